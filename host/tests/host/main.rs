//! The host's integration tests, one binary: each binary links wasmtime, kube and the
//! devcluster again, which cost CI minutes for every file. One module per subject; run one with
//! `cargo test -p windlass --test host -- operator::` (the module path is the filter).
//!
//! `operator`, `containment`, `controllers`, `oci` and `sampledb` also run against a real control plane
//! (`WINDLASS_TEST_CLUSTER=real`, see `support`).

mod support;

mod accounts;
mod admission;
mod chaos;
mod conformance;
mod containment;
mod controllers;
mod crds;
mod dev;
mod finalize;
mod helm;
mod image;
mod install;
mod monitoring;
mod oci;
mod operator;
mod plugin_diff;
mod render;
mod replay;
mod sampledb;
mod signature;
mod templates;
mod trace_command;
mod traces;
mod version;
