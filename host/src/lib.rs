//! Windlass: a Kubernetes operator host whose reconcile logic runs as sandboxed WebAssembly
//! components ("plugins"). This crate is the `windlass` binary and what it adds to the layers
//! below it; the layers are their own crates, so that `Cargo.toml` holds what
//! `docs/ARCHITECTURE.md` promises:
//!
//! - [`contract`] (`windlass-contract`): the WIT contract in plain Rust, and the engine traits.
//! - [`runtime`] (`windlass-runtime`): wasmtime; loads, sandboxes and calls plugins. No
//!   Kubernetes.
//! - [`policy`] and [`pipeline`] (`windlass-policy`): what a plugin may return, and a kind's
//!   plugins run in order with every output checked. Pure.
//! - [`source`] (`windlass-source`): where plugin bytes come from (an OCI registry), verified.
//! - [`operator`], [`controller`], [`crd`], [`k8s`], [`admin`], [`metrics`]
//!   (`windlass-operator`): the controllers and the process around them. No wasmtime.
//!
//! Here: [`render`] (`windlass render`, the pipeline offline), [`cases`] (`windlass plugin
//! test`, a component against recorded cases), [`scaffold`] (`windlass plugin new`) and, with
//! the `dev` feature, [`dev`] (`windlass dev` on the embedded devcluster).

pub use windlass_contract as contract;
pub use windlass_operator::{admin, controller, crd, k8s, leader, metrics, operator, record, runs};
pub use windlass_policy as policy;
pub use windlass_policy::pipeline;
pub use windlass_runtime as runtime;
pub use windlass_source as source;

pub mod cases;
#[cfg(feature = "dev")]
pub mod dev;
pub mod render;
pub mod scaffold;
pub mod trace;

use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;

/// Every CRD `windlass crds` prints: the host's WasmPlugin and, in a build with the `dev`
/// feature (the one the Helm chart's CRDs are made with, for its SampleDB preset), the SampleDB
/// operator's SampleDB. The production build knows nothing of SampleDB.
pub fn crds() -> Vec<CustomResourceDefinition> {
    use kube::CustomResourceExt as _;
    #[allow(unused_mut)]
    let mut crds = vec![crd::WasmPlugin::crd()];
    #[cfg(feature = "dev")]
    crds.push(sampledb_api::crd::crd());
    crds
}
