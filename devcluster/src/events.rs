//! Events are stored once, as core `v1` Events, and served through both `v1` and
//! `events.k8s.io/v1`, as the real API server does: an event written through either group is
//! read back through the other, so the host's events (written through `events.k8s.io`) show in
//! `kubectl get events`, `kubectl events --for` and `kubectl describe`.
//!
//! The two shapes differ only in field names (the conversion is one-to-one):
//!
//! | `events.k8s.io/v1`         | core `v1`            |
//! | -------------------------- | -------------------- |
//! | `regarding`                | `involvedObject`     |
//! | `note`                     | `message`            |
//! | `reportingController`      | `reportingComponent` |
//! | `deprecatedSource`         | `source`             |
//! | `deprecatedFirstTimestamp` | `firstTimestamp`     |
//! | `deprecatedLastTimestamp`  | `lastTimestamp`      |
//! | `deprecatedCount`          | `count`              |
//!
//! and `metadata`, `eventTime`, `series`, `action`, `reason`, `type`, `related`,
//! `reportingInstance` keep their names.

use serde_json::{Map, Value, json};

/// `(events.k8s.io/v1 name, core v1 name)` of the renamed fields.
const RENAMED: &[(&str, &str)] = &[
    ("regarding", "involvedObject"),
    ("note", "message"),
    ("reportingController", "reportingComponent"),
    ("deprecatedSource", "source"),
    ("deprecatedFirstTimestamp", "firstTimestamp"),
    ("deprecatedLastTimestamp", "lastTimestamp"),
    ("deprecatedCount", "count"),
];

/// The fields both shapes share.
const SHARED: &[&str] = &[
    "metadata",
    "eventTime",
    "series",
    "action",
    "reason",
    "type",
    "related",
    "reportingInstance",
];

/// The core `v1` Event for an `events.k8s.io/v1` one. Fields neither shape knows are dropped,
/// as the real server's decoding drops them.
pub fn to_core(event: &Value) -> Value {
    convert(event, "v1", |name| {
        RENAMED
            .iter()
            .find(|(new, _)| *new == name)
            .map(|(_, old)| *old)
    })
}

/// The `events.k8s.io/v1` Event for a core `v1` one.
pub fn to_events_v1(event: &Value) -> Value {
    convert(event, "events.k8s.io/v1", |name| {
        RENAMED
            .iter()
            .find(|(_, old)| *old == name)
            .map(|(new, _)| *new)
    })
}

fn convert(
    event: &Value,
    api_version: &str,
    renamed: impl Fn(&str) -> Option<&'static str>,
) -> Value {
    let mut out = Map::new();
    out.insert("kind".into(), json!("Event"));
    out.insert("apiVersion".into(), json!(api_version));
    if let Some(fields) = event.as_object() {
        for (name, value) in fields {
            if let Some(to) = renamed(name) {
                out.insert(to.into(), value.clone());
            } else if SHARED.contains(&name.as_str()) {
                out.insert(name.clone(), value.clone());
            }
        }
    }
    Value::Object(out)
}

/// The core `v1` field selector path for an `events.k8s.io/v1` one (`regarding.name` →
/// `involvedObject.name`), as the real server converts field labels.
pub fn core_field(path: &str) -> String {
    let (head, rest) = path
        .split_once('.')
        .map_or((path, None), |(h, r)| (h, Some(r)));
    let head = RENAMED
        .iter()
        .find(|(new, _)| *new == head)
        .map_or(head, |(_, old)| *old);
    match rest {
        Some(rest) => format!("{head}.{rest}"),
        None => head.to_string(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_event_converts_both_ways_without_loss() {
        let v1 = json!({
            "apiVersion": "events.k8s.io/v1", "kind": "Event",
            "metadata": {"name": "e1", "namespace": "shop"},
            "eventTime": "2026-12-01T10:00:00.000000Z",
            "series": {"count": 2, "lastObservedTime": "2026-12-01T10:01:00.000000Z"},
            "reportingController": "windlass.dev/host", "reportingInstance": "host-1",
            "action": "Apply", "reason": "Applied", "type": "Normal",
            "regarding": {"kind": "SampleDB", "name": "orders", "namespace": "shop"},
            "note": "applied 3 objects",
            "deprecatedCount": 0,
        });
        let core = to_core(&v1);
        assert_eq!(core["apiVersion"], "v1");
        assert_eq!(core["involvedObject"]["name"], "orders");
        assert_eq!(core["message"], "applied 3 objects");
        assert_eq!(core["reportingComponent"], "windlass.dev/host");
        assert_eq!(core["series"]["count"], 2);
        assert_eq!(core.get("regarding"), None);
        assert_eq!(to_events_v1(&core), v1);
    }

    #[test]
    fn field_selector_paths_follow_the_renames() {
        assert_eq!(core_field("regarding.name"), "involvedObject.name");
        assert_eq!(core_field("reportingController"), "reportingComponent");
        assert_eq!(core_field("metadata.name"), "metadata.name");
    }
}
