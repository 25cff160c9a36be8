//! What every part of the controller shares: the client, the engine, the pipelines, metrics,
//! events, discovery, the settings, the per-parent rate limits and the reconciles running.

use std::{sync::Arc, time::Duration};

use kube::Client;
use windlass_contract::Engine;

use super::{
    discovery::Discovery, drain::Drain, events::Recorder, index::ListedCaches, limits,
    registry::Registry, source, traffic::Traffic,
};
use crate::{metrics::Metrics, runs::Runs};

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
    pub oci: source::OciSettings,
    /// How often OCI tags are re-resolved; a moved tag triggers the normal verified swap.
    pub oci_poll: Duration,
    /// First wait before a plugin load that failed for a reason that may pass (the API or the
    /// source unavailable, a kind not served yet) is tried again; doubles per failure. Default 1 s.
    pub load_retry_base: Duration,
    /// Longest such wait. Default 30 s.
    pub load_retry_max: Duration,
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
    /// Where the calls of parents annotated `windlass.dev/record: "true"` are recorded for
    /// replay (`crate::record`). Default: nowhere; the annotation does nothing.
    pub record_dir: Option<std::path::PathBuf>,
    /// How long a host asked to stop waits for the reconciles already running to finish
    /// (starting no new one) before it stops them halfway. Default 10 s: with the lease freed
    /// after it, within the 30 s a Pod gets between SIGTERM and SIGKILL.
    pub drain: Duration,
}

impl Default for Settings {
    fn default() -> Self {
        Settings {
            concurrency: 16,
            resync: Duration::from_secs(600),
            backoff_base: Duration::from_millis(500),
            backoff_max: Duration::from_secs(300),
            oci: source::OciSettings::default(),
            oci_poll: Duration::from_secs(300),
            load_retry_base: Duration::from_secs(1),
            load_retry_max: Duration::from_secs(30),
            min_requeue: Duration::from_secs(1),
            reconcile_burst: 10,
            finalize_stuck_after: Duration::from_secs(600),
            record_dir: None,
            drain: Duration::from_secs(10),
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
    /// The parents' last runs.
    pub runs: Arc<Runs>,
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
    /// The child caches of the running parent kinds, for the canary and the diff gate.
    pub listed: ListedCaches,
    /// The reconciles running, let finish when the host stops.
    pub running: Drain,
    /// The cluster's Services and NetworkPolicies for the traffic check, watched from its
    /// first use on.
    traffic: tokio::sync::OnceCell<Traffic>,
    /// When starting the traffic index last failed: no new try for `TRAFFIC_RETRY` after it.
    traffic_failed: std::sync::Mutex<Option<std::time::Instant>>,
}

/// How long after a failed start of the traffic index the check lists instead, without
/// waiting for another start.
const TRAFFIC_RETRY: Duration = Duration::from_secs(30);

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
        runs: Arc<Runs>,
        settings: Settings,
        instance: &str,
    ) -> Arc<Self> {
        let registry = Arc::new(Registry::default());
        registry.set_host_account(settings.host_account.clone());
        Arc::new(Shared {
            reconciles: limits::Buckets::new(settings.reconcile_burst, settings.reconcile_every),
            events: limits::Buckets::new(settings.event_burst, settings.event_every),
            recorder: Recorder::new(client.clone(), "windlass", instance),
            discovery: Discovery::new(client.clone()),
            client,
            engine,
            registry,
            metrics,
            runs,
            settings,
            listed: ListedCaches::default(),
            running: Drain::default(),
            traffic: tokio::sync::OnceCell::new(),
            traffic_failed: std::sync::Mutex::new(None),
        })
    }

    /// Stops what runs beside the controllers (the traffic watches) when the host stops: the
    /// last reference to `Shared` may go a moment after, and a watch of a server already gone
    /// would log its errors meanwhile.
    pub fn stop(&self) {
        if let Some(traffic) = self.traffic.get() {
            traffic.stop();
        }
    }

    /// The traffic check's index, started (and listed once) on first use. After a failed start
    /// the next try waits `TRAFFIC_RETRY`; meanwhile this fails at once (the check lists).
    pub async fn traffic(&self) -> Result<&Traffic, String> {
        self.traffic
            .get_or_try_init(|| async {
                let failed = |at: &mut Option<std::time::Instant>| {
                    at.is_some_and(|t| t.elapsed() < TRAFFIC_RETRY)
                };
                if failed(
                    &mut self
                        .traffic_failed
                        .lock()
                        .unwrap_or_else(|e| e.into_inner()),
                ) {
                    return Err("its last start failed; listing until the next try".to_string());
                }
                let started = Traffic::start(&self.client).await;
                if started.is_err() {
                    *self
                        .traffic_failed
                        .lock()
                        .unwrap_or_else(|e| e.into_inner()) = Some(std::time::Instant::now());
                }
                started
            })
            .await
    }
}
