//! CustomResourceDefinitions: what a CRD object makes the server serve, and the status the
//! real server writes on it (`Established`, `NamesAccepted`).

use crate::error::{ApiError, Cause, Result};
use crate::resources::{PrinterColumn, ResourceType, ScalePaths};
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use serde_json::{Value, json};
use std::collections::HashMap;
use std::time::Duration;

/// The resource a CRD defines.
///
/// # Errors
/// 422 when group, names, scope or versions are missing.
pub fn resource_type(crd: &Value) -> Result<ResourceType> {
    let spec = &crd["spec"];
    let name = crd["metadata"]["name"].as_str().unwrap_or_default();
    let s = |v: &Value| v.as_str().unwrap_or_default().to_string();
    let group = s(&spec["group"]);
    let names = &spec["names"];
    let plural = s(&names["plural"]);
    let kind = s(&names["kind"]);
    let mut causes = Vec::new();
    let mut need = |ok: bool, field: &str| {
        if !ok {
            causes.push(Cause {
                reason: "FieldValueRequired".into(),
                field: field.into(),
                message: "Required value".into(),
            });
        }
    };
    need(!group.is_empty(), "spec.group");
    need(!plural.is_empty(), "spec.names.plural");
    need(!kind.is_empty(), "spec.names.kind");
    need(spec["scope"].is_string(), "spec.scope");
    let versions: Vec<&Value> = spec["versions"]
        .as_array()
        .map(|v| v.iter().collect())
        .unwrap_or_default();
    need(!versions.is_empty(), "spec.versions");
    if !plural.is_empty() && !group.is_empty() && name != format!("{plural}.{group}") {
        causes.push(Cause {
            reason: "FieldValueInvalid".into(),
            field: "metadata.name".into(),
            message: format!(
                "Invalid value: \"{name}\": must be spec.names.plural+\".\"+spec.group"
            ),
        });
    }
    // Groups under k8s.io and kubernetes.io belong to the Kubernetes project: a definition
    // there must say it was approved (or that it was not: "unapproved, …").
    let protected = ["k8s.io", "kubernetes.io"]
        .iter()
        .any(|d| group == *d || group.ends_with(&format!(".{d}")));
    if protected
        && crd["metadata"]["annotations"]["api-approved.kubernetes.io"]
            .as_str()
            .is_none_or(str::is_empty)
    {
        causes.push(Cause {
            reason: "FieldValueRequired".into(),
            field: "metadata.annotations[api-approved.kubernetes.io]".into(),
            message: "Required value: protected groups must have approval annotation \
                      \"api-approved.kubernetes.io\""
                .into(),
        });
    }
    if !causes.is_empty() {
        return Err(ApiError::invalid(
            "CustomResourceDefinition",
            "apiextensions.k8s.io",
            name,
            causes,
        ));
    }
    let served: Vec<&&Value> = versions
        .iter()
        .filter(|v| v["served"] != Value::Bool(false))
        .collect();
    // The storage version first: it is the preferred one in discovery too.
    let mut ordered: Vec<&&Value> = served
        .iter()
        .filter(|v| v["storage"] == Value::Bool(true))
        .copied()
        .collect();
    ordered.extend(served.iter().filter(|v| v["storage"] != Value::Bool(true)));
    let storage = ordered.first().copied();
    let list = |v: &Value| -> Vec<String> {
        v.as_array()
            .map(|a| {
                a.iter()
                    .filter_map(|x| x.as_str().map(String::from))
                    .collect()
            })
            .unwrap_or_default()
    };
    let printer_columns = storage
        .and_then(|v| v["additionalPrinterColumns"].as_array())
        .map(|cols| {
            cols.iter()
                .map(|c| PrinterColumn {
                    name: s(&c["name"]),
                    type_: s(&c["type"]),
                    json_path: s(&c["jsonPath"]),
                    priority: c["priority"].as_i64().unwrap_or(0),
                    description: s(&c["description"]),
                })
                .collect()
        })
        .unwrap_or_default();
    let schemas: HashMap<String, Value> = ordered
        .iter()
        .filter_map(|v| Some((s(&v["name"]), v["schema"].get("openAPIV3Schema")?.clone())))
        .collect();
    Ok(ResourceType {
        group,
        versions: ordered.iter().map(|v| s(&v["name"])).collect(),
        singular: names["singular"]
            .as_str()
            .map(String::from)
            .unwrap_or_else(|| kind.to_lowercase()),
        kind,
        plural,
        namespaced: spec["scope"] == "Namespaced",
        short_names: list(&names["shortNames"]),
        categories: list(&names["categories"]),
        status_subresource: storage.is_some_and(|v| v["subresources"].get("status").is_some()),
        printer_columns,
        schemas,
        builtin: false,
        scale: storage.and_then(|v| {
            let scale = v["subresources"].get("scale")?;
            let path = |p: &Value| p.as_str().map(|p| p.trim_start_matches('.').to_string());
            Some(ScalePaths {
                spec_replicas: path(&scale["specReplicasPath"])?,
                status_replicas: path(&scale["statusReplicasPath"])?,
                label_selector: path(&scale["labelSelectorPath"]),
            })
        }),
        selectable_fields: storage
            .and_then(|v| v["selectableFields"].as_array())
            .into_iter()
            .flatten()
            .filter_map(|f| f["jsonPath"].as_str())
            .map(|p| p.trim_start_matches('.').to_string())
            .collect(),
        view: None,
    })
}

/// A client's wait until the CRD `name` is Established: a real API server serves a new kind
/// only then (a moment after the create), the devcluster at once. Polls every 100 ms.
///
/// # Errors
/// A failed read, or not Established within `timeout`, naming the CRD.
pub async fn wait_established(
    crds: &kube::Api<CustomResourceDefinition>,
    name: &str,
    timeout: Duration,
) -> std::result::Result<(), String> {
    let deadline = tokio::time::Instant::now() + timeout;
    loop {
        let established = crds
            .get(name)
            .await
            .map_err(|e| format!("reading CRD {name}: {e}"))?
            .status
            .and_then(|s| s.conditions)
            .is_some_and(|c| {
                c.iter()
                    .any(|c| c.type_ == "Established" && c.status == "True")
            });
        if established {
            return Ok(());
        }
        if tokio::time::Instant::now() > deadline {
            return Err(format!("CRD {name} is not Established after {timeout:?}"));
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// The status the real server gives an accepted CRD.
pub fn accepted_status(crd: &Value, now: &str) -> Value {
    let condition = |t: &str, reason: &str, message: &str| json!({"type": t, "status": "True", "lastTransitionTime": now, "reason": reason, "message": message});
    let stored: Vec<Value> = crd["spec"]["versions"]
        .as_array()
        .into_iter()
        .flatten()
        .filter(|v| v["storage"] == Value::Bool(true))
        .map(|v| v["name"].clone())
        .collect();
    json!({
        "acceptedNames": crd["spec"]["names"],
        "conditions": [
            condition("NamesAccepted", "NoConflicts", "no conflicts found"),
            condition("Established", "InitialNamesAccepted", "the initial names have been accepted"),
        ],
        "storedVersions": stored,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn crd() -> Value {
        json!({"metadata": {"name": "widgets.x.dev"}, "spec": {"group": "x.dev", "scope": "Namespaced",
            "names": {"plural": "widgets", "kind": "Widget", "shortNames": ["wd"]},
            "versions": [
                {"name": "v1beta1", "served": true, "storage": false},
                {"name": "v1", "served": true, "storage": true, "subresources": {"status": {}},
                 "additionalPrinterColumns": [{"name": "Size", "type": "integer", "jsonPath": ".spec.size"}],
                 "schema": {"openAPIV3Schema": {"type": "object"}}}]}})
    }

    #[test]
    fn a_crd_serves_its_storage_version_first_with_status_and_columns() {
        let rt = resource_type(&crd()).expect("valid");
        assert_eq!(rt.versions, vec!["v1", "v1beta1"]);
        assert!(rt.status_subresource && rt.namespaced);
        assert_eq!(rt.printer_columns[0].json_path, ".spec.size");
        assert_eq!(rt.short_names, vec!["wd"]);
    }

    #[test]
    fn a_crd_named_otherwise_than_plural_dot_group_is_invalid() {
        let mut bad = crd();
        bad["metadata"]["name"] = json!("widgets");
        assert_eq!(resource_type(&bad).expect_err("invalid").code, 422);
    }
}
