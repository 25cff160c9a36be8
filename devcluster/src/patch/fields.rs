//! Field sets — what a manager owns — and their `FieldsV1` form in `managedFields`.
//!
//! A path is a list of FieldsV1 path elements: `f:<field>`, `k:<json key>` (an item of a map
//! list), `v:<json value>` (an item of a set), `i:<index>`. A set holds leaf fields, atomic
//! lists, and (for map-list items) the item itself, written `.` in FieldsV1.

use super::lists::{ListType, Rules, item_key};
use serde_json::{Map, Value};
use std::collections::BTreeSet;

/// A path of FieldsV1 elements.
pub type Path = Vec<String>;

/// A set of owned paths.
pub type FieldSet = BTreeSet<Path>;

/// Metadata fields the server owns; never part of a manager's set.
const SERVER_META: &[&str] = &[
    "name",
    "namespace",
    "uid",
    "resourceVersion",
    "generation",
    "creationTimestamp",
    "deletionTimestamp",
    "deletionGracePeriodSeconds",
    "managedFields",
    "selfLink",
    "generateName",
];

/// The fields an object sets (`apiVersion`, `kind` and server-owned metadata left out).
pub fn of(obj: &Value, rules: Rules<'_>) -> FieldSet {
    let mut set = FieldSet::new();
    if let Value::Object(m) = obj {
        for (k, v) in m {
            if k == "apiVersion" || k == "kind" {
                continue;
            }
            let mut path = vec![format!("f:{k}")];
            if k == "metadata" {
                if let Value::Object(meta) = v {
                    for (mk, mv) in meta {
                        if SERVER_META.contains(&mk.as_str()) {
                            continue;
                        }
                        path.push(format!("f:{mk}"));
                        walk(
                            mv,
                            mk,
                            rules.field("metadata").field(mk),
                            &mut path,
                            &mut set,
                        );
                        path.pop();
                    }
                }
                continue;
            }
            walk(v, k, rules.field(k), &mut path, &mut set);
        }
    }
    set
}

fn walk(v: &Value, name: &str, rules: Rules<'_>, path: &mut Path, set: &mut FieldSet) {
    match v {
        Value::Object(m) if !m.is_empty() => {
            for (k, child) in m {
                path.push(format!("f:{k}"));
                walk(child, k, rules.field(k), path, set);
                path.pop();
            }
        }
        Value::Array(items) => match rules.list_type(name, items) {
            ListType::Atomic => {
                set.insert(path.clone());
            }
            ListType::Set => {
                for item in items {
                    path.push(format!("v:{item}"));
                    set.insert(path.clone());
                    path.pop();
                }
            }
            ListType::Map(keys) => {
                for item in items {
                    let Some(k) = item_key(&keys, item) else {
                        set.insert(path.clone());
                        return;
                    };
                    path.push(format!("k:{k}"));
                    set.insert(path.clone());
                    if let Value::Object(m) = item {
                        for (ck, cv) in m {
                            path.push(format!("f:{ck}"));
                            walk(cv, ck, rules.items().field(ck), path, set);
                            path.pop();
                        }
                    }
                    path.pop();
                }
            }
        },
        _ => {
            set.insert(path.clone());
        }
    }
}

/// The value at a path, if present.
pub fn lookup<'v>(obj: &'v Value, path: &[String]) -> Option<&'v Value> {
    let mut cur = obj;
    for el in path {
        cur = step(cur, el)?;
    }
    Some(cur)
}

fn step<'v>(cur: &'v Value, el: &str) -> Option<&'v Value> {
    if let Some(f) = el.strip_prefix("f:") {
        return cur.get(f);
    }
    let items = cur.as_array()?;
    if let Some(k) = el.strip_prefix("k:") {
        let key: Map<String, Value> = serde_json::from_str(k).ok()?;
        return items
            .iter()
            .find(|i| key.iter().all(|(kk, kv)| i.get(kk) == Some(kv)));
    }
    if let Some(v) = el.strip_prefix("v:") {
        let want: Value = serde_json::from_str(v).ok()?;
        return items.iter().find(|i| **i == want);
    }
    None
}

/// Removes the value at a path (a field, a map-list item, a set item). Returns whether
/// something was removed.
pub fn remove(obj: &mut Value, path: &[String]) -> bool {
    let Some((last, parent_path)) = path.split_last() else {
        return false;
    };
    let mut cur = obj;
    for el in parent_path {
        let next = if let Some(f) = el.strip_prefix("f:") {
            cur.get_mut(f)
        } else {
            let Some(found) = step(cur, el).cloned() else {
                return false;
            };
            cur.as_array_mut()
                .and_then(|a| a.iter_mut().find(|i| **i == found))
        };
        match next {
            Some(n) => cur = n,
            None => return false,
        }
    }
    if let Some(f) = last.strip_prefix("f:") {
        return cur.as_object_mut().and_then(|m| m.remove(f)).is_some();
    }
    let Some(found) = step(cur, last).cloned() else {
        return false;
    };
    match cur.as_array_mut() {
        Some(a) => {
            let before = a.len();
            a.retain(|i| *i != found);
            a.len() != before
        }
        None => false,
    }
}

/// The `fieldsV1` object for a set.
pub fn to_fields_v1(set: &FieldSet) -> Value {
    let mut root = Value::Object(Map::new());
    for path in set {
        let mut node = &mut root;
        for el in path {
            node = node
                .as_object_mut()
                .map(|m| {
                    m.entry(el.clone())
                        .or_insert_with(|| Value::Object(Map::new()))
                })
                .expect("fieldsV1 nodes are objects");
        }
        // A member that also has children gets the "." marker.
        if let Some(m) = node.as_object_mut() {
            m.insert(".".into(), Value::Object(Map::new()));
        }
    }
    strip_leaf_markers(&mut root);
    root
}

/// A node whose only child is "." is a plain leaf: `{}`.
fn strip_leaf_markers(node: &mut Value) {
    if let Some(m) = node.as_object_mut() {
        if m.len() == 1 && m.contains_key(".") {
            m.clear();
            return;
        }
        for (_, child) in m.iter_mut() {
            strip_leaf_markers(child);
        }
    }
}

/// The set a `fieldsV1` object describes.
pub fn from_fields_v1(v: &Value) -> FieldSet {
    let mut set = FieldSet::new();
    let mut path = Path::new();
    read(v, &mut path, &mut set);
    set
}

fn read(v: &Value, path: &mut Path, set: &mut FieldSet) {
    let Some(m) = v.as_object() else { return };
    if m.is_empty() && !path.is_empty() {
        set.insert(path.clone());
        return;
    }
    for (k, child) in m {
        if k == "." {
            set.insert(path.clone());
            continue;
        }
        path.push(k.clone());
        read(child, path, set);
        path.pop();
    }
}

/// The paths whose value differs between two objects (added, removed or changed leaves).
pub fn changed(old: &Value, new: &Value, rules: Rules<'_>) -> FieldSet {
    // A field's paths and values depend only on its own subtree (a metadata field's on its
    // own): subtrees equal in both contribute nothing, and are left out before the walk — a
    // status write to a large object walks its status only.
    let (old, new) = differing(old, new);
    let a = of(&old, rules);
    let b = of(&new, rules);
    a.symmetric_difference(&b)
        .cloned()
        .chain(
            b.iter()
                .filter(|p| !is_item(p) && lookup(&old, p) != lookup(&new, p))
                .cloned(),
        )
        .collect()
}

/// The parts of two objects that differ: the top-level fields, and metadata's fields, that
/// are not equal in both (a field only one has is kept); everything else left out of both.
fn differing(old: &Value, new: &Value) -> (Value, Value) {
    let (Value::Object(o), Value::Object(n)) = (old, new) else {
        return (old.clone(), new.clone());
    };
    let mut a = serde_json::Map::new();
    let mut b = serde_json::Map::new();
    let keys: BTreeSet<&String> = o.keys().chain(n.keys()).collect();
    for k in keys {
        let (ov, nv) = (o.get(k), n.get(k));
        if ov == nv {
            continue;
        }
        if k == "metadata"
            && let (Some(ov), Some(nv)) = (ov, nv)
        {
            let (om, nm) = differing(ov, nv);
            a.insert(k.clone(), om);
            b.insert(k.clone(), nm);
            continue;
        }
        if let Some(ov) = ov {
            a.insert(k.clone(), ov.clone());
        }
        if let Some(nv) = nv {
            b.insert(k.clone(), nv.clone());
        }
    }
    (Value::Object(a), Value::Object(b))
}

fn is_item(path: &Path) -> bool {
    path.last()
        .is_some_and(|l| l.starts_with("k:") || l.starts_with("v:"))
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn container_fields_are_keyed_by_name_in_fields_v1() {
        let obj = json!({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "p", "labels": {"a": "1"}},
            "spec": {"containers": [{"name": "db", "image": "pg:16"}]}});
        let v1 = to_fields_v1(&of(&obj, Rules::Builtin));
        assert_eq!(
            v1,
            json!({"f:metadata": {"f:labels": {"f:a": {}}},
            "f:spec": {"f:containers": {"k:{\"name\":\"db\"}": {".": {}, "f:image": {}, "f:name": {}}}}})
        );
        assert_eq!(from_fields_v1(&v1), of(&obj, Rules::Builtin));
    }

    #[test]
    fn changed_names_only_the_differing_leaves() {
        let a = json!({"spec": {"replicas": 1, "image": "x"}});
        let b = json!({"spec": {"replicas": 2, "image": "x", "paused": true}});
        let c = changed(&a, &b, Rules::Builtin);
        let want: FieldSet = [
            vec!["f:spec".to_string(), "f:paused".into()],
            vec!["f:spec".into(), "f:replicas".into()],
        ]
        .into_iter()
        .collect();
        assert_eq!(c, want);
    }

    #[test]
    fn leaving_out_equal_subtrees_changes_nothing_in_what_changed() {
        // The field sets of the whole objects, compared as before the pruning.
        let whole = |old: &Value, new: &Value| -> FieldSet {
            let (a, b) = (of(old, Rules::Builtin), of(new, Rules::Builtin));
            a.symmetric_difference(&b)
                .cloned()
                .chain(
                    b.iter()
                        .filter(|p| !is_item(p) && lookup(old, p) != lookup(new, p))
                        .cloned(),
                )
                .collect()
        };
        let base = json!({"apiVersion": "apps/v1", "kind": "StatefulSet",
            "metadata": {"name": "s", "resourceVersion": "7", "labels": {"a": "1"},
                "annotations": {"x": "y"}},
            "spec": {"replicas": 1, "template": {"spec": {"containers": [
                {"name": "db", "image": "pg:16", "ports": [{"containerPort": 5432}]}]}}},
            "status": {"replicas": 1, "readyReplicas": 0}});
        let edits: [fn(&mut Value); 6] = [
            |o| o["status"]["readyReplicas"] = json!(1),
            |o| o["metadata"]["labels"]["b"] = json!("2"),
            |o| o["metadata"]["resourceVersion"] = json!("8"),
            |o| o["spec"]["template"]["spec"]["containers"][0]["image"] = json!("pg:17"),
            |o| {
                o.as_object_mut().expect("an object").remove("status");
            },
            |o| {
                o["metadata"]
                    .as_object_mut()
                    .expect("an object")
                    .remove("annotations");
                o["spec"]["paused"] = json!(true);
            },
        ];
        for (i, edit) in edits.iter().enumerate() {
            let mut new = base.clone();
            edit(&mut new);
            let want = whole(&base, &new);
            assert!(!want.is_empty() || i == 2, "edit {i} changes some field");
            assert_eq!(changed(&base, &new, Rules::Builtin), want, "edit {i}");
            assert_eq!(
                changed(&new, &base, Rules::Builtin),
                whole(&new, &base),
                "edit {i} reversed"
            );
        }
    }

    #[test]
    fn remove_drops_a_map_list_item() {
        let mut obj = json!({"spec": {"containers": [{"name": "a"}, {"name": "b"}]}});
        assert!(remove(
            &mut obj,
            &[
                "f:spec".into(),
                "f:containers".into(),
                r#"k:{"name":"a"}"#.into()
            ]
        ));
        assert_eq!(obj, json!({"spec": {"containers": [{"name": "b"}]}}));
    }
}
