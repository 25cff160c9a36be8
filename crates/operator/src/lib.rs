//! The Windlass operator: WasmPlugins become per-kind pipelines, and a kube-runtime controller
//! per parent kind runs them; leader election, the admin endpoints and the metrics around it.
//!
//! This crate talks to the Kubernetes API and knows no WebAssembly engine: plugins are loaded
//! and called through `windlass_contract::Engine`, which the `windlass` binary provides.
//!
//! - [`controller`]: the controllers (plugin loader, one per parent kind) and their decisions.
//! - [`crd`]: the WasmPlugin custom resource.
//! - [`operator`]: the process: admin server, leader election, the controllers while leading.
//! - [`leader`]: leader election on a Lease.
//! - [`k8s`]: the API plumbing the rest shares (API per scope, typed JSON).

pub mod admin;
pub mod controller;
pub mod crd;
pub mod k8s;
pub mod leader;
pub mod metrics;
pub mod operator;
pub mod record;
pub mod runs;
pub mod telemetry;
