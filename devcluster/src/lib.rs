//! `windlass-devcluster`: an embedded Kubernetes-compatible API server for development and
//! tests, with a workload simulator and fault injection — what envtest + kwok are for Go, in
//! Rust, in-process. Real clients (kube-rs, kube-runtime, kubectl) talk to it over HTTP.
//!
//! ```no_run
//! # async fn demo() -> Result<(), Box<dyn std::error::Error>> {
//! use windlass_devcluster::{DevCluster, Options};
//! let dc = DevCluster::start(Options::default()).await?;
//! let client = dc.client(); // a kube::Client
//! dc.write_kubeconfig(std::path::Path::new("/tmp/devcluster.kubeconfig"))?;
//! dc.faults().set_error_rate("create", 500, 0.1);
//! dc.shutdown().await;
//! # Ok(()) }
//! ```
//!
//! # Scope
//! Objects are stored as JSON in memory with one global resourceVersion. Built-in kinds are
//! validated only where the real server would reject (required and immutable fields); custom
//! resources against their CRD's openAPIV3Schema. See docs/DEVCLUSTER.md for what is and is not
//! modelled.
//!
//! # Test annotations
//! - `devcluster.windlass.dev/fail: "true"` on a Job (or its Pod template) makes its Pod fail
//!   and the Job report `Failed`.
//! - `devcluster.windlass.dev/fail: "true"` on a VolumeSnapshot makes it report
//!   `status.error` instead of `readyToUse: true`.

pub mod api;
pub mod cluster;
pub mod crd;
pub mod defaults;
pub mod error;
pub mod events;
pub mod faults;
pub mod gc;
pub mod http;
pub mod kubeconfig;
pub mod malloc;
pub mod owners;
pub mod patch;
pub mod protobuf;
pub mod proxy;
pub mod resources;
pub mod schema;
pub mod selector;
pub mod server;
pub mod simulator;
pub mod store;
pub mod validate;

pub use cluster::{DevCluster, Options, StartError};
pub use faults::{ErrorRate, FaultConfig, Faults, Held, RequestInfo, Timeouts};

/// The annotation that makes the simulator fail a Job's Pod or a VolumeSnapshot.
pub const FAIL_ANNOTATION: &str = "devcluster.windlass.dev/fail";
