//! Prometheus metrics of the host (prometheus-client), served at `/metrics` by `admin.rs`.
//!
//! The reconcile and queue series are named and labelled as controller-runtime's
//! (`controller_runtime_*` by `controller`, `workqueue_*` by `name` and `controller`, the label
//! value being the parent kind's key), so dashboards and alerts written for Go operators apply
//! as they are. What only Windlass has (plugins, policy, lanes, hot swaps) is `windlass_*`.

use std::{
    collections::HashMap,
    sync::{
        Arc, Mutex,
        atomic::{AtomicU64, Ordering},
    },
    time::Instant,
};

use prometheus_client::{
    encoding::{EncodeLabelSet, text::encode},
    metrics::{
        counter::Counter,
        family::Family,
        gauge::Gauge,
        histogram::{Histogram, exponential_buckets},
    },
    registry::Registry,
};

use windlass_contract::CallStats;

/// Labels of controller-runtime's per-controller series.
#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct ControllerLabel {
    /// Parent kind (`group/version/Kind`): a controller per parent kind.
    pub controller: String,
}

/// Labels of `controller_runtime_reconcile_total`.
#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct ControllerResult {
    /// Parent kind (`group/version/Kind`).
    pub controller: String,
    /// `success` (nothing more to do until something changes), `requeue_after` (succeeded, and
    /// runs again after a delay) or `error`.
    pub result: String,
}

/// Labels of the `workqueue_*` series, as controller-runtime sets them: both the parent kind.
#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct QueueLabel {
    /// Parent kind (`group/version/Kind`).
    pub name: String,
    /// Parent kind (`group/version/Kind`).
    pub controller: String,
}

impl QueueLabel {
    fn of(kind: &str) -> Self {
        QueueLabel {
            name: kind.to_string(),
            controller: kind.to_string(),
        }
    }
}

/// The `workqueue_*` series of one parent kind that its queue keeps.
#[derive(Debug, Clone)]
pub struct QueueMetrics {
    /// Parents waiting for a reconcile to start.
    pub depth: Gauge,
    /// Parents that started waiting.
    pub adds: Counter,
    /// From starting to wait to the reconcile's start.
    pub waited: Histogram,
}

/// Labels of the failed-reconcile series.
#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct KindReason {
    /// Parent kind (`group/version/Kind`).
    pub kind: String,
    /// The error's one-word reason (`ReconcileError::reason`).
    pub reason: String,
}

/// Labels of per-plugin series.
#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct PluginOutcome {
    /// Plugin name.
    pub plugin: String,
    /// `ok` or the error reason.
    pub outcome: String,
}

/// Labels naming a parent kind.
#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct KindLabel {
    /// Parent kind (`group/version/Kind`).
    pub kind: String,
}

/// Labels of the queue-wait series.
#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct KindLane {
    /// Parent kind (`group/version/Kind`).
    pub kind: String,
    /// `changed`, `swapped` or `resync`.
    pub lane: String,
}

/// Labels of the write series.
#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct WriteOutcome {
    /// What was written: the child's kind key, or `status` for the parent's status.
    pub kind: String,
    /// `applied`, or `unchanged` when the cluster already held it and no request was sent.
    pub outcome: String,
}

/// Labels of the policy refusal series.
#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct PluginRule {
    /// Plugin name.
    pub plugin: String,
    /// The rule that refused its output (`policy::Rule`), or `EventRate` for events the
    /// per-parent spam filter dropped.
    pub rule: String,
}

/// Labels of the stuck-finalize series.
#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct KindPlugin {
    /// Parent kind (`group/version/Kind`).
    pub kind: String,
    /// The plugin holding the finalize phase (not finalized, failing, or not loaded).
    pub plugin: String,
}

/// Labels naming a plugin.
#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct PluginLabel {
    /// Plugin name.
    pub plugin: String,
}

/// Labels of the state the host keeps in memory.
#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct TrackedLabel {
    /// Parent kind (`group/version/Kind`), or `WasmPlugin` for the plugin loader's state.
    pub kind: String,
    /// `parents` (uid → reference), `backoffs` (failure counts), `config_map_watches`,
    /// `oci_manifests` or `load_retries`.
    pub what: String,
}

type Histograms<L> = Family<L, Histogram, fn() -> Histogram>;
type Seconds = Gauge<f64, AtomicU64>;

fn call_buckets() -> Histogram {
    Histogram::new(exponential_buckets(0.000_05, 2.0, 18))
}

fn reconcile_buckets() -> Histogram {
    Histogram::new(exponential_buckets(0.000_5, 2.0, 16))
}

/// The buckets controller-runtime gives `controller_runtime_reconcile_time_seconds`, so that
/// quantiles match a Go operator's on one dashboard.
fn reconcile_time_buckets() -> Histogram {
    Histogram::new([
        0.005, 0.01, 0.025, 0.05, 0.1, 0.15, 0.2, 0.25, 0.3, 0.35, 0.4, 0.45, 0.5, 0.6, 0.7, 0.8,
        0.9, 1.0, 1.25, 1.5, 1.75, 2.0, 2.5, 3.0, 3.5, 4.0, 4.5, 5.0, 6.0, 7.0, 8.0, 9.0, 10.0,
        15.0, 20.0, 25.0, 30.0, 40.0, 50.0, 60.0,
    ])
}

/// client-go's workqueue buckets: 10 ns to 1,000 s by tens.
fn workqueue_buckets() -> Histogram {
    Histogram::new(exponential_buckets(1e-8, 10.0, 12))
}

/// Every metric the host exports.
#[derive(Debug)]
pub struct Metrics {
    registry: Mutex<Registry>,
    /// Reconciles by parent kind and result (`controller_runtime_reconcile_total`).
    pub reconciles: Family<ControllerResult, Counter>,
    /// Failed reconciles by parent kind (`controller_runtime_reconcile_errors_total`).
    pub reconcile_errors: Family<ControllerLabel, Counter>,
    /// Failed reconciles by parent kind and reason (`windlass_reconcile_errors_total`).
    pub reconcile_error_reasons: Family<KindReason, Counter>,
    /// Reconcile duration by parent kind (`controller_runtime_reconcile_time_seconds`).
    pub reconcile_seconds: Histograms<ControllerLabel>,
    /// How many reconciles of a kind may run at once
    /// (`controller_runtime_max_concurrent_reconciles`).
    pub max_concurrent: Family<ControllerLabel, Gauge>,
    /// Reconciles of a kind running now (`controller_runtime_active_workers`).
    pub active_workers: Family<ControllerLabel, Gauge>,
    /// Parents waiting for a reconcile to start (`workqueue_depth`, see `controller::queue`).
    pub queue_depth: Family<QueueLabel, Gauge>,
    /// Parents that started waiting (`workqueue_adds_total`).
    pub queue_adds: Family<QueueLabel, Counter>,
    /// From starting to wait to the reconcile's start (`workqueue_queue_duration_seconds`).
    pub queue_seconds: Histograms<QueueLabel>,
    /// Reconciles' run time (`workqueue_work_duration_seconds`).
    pub work_seconds: Histograms<QueueLabel>,
    /// Retries after a failed reconcile (`workqueue_retries_total`).
    pub retries: Family<QueueLabel, Counter>,
    /// Seconds the running reconciles have run so far (`workqueue_unfinished_work_seconds`),
    /// set when the metrics are encoded.
    pub unfinished_seconds: Family<QueueLabel, Seconds>,
    /// Seconds the longest running reconcile has run (`workqueue_longest_running_processor_seconds`),
    /// set when the metrics are encoded.
    pub longest_running_seconds: Family<QueueLabel, Seconds>,
    /// Parent kind → the running reconciles' start times, by a number of their own.
    running: Mutex<HashMap<String, HashMap<u64, Instant>>>,
    next_work: AtomicU64,
    /// Plugin calls by plugin and outcome.
    pub plugin_calls: Family<PluginOutcome, Counter>,
    /// Plugin call duration by plugin.
    pub plugin_call_seconds: Histograms<PluginLabel>,
    /// The most linear memory a plugin's instance held in its last call.
    pub plugin_memory_bytes: Family<PluginLabel, Gauge>,
    /// Fuel used by a plugin's calls (when fuel is enabled).
    pub plugin_fuel: Family<PluginLabel, Counter>,
    /// Hot swaps by plugin and result (`swapped`, `unchanged` or the refusal reason).
    pub hot_swaps: Family<PluginOutcome, Counter>,
    /// Per WasmPlugin: 1 while a version of it serves, 0 while none does.
    pub plugin_serving: Family<PluginLabel, Gauge>,
    /// Child applies and status patches, sent or skipped as unchanged.
    pub writes: Family<WriteOutcome, Counter>,
    /// How long reconciles waited for leave to run, by parent kind and lane (see
    /// `controller::gate`).
    pub queue_wait_seconds: Histograms<KindLane>,
    /// 1 while this instance is the leader.
    pub leader: Gauge,
    /// Plugin outputs (or parts of them) the host refused, by plugin and rule.
    pub policy_refusals: Family<PluginRule, Counter>,
    /// Entries the host keeps per parent or per plugin source: flat in a long-running host.
    pub tracked: Family<TrackedLabel, Gauge>,
    /// Tokio tasks alive in the host's runtime, read when the metrics are encoded.
    pub tasks: Gauge,
    /// Deleting parents whose finalize phase a plugin has held past the threshold
    /// (`Settings::finalize_stuck_after`), by parent kind and plugin.
    pub finalize_stuck: Family<KindPlugin, Gauge>,
}

impl Default for Metrics {
    fn default() -> Self {
        let m = Metrics {
            registry: Mutex::new(Registry::default()),
            reconciles: Family::default(),
            reconcile_errors: Family::default(),
            reconcile_error_reasons: Family::default(),
            reconcile_seconds: Family::new_with_constructor(reconcile_time_buckets),
            max_concurrent: Family::default(),
            active_workers: Family::default(),
            queue_depth: Family::default(),
            queue_adds: Family::default(),
            queue_seconds: Family::new_with_constructor(workqueue_buckets),
            work_seconds: Family::new_with_constructor(workqueue_buckets),
            retries: Family::default(),
            unfinished_seconds: Family::default(),
            longest_running_seconds: Family::default(),
            running: Mutex::default(),
            next_work: AtomicU64::new(0),
            plugin_calls: Family::default(),
            plugin_call_seconds: Family::new_with_constructor(call_buckets),
            plugin_memory_bytes: Family::default(),
            plugin_fuel: Family::default(),
            hot_swaps: Family::default(),
            plugin_serving: Family::default(),
            writes: Family::default(),
            queue_wait_seconds: Family::new_with_constructor(reconcile_buckets),
            leader: Gauge::default(),
            policy_refusals: Family::default(),
            tracked: Family::default(),
            tasks: Gauge::default(),
            finalize_stuck: Family::default(),
        };
        {
            let mut root = m.registry.lock().unwrap_or_else(|e| e.into_inner());
            let r = root.sub_registry_with_prefix("controller_runtime");
            r.register(
                "reconcile",
                "Total number of reconciliations per controller",
                m.reconciles.clone(),
            );
            r.register(
                "reconcile_errors",
                "Total number of reconciliation errors per controller",
                m.reconcile_errors.clone(),
            );
            r.register(
                "reconcile_time_seconds",
                "Length of time per reconciliation per controller",
                m.reconcile_seconds.clone(),
            );
            r.register(
                "max_concurrent_reconciles",
                "Maximum number of concurrent reconciles per controller",
                m.max_concurrent.clone(),
            );
            r.register(
                "active_workers",
                "Number of currently used workers per controller",
                m.active_workers.clone(),
            );
            let r = root.sub_registry_with_prefix("workqueue");
            r.register(
                "depth",
                "Parents waiting for a reconcile to start, by parent kind",
                m.queue_depth.clone(),
            );
            r.register(
                "adds",
                "Parents that started waiting for a reconcile (a change, a hot swap, or a requeue come due)",
                m.queue_adds.clone(),
            );
            r.register(
                "queue_duration_seconds",
                "How long in seconds a parent waits before its reconcile starts",
                m.queue_seconds.clone(),
            );
            r.register(
                "work_duration_seconds",
                "How long in seconds a reconcile takes",
                m.work_seconds.clone(),
            );
            r.register(
                "retries",
                "Reconciles scheduled again after a failure",
                m.retries.clone(),
            );
            r.register(
                "unfinished_work_seconds",
                "Seconds the running reconciles have run so far; large values indicate stuck reconciles",
                m.unfinished_seconds.clone(),
            );
            r.register(
                "longest_running_processor_seconds",
                "Seconds the longest running reconcile has run",
                m.longest_running_seconds.clone(),
            );
            let r = root.sub_registry_with_prefix("windlass");
            r.register(
                "reconcile_errors",
                "Failed reconciles by parent kind and reason",
                m.reconcile_error_reasons.clone(),
            );
            r.register(
                "plugin_calls",
                "Plugin calls by plugin and outcome",
                m.plugin_calls.clone(),
            );
            r.register(
                "plugin_call_seconds",
                "Plugin call duration",
                m.plugin_call_seconds.clone(),
            );
            r.register(
                "plugin_memory_bytes",
                "Peak linear memory of a plugin's last call",
                m.plugin_memory_bytes.clone(),
            );
            r.register(
                "plugin_fuel",
                "Fuel used by plugin calls",
                m.plugin_fuel.clone(),
            );
            r.register(
                "hot_swaps",
                "Plugin loads by plugin and result",
                m.hot_swaps.clone(),
            );
            r.register(
                "plugin_serving",
                "1 while a version of the WasmPlugin serves, 0 while none does",
                m.plugin_serving.clone(),
            );
            r.register(
                "writes",
                "Child applies and status patches by kind, sent (applied) or skipped (unchanged)",
                m.writes.clone(),
            );
            r.register(
                "queue_wait_seconds",
                "How long due reconciles waited for leave to run, by parent kind and lane (changed, swapped, resync)",
                m.queue_wait_seconds.clone(),
            );
            r.register("leader", "1 while this instance leads", m.leader.clone());
            r.register(
                "policy_refusals",
                "Plugin outputs the host refused, by plugin and rule",
                m.policy_refusals.clone(),
            );
            r.register(
                "tracked",
                "Entries the host keeps in memory, by parent kind (or WasmPlugin) and what",
                m.tracked.clone(),
            );
            r.register(
                "tasks",
                "Tokio tasks alive in the host's runtime",
                m.tasks.clone(),
            );
            r.register(
                "finalize_stuck",
                "Deleting parents whose finalize phase a plugin has held past the threshold, by parent kind and plugin",
                m.finalize_stuck.clone(),
            );
        }
        m
    }
}

/// One running reconcile, counted in `workqueue_unfinished_work_seconds` until dropped —
/// also when its reconcile is cancelled (its controller stopped).
#[derive(Debug)]
pub struct Work {
    metrics: Arc<Metrics>,
    kind: String,
    id: u64,
    started: Instant,
}

impl Work {
    /// Ends the work: its run time goes to `workqueue_work_duration_seconds`.
    pub fn done(self) {
        self.metrics
            .work_seconds
            .get_or_create(&QueueLabel::of(&self.kind))
            .observe(self.started.elapsed().as_secs_f64());
    }
}

impl Drop for Work {
    fn drop(&mut self) {
        let mut running = self
            .metrics
            .running
            .lock()
            .unwrap_or_else(|e| e.into_inner());
        let was_running = running
            .get_mut(&self.kind)
            .is_some_and(|works| works.remove(&self.id).is_some());
        drop(running);
        // Not when the host stopped leading meanwhile: its series went then.
        if was_running {
            self.metrics
                .active_workers
                .get_or_create(&ControllerLabel {
                    controller: self.kind.clone(),
                })
                .dec();
        }
    }
}

impl Metrics {
    /// The `workqueue_*` series of one parent kind that its queue keeps (see
    /// `controller::queue`).
    pub fn queue_of(&self, kind: &str) -> QueueMetrics {
        let label = QueueLabel::of(kind);
        QueueMetrics {
            depth: self.queue_depth.get_or_create(&label).clone(),
            adds: self.queue_adds.get_or_create(&label).clone(),
            waited: self.queue_seconds.get_or_create(&label).clone(),
        }
    }

    /// A controller of this kind starts (again), running up to `concurrency` reconciles at once.
    pub fn controller_started(&self, kind: &str, concurrency: u16) {
        let label = ControllerLabel {
            controller: kind.to_string(),
        };
        self.max_concurrent
            .get_or_create(&label)
            .set(i64::from(concurrency));
        // Zero series from the start, so that rates and alerts see the first one.
        for result in ["success", "requeue_after", "error"] {
            drop(self.reconciles.get_or_create(&ControllerResult {
                controller: kind.to_string(),
                result: result.to_string(),
            }));
        }
        drop(self.active_workers.get_or_create(&label));
        drop(self.reconcile_errors.get_or_create(&label));
        drop(self.retries.get_or_create(&QueueLabel::of(kind)));
        self.running
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .entry(kind.to_string())
            .or_default();
    }

    /// This host stopped leading: the series of the controllers and plugin loader it ran go
    /// (counters stay: they only ever count up).
    pub fn stopped_leading(&self) {
        self.plugin_serving.clear();
        self.queue_depth.clear();
        self.max_concurrent.clear();
        self.active_workers.clear();
        self.unfinished_seconds.clear();
        self.longest_running_seconds.clear();
        self.running
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .clear();
    }

    /// A reconcile of this kind starts running: running until the returned [`Work`] goes.
    pub fn work_started(self: &Arc<Self>, kind: &str) -> Work {
        let id = self.next_work.fetch_add(1, Ordering::Relaxed);
        let started = Instant::now();
        self.running
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .entry(kind.to_string())
            .or_default()
            .insert(id, started);
        self.active_workers
            .get_or_create(&ControllerLabel {
                controller: kind.to_string(),
            })
            .inc();
        Work {
            metrics: self.clone(),
            kind: kind.to_string(),
            id,
            started,
        }
    }

    /// Counts one finished reconcile: `Ok(requeued)` whether it asked to run again after a
    /// delay, or the failure's reason.
    pub fn record_reconcile(&self, kind: &str, outcome: Result<bool, &str>, seconds: f64) {
        let controller = ControllerLabel {
            controller: kind.to_string(),
        };
        let result = match outcome {
            Ok(false) => "success",
            Ok(true) => "requeue_after",
            Err(reason) => {
                self.reconcile_errors.get_or_create(&controller).inc();
                self.reconcile_error_reasons
                    .get_or_create(&KindReason {
                        kind: kind.to_string(),
                        reason: reason.to_string(),
                    })
                    .inc();
                "error"
            }
        };
        self.reconciles
            .get_or_create(&ControllerResult {
                controller: kind.to_string(),
                result: result.to_string(),
            })
            .inc();
        self.reconcile_seconds
            .get_or_create(&controller)
            .observe(seconds);
    }

    /// Counts one reconcile stopped halfway because its controller stopped (the host stopping
    /// past its drain, the lease lost): `result="cancelled"`, neither a success nor an error.
    pub fn record_cancelled(&self, kind: &str) {
        self.reconciles
            .get_or_create(&ControllerResult {
                controller: kind.to_string(),
                result: "cancelled".to_string(),
            })
            .inc();
    }

    /// Whether a version of a WasmPlugin serves, or `None` once the WasmPlugin is gone.
    pub fn set_plugin_serving(&self, plugin: &str, serving: Option<bool>) {
        let label = PluginLabel {
            plugin: plugin.to_string(),
        };
        if let Some(serves) = serving {
            self.plugin_serving
                .get_or_create(&label)
                .set(i64::from(serves));
        } else {
            self.plugin_serving.remove(&label);
        }
    }

    /// Counts one retry after a failed reconcile of this kind.
    pub fn record_retry(&self, kind: &str) {
        self.retries.get_or_create(&QueueLabel::of(kind)).inc();
    }

    /// The queue-wait histogram of one parent kind and lane.
    pub fn queue_wait_of(&self, kind: &str, lane: &str) -> Histogram {
        self.queue_wait_seconds
            .get_or_create(&KindLane {
                kind: kind.to_string(),
                lane: lane.to_string(),
            })
            .clone()
    }

    /// The gauge of one kind of state the host keeps (see [`TrackedLabel`]).
    pub fn tracked_of(&self, kind: &str, what: &str) -> Gauge {
        self.tracked
            .get_or_create(&TrackedLabel {
                kind: kind.to_string(),
                what: what.to_string(),
            })
            .clone()
    }

    /// Counts one refusal of a plugin's output by a rule.
    pub fn record_refusal(&self, plugin: &str, rule: &str) {
        self.policy_refusals
            .get_or_create(&PluginRule {
                plugin: plugin.to_string(),
                rule: rule.to_string(),
            })
            .inc();
    }

    /// Counts one child apply or status patch, sent or skipped.
    pub fn record_write(&self, kind: &str, sent: bool) {
        self.writes
            .get_or_create(&WriteOutcome {
                kind: kind.to_string(),
                outcome: if sent { "applied" } else { "unchanged" }.to_string(),
            })
            .inc();
    }

    /// Records one plugin call.
    pub fn record_call(&self, plugin: &str, stats: &CallStats, outcome: &str) {
        let label = PluginLabel {
            plugin: plugin.to_string(),
        };
        self.plugin_calls
            .get_or_create(&PluginOutcome {
                plugin: plugin.to_string(),
                outcome: outcome.to_string(),
            })
            .inc();
        self.plugin_call_seconds
            .get_or_create(&label)
            .observe(stats.duration.as_secs_f64());
        self.plugin_memory_bytes
            .get_or_create(&label)
            .set(i64::try_from(stats.memory_peak_bytes).unwrap_or(i64::MAX));
        if let Some(fuel) = stats.fuel_consumed {
            self.plugin_fuel.get_or_create(&label).inc_by(fuel);
        }
    }

    /// The metrics in the Prometheus text format.
    pub fn encode(&self) -> String {
        if let Ok(runtime) = tokio::runtime::Handle::try_current() {
            let alive = runtime.metrics().num_alive_tasks();
            self.tasks.set(i64::try_from(alive).unwrap_or(i64::MAX));
        }
        let now = Instant::now();
        for (kind, works) in self
            .running
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .iter()
        {
            let ages = works.values().map(|t| now.duration_since(*t).as_secs_f64());
            let label = QueueLabel::of(kind);
            self.unfinished_seconds
                .get_or_create(&label)
                .set(ages.clone().fold(0.0, |sum, age| sum + age));
            self.longest_running_seconds
                .get_or_create(&label)
                .set(ages.fold(0.0, f64::max));
        }
        let mut out = String::new();
        let registry = self.registry.lock().unwrap_or_else(|e| e.into_inner());
        // Writing to a String cannot fail.
        let _ = encode(&mut out, &registry);
        out
    }

    /// The metrics as the scraper asks (its `Accept` header): the OpenMetrics text format when
    /// it accepts that (Prometheus does), else the Prometheus text format 0.0.4 (curl, `promtool
    /// check metrics`). Returns the content type and the body.
    pub fn encode_for(&self, accept: Option<&str>) -> (&'static str, String) {
        let openmetrics = self.encode();
        if accept.is_some_and(|a| a.contains("application/openmetrics-text")) {
            (
                "application/openmetrics-text; version=1.0.0; charset=utf-8",
                openmetrics,
            )
        } else {
            (
                "text/plain; version=0.0.4; charset=utf-8",
                prometheus_text(&openmetrics),
            )
        }
    }
}

/// The Prometheus text format 0.0.4 of what prometheus-client encoded as OpenMetrics: the same
/// samples, but a counter's HELP and TYPE name its samples' `_total` name, `unknown` is
/// `untyped`, and there is no `# EOF`.
fn prometheus_text(openmetrics: &str) -> String {
    let mut out = String::with_capacity(openmetrics.len());
    let mut help: Option<(&str, &str)> = None;
    for line in openmetrics.lines() {
        if let Some(rest) = line.strip_prefix("# HELP ") {
            let (name, text) = rest.split_once(' ').unwrap_or((rest, ""));
            help = Some((name, text));
        } else if let Some(rest) = line.strip_prefix("# TYPE ") {
            let (name, kind) = rest.split_once(' ').unwrap_or((rest, "untyped"));
            let (name, kind) = match kind {
                "counter" if !name.ends_with("_total") => (format!("{name}_total"), kind),
                "unknown" => (name.to_string(), "untyped"),
                _ => (name.to_string(), kind),
            };
            if let Some((_, text)) = help.take() {
                out.push_str(&format!("# HELP {name} {text}\n"));
            }
            out.push_str(&format!("# TYPE {name} {kind}\n"));
        } else if line.starts_with("# ") {
            // `# EOF`, `# UNIT`: OpenMetrics only.
        } else {
            if let Some((name, text)) = help.take() {
                out.push_str(&format!("# HELP {name} {text}\n"));
            }
            out.push_str(line);
            out.push('\n');
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn calls_and_reconciles_show_up_in_the_text_format() {
        let m = Metrics::default();
        m.record_call(
            "storage",
            &CallStats {
                memory_peak_bytes: 2048,
                ..CallStats::default()
            },
            "ok",
        );
        m.record_reconcile("v1/Thing", Ok(false), 0.01);
        m.record_reconcile("v1/Thing", Err("PluginFailed"), 0.01);
        let text = m.encode();
        assert!(
            text.contains(r#"windlass_plugin_calls_total{plugin="storage",outcome="ok"} 1"#),
            "{text}"
        );
        assert!(
            text.contains(r#"windlass_plugin_memory_bytes{plugin="storage"} 2048"#),
            "{text}"
        );
        for series in [
            r#"controller_runtime_reconcile_total{controller="v1/Thing",result="success"} 1"#,
            r#"controller_runtime_reconcile_total{controller="v1/Thing",result="error"} 1"#,
            r#"controller_runtime_reconcile_errors_total{controller="v1/Thing"} 1"#,
            r#"windlass_reconcile_errors_total{kind="v1/Thing",reason="PluginFailed"} 1"#,
            r#"controller_runtime_reconcile_time_seconds_count{controller="v1/Thing"} 2"#,
        ] {
            assert!(text.contains(series), "{series} missing from {text}");
        }
    }

    /// The value of the one series `series` (its name and labels, then a space).
    fn value(text: &str, series: &str) -> f64 {
        text.lines()
            .find_map(|l| l.strip_prefix(series))
            .unwrap_or_else(|| panic!("{series} missing from {text}"))
            .trim()
            .parse()
            .unwrap_or_else(|e| panic!("{series}: {e}"))
    }

    #[test]
    fn running_reconciles_count_as_active_unfinished_and_longest_running() {
        let m = Arc::new(Metrics::default());
        m.controller_started("v1/Thing", 4);
        let c = r#"{controller="v1/Thing"} "#;
        let q = r#"{name="v1/Thing",controller="v1/Thing"} "#;
        let text = m.encode();
        assert_eq!(
            value(
                &text,
                &format!("controller_runtime_max_concurrent_reconciles{c}")
            ),
            4.0
        );
        assert_eq!(
            value(
                &text,
                &format!("controller_runtime_reconcile_errors_total{c}")
            ),
            0.0
        );
        assert_eq!(value(&text, &format!("workqueue_retries_total{q}")), 0.0);
        for result in ["success", "requeue_after", "error"] {
            let series = format!(
                r#"controller_runtime_reconcile_total{{controller="v1/Thing",result="{result}"}} "#
            );
            assert_eq!(value(&text, &series), 0.0);
        }
        let first = m.work_started("v1/Thing");
        std::thread::sleep(std::time::Duration::from_millis(40));
        let second = m.work_started("v1/Thing");
        let text = m.encode();
        assert_eq!(
            value(&text, &format!("controller_runtime_active_workers{c}")),
            2.0
        );
        let longest = value(
            &text,
            &format!("workqueue_longest_running_processor_seconds{q}"),
        );
        let unfinished = value(&text, &format!("workqueue_unfinished_work_seconds{q}"));
        assert!((0.04..5.0).contains(&longest), "longest {longest}");
        assert!(
            unfinished >= longest,
            "unfinished {unfinished} < longest {longest}"
        );
        first.done();
        // Dropped without `done` (a cancelled reconcile): no longer running, no run time.
        drop(second);
        let text = m.encode();
        assert_eq!(
            value(&text, &format!("controller_runtime_active_workers{c}")),
            0.0
        );
        assert_eq!(
            value(&text, &format!("workqueue_unfinished_work_seconds{q}")),
            0.0
        );
        assert_eq!(
            value(&text, &format!("workqueue_work_duration_seconds_count{q}")),
            1.0
        );
        // A reconcile cut off by the lease's loss: its series go, and it does not bring them
        // back when it ends.
        let cut = m.work_started("v1/Thing");
        m.set_plugin_serving("storage", Some(false));
        m.stopped_leading();
        drop(cut);
        let text = m.encode();
        for gone in [
            "controller_runtime_active_workers{",
            "controller_runtime_max_concurrent_reconciles{",
            "workqueue_unfinished_work_seconds{",
            "windlass_plugin_serving{",
        ] {
            assert!(!text.contains(gone), "{gone} still in {text}");
        }
        m.controller_started("v1/Thing", 4);
        m.record_retry("v1/Thing");
        m.record_reconcile("v1/Thing", Ok(true), 0.2);
        let text = m.encode();
        assert_eq!(value(&text, &format!("workqueue_retries_total{q}")), 1.0);
        assert_eq!(
            value(
                &text,
                r#"controller_runtime_reconcile_total{controller="v1/Thing",result="requeue_after"} "#
            ),
            1.0
        );
    }

    #[test]
    fn the_prometheus_text_format_names_counters_by_their_samples_and_has_no_eof() {
        let m = Metrics::default();
        m.record_reconcile("v1/Thing", Ok(false), 0.1);
        let (content_type, text) = m.encode_for(Some("*/*"));
        assert!(content_type.starts_with("text/plain; version=0.0.4"));
        assert!(
            text.contains(
                "# HELP controller_runtime_reconcile_total Total number of reconciliations per controller.\n\
                 # TYPE controller_runtime_reconcile_total counter\n\
                 controller_runtime_reconcile_total{"
            ),
            "{text}"
        );
        assert!(!text.contains("# EOF"), "{text}");
        let (content_type, om) = m.encode_for(Some(
            "application/openmetrics-text;version=1.0.0;q=0.5,*/*;q=0.1",
        ));
        assert!(content_type.starts_with("application/openmetrics-text"));
        assert!(
            om.contains("# TYPE controller_runtime_reconcile counter\n"),
            "{om}"
        );
        assert!(om.ends_with("# EOF\n"), "{om}");
        let samples = |t: &str| {
            t.lines()
                .filter(|l| !l.starts_with('#'))
                .map(str::to_string)
                .collect::<Vec<_>>()
        };
        assert_eq!(samples(&text), samples(&om));
        assert!(samples(&text).len() > 5);
    }
}
