//! Prometheus metrics of the host (prometheus-client), served at `/metrics` by `admin.rs`.

use std::sync::Mutex;

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

/// Labels of per-kind series.
#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct KindResult {
    /// Parent kind (`group/version/Kind`).
    pub kind: String,
    /// `success` or the error reason.
    pub result: String,
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

fn call_buckets() -> Histogram {
    Histogram::new(exponential_buckets(0.000_05, 2.0, 18))
}

fn reconcile_buckets() -> Histogram {
    Histogram::new(exponential_buckets(0.000_5, 2.0, 16))
}

/// Every metric the host exports.
#[derive(Debug)]
pub struct Metrics {
    registry: Mutex<Registry>,
    /// Reconciles by parent kind and result.
    pub reconciles: Family<KindResult, Counter>,
    /// Reconcile duration by parent kind and result.
    pub reconcile_seconds: Histograms<KindResult>,
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
    /// Child applies and status patches, sent or skipped as unchanged.
    pub writes: Family<WriteOutcome, Counter>,
    /// Parents waiting for a reconcile to start, by parent kind (see `controller::queue`).
    pub queue_depth: Family<KindLabel, Gauge>,
    /// How long reconciles waited for leave to run, by parent kind and lane (see
    /// `controller::gate`).
    pub queue_wait_seconds: Histograms<KindLane>,
    /// Reconciles running now.
    pub in_flight: Gauge,
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
            registry: Mutex::new(Registry::with_prefix("windlass")),
            reconciles: Family::default(),
            reconcile_seconds: Family::new_with_constructor(reconcile_buckets),
            plugin_calls: Family::default(),
            plugin_call_seconds: Family::new_with_constructor(call_buckets),
            plugin_memory_bytes: Family::default(),
            plugin_fuel: Family::default(),
            hot_swaps: Family::default(),
            writes: Family::default(),
            queue_depth: Family::default(),
            queue_wait_seconds: Family::new_with_constructor(reconcile_buckets),
            in_flight: Gauge::default(),
            leader: Gauge::default(),
            policy_refusals: Family::default(),
            tracked: Family::default(),
            tasks: Gauge::default(),
            finalize_stuck: Family::default(),
        };
        {
            let mut r = m.registry.lock().unwrap_or_else(|e| e.into_inner());
            r.register(
                "reconciles",
                "Reconciles by parent kind and result",
                m.reconciles.clone(),
            );
            r.register(
                "reconcile_seconds",
                "Reconcile duration",
                m.reconcile_seconds.clone(),
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
                "writes",
                "Child applies and status patches by kind, sent (applied) or skipped (unchanged)",
                m.writes.clone(),
            );
            r.register(
                "reconcile_queue_depth",
                "Parents waiting for a reconcile because they, a child or the pipeline changed",
                m.queue_depth.clone(),
            );
            r.register(
                "queue_wait_seconds",
                "How long due reconciles waited for leave to run, by parent kind and lane (changed, swapped, resync)",
                m.queue_wait_seconds.clone(),
            );
            r.register(
                "reconciles_in_flight",
                "Reconciles running now",
                m.in_flight.clone(),
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

impl Metrics {
    /// The queue-depth gauge of one parent kind.
    pub fn queue_depth_of(&self, kind: &str) -> Gauge {
        self.queue_depth
            .get_or_create(&KindLabel {
                kind: kind.to_string(),
            })
            .clone()
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
        let mut out = String::new();
        let registry = self.registry.lock().unwrap_or_else(|e| e.into_inner());
        // Writing to a String cannot fail.
        let _ = encode(&mut out, &registry);
        out
    }
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
        m.reconciles
            .get_or_create(&KindResult {
                kind: "v1/Thing".into(),
                result: "success".into(),
            })
            .inc();
        let text = m.encode();
        assert!(
            text.contains(r#"windlass_plugin_calls_total{plugin="storage",outcome="ok"} 1"#),
            "{text}"
        );
        assert!(
            text.contains(r#"windlass_plugin_memory_bytes{plugin="storage"} 2048"#),
            "{text}"
        );
        assert!(
            text.contains(r#"windlass_reconciles_total{kind="v1/Thing",result="success"} 1"#),
            "{text}"
        );
    }
}
