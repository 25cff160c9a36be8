//! Kubernetes API plumbing shared by the controller, `windlass dev` and the CLI: the API of a
//! kind in a scope, and an object read from the API as the JSON a plugin is given. One copy of
//! each, so that the rules they carry (never a cluster-wide API for a namespaced kind;
//! `apiVersion` and `kind` always set) hold everywhere. Object identity (`ObjectKey`, `kind_of`)
//! is pure and lives in `windlass-policy`; the time format in `windlass-contract`.

use kube::{
    Api, Client,
    api::{DynamicObject, TypeMeta},
    core::ApiResource,
};
use serde_json::Value;

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
    // What serialising the whole object gives, built from its parts: the data's fields are
    // copied, not serialised one by one into a new tree as `#[serde(flatten)]` does (this runs
    // for every observed child of every reconcile).
    let mut value = match &obj.data {
        Value::Object(data) => {
            let mut map = data.clone();
            map.insert("metadata".into(), serde_json::to_value(&obj.metadata)?);
            Value::Object(map)
        }
        Value::Null => serde_json::json!({"metadata": serde_json::to_value(&obj.metadata)?}),
        _ => serde_json::to_value(obj)?,
    };
    if let Some(map) = value.as_object_mut() {
        map.insert("apiVersion".into(), Value::String(ar.api_version.clone()));
        map.insert("kind".into(), Value::String(ar.kind.clone()));
    }
    Ok(value)
}

/// A child as the JSON a plugin observes (`apiVersion` and `kind` set); none, with a warning,
/// for one that cannot be encoded — not expected of an object decoded from JSON, and said
/// rather than lost. Reconciles and the canary observe through this.
pub fn observed_json(child: &DynamicObject, resource: &ApiResource) -> Option<Value> {
    typed_json(child, resource)
        .inspect_err(|e| {
            tracing::warn!(child = %kube::ResourceExt::name_any(child), error = %e, "an observed child cannot be encoded; left out");
        })
        .ok()
}

/// The type fields of `ar`, for an object about to be sent.
pub fn type_meta(ar: &ApiResource) -> TypeMeta {
    TypeMeta {
        api_version: ar.api_version.clone(),
        kind: ar.kind.clone(),
    }
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
    fn typed_json_is_the_whole_object_serialised_with_its_type() {
        let objects = [
            serde_json::json!({"metadata": {"name": "a", "labels": {"x": "1"}}, "data": {"k": "v"},
                "binaryData": {}, "immutable": true}),
            serde_json::json!({"apiVersion": "v0", "kind": "Old", "metadata": {"name": "b"}}),
            serde_json::json!({}),
        ];
        let made = DynamicObject::new("d", &config_maps());
        let objects = objects
            .into_iter()
            .map(|json| serde_json::from_value(json).unwrap())
            .chain([
                made.clone(),
                made.data(serde_json::json!({"data": {"k": "v"}})),
            ]);
        for obj in objects {
            let json = serde_json::to_string(&obj).unwrap();
            let mut whole = serde_json::to_value(&obj).unwrap();
            whole["apiVersion"] = "v1".into();
            whole["kind"] = "ConfigMap".into();
            assert_eq!(typed_json(&obj, &config_maps()).unwrap(), whole, "{json}");
        }
        // Data that is not a map cannot be flattened into an object: refused as before.
        let mut odd = DynamicObject::new("c", &config_maps());
        odd.data = serde_json::json!("text");
        assert!(typed_json(&odd, &config_maps()).is_err());
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
    }
}
