//! Strategic merge patch, as kubectl sends it for built-in kinds (`edit`, `apply`, `patch
//! --type strategic`): a JSON merge patch where lists with a merge key (containers by name…)
//! merge item by item, and the `$patch`, `$setElementOrder`, `$deleteFromPrimitiveList` and
//! `$retainKeys` directives are honoured.

use super::lists::{ListType, Rules, item_key};
use serde_json::{Map, Value};

/// Applies a strategic merge patch to `target`.
pub fn patch(target: &mut Value, patch: &Value) {
    merge_value(target, patch, "");
}

fn merge_value(target: &mut Value, patch: &Value, name: &str) {
    match patch {
        Value::Object(p) => {
            if p.get("$patch").and_then(Value::as_str) == Some("replace") {
                let mut clean = p.clone();
                clean.remove("$patch");
                *target = Value::Object(clean);
                return;
            }
            if !target.is_object() {
                *target = Value::Object(Map::new());
            }
            if let Some(t) = target.as_object_mut() {
                merge_map(t, p);
            }
        }
        Value::Array(items) => {
            let list_type = Rules::Builtin.list_type(name, items);
            let Value::Array(t) = target else {
                *target = Value::Array(strip(items));
                return;
            };
            match list_type {
                ListType::Map(keys) => merge_keyed(t, items, &keys),
                _ => *t = strip(items),
            }
        }
        other => *target = other.clone(),
    }
}

fn merge_map(t: &mut Map<String, Value>, p: &Map<String, Value>) {
    if let Some(Value::Array(keep)) = p.get("$retainKeys") {
        let keep: Vec<&str> = keep.iter().filter_map(Value::as_str).collect();
        t.retain(|k, _| keep.contains(&k.as_str()));
    }
    for (k, v) in p {
        if k.starts_with("$setElementOrder/") || k == "$retainKeys" || k == "$patch" {
            continue;
        }
        if let Some(field) = k.strip_prefix("$deleteFromPrimitiveList/") {
            if let (Some(Value::Array(list)), Value::Array(del)) = (t.get_mut(field), v) {
                list.retain(|i| !del.contains(i));
            }
            continue;
        }
        if v.is_null() {
            t.remove(k);
            continue;
        }
        match t.get_mut(k) {
            Some(existing) => merge_value(existing, v, k),
            None => {
                let mut fresh = if v.is_object() {
                    Value::Object(Map::new())
                } else {
                    Value::Null
                };
                merge_value(&mut fresh, v, k);
                t.insert(k.clone(), fresh);
            }
        }
    }
}

fn merge_keyed(target: &mut Vec<Value>, items: &[Value], keys: &[String]) {
    for item in items {
        let key = item_key(keys, item);
        let directive = item.get("$patch").and_then(Value::as_str);
        let pos = target
            .iter()
            .position(|t| key.is_some() && item_key(keys, t) == key);
        match (directive, pos) {
            (Some("delete"), Some(i)) => {
                target.remove(i);
            }
            (Some("delete"), None) => {}
            (_, Some(i)) => merge_value(&mut target[i], item, ""),
            (_, None) => {
                let mut fresh = Value::Object(Map::new());
                merge_value(&mut fresh, item, "");
                target.push(fresh);
            }
        }
    }
}

fn strip(items: &[Value]) -> Vec<Value> {
    items
        .iter()
        .filter(|i| i.get("$patch").is_none())
        .map(|i| {
            let mut fresh = if i.is_object() {
                Value::Object(Map::new())
            } else {
                Value::Null
            };
            merge_value(&mut fresh, i, "");
            fresh
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn containers_merge_by_name_and_other_fields_merge_like_json_merge_patch() {
        let mut pod = json!({"metadata": {"labels": {"a": "1", "b": "2"}},
            "spec": {"containers": [{"name": "db", "image": "pg:15"}, {"name": "sidecar", "image": "s"}]}});
        patch(
            &mut pod,
            &json!({"metadata": {"labels": {"b": null, "c": "3"}},
            "spec": {"$setElementOrder/containers": [{"name": "db"}], "containers": [{"name": "db", "image": "pg:16"}]}}),
        );
        assert_eq!(pod["metadata"]["labels"], json!({"a": "1", "c": "3"}));
        assert_eq!(
            pod["spec"]["containers"],
            json!([{"name": "db", "image": "pg:16"}, {"name": "sidecar", "image": "s"}])
        );
    }

    #[test]
    fn patch_delete_directive_removes_the_keyed_item_and_plain_lists_are_replaced() {
        let mut pod =
            json!({"spec": {"containers": [{"name": "a"}, {"name": "b"}], "args": ["x"]}});
        patch(
            &mut pod,
            &json!({"spec": {"containers": [{"name": "a", "$patch": "delete"}], "args": ["y", "z"]}}),
        );
        assert_eq!(
            pod["spec"],
            json!({"containers": [{"name": "b"}], "args": ["y", "z"]})
        );
    }
}
