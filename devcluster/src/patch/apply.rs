//! Server-side apply and `managedFields`: who owns which field, conflicts, and the removal of
//! fields a manager stopped applying.
//!
//! # Semantics (those of the real server, within what the devcluster models)
//! - Applying merges the applied configuration into the live object: maps field by field,
//!   map lists item by item (by their keys), sets by value, other lists as a whole.
//! - The applier then owns exactly the fields it applied (`operation: Apply`).
//! - A field that would change and is owned by another manager is a conflict: 409 listing
//!   every conflict, unless `force`, which moves the ownership to the applier.
//! - A field the applier owned before, does not apply now and nobody else owns is removed.
//! - Any other write (create, update, patch) gives its manager (`operation: Update`) the
//!   fields it changed and takes them from everyone else, without conflicts.

use super::fields::{self, FieldSet, Path};
use super::lists::{ListType, Rules, item_key};
use crate::error::{ApiError, Cause, Result};
use serde_json::{Value, json};

/// One `managedFields` entry.
#[derive(Debug, Clone, PartialEq)]
pub struct Entry {
    /// `fieldManager`.
    pub manager: String,
    /// `Apply` or `Update`.
    pub operation: String,
    /// The apiVersion the manager wrote with.
    pub api_version: String,
    /// RFC 3339 time of the last write.
    pub time: String,
    /// `status` for writes through the status subresource, else empty.
    pub subresource: String,
    /// The owned fields.
    pub fields: FieldSet,
}

/// The entries of an object.
pub fn read_managed(obj: &Value) -> Vec<Entry> {
    let Some(list) = obj["metadata"]["managedFields"].as_array() else {
        return Vec::new();
    };
    list.iter()
        .map(|e| Entry {
            manager: e["manager"].as_str().unwrap_or_default().into(),
            operation: e["operation"].as_str().unwrap_or("Update").into(),
            api_version: e["apiVersion"].as_str().unwrap_or_default().into(),
            time: e["time"].as_str().unwrap_or_default().into(),
            subresource: e["subresource"].as_str().unwrap_or_default().into(),
            fields: fields::from_fields_v1(&e["fieldsV1"]),
        })
        .collect()
}

/// Writes the entries into `metadata.managedFields` (removed when there are none).
pub fn write_managed(obj: &mut Value, entries: &[Entry]) {
    let list: Vec<Value> = entries
        .iter()
        .filter(|e| !e.fields.is_empty())
        .map(|e| {
            let mut v = json!({"manager": e.manager, "operation": e.operation, "apiVersion": e.api_version,
                "time": e.time, "fieldsType": "FieldsV1", "fieldsV1": fields::to_fields_v1(&e.fields)});
            if !e.subresource.is_empty() {
                v["subresource"] = Value::String(e.subresource.clone());
            }
            v
        })
        .collect();
    if let Some(meta) = obj["metadata"].as_object_mut() {
        if list.is_empty() {
            meta.remove("managedFields");
        } else {
            meta.insert("managedFields".into(), Value::Array(list));
        }
    }
}

/// Who is writing: the manager, its apiVersion, the subresource, the time.
#[derive(Debug, Clone)]
pub struct Writer<'a> {
    /// `fieldManager`.
    pub manager: &'a str,
    /// apiVersion of the request.
    pub api_version: &'a str,
    /// `status` or empty.
    pub subresource: &'a str,
    /// Now, RFC 3339.
    pub now: &'a str,
}

fn upsert<'e>(entries: &'e mut Vec<Entry>, w: &Writer<'_>, operation: &str) -> &'e mut Entry {
    let pos = entries.iter().position(|e| {
        e.manager == w.manager && e.operation == operation && e.subresource == w.subresource
    });
    let idx = match pos {
        Some(i) => i,
        None => {
            entries.push(Entry {
                manager: w.manager.into(),
                operation: operation.into(),
                api_version: w.api_version.into(),
                time: w.now.into(),
                subresource: w.subresource.into(),
                fields: FieldSet::new(),
            });
            entries.len() - 1
        }
    };
    let e = &mut entries[idx];
    e.api_version = w.api_version.into();
    e.time = w.now.into();
    e
}

/// Records a non-apply write (`old` is `None` for a create): the writer owns what it changed.
pub fn record_update(old: Option<&Value>, new: &mut Value, w: &Writer<'_>, rules: Rules<'_>) {
    // A client may set managedFields itself (kubectl does when it migrates client-side apply
    // ownership to server-side apply): then its list is the starting point.
    let client_set = new["metadata"]
        .get("managedFields")
        .is_some_and(|m| old.is_none_or(|o| o["metadata"].get("managedFields") != Some(m)));
    let mut entries = if client_set {
        read_managed(new)
    } else {
        old.map(read_managed).unwrap_or_default()
    };
    let empty = json!({});
    let changed = fields::changed(old.unwrap_or(&empty), new, rules);
    if changed.is_empty() && old.is_some() {
        write_managed(new, &entries);
        return;
    }
    for e in entries.iter_mut() {
        e.fields.retain(|p| !changed.contains(p));
    }
    upsert(&mut entries, w, "Update").fields.extend(changed);
    entries.retain(|e| !e.fields.is_empty());
    write_managed(new, &entries);
}

/// Server-side apply of `applied` onto `live` (`None`: the object is created).
///
/// # Errors
/// 409 with one cause per conflicting field when another manager owns a field that would
/// change and `force` is false.
pub fn apply(
    live: Option<&Value>,
    applied: &Value,
    w: &Writer<'_>,
    force: bool,
    rules: Rules<'_>,
) -> Result<Value> {
    let applied_set = fields::of(applied, rules);
    let Some(live) = live else {
        let mut obj = applied.clone();
        let mut entries = Vec::new();
        upsert(&mut entries, w, "Apply").fields = applied_set;
        write_managed(&mut obj, &entries);
        return Ok(obj);
    };
    let mut entries = read_managed(live);
    let mut merged = live.clone();
    merge(&mut merged, applied, "", rules);

    // Fields this manager applied before and no longer applies, owned by nobody else, go.
    let previous = entries
        .iter()
        .find(|e| {
            e.manager == w.manager && e.operation == "Apply" && e.subresource == w.subresource
        })
        .map(|e| e.fields.clone())
        .unwrap_or_default();
    let others_own = |p: &Path, entries: &[Entry]| {
        entries
            .iter()
            .filter(|e| {
                !(e.manager == w.manager
                    && e.operation == "Apply"
                    && e.subresource == w.subresource)
            })
            .any(|e| e.fields.iter().any(|q| q.starts_with(p)))
    };
    for p in previous.difference(&applied_set) {
        if !others_own(p, &entries) {
            fields::remove(&mut merged, p);
        }
    }

    let changed = fields::changed(live, &merged, rules);
    let mut causes = Vec::new();
    for e in entries.iter_mut() {
        if e.manager == w.manager && e.subresource == w.subresource {
            continue;
        }
        let conflicting: Vec<Path> = e
            .fields
            .iter()
            .filter(|p| changed.contains(*p) && applied_set.contains(*p))
            .cloned()
            .collect();
        for p in &conflicting {
            causes.push(Cause {
                reason: "FieldManagerConflict".into(),
                message: format!(
                    "conflict with \"{}\" using {}: {}",
                    e.manager,
                    e.api_version,
                    path_string(p)
                ),
                field: path_string(p),
            });
        }
        if force {
            e.fields.retain(|p| !conflicting.contains(p));
        }
    }
    if !causes.is_empty() && !force {
        return Err(ApiError::apply_conflicts(causes));
    }
    upsert(&mut entries, w, "Apply").fields = applied_set;
    entries.retain(|e| !e.fields.is_empty());
    write_managed(&mut merged, &entries);
    Ok(merged)
}

/// Merges an applied configuration into an object (see the module docs).
pub fn merge(live: &mut Value, applied: &Value, name: &str, rules: Rules<'_>) {
    match (live, applied) {
        (Value::Object(l), Value::Object(a)) => {
            for (k, v) in a {
                if k == "managedFields" || k == "resourceVersion" {
                    continue;
                }
                match l.get_mut(k) {
                    Some(existing) => merge(existing, v, k, rules.field(k)),
                    None => {
                        l.insert(k.clone(), v.clone());
                    }
                }
            }
        }
        (Value::Array(l), Value::Array(a)) => match rules.list_type(name, a) {
            ListType::Atomic => *l = a.clone(),
            ListType::Set => {
                for item in a {
                    if !l.contains(item) {
                        l.push(item.clone());
                    }
                }
            }
            ListType::Map(keys) => {
                for item in a {
                    let key = item_key(&keys, item);
                    match l
                        .iter_mut()
                        .find(|i| key.is_some() && item_key(&keys, i) == key)
                    {
                        Some(existing) => merge(existing, item, "", rules.items()),
                        None => l.push(item.clone()),
                    }
                }
            }
        },
        (l, a) => *l = a.clone(),
    }
}

/// `.spec.containers[name="db"].image`, as conflict messages print a path.
pub fn path_string(p: &[String]) -> String {
    let mut s = String::new();
    for el in p {
        if let Some(f) = el.strip_prefix("f:") {
            s.push('.');
            s.push_str(f);
        } else if let Some(k) = el.strip_prefix("k:") {
            let parts: Vec<String> = serde_json::from_str::<serde_json::Map<String, Value>>(k)
                .map(|m| m.iter().map(|(k, v)| format!("{k}={v}")).collect())
                .unwrap_or_default();
            s.push_str(&format!("[{}]", parts.join(",")));
        } else if let Some(v) = el.strip_prefix("v:") {
            s.push_str(&format!("[={v}]"));
        }
    }
    s
}

#[cfg(test)]
mod tests {
    use super::*;

    fn writer(m: &str) -> Writer<'_> {
        Writer {
            manager: m,
            api_version: "apps/v1",
            subresource: "",
            now: "2026-01-01T00:00:00Z",
        }
    }

    fn sts(replicas: i64) -> Value {
        json!({"apiVersion": "apps/v1", "kind": "StatefulSet", "metadata": {"name": "db"}, "spec": {"replicas": replicas}})
    }

    #[test]
    fn applying_a_field_another_manager_set_differently_conflicts() {
        let live = apply(None, &sts(1), &writer("a"), false, Rules::Builtin).expect("create");
        let err =
            apply(Some(&live), &sts(3), &writer("b"), false, Rules::Builtin).expect_err("conflict");
        assert_eq!(err.code, 409);
        assert!(
            err.message
                .contains("conflict with \"a\" using apps/v1: .spec.replicas"),
            "{}",
            err.message
        );
    }

    #[test]
    fn forcing_takes_ownership_and_the_same_value_is_shared_without_conflict() {
        let live = apply(None, &sts(1), &writer("a"), false, Rules::Builtin).expect("create");
        let shared =
            apply(Some(&live), &sts(1), &writer("b"), false, Rules::Builtin).expect("same value");
        assert_eq!(read_managed(&shared).len(), 2);
        let forced =
            apply(Some(&shared), &sts(5), &writer("b"), true, Rules::Builtin).expect("force");
        assert_eq!(forced["spec"]["replicas"], 5);
        let owners: Vec<String> = read_managed(&forced)
            .into_iter()
            .map(|e| e.manager)
            .collect();
        assert_eq!(owners, vec!["b"]);
    }

    #[test]
    fn a_field_no_longer_applied_and_owned_by_nobody_else_is_removed() {
        let mut first = sts(1);
        first["metadata"]["labels"] = json!({"keep": "1", "drop": "1"});
        let live = apply(None, &first, &writer("a"), false, Rules::Builtin).expect("create");
        let mut second = sts(1);
        second["metadata"]["labels"] = json!({"keep": "1"});
        let after =
            apply(Some(&live), &second, &writer("a"), false, Rules::Builtin).expect("apply");
        assert_eq!(after["metadata"]["labels"], json!({"keep": "1"}));
    }

    #[test]
    fn an_update_takes_the_changed_fields_from_the_applier_without_conflict() {
        let live = apply(None, &sts(1), &writer("a"), false, Rules::Builtin).expect("create");
        let mut edited = live.clone();
        edited["spec"]["replicas"] = json!(2);
        record_update(
            Some(&live),
            &mut edited,
            &writer("kubectl-edit"),
            Rules::Builtin,
        );
        let entries = read_managed(&edited);
        assert_eq!(entries.len(), 1);
        assert_eq!(entries[0].manager, "kubectl-edit");
    }
}
