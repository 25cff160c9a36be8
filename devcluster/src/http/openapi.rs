//! OpenAPI v3, as much as kubectl needs: an index of group versions and, per group version,
//! the PATCH operations tagged with their kind and the `fieldValidation` parameter, so that
//! kubectl leaves validation to the server (no `--validate=false` needed), plus a schema per
//! kind (a CRD's own openAPIV3Schema).
//!
//! Strategic merge patch is deliberately not listed as a PATCH content type: kubectl then
//! builds its strategic patches from its compiled-in types, which carry the merge keys.

use super::discovery::served_in;
use crate::resources::Registry;
use serde_json::{Map, Value, json};

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
        let schema_name = format!(
            "{}.{version}.{}",
            if rt.group.is_empty() {
                "core"
            } else {
                &rt.group
            },
            rt.kind
        );
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
        let mut schema = rt.schemas.get(version).cloned().unwrap_or_else(
            || json!({"type": "object", "x-kubernetes-preserve-unknown-fields": true}),
        );
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
        assert!(
            index(&reg)["paths"]["apis/apps/v1"]["serverRelativeURL"]
                .as_str()
                .is_some_and(|u| u.starts_with("/openapi/v3/apis/apps/v1?hash="))
        );
    }
}
