//! The controllers: WasmPlugins become per-kind pipelines, and a dynamic kube-runtime controller
//! per parent kind runs them. This module uses kube-runtime and the pipeline; it knows nothing
//! of wasmtime. It only declares its modules; `crate::operator` runs the two long-lived tasks
//! (`plugins::run`, `kinds::run`) while the host leads.
//!
//! From the top down (each uses only those below it):
//! - `preview.rs`: what a new version of a WasmPlugin would do to every live parent of its
//!   kind, applying nothing (`windlass plugin diff`): the candidate pipeline as `plugins.rs`
//!   would build it, parents observed as the canary does, server-side apply dry runs.
//! - `plugins.rs`: watches WasmPlugins (and the ConfigMaps they point at), fetches, verifies,
//!   loads and smoke-calls each version, and swaps it in only when every step passed.
//! - `canary.rs`: a new plugin version tried on a few parents, applying nothing, before it
//!   serves.
//! - `retire.rs`: the host's finalizer on WasmPlugins: a deletion waits for the finalize phase
//!   of its kind's deleting parents.
//! - `plugin_status.rs`: a WasmPlugin's status, by server-side apply (the loader's and the
//!   retirement's), and the hand-over of the fields an older host wrote with merge patches.
//! - `kinds.rs`: starts and stops one controller per parent kind as WasmPlugins come and go.
//! - `parent.rs`: one reconcile of one parent: preconditions, finalizer, observe, run the
//!   pipeline, then by phase apply and prune, or finalize; a failure is reported once.
//! - `finalizer.rs`: the host's finalizer on parents whose plugins finalize; a stuck finalize
//!   phase reported, and the administrator's release.
//! - `apply.rs`: the API writes of a reconcile (apply with the checks that need a read, prune,
//!   status, events).
//! - `context.rs`: what the reconciles of one parent kind share (`KindCtx`, the watch caches).
//! - `shared.rs`: what every part shares (`Shared`, `Settings`); `error.rs`: `LoadError` (a
//!   WasmPlugin's version refused) and `ReconcileError` (one reconcile failed), with the reason
//!   words they share.
//! - `plan.rs`, `status.rs`: the pure decisions the writes make.
//! - `registry.rs`: the pipelines, one immutable snapshot per parent kind; `index.rs`: which
//!   cached children carry which parent's uid label; `queue.rs`: how many parents wait for a
//!   reconcile; `drain.rs`: the reconciles running, let finish when the host stops;
//!   `remembered.rs`: what is kept per parent; `unchanged.rs`: the inputs of an apply that
//!   wrote nothing, hashed, so that the same inputs are not decided again; `limits.rs`: per-parent rate limits;
//!   `discovery.rs`: the kinds the API server serves; `events.rs`: the events the host
//!   publishes, counted into series only when they say the same; `source/`: a plugin's bytes,
//!   one module per kind of source (ConfigMap, OCI, file) with the same verbs.

pub mod apply;
mod canary;
mod context;
mod discovery;
pub(crate) mod drain;
mod error;
mod events;
mod finalizer;
mod gate;
pub mod index;
pub(crate) mod kinds;
pub mod limits;
mod parent;
pub mod plan;
mod plugin_status;
pub(crate) mod plugins;
pub mod preview;
mod queue;
mod registry;
mod remembered;
mod retire;
mod shared;
pub mod source;
pub mod status;
mod traffic;
mod unchanged;

pub use discovery::Discovery;
pub use error::{DiscoveryError, LoadError, ReconcileError, reason};
pub use registry::Registry;
pub use shared::{Settings, Shared};
