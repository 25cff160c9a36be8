//! The parent's status as the host writes it: plugin status fragments, one condition per
//! plugin-reported type plus the host's own `Reconciled`, and observedGeneration; and the
//! condition merge the WasmPlugin status uses too. Pure; the writes live in `apply.rs` (a
//! merge patch of the parent's status subresource) and `plugin_status.rs`.

use std::collections::BTreeMap;

use serde_json::{Map, Value, json};

use windlass_policy::pipeline::Outcome;

/// The condition type the host itself reports on every parent.
pub const RECONCILED: &str = "Reconciled";

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
        .pointer("/metadata/generation")
        .and_then(Value::as_i64)
        .unwrap_or(0);
    let mut conditions = BTreeMap::new();
    for c in &outcome.conditions {
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

/// The status merge patch after a failed run (a plugin, the policy or the API): only the host's
/// condition changes; plugin conditions and fields stay as the last successful run left them.
pub fn after_failure(parent: &Value, error: &super::error::ReconcileError, now: &str) -> Value {
    let generation = parent
        .pointer("/metadata/generation")
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
        .pointer("/status/conditions")
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
        assert_eq!(types, ["Reconciled", "StorageReady"]);
        assert_eq!(status["conditions"][0]["status"], "True");
        assert_eq!(status["conditions"][1]["observedGeneration"], 4);
    }

    #[test]
    fn transition_time_moves_only_when_the_status_flips() {
        let before = after_success(&parent(json!([])), &outcome(false), "T1");
        let p = parent(before["status"]["conditions"].clone());
        let same = after_success(&p, &outcome(false), "T2");
        assert_eq!(same["status"]["conditions"][1]["lastTransitionTime"], "T1");
        let flipped = after_success(&p, &outcome(true), "T3");
        assert_eq!(
            flipped["status"]["conditions"][1]["lastTransitionTime"],
            "T3"
        );
        assert_eq!(
            flipped["status"]["conditions"][0]["lastTransitionTime"],
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
        assert_eq!(conds.len(), 2);
        assert_eq!(conds[0]["status"], "False");
        assert_eq!(conds[0]["reason"], "Timeout");
        assert_eq!(conds[0]["message"], "plugin backup: timed out after 2s");
        assert_eq!(
            conds[1]["status"], "True",
            "the plugin's own condition is untouched"
        );
        assert!(patch["status"].get("phase").is_none());
        assert!(patch["status"].get("observedGeneration").is_none());
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
