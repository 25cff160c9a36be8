//! The operator host: WasmPlugins become per-kind pipelines, and a dynamic kube-runtime
//! controller per parent kind runs them. This module uses kube-runtime and the pipeline; it
//! knows nothing of wasmtime.
//!
//! - `plugins.rs`: watches WasmPlugins (and the ConfigMaps they point at), fetches, verifies,
//!   loads and smoke-calls each version, and swaps it in only when every step passed.
//! - `registry.rs`: the pipelines, one immutable snapshot per parent kind.
//! - `kinds.rs`: starts and stops one controller per parent kind as WasmPlugins come and go.
//! - `index.rs`: which cached children carry which parent's uid label.
//! - `queue.rs`: how many parents wait for a reconcile (the queue-depth metric).
//! - `canary.rs`: a new plugin version tried on a few parents, applying nothing, before it
//!   serves.
//! - `parent.rs`: one reconcile: observe, run the pipeline, apply, prune, status.
//! - `finalizer.rs`: the host's finalizer on parents whose plugins finalize; a stuck finalize
//!   phase reported, and the administrator's release.
//! - `retire.rs`: the host's finalizer on WasmPlugins: a deletion waits for the finalize phase
//!   of its kind's deleting parents.
//! - `apply.rs`, `status.rs`: the pure decisions those make.
//! - `leader.rs`: leader election on a Lease.

pub mod apply;
mod canary;
mod discovery;
pub mod fetch;
mod finalizer;
pub mod index;
mod kinds;
pub mod leader;
pub mod limits;
mod parent;
mod plugins;
mod queue;
mod registry;
mod remembered;
mod retire;
pub mod status;

use std::{sync::Arc, time::Duration};

use kube::{Client, runtime::events::Recorder};

pub use discovery::Discovery;
pub use registry::Registry;

use windlass_contract::Engine;
use windlass_policy::pipeline;

use crate::metrics::Metrics;

/// Why loading a plugin or reconciling a parent failed.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// The plugin's source could not be read.
    #[error("plugin {plugin}: source {why}")]
    Source { plugin: String, why: String },
    /// The source could not be used: a registry pull failed (unreachable, auth, not found,
    /// wrong layout), or the pin is malformed or does not match what was fetched, from any
    /// source.
    #[error("plugin {plugin}: {source}")]
    Fetch {
        plugin: String,
        source: windlass_source::Error,
    },
    /// The component failed to load or to answer `info`.
    #[error(transparent)]
    Runtime(#[from] windlass_contract::Error),
    /// The plugin does not reconcile the kind its WasmPlugin names.
    #[error("plugin {plugin}: reconciles {declared:?}, not {wanted}")]
    WrongParentKind {
        plugin: String,
        wanted: String,
        declared: Vec<String>,
    },
    /// A plugin of the pipeline failed or broke the policy.
    #[error(transparent)]
    Pipeline(#[from] pipeline::Error),
    /// A new plugin version failed on an existing parent before it was swapped in.
    #[error("canary reconcile of {parent} failed: {source}")]
    Canary {
        parent: String,
        source: pipeline::Error,
    },
    /// A plugin declares a kind the API server does not serve (or whose scope cannot be
    /// discovered): it is refused at load.
    #[error("plugin {plugin}: declares kind {kind}, which the API server does not serve: {why}")]
    KindNotServed {
        plugin: String,
        kind: String,
        why: String,
    },
    /// A plugin declares a kind its WasmPlugin does not grant.
    #[error("plugin {plugin}: {why}")]
    NotGranted { plugin: String, why: String },
    /// A kind is not served by the API server.
    #[error("kind {kind} is not served by the API server: {why}")]
    Discovery { kind: String, why: String },
    /// A desired object exists but is not this parent's child (or may only be labelled).
    #[error("plugin {plugin}: invalid output (ObjectNotOwned): {object}: {why}")]
    NotOwned {
        plugin: String,
        object: String,
        why: String,
    },
    /// Applying a desired object failed.
    #[error("applying {object}: {source}")]
    Apply { object: String, source: kube::Error },
    /// Deleting a child failed.
    #[error("pruning {object}: {source}")]
    Prune { object: String, source: kube::Error },
    /// A WasmPlugin of the parent's kind has no serving version (loading, or refused with no
    /// earlier version): the pipeline without it would apply, prune and finalize as if its
    /// concern did not exist, so nothing runs until it serves.
    #[error("waiting for WasmPlugins to serve before reconciling: {}", plugins.join(", "))]
    NotServing { plugins: Vec<String> },
    /// A deleting parent's release annotation is not one the host knows.
    #[error("parent {parent}: {why}")]
    Release { parent: String, why: String },
    /// Any other API call failed.
    #[error("kubernetes API: {0}")]
    Kube(#[from] kube::Error),
    /// A plugin call could not be run (its task panicked or was cancelled).
    #[error("plugin call did not complete: {0}")]
    Join(String),
    /// An object read from the API could not be turned into the JSON a plugin is given.
    #[error("encoding {object} as JSON: {source}")]
    Encode {
        object: String,
        source: serde_json::Error,
    },
}

impl Error {
    /// Whether trying the same thing again later may succeed: the API or a source was not
    /// available, a kind is not served yet. A broken or refused plugin version is not retried;
    /// a new spec, ConfigMap or tag is.
    pub fn is_transient(&self) -> bool {
        matches!(
            self,
            Error::Source { .. }
                | Error::NotServing { .. }
                | Error::Kube(_)
                | Error::Discovery { .. }
                | Error::KindNotServed { .. }
                | Error::Join(_)
        )
    }

    /// A stable, one-word reason for conditions and metrics.
    pub fn reason(&self) -> &'static str {
        match self {
            Error::Source { .. } => "SourceUnavailable",
            Error::Fetch { source, .. } => source.reason(),
            Error::Runtime(e) => e.reason(),
            Error::WrongParentKind { .. } => "WrongParentKind",
            Error::Pipeline(e) => e.reason(),
            Error::Canary { source, .. } => source.reason(),
            Error::Discovery { .. } | Error::KindNotServed { .. } => "KindNotServed",
            Error::NotGranted { .. } => "KindNotGranted",
            Error::NotOwned { .. } => "ObjectNotOwned",
            Error::Apply { .. } => "ApplyFailed",
            Error::Prune { .. } => "PruneFailed",
            Error::NotServing { .. } => "PluginsNotServing",
            Error::Release { .. } => "ReleaseRefused",
            Error::Kube(_) => "ApiError",
            Error::Join(_) => "PluginCallAborted",
            Error::Encode { .. } => "EncodeFailed",
        }
    }
}

/// Settings of the controller.
#[derive(Debug, Clone)]
pub struct Settings {
    /// Parents reconciled at once per kind.
    pub concurrency: u16,
    /// Reconcile every parent at least this often.
    pub resync: Duration,
    /// First retry delay after a failed reconcile; doubles per failure.
    pub backoff_base: Duration,
    /// Longest retry delay.
    pub backoff_max: Duration,
    /// OCI registries and the namespace of pull secrets.
    pub oci: fetch::OciSettings,
    /// How often OCI tags are re-resolved; a moved tag triggers the normal verified swap.
    pub oci_poll: Duration,
    /// The earliest a plugin may ask to be run again (`requeue-after`). Default 1 s.
    pub min_requeue: Duration,
    /// Reconciles of one parent in a burst, then one per `reconcile_every`. Default 10.
    pub reconcile_burst: u32,
    /// Default 500 ms: a parent is reconciled at most twice a second after its burst.
    pub reconcile_every: Duration,
    /// Plugin events on one parent in a burst, then one per `event_every` (client-go's spam
    /// filter: 25, then one per 5 minutes). Beyond that they are dropped and counted.
    pub event_burst: u32,
    /// Default 5 min.
    pub event_every: Duration,
    /// The host's own ServiceAccount, which no plugin's pod may use.
    pub host_account: Option<windlass_policy::HostAccount>,
    /// How long a deleting parent's finalize phase may go uncompleted before the host says it
    /// is stuck: the `FinalizeStuck` condition, a Warning event and the `finalize_stuck`
    /// gauge, naming the plugins that hold it. Default 10 min.
    pub finalize_stuck_after: Duration,
}

impl Default for Settings {
    fn default() -> Self {
        Settings {
            concurrency: 16,
            resync: Duration::from_secs(600),
            backoff_base: Duration::from_millis(500),
            backoff_max: Duration::from_secs(300),
            oci: fetch::OciSettings::default(),
            oci_poll: Duration::from_secs(300),
            min_requeue: Duration::from_secs(1),
            reconcile_burst: 10,
            finalize_stuck_after: Duration::from_secs(600),
            reconcile_every: Duration::from_millis(500),
            event_burst: 25,
            event_every: Duration::from_secs(300),
            host_account: None,
        }
    }
}

/// What every part of the controller shares.
pub struct Shared {
    /// The API client.
    pub client: Client,
    /// Loads plugins (the wasmtime runtime in the `windlass` binary).
    pub engine: Arc<dyn Engine>,
    /// The pipelines.
    pub registry: Arc<Registry>,
    /// Metrics.
    pub metrics: Arc<Metrics>,
    /// Events on parents and WasmPlugins.
    pub recorder: Recorder,
    /// Kinds the API server serves.
    pub discovery: Discovery,
    /// Settings.
    pub settings: Settings,
    /// Reconciles per parent uid.
    pub reconciles: limits::Buckets,
    /// Plugin events per parent uid.
    pub events: limits::Buckets,
}

impl std::fmt::Debug for Shared {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Shared")
            .field("settings", &self.settings)
            .finish_non_exhaustive()
    }
}

impl Shared {
    /// Everything the controller needs, around a client and an engine.
    pub fn new(
        client: Client,
        engine: Arc<dyn Engine>,
        metrics: Arc<Metrics>,
        settings: Settings,
        instance: &str,
    ) -> Arc<Self> {
        let reporter = kube::runtime::events::Reporter {
            controller: "windlass".into(),
            instance: Some(instance.to_string()),
        };
        let registry = Arc::new(Registry::default());
        registry.set_host_account(settings.host_account.clone());
        Arc::new(Shared {
            reconciles: limits::Buckets::new(settings.reconcile_burst, settings.reconcile_every),
            events: limits::Buckets::new(settings.event_burst, settings.event_every),
            recorder: Recorder::new(client.clone(), reporter),
            discovery: Discovery::new(client.clone()),
            client,
            engine,
            registry,
            metrics,
            settings,
        })
    }
}

/// A task that is aborted when its owner drops it. A plain `JoinHandle` detaches its task when
/// dropped: a task started by an aborted task would go on running (after the lease was lost,
/// that would be a second leader).
#[derive(Debug)]
pub(crate) struct Owned(pub(crate) tokio::task::JoinHandle<()>);

impl Owned {
    /// Spawns `future` as an owned task.
    pub(crate) fn spawn(future: impl std::future::Future<Output = ()> + Send + 'static) -> Self {
        Owned(tokio::spawn(future))
    }
}

impl std::ops::Deref for Owned {
    type Target = tokio::task::JoinHandle<()>;

    fn deref(&self) -> &Self::Target {
        &self.0
    }
}

impl Drop for Owned {
    fn drop(&mut self) {
        self.0.abort();
    }
}

/// Runs the plugin loader and the per-kind controllers until `shutdown` resolves.
pub async fn run(shared: Arc<Shared>, shutdown: impl std::future::Future<Output = ()> + Send) {
    let plugins = tokio::spawn(plugins::run(shared.clone()));
    let kinds = tokio::spawn(kinds::run(shared.clone()));
    shutdown.await;
    plugins.abort();
    kinds.abort();
    let _ = plugins.await;
    let _ = kinds.await;
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_object_that_cannot_be_encoded_is_not_reported_as_an_aborted_plugin_call() {
        let Err(source) = serde_json::from_str::<serde_json::Value>("{") else {
            panic!("an unterminated object parsed");
        };
        let e = Error::Encode {
            object: "db-1".into(),
            source,
        };
        assert_eq!(e.reason(), "EncodeFailed");
        let message = e.to_string();
        assert!(message.starts_with("encoding db-1 as JSON: "), "{message}");
        assert!(!message.contains("plugin call"), "{message}");
    }

    #[tokio::test]
    async fn dropping_an_owned_task_stops_it() {
        let (tx, mut rx) = tokio::sync::mpsc::channel::<()>(1);
        let task = Owned::spawn(async move {
            // Holds the sender until stopped.
            let _tx = tx;
            std::future::pending::<()>().await;
        });
        drop(task);
        // The sender is dropped only if the task was stopped.
        assert!(
            tokio::time::timeout(Duration::from_secs(5), rx.recv())
                .await
                .is_ok_and(|v| v.is_none()),
            "the task still runs"
        );
    }
}
