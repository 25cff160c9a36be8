//! The devcluster: an embedded Kubernetes-compatible API server (being built).
