//! OpenAPI v3, as much as kubectl needs: an index of group versions and, per group version,
//! the PATCH operations tagged with their kind and the `fieldValidation` parameter, so that
//! kubectl leaves validation to the server (no `--validate=false` needed), plus a schema per
//! kind: a CRD's own openAPIV3Schema, and for the built-in kinds the schemas of the Kubernetes
//! API with their descriptions (generated from k8s-openapi's types), so that `kubectl explain`
//! works for them.
//!
//! Strategic merge patch is deliberately not listed as a PATCH content type: kubectl then
//! builds its strategic patches from its compiled-in types, which carry the merge keys.

use super::discovery::served_in;
use crate::resources::Registry;
use k8s_openapi::api;
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1 as apiextensions;
use schemars::generate::{SchemaGenerator, SchemaSettings};
use serde_json::{Map, Value, json};
use std::collections::{BTreeSet, HashMap};
use std::sync::OnceLock;

/// The built-in kinds' schemas: every definition, and the definition of each kind.
struct Builtin {
    components: Map<String, Value>,
    /// `group/version/Kind` → component name.
    kinds: HashMap<String, String>,
}

fn builtin() -> &'static Builtin {
    static BUILTIN: OnceLock<Builtin> = OnceLock::new();
    BUILTIN.get_or_init(|| {
        let mut generator = SchemaGenerator::new(SchemaSettings::openapi3());
        let mut kinds = HashMap::new();
        let mut add = |gvk: &str, schema: schemars::Schema| {
            let name = schema
                .get("$ref")
                .and_then(Value::as_str)
                .and_then(|r| r.rsplit('/').next())
                .unwrap_or_default()
                .to_string();
            kinds.insert(gvk.to_string(), name);
        };
        macro_rules! kinds {
            ($($gvk:literal => $ty:ty),* $(,)?) => {
                $(add($gvk, generator.subschema_for::<$ty>());)*
            };
        }
        kinds! {
            "/v1/Namespace" => api::core::v1::Namespace,
            "/v1/ConfigMap" => api::core::v1::ConfigMap,
            "/v1/Secret" => api::core::v1::Secret,
            "/v1/Service" => api::core::v1::Service,
            "/v1/Pod" => api::core::v1::Pod,
            "/v1/PersistentVolumeClaim" => api::core::v1::PersistentVolumeClaim,
            "/v1/PersistentVolume" => api::core::v1::PersistentVolume,
            "/v1/Event" => api::core::v1::Event,
            "/v1/ServiceAccount" => api::core::v1::ServiceAccount,
            "/v1/Node" => api::core::v1::Node,
            "/v1/Endpoints" => api::core::v1::Endpoints,
            "/v1/ReplicationController" => api::core::v1::ReplicationController,
            "apps/v1/StatefulSet" => api::apps::v1::StatefulSet,
            "apps/v1/Deployment" => api::apps::v1::Deployment,
            "apps/v1/ReplicaSet" => api::apps::v1::ReplicaSet,
            "apps/v1/DaemonSet" => api::apps::v1::DaemonSet,
            "apps/v1/ControllerRevision" => api::apps::v1::ControllerRevision,
            "batch/v1/Job" => api::batch::v1::Job,
            "batch/v1/CronJob" => api::batch::v1::CronJob,
            "discovery.k8s.io/v1/EndpointSlice" => api::discovery::v1::EndpointSlice,
            "networking.k8s.io/v1/NetworkPolicy" => api::networking::v1::NetworkPolicy,
            "networking.k8s.io/v1/Ingress" => api::networking::v1::Ingress,
            "networking.k8s.io/v1/IngressClass" => api::networking::v1::IngressClass,
            "coordination.k8s.io/v1/Lease" => api::coordination::v1::Lease,
            "events.k8s.io/v1/Event" => api::events::v1::Event,
            "rbac.authorization.k8s.io/v1/Role" => api::rbac::v1::Role,
            "rbac.authorization.k8s.io/v1/RoleBinding" => api::rbac::v1::RoleBinding,
            "rbac.authorization.k8s.io/v1/ClusterRole" => api::rbac::v1::ClusterRole,
            "rbac.authorization.k8s.io/v1/ClusterRoleBinding" => api::rbac::v1::ClusterRoleBinding,
            "policy/v1/PodDisruptionBudget" => api::policy::v1::PodDisruptionBudget,
            "storage.k8s.io/v1/StorageClass" => api::storage::v1::StorageClass,
            "apiextensions.k8s.io/v1/CustomResourceDefinition" => apiextensions::CustomResourceDefinition,
        }
        Builtin {
            components: generator.take_definitions(true),
            kinds,
        }
    })
}

/// The names of the components `name` refers to, itself included, transitively.
fn reachable(components: &Map<String, Value>, name: &str, seen: &mut BTreeSet<String>) {
    if !seen.insert(name.to_string()) {
        return;
    }
    fn refs(v: &Value, out: &mut Vec<String>) {
        match v {
            Value::Object(m) => {
                if let Some(r) = m.get("$ref").and_then(Value::as_str) {
                    out.extend(r.rsplit('/').next().map(String::from));
                }
                m.values().for_each(|v| refs(v, out));
            }
            Value::Array(a) => a.iter().for_each(|v| refs(v, out)),
            _ => {}
        }
    }
    let mut found = Vec::new();
    if let Some(schema) = components.get(name) {
        refs(schema, &mut found);
    }
    for r in found {
        reachable(components, &r, seen);
    }
}

/// The built-in schema of a kind and every schema it refers to, if the kind is a built-in one
/// k8s-openapi knows: `(component name, components)`.
fn builtin_schema(group: &str, version: &str, kind: &str) -> Option<(String, Map<String, Value>)> {
    let builtin = builtin();
    let name = builtin.kinds.get(&format!("{group}/{version}/{kind}"))?;
    let mut names = BTreeSet::new();
    reachable(&builtin.components, name, &mut names);
    let components = names
        .into_iter()
        .filter_map(|n| Some((n.clone(), builtin.components.get(&n)?.clone())))
        .collect();
    Some((name.clone(), components))
}

/// `/openapi/v3`.
pub fn index(reg: &Registry) -> Value {
    let mut paths = Map::new();
    let mut gvs: Vec<(String, String)> = reg
        .all()
        .iter()
        .flat_map(|r| {
            r.versions
                .iter()
                .map(|v| (r.group.clone(), v.clone()))
                .collect::<Vec<_>>()
        })
        .collect();
    gvs.sort();
    gvs.dedup();
    for (g, v) in gvs {
        let path = if g.is_empty() {
            format!("api/{v}")
        } else {
            format!("apis/{g}/{v}")
        };
        let hash = hash(&doc(reg, &g, &v).to_string());
        paths.insert(
            path.clone(),
            json!({"serverRelativeURL": format!("/openapi/v3/{path}?hash={hash}")}),
        );
    }
    json!({"paths": paths})
}

fn hash(s: &str) -> String {
    // FNV-1a: a cache key for kubectl, not a security property.
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for b in s.bytes() {
        h ^= u64::from(b);
        h = h.wrapping_mul(0x0100_0000_01b3);
    }
    format!("{h:016X}")
}

/// `/openapi/v3/api/v1` or `/openapi/v3/apis/<group>/<version>`.
pub fn doc(reg: &Registry, group: &str, version: &str) -> Value {
    let mut paths = Map::new();
    let mut schemas = Map::new();
    let base = if group.is_empty() {
        format!("/api/{version}")
    } else {
        format!("/apis/{group}/{version}")
    };
    for rt in served_in(reg, group, version) {
        let gvk = json!({"group": rt.group, "version": version, "kind": rt.kind});
        let builtin = rt
            .builtin
            .then(|| builtin_schema(group, version, &rt.kind))
            .flatten();
        let schema_name = match &builtin {
            Some((name, _)) => name.clone(),
            None => format!(
                "{}.{version}.{}",
                if rt.group.is_empty() {
                    "core"
                } else {
                    &rt.group
                },
                rt.kind
            ),
        };
        let params = json!([
            {"name": "dryRun", "in": "query", "schema": {"type": "string"}},
            {"name": "fieldManager", "in": "query", "schema": {"type": "string"}},
            {"name": "fieldValidation", "in": "query", "schema": {"type": "string"}},
            {"name": "force", "in": "query", "schema": {"type": "boolean"}},
        ]);
        let patch = json!({
            "x-kubernetes-action": "patch", "x-kubernetes-group-version-kind": gvk, "parameters": params,
            "requestBody": {"content": {"application/json-patch+json": {"schema": {"type": "object"}},
                "application/merge-patch+json": {"schema": {"type": "object"}},
                "application/apply-patch+yaml": {"schema": {"type": "object"}}}},
            "responses": {"200": {"content": {"application/json": {"schema": {"$ref": format!("#/components/schemas/{schema_name}")}}}}},
        });
        let item = if rt.namespaced {
            format!("{base}/namespaces/{{namespace}}/{}/{{name}}", rt.plural)
        } else {
            format!("{base}/{}/{{name}}", rt.plural)
        };
        paths.insert(item, json!({"patch": patch}));
        if let Some((_, components)) = builtin {
            for (name, schema) in components {
                schemas.entry(name).or_insert(schema);
            }
        }
        let mut schema = schemas.remove(&schema_name).unwrap_or_else(|| {
            rt.schemas.get(version).cloned().unwrap_or_else(
                || json!({"type": "object", "x-kubernetes-preserve-unknown-fields": true}),
            )
        });
        schema["x-kubernetes-group-version-kind"] = json!([gvk]);
        schemas.insert(schema_name, schema);
    }
    json!({"openapi": "3.0.0", "info": {"title": "Kubernetes (windlass devcluster)", "version": "v1.33.0"},
        "paths": paths, "components": {"schemas": schemas}})
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn patch_operations_declare_field_validation_for_their_kind() {
        let reg = Registry::default();
        let d = doc(&reg, "apps", "v1");
        let op = &d["paths"]["/apis/apps/v1/namespaces/{namespace}/statefulsets/{name}"]["patch"];
        assert_eq!(op["x-kubernetes-group-version-kind"]["kind"], "StatefulSet");
        assert!(
            op["parameters"]
                .as_array()
                .into_iter()
                .flatten()
                .any(|p| p["name"] == "fieldValidation")
        );
        let sts = &d["components"]["schemas"]["io.k8s.api.apps.v1.StatefulSet"];
        assert_eq!(
            sts["x-kubernetes-group-version-kind"][0]["kind"],
            "StatefulSet"
        );
        assert!(
            d["components"]["schemas"]["io.k8s.api.apps.v1.StatefulSetSpec"]["properties"]
                ["replicas"]["description"]
                .as_str()
                .is_some_and(|t| !t.is_empty()),
            "the built-in schemas carry their descriptions"
        );
        assert!(
            index(&reg)["paths"]["apis/apps/v1"]["serverRelativeURL"]
                .as_str()
                .is_some_and(|u| u.starts_with("/openapi/v3/apis/apps/v1?hash="))
        );
    }
}
