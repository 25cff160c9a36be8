//! What the last reconcile of each parent did, plugin by plugin — when it started, how long each
//! call took, what it cost and how it ended, with a refusal's rule — for `windlass trace`. The
//! leader serves a parent's record on its admin address (`/debug/runs/{uid}`).
//!
//! # Why in memory, not in the parent's status
//! Durations change on every run: written to the status, each reconcile would be a write (and a
//! watch event to every client of the kind), where today a steady parent costs none. What a run
//! decided that lasts — the `Reconciled` condition with the failing plugin and rule, the events —
//! is on the parent already. The records are bounded by the parents that exist: a controller
//! forgets a parent's with the parent (`Remembered`), and all of its kind when it stops.

use std::{collections::HashMap, sync::Mutex};

use serde::{Deserialize, Serialize};

/// One parent's last reconcile.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct LastRun {
    /// The parent kind's key (group/version/Kind).
    pub kind: String,
    /// The parent's namespace (empty: cluster-scoped).
    pub namespace: String,
    /// The parent's name.
    pub name: String,
    /// When it started (RFC 3339).
    pub started: String,
    /// How long the whole reconcile took, reads and writes included.
    pub duration_ms: f64,
    /// `success`, `requeue_after`, or the failure's reason (as the reconcile metrics say).
    pub result: String,
    /// Why it failed, when it did.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub message: Option<String>,
    /// The plugin calls, in pipeline order (none when the run stopped before the pipeline).
    pub plugins: Vec<PluginRun>,
}

/// One plugin call of a run.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct PluginRun {
    /// The plugin's name.
    pub name: String,
    /// The component's digest.
    pub digest: String,
    /// Wall time of the call (an instance's start included when it was fresh).
    pub duration_ms: f64,
    /// The most memory the instance held.
    pub memory_bytes: u64,
    /// Fuel used, when fuel is enabled.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub fuel: Option<u64>,
    /// `ok`, or why it failed (`Refused`, `Trap`, `Timeout`, …).
    pub result: String,
    /// The output policy's rule that refused it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rule: Option<String>,
    /// What went wrong, when something did.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub message: Option<String>,
}

/// The last run of every parent this instance reconciles, by parent uid.
#[derive(Debug, Default)]
pub struct Runs {
    last: Mutex<HashMap<String, LastRun>>,
    /// The calls of a run under way, until it ends (one reconcile per parent at a time).
    calls: Mutex<HashMap<String, Vec<PluginRun>>>,
}

fn lock<V>(m: &Mutex<V>) -> std::sync::MutexGuard<'_, V> {
    m.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
}

impl Runs {
    /// A run of `uid` begins: calls of an earlier run that ended without its record are
    /// dropped.
    pub fn begin(&self, uid: &str) {
        lock(&self.calls).remove(uid);
    }

    /// The pipeline of `uid`'s run made these calls.
    pub fn called(&self, uid: &str, calls: Vec<PluginRun>) {
        lock(&self.calls).insert(uid.to_string(), calls);
    }

    /// `uid`'s run ended: `run` (its `plugins` are filled from [`Runs::called`]) becomes its
    /// last run.
    pub fn end(&self, uid: &str, mut run: LastRun) {
        run.plugins = lock(&self.calls).remove(uid).unwrap_or_default();
        lock(&self.last).insert(uid.to_string(), run);
    }

    /// The last run of `uid`.
    pub fn get(&self, uid: &str) -> Option<LastRun> {
        lock(&self.last).get(uid).cloned()
    }

    /// Forgets a parent that was deleted.
    pub fn forget(&self, uid: &str) {
        lock(&self.last).remove(uid);
        lock(&self.calls).remove(uid);
    }

    /// Forgets every parent of `kind` but those in `keep` (`None`: all of them): the kind's
    /// controller stopped, or relisted.
    pub fn forget_kind(&self, kind: &str, keep: Option<&std::collections::HashSet<String>>) {
        lock(&self.last)
            .retain(|uid, run| run.kind != kind || keep.is_some_and(|k| k.contains(uid)));
    }

    /// How many parents have a record.
    pub fn len(&self) -> usize {
        lock(&self.last).len()
    }

    /// Whether no parent has a record.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    fn run(kind: &str, name: &str) -> LastRun {
        LastRun {
            kind: kind.into(),
            namespace: "shop".into(),
            name: name.into(),
            started: "2026-12-05T10:00:00Z".into(),
            duration_ms: 12.5,
            result: "success".into(),
            message: None,
            plugins: Vec::new(),
        }
    }

    fn call(name: &str) -> PluginRun {
        PluginRun {
            name: name.into(),
            digest: "sha256:1".into(),
            duration_ms: 3.0,
            memory_bytes: 1 << 20,
            fuel: None,
            result: "ok".into(),
            rule: None,
            message: None,
        }
    }

    #[test]
    fn a_run_keeps_its_own_calls_and_a_run_that_called_nothing_shows_none() {
        let runs = Runs::default();
        runs.begin("u1");
        runs.called("u1", vec![call("storage"), call("backup")]);
        runs.end("u1", run("samples/v1/DB", "orders"));
        let last = runs.get("u1").unwrap();
        assert_eq!(
            last.plugins
                .iter()
                .map(|p| p.name.as_str())
                .collect::<Vec<_>>(),
            ["storage", "backup"]
        );
        // The next run fails before the pipeline: it shows no calls, not the last run's.
        runs.begin("u1");
        let mut failed = run("samples/v1/DB", "orders");
        failed.result = "NotServing".into();
        runs.end("u1", failed);
        let last = runs.get("u1").unwrap();
        assert_eq!(last.result, "NotServing");
        assert!(last.plugins.is_empty());
        let json = serde_json::to_value(&last).unwrap();
        assert_eq!(json["durationMs"], 12.5);
        assert!(json.get("message").is_none());
    }

    #[test]
    fn records_go_with_their_parent_and_with_their_kind() {
        let runs = Runs::default();
        for (uid, kind) in [("a", "k1"), ("b", "k1"), ("c", "k2")] {
            runs.end(uid, run(kind, uid));
        }
        runs.forget("a");
        assert!(runs.get("a").is_none());
        let keep = ["b".to_string()].into_iter().collect();
        runs.forget_kind("k1", Some(&keep));
        assert!(runs.get("b").is_some());
        runs.forget_kind("k1", None);
        assert!(runs.get("b").is_none());
        assert!(runs.get("c").is_some());
        assert_eq!(runs.len(), 1);
    }
}
