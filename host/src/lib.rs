//! Windlass: a Kubernetes operator host whose reconcile logic runs as sandboxed WebAssembly
//! components ("plugins").
//!
//! - [`runtime`]: wasmtime only; loads, sandboxes and calls plugins.
//! - [`policy`]: what a plugin may return; checked before anything it returns is used.
//! - [`pipeline`]: runs a kind's plugins in order, each output checked by the policy.
//! - [`render`]: the offline `windlass render` tool, the pipeline exactly as the host runs it.
//! - [`source`]: where plugin bytes come from (an OCI registry), fetched and verified.
//! - [`k8s`]: the Kubernetes plumbing the rest shares (API per scope, typed JSON, time).

pub mod admin;
pub mod controller;
pub mod crd;
pub mod dev;
pub mod k8s;
pub mod metrics;
pub mod operator;
pub mod pipeline;
pub mod policy;
pub mod render;
pub mod runtime;
pub mod source;
