//! The parent's status as the host writes it: plugin status fragments, one condition per
//! plugin-reported type plus the host's own `Reconciled` and `Ready`, and observedGeneration;
//! and the condition merge the WasmPlugin status uses too. Pure; the writes live in `apply.rs` (a
//! merge patch of the parent's status subresource) and `plugin_status.rs`.

use std::collections::BTreeMap;
use windlass_policy::At as _;

use serde_json::{Map, Value, json};

use windlass_policy::pipeline::Outcome;

/// The condition type the host itself reports on every parent: did the last run succeed.
pub const RECONCILED: &str = "Reconciled";

/// The condition type the host composes on every parent, for `kubectl wait
/// --for=condition=Ready` and kstatus-based tools (Argo CD, Flux, `helm --wait`): True when the
/// last run applied everything (no plugin skipped) and every plugin that reports a `Ready` of
/// its own reports it True. Plugins' `Ready` reports are combined, never shown one by one; a
/// plugin that knows nothing of readiness reports none.
pub const READY: &str = "Ready";

/// One condition as Kubernetes stores it (its type is the key it is given under).
#[derive(Debug, Clone, PartialEq)]
pub struct Cond {
    /// `True` or `False`.
    pub status: &'static str,
    /// CamelCase reason.
    pub reason: String,
    /// Human-readable message.
    pub message: String,
}

/// The status merge patch after a successful run.
pub fn after_success(parent: &Value, outcome: &Outcome, now: &str) -> Value {
    let generation = parent
        .at("/metadata/generation")
        .and_then(Value::as_i64)
        .unwrap_or(0);
    let mut conditions = BTreeMap::new();
    for c in outcome.conditions.iter().filter(|c| c.item.kind != READY) {
        conditions.insert(
            c.item.kind.clone(),
            Cond {
                status: if c.item.status { "True" } else { "False" },
                reason: c.item.reason.clone(),
                message: c.item.message.clone(),
            },
        );
    }
    let (status, reason, message) = if outcome.incomplete() {
        let skipped: Vec<String> = outcome.skipped.iter().map(ToString::to_string).collect();
        (
            "False",
            "PluginSkipped".to_string(),
            format!(
                "skipped under failurePolicy Ignore (nothing pruned): {}",
                skipped.join("; ")
            ),
        )
    } else {
        (
            "True",
            "Success".to_string(),
            format!("{} objects applied", outcome.desired.len()),
        )
    };
    let ready = ready(outcome, status == "True", &reason, &message);
    conditions.insert(READY.into(), ready);
    conditions.insert(
        RECONCILED.into(),
        Cond {
            status,
            reason,
            message,
        },
    );
    let mut body: Map<String, Value> = outcome.status.clone();
    body.insert(
        "conditions".into(),
        merge_conditions(parent, &conditions, generation, now),
    );
    body.insert("observedGeneration".into(), json!(generation));
    json!({ "status": body })
}

/// The parent's `Ready` ([`READY`]) after a run: not ready while the run was incomplete (the
/// reason and message of `Reconciled`); else not ready while any plugin reports its `Ready`
/// False (the first such plugin's reason; each one's message, naming it); else ready.
fn ready(outcome: &Outcome, complete: bool, reason: &str, message: &str) -> Cond {
    if !complete {
        return Cond {
            status: "False",
            reason: reason.to_string(),
            message: message.to_string(),
        };
    }
    let reports: Vec<_> = outcome
        .conditions
        .iter()
        .filter(|c| c.item.kind == READY)
        .collect();
    let said = |status: bool| -> Vec<String> {
        reports
            .iter()
            .filter(|c| c.item.status == status)
            .map(|c| format!("{}: {}", c.plugin, c.item.message))
            .collect()
    };
    let cut = |parts: Vec<String>| {
        windlass_policy::cut_message(&parts.join("; "), windlass_policy::MAX_CONDITION_MESSAGE)
    };
    match reports.iter().find(|c| !c.item.status) {
        Some(first) => Cond {
            status: "False",
            reason: first.item.reason.clone(),
            message: cut(said(false)),
        },
        None if reports.is_empty() => Cond {
            status: "True",
            reason: "Reconciled".to_string(),
            message: "every object applied; no plugin reports readiness".to_string(),
        },
        None => Cond {
            status: "True",
            reason: "PluginsReady".to_string(),
            message: cut(said(true)),
        },
    }
}

/// The status merge patch after a failed run (a plugin, the policy or the API): only the host's
/// `Reconciled` changes; `Ready`, plugin conditions and fields stay as the last successful run
/// left them (a failed write to the API says nothing about whether the parent serves).
pub fn after_failure(parent: &Value, error: &super::error::ReconcileError, now: &str) -> Value {
    let generation = parent
        .at("/metadata/generation")
        .and_then(Value::as_i64)
        .unwrap_or(0);
    let conditions = BTreeMap::from([(
        RECONCILED.to_string(),
        Cond {
            status: "False",
            reason: error.reason().to_string(),
            // The error carries plugin-chosen text (names, its own error message): cut it to
            // the API's limit, or the status patch would be refused and the failure unseen.
            message: windlass_policy::cut_message(
                &error.to_string(),
                windlass_policy::MAX_CONDITION_MESSAGE,
            ),
        },
    )]);
    json!({ "status": { "conditions": merge_conditions(parent, &conditions, generation, now) } })
}

/// The conditions of `object` (a parent, a WasmPlugin) updated with `new` ones, by type:
/// lastTransitionTime moves only when the status flips; conditions not mentioned are kept as
/// they were. The one condition merge of the host.
pub fn merge_conditions(
    parent: &Value,
    new: &BTreeMap<String, Cond>,
    generation: i64,
    now: &str,
) -> Value {
    let existing: Vec<Value> = parent
        .at("/status/conditions")
        .and_then(Value::as_array)
        .cloned()
        .unwrap_or_default();
    let mut out: Vec<Value> = Vec::new();
    for old in &existing {
        let Some(kind) = old["type"].as_str() else {
            continue;
        };
        match new.get(kind) {
            Some(c) => out.push(condition(kind, c, Some(old), generation, now)),
            None => out.push(old.clone()),
        }
    }
    for (kind, c) in new {
        if !existing.iter().any(|o| o["type"] == kind.as_str()) {
            out.push(condition(kind, c, None, generation, now));
        }
    }
    Value::Array(out)
}

fn condition(kind: &str, c: &Cond, old: Option<&Value>, generation: i64, now: &str) -> Value {
    let since = match old {
        Some(old) if old["status"] == c.status => old["lastTransitionTime"]
            .as_str()
            .unwrap_or(now)
            .to_string(),
        _ => now.to_string(),
    };
    json!({
        "type": kind,
        "status": c.status,
        "reason": c.reason,
        "message": c.message,
        "lastTransitionTime": since,
        "observedGeneration": generation,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use windlass_contract::Condition;
    use windlass_policy::pipeline::{Error, Reported};

    fn parent(conditions: Value) -> Value {
        json!({"metadata": {"name": "p", "generation": 4}, "status": {"conditions": conditions}})
    }

    fn outcome(ready: bool) -> Outcome {
        let mut o = Outcome::default();
        o.status.insert(
            "phase".into(),
            json!(if ready { "Ready" } else { "Provisioning" }),
        );
        o.conditions.push(Reported {
            plugin: "storage".into(),
            item: Condition {
                kind: "StorageReady".into(),
                status: ready,
                reason: if ready {
                    "ReplicasReady"
                } else {
                    "WaitingForReplicas"
                }
                .into(),
                message: "m".into(),
            },
        });
        o
    }

    #[test]
    fn success_writes_fragments_conditions_and_observed_generation() {
        let patch = after_success(&parent(json!([])), &outcome(false), "2026-01-01T00:00:00Z");
        let status = &patch["status"];
        assert_eq!(status["phase"], "Provisioning");
        assert_eq!(status["observedGeneration"], 4);
        let types: Vec<&str> = status["conditions"]
            .as_array()
            .unwrap()
            .iter()
            .map(|c| c["type"].as_str().unwrap())
            .collect();
        assert_eq!(types, ["Ready", "Reconciled", "StorageReady"]);
        assert_eq!(status["conditions"][1]["status"], "True");
        assert_eq!(status["conditions"][2]["observedGeneration"], 4);
    }

    #[test]
    fn transition_time_moves_only_when_the_status_flips() {
        let before = after_success(&parent(json!([])), &outcome(false), "T1");
        let p = parent(before["status"]["conditions"].clone());
        let same = after_success(&p, &outcome(false), "T2");
        assert_eq!(same["status"]["conditions"][2]["lastTransitionTime"], "T1");
        let flipped = after_success(&p, &outcome(true), "T3");
        assert_eq!(
            flipped["status"]["conditions"][2]["lastTransitionTime"],
            "T3"
        );
        assert_eq!(
            flipped["status"]["conditions"][1]["lastTransitionTime"],
            "T1"
        );
    }

    #[test]
    fn failure_changes_only_the_hosts_condition_and_names_the_plugin() {
        let ok = after_success(&parent(json!([])), &outcome(true), "T1");
        let p = parent(ok["status"]["conditions"].clone());
        let err = Error::Plugin(windlass_contract::Error::Timeout {
            plugin: "backup".into(),
            limit: std::time::Duration::from_secs(2),
        });
        let patch = after_failure(&p, &err.into(), "T2");
        let conds = patch["status"]["conditions"].as_array().unwrap();
        assert_eq!(conds.len(), 3);
        assert_eq!(conds[1]["status"], "False");
        assert_eq!(conds[1]["reason"], "Timeout");
        assert_eq!(conds[1]["message"], "plugin backup: timed out after 2s");
        assert_eq!(
            conds[0]["status"], "True",
            "Ready is kept as the last successful run left it"
        );
        assert_eq!(
            conds[2]["status"], "True",
            "the plugin's own condition is untouched"
        );
        assert!(patch["status"].get("phase").is_none());
        assert!(patch["status"].get("observedGeneration").is_none());
    }

    fn report(o: &mut Outcome, plugin: &str, ready: bool, reason: &str, message: &str) {
        o.conditions.push(Reported {
            plugin: plugin.into(),
            item: Condition {
                kind: READY.into(),
                status: ready,
                reason: reason.into(),
                message: message.into(),
            },
        });
    }

    fn ready_of(patch: &Value) -> Value {
        let all = patch["status"]["conditions"].as_array().unwrap();
        let ready: Vec<&Value> = all.iter().filter(|c| c["type"] == READY).collect();
        assert_eq!(ready.len(), 1, "one Ready, however many plugins report it");
        ready[0].clone()
    }

    #[test]
    fn ready_combines_the_plugins_reports_and_waits_for_every_one() {
        let none = ready_of(&after_success(&parent(json!([])), &outcome(true), "T"));
        assert_eq!(
            (none["status"].as_str(), none["reason"].as_str()),
            (Some("True"), Some("Reconciled")),
            "no plugin knows readiness: ready once everything is applied"
        );

        let mut o = outcome(true);
        report(&mut o, "storage", true, "Serving", "3/3 replicas ready");
        report(
            &mut o,
            "backup",
            false,
            "RestoreFailed",
            "backup b is missing",
        );
        report(&mut o, "upgrade", false, "Upgrading", "rolling to 17.0");
        let not = ready_of(&after_success(&parent(json!([])), &o, "T"));
        assert_eq!(not["status"], "False");
        assert_eq!(not["reason"], "RestoreFailed", "the first plugin not ready");
        assert_eq!(
            not["message"],
            "backup: backup b is missing; upgrade: rolling to 17.0"
        );

        let mut o = outcome(true);
        report(&mut o, "storage", true, "Serving", "3/3 replicas ready");
        report(&mut o, "backup", true, "Restored", "restored from b");
        let yes = ready_of(&after_success(&parent(json!([])), &o, "T"));
        assert_eq!(yes["status"], "True");
        assert_eq!(yes["reason"], "PluginsReady");
        assert_eq!(
            yes["message"],
            "storage: 3/3 replicas ready; backup: restored from b"
        );

        // A skipped plugin's readiness is unknown: not ready, whatever the others say.
        o.skipped
            .push(Error::Plugin(windlass_contract::Error::Timeout {
                plugin: "chaos".into(),
                limit: std::time::Duration::from_secs(2),
            }));
        let skipped = ready_of(&after_success(&parent(json!([])), &o, "T"));
        assert_eq!(skipped["status"], "False");
        assert_eq!(skipped["reason"], "PluginSkipped");
        assert!(
            skipped["message"].as_str().unwrap().contains("chaos"),
            "{skipped}"
        );
    }

    #[test]
    fn a_failure_message_of_plugin_chosen_length_is_cut_to_the_api_limit() {
        // From a plugin (through the pipeline) and from the host's own steps alike: a source
        // or an API error quotes names and server text of any length too.
        let errors: [super::super::error::ReconcileError; 2] = [
            Error::Parent("é".repeat(100_000)).into(),
            super::super::error::ReconcileError::NotOwned {
                plugin: "p".into(),
                object: "v1/Secret db/x".into(),
                why: "é".repeat(100_000),
            },
        ];
        for err in errors {
            let patch = after_failure(&parent(json!([])), &err, "T");
            let condition = &patch["status"]["conditions"][0];
            assert_eq!(condition["reason"], err.reason());
            let message = condition["message"].as_str().unwrap();
            assert!(
                message.len() <= windlass_policy::MAX_CONDITION_MESSAGE,
                "{}",
                message.len()
            );
            assert!(message.ends_with("[cut by the host]"));
        }
    }
}
