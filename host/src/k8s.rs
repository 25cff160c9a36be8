//! Kubernetes plumbing shared by the controller, `windlass dev` and the CLI: the API of a kind
//! in a scope, an object read from the API as the JSON a plugin is given, and the time as the
//! API writes it. One copy of each, so that the rules they carry (never a cluster-wide API for a
//! namespaced kind; `apiVersion` and `kind` always set) hold everywhere.

use kube::{
    Api, Client,
    api::{DynamicObject, TypeMeta},
    core::ApiResource,
};
use serde_json::Value;

/// Which object: its kind key (`group/version/Kind`), namespace (none for a cluster-scoped
/// object) and name. The one identity the host compares objects by.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct ObjectKey {
    /// `group/version/Kind` (`v1/ConfigMap` for the core group).
    pub kind: String,
    /// The namespace; an empty one counts as none.
    pub namespace: Option<String>,
    /// `metadata.name`.
    pub name: String,
}

impl ObjectKey {
    /// The key of an object as JSON.
    pub fn of(object: &Value) -> Self {
        let field = |p: &str| {
            object
                .pointer(p)
                .and_then(Value::as_str)
                .unwrap_or_default()
        };
        ObjectKey::new(
            kind_of(object),
            Some(field("/metadata/namespace")),
            field("/metadata/name"),
        )
    }

    /// Whether `object` (as JSON) is the object this key names, compared in place: the host
    /// looks each desired object up among the observed ones on every reconcile.
    pub fn is(&self, object: &Value) -> bool {
        let field = |p: &str| {
            object
                .pointer(p)
                .and_then(Value::as_str)
                .unwrap_or_default()
        };
        if field("/metadata/name") != self.name
            || self.namespace.as_deref().unwrap_or_default() != field("/metadata/namespace")
        {
            return false;
        }
        // `apiVersion/kind` without building it.
        let (api_version, kind) = (field("/apiVersion"), field("/kind"));
        self.kind.len() == api_version.len() + 1 + kind.len()
            && self.kind.starts_with(api_version)
            && self.kind[api_version.len()..].starts_with('/')
            && self.kind.ends_with(kind)
    }

    /// A key from its parts; an empty namespace counts as none.
    pub fn new(kind: impl Into<String>, namespace: Option<&str>, name: impl Into<String>) -> Self {
        ObjectKey {
            kind: kind.into(),
            namespace: namespace.filter(|ns| !ns.is_empty()).map(str::to_string),
            name: name.into(),
        }
    }
}

impl std::fmt::Display for ObjectKey {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match &self.namespace {
            Some(ns) => write!(f, "{} {ns}/{}", self.kind, self.name),
            None => write!(f, "{} {}", self.kind, self.name),
        }
    }
}

/// The kind key of an object as JSON: `apiVersion/kind` (`apps/v1/StatefulSet`, `v1/Secret`).
pub fn kind_of(object: &Value) -> String {
    let field = |f: &str| object.get(f).and_then(Value::as_str).unwrap_or_default();
    format!("{}/{}", field("apiVersion"), field("kind"))
}

/// The API of `ar` in `namespace`, given whether the kind is namespaced. `None` when the two do
/// not fit: a namespaced kind without a namespace (that would be a cluster-wide API) or a
/// cluster-scoped kind with one. An empty namespace counts as none.
pub fn api(
    client: Client,
    ar: &ApiResource,
    namespace: Option<&str>,
    namespaced: bool,
) -> Option<Api<DynamicObject>> {
    match (namespace.filter(|ns| !ns.is_empty()), namespaced) {
        (Some(ns), true) => Some(Api::namespaced_with(client, ns, ar)),
        (None, false) => Some(Api::all_with(client, ar)),
        _ => None,
    }
}

/// An object as read from the API (where lists and watches leave `apiVersion` and `kind` out),
/// as JSON with both set from its resource.
///
/// # Errors
/// When the object cannot be encoded as JSON.
pub fn typed_json(obj: &DynamicObject, ar: &ApiResource) -> Result<Value, serde_json::Error> {
    let mut value = serde_json::to_value(obj)?;
    if let Some(map) = value.as_object_mut() {
        map.insert("apiVersion".into(), Value::String(ar.api_version.clone()));
        map.insert("kind".into(), Value::String(ar.kind.clone()));
    }
    Ok(value)
}

/// The type fields of `ar`, for an object about to be sent.
pub fn type_meta(ar: &ApiResource) -> TypeMeta {
    TypeMeta {
        api_version: ar.api_version.clone(),
        kind: ar.kind.clone(),
    }
}

/// Now in UTC as RFC 3339 with whole seconds, as the API writes timestamps
/// (`lastTransitionTime`, `creationTimestamp`).
pub fn now_rfc3339() -> String {
    jiff::Timestamp::now()
        .round(jiff::Unit::Second)
        .map(|t| t.to_string())
        .unwrap_or_default()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn config_maps() -> ApiResource {
        ApiResource::erase::<k8s_openapi::api::core::v1::ConfigMap>(&())
    }

    fn nodes() -> ApiResource {
        ApiResource::erase::<k8s_openapi::api::core::v1::Node>(&())
    }

    #[tokio::test]
    async fn a_scope_that_does_not_fit_the_kind_gives_no_api() {
        // A client that is never used: building an Api sends nothing.
        let config = kube::Config::new("http://127.0.0.1:9".parse().unwrap());
        let client = Client::try_from(config).unwrap();
        let scoped = |ar: &ApiResource, ns: Option<&str>, namespaced: bool| {
            api(client.clone(), ar, ns, namespaced).map(|a| a.resource_url().to_string())
        };
        assert_eq!(
            scoped(&config_maps(), Some("shop"), true).as_deref(),
            Some("/api/v1/namespaces/shop/configmaps")
        );
        assert_eq!(scoped(&config_maps(), None, true), None);
        assert_eq!(scoped(&config_maps(), Some(""), true), None);
        assert_eq!(
            scoped(&nodes(), Some(""), false).as_deref(),
            Some("/api/v1/nodes")
        );
        assert_eq!(scoped(&nodes(), Some("shop"), false), None);
    }

    #[test]
    fn typed_json_sets_the_type_fields_a_list_left_out() {
        let obj: DynamicObject = serde_json::from_value(
            serde_json::json!({"metadata": {"name": "a"}, "data": {"k": "v"}}),
        )
        .unwrap();
        let v = typed_json(&obj, &config_maps()).unwrap();
        assert_eq!(v["apiVersion"], "v1");
        assert_eq!(v["kind"], "ConfigMap");
        assert_eq!(v["data"]["k"], "v");
        assert!(now_rfc3339().ends_with('Z'), "{}", now_rfc3339());
    }

    #[test]
    fn an_object_key_treats_an_empty_namespace_as_none() {
        let a = ObjectKey::of(&serde_json::json!({
            "apiVersion": "apps/v1", "kind": "StatefulSet",
            "metadata": {"name": "db", "namespace": ""},
        }));
        let b = ObjectKey::new("apps/v1/StatefulSet", None, "db");
        assert_eq!(a, b);
        assert_eq!(b.to_string(), "apps/v1/StatefulSet db");
        let c = ObjectKey::new("v1/ConfigMap", Some("shop"), "c");
        assert_eq!(c.to_string(), "v1/ConfigMap shop/c");
        assert_ne!(ObjectKey::new("v1/ConfigMap", Some("a"), "c"), c);
        // `is` agrees with comparing keys.
        let objects = [
            serde_json::json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "c", "namespace": "shop"}}),
            serde_json::json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "c"}}),
            serde_json::json!({"apiVersion": "v1", "kind": "Secret", "metadata": {"name": "c", "namespace": "shop"}}),
            serde_json::json!({"apiVersion": "apps/v1", "kind": "ConfigMap", "metadata": {"name": "c", "namespace": "shop"}}),
            serde_json::json!({"apiVersion": "v1/C", "kind": "onfigMap", "metadata": {"name": "c", "namespace": "shop"}}),
            serde_json::json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "d", "namespace": "shop"}}),
            serde_json::json!({"apiVersion": "apps/v1", "kind": "StatefulSet", "metadata": {"name": "db", "namespace": ""}}),
        ];
        for key in [&a, &c] {
            for o in &objects {
                assert_eq!(key.is(o), *key == ObjectKey::of(o), "{key} against {o}");
            }
        }
    }
}
