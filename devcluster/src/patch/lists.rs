//! How a list merges: atomically, as a set, or as a map keyed by some fields. CRDs say so in
//! their schema (`x-kubernetes-list-type`, `x-kubernetes-list-map-keys`); built-in kinds by the
//! field's name, following the `patchMergeKey`/`listType` markers of the Kubernetes types.

use serde_json::Value;

/// How a list is merged by strategic merge patch and server-side apply.
#[derive(Debug, Clone, PartialEq)]
pub enum ListType {
    /// Replaced as a whole.
    Atomic,
    /// A set of scalars.
    Set,
    /// A map keyed by these fields of each item.
    Map(Vec<String>),
}

/// Where the merge rules come from.
#[derive(Debug, Clone, Copy)]
pub enum Rules<'a> {
    /// Built-in kind: by field name.
    Builtin,
    /// A CRD schema node (the node of the object being walked), if any.
    Schema(Option<&'a Value>),
}

impl<'a> Rules<'a> {
    /// The rules for the child field `name`.
    pub fn field(self, name: &str) -> Rules<'a> {
        match self {
            Rules::Builtin => Rules::Builtin,
            Rules::Schema(None) => Rules::Schema(None),
            Rules::Schema(Some(node)) => Rules::Schema(
                node.get("properties")
                    .and_then(|p| p.get(name))
                    .or_else(|| node.get("additionalProperties").filter(|a| a.is_object())),
            ),
        }
    }

    /// The rules for the items of a list.
    pub fn items(self) -> Rules<'a> {
        match self {
            Rules::Schema(Some(node)) => Rules::Schema(node.get("items")),
            other => other,
        }
    }

    /// The merge type of the list held by field `name` (these rules being the list's own).
    pub fn list_type(self, name: &str, items: &[Value]) -> ListType {
        match self {
            Rules::Schema(Some(node)) => {
                match node.get("x-kubernetes-list-type").and_then(Value::as_str) {
                    Some("set") => ListType::Set,
                    Some("map") => {
                        let keys = node
                            .get("x-kubernetes-list-map-keys")
                            .and_then(Value::as_array)
                            .map(|a| {
                                a.iter()
                                    .filter_map(|k| k.as_str().map(String::from))
                                    .collect()
                            })
                            .unwrap_or_default();
                        ListType::Map(keys)
                    }
                    _ if name == "finalizers" => ListType::Set,
                    _ => ListType::Atomic,
                }
            }
            Rules::Schema(None) if name == "finalizers" => ListType::Set,
            Rules::Schema(None) if name == "ownerReferences" => ListType::Map(vec!["uid".into()]),
            Rules::Schema(None) => ListType::Atomic,
            Rules::Builtin => builtin_list_type(name, items),
        }
    }
}

fn builtin_list_type(name: &str, items: &[Value]) -> ListType {
    let key = |k: &str| ListType::Map(vec![k.to_string()]);
    match name {
        "containers"
        | "initContainers"
        | "ephemeralContainers"
        | "env"
        | "volumes"
        | "imagePullSecrets"
        | "hostAliases" => match name {
            "hostAliases" => key("ip"),
            _ => key("name"),
        },
        "volumeMounts" | "volumeDevices" => key("mountPath"),
        "conditions" => key("type"),
        "ownerReferences" => key("uid"),
        "finalizers" => ListType::Set,
        "ports" => {
            if items.iter().all(|i| i.get("containerPort").is_some()) {
                key("containerPort")
            } else if items.iter().all(|i| i.get("port").is_some()) {
                key("port")
            } else {
                ListType::Atomic
            }
        }
        _ => ListType::Atomic,
    }
}

/// The key of a list item under a map list type, as the compact JSON object FieldsV1 uses
/// (`{"name":"db"}`); `None` when a key field is missing.
pub fn item_key(keys: &[String], item: &Value) -> Option<String> {
    if keys.is_empty() {
        return None;
    }
    let mut m = serde_json::Map::new();
    let mut sorted = keys.to_vec();
    sorted.sort();
    for k in sorted {
        m.insert(k.clone(), item.get(&k)?.clone());
    }
    Some(Value::Object(m).to_string())
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn schema_map_lists_give_their_keys() {
        let schema = json!({"properties": {"nodes": {"type": "array", "x-kubernetes-list-type": "map",
            "x-kubernetes-list-map-keys": ["id"], "items": {"type": "object"}}}});
        let rules = Rules::Schema(Some(&schema)).field("nodes");
        assert_eq!(
            rules.list_type("nodes", &[]),
            ListType::Map(vec!["id".into()])
        );
    }

    #[test]
    fn builtin_container_lists_merge_by_name_and_args_are_atomic() {
        assert_eq!(
            Rules::Builtin.list_type("containers", &[]),
            ListType::Map(vec!["name".into()])
        );
        assert_eq!(Rules::Builtin.list_type("args", &[]), ListType::Atomic);
        assert_eq!(
            item_key(&["name".into()], &json!({"name": "a", "image": "x"})).as_deref(),
            Some(r#"{"name":"a"}"#)
        );
    }
}
