//! The scale subresource (`…/NAME/scale`, an `autoscaling/v1` Scale): what `kubectl scale`
//! and autoscalers use. Deployments, StatefulSets, ReplicaSets and ReplicationControllers have
//! it, and custom resources whose CRD declares `subresources.scale`.

use crate::api::{Cluster, WriteOpts};
use crate::error::{ApiError, Result};
use crate::patch::{PatchType, patch_object};
use crate::resources::{ResourceType, ScalePaths};
use serde_json::{Map, Value, json};

fn get<'a>(obj: &'a Value, path: &str) -> &'a Value {
    path.split('.').fold(obj, |cur, seg| &cur[seg])
}

/// `{"a": {"b": value}}` for `a.b`.
fn nested(path: &str, value: Value) -> Value {
    path.rsplit('.').fold(value, |inner, seg| {
        let mut m = Map::new();
        m.insert(seg.to_string(), inner);
        Value::Object(m)
    })
}

/// A LabelSelector (`matchLabels`, `matchExpressions` with In/NotIn/Exists/DoesNotExist) as the
/// selector string a Scale shows.
fn selector_string(sel: &Value) -> String {
    if let Some(s) = sel.as_str() {
        return s.to_string();
    }
    let mut terms: Vec<String> = sel["matchLabels"]
        .as_object()
        .into_iter()
        .flatten()
        .map(|(k, v)| format!("{k}={}", v.as_str().unwrap_or_default()))
        .collect();
    for e in sel["matchExpressions"].as_array().into_iter().flatten() {
        let key = e["key"].as_str().unwrap_or_default();
        let values: Vec<&str> = e["values"]
            .as_array()
            .into_iter()
            .flatten()
            .filter_map(Value::as_str)
            .collect();
        terms.push(match e["operator"].as_str().unwrap_or_default() {
            "In" => format!("{key} in ({})", values.join(",")),
            "NotIn" => format!("{key} notin ({})", values.join(",")),
            "DoesNotExist" => format!("!{key}"),
            _ => key.to_string(),
        });
    }
    terms.join(",")
}

/// The Scale of an object.
pub fn scale_of(paths: &ScalePaths, obj: &Value) -> Value {
    let meta = &obj["metadata"];
    let mut status = json!({"replicas": get(obj, &paths.status_replicas).as_i64().unwrap_or(0)});
    if let Some(p) = &paths.label_selector {
        let sel = get(obj, p);
        if !sel.is_null() {
            status["selector"] = json!(selector_string(sel));
        }
    }
    json!({
        "kind": "Scale", "apiVersion": "autoscaling/v1",
        "metadata": {
            "name": meta["name"], "namespace": meta["namespace"], "uid": meta["uid"],
            "resourceVersion": meta["resourceVersion"],
            "creationTimestamp": meta["creationTimestamp"],
        },
        "spec": {"replicas": get(obj, &paths.spec_replicas).as_i64().unwrap_or(0)},
        "status": status,
    })
}

/// Answers a request on `…/scale`: GET reads, PUT and PATCH (JSON, merge, strategic) set the
/// object's replicas (a resourceVersion in the Scale is a precondition).
///
/// # Errors
/// 404 for a kind without the subresource or a missing object; 405 for other methods
/// (server-side apply on `scale` included); 409 on a stale resourceVersion; 422 for replicas
/// that are not a non-negative integer.
#[allow(clippy::too_many_arguments)]
pub fn handle(
    cluster: &Cluster,
    rt: &ResourceType,
    version: &str,
    ns: &str,
    name: &str,
    verb: &str,
    patch: Option<PatchType>,
    body: &[u8],
    opts: &WriteOpts,
) -> Result<Value> {
    let paths = rt
        .scale
        .as_ref()
        .ok_or_else(|| ApiError::not_found(&rt.group, &format!("{}/scale", rt.plural), name))?;
    let cur = cluster.get(rt, ns, name)?;
    let current = scale_of(paths, &cur);
    let wanted = match (verb, patch) {
        ("get", _) => return Ok(current),
        ("update", _) => serde_json::from_slice::<Value>(body)
            .map_err(|e| ApiError::bad_request(format!("invalid body: {e}")))?,
        ("patch", Some(kind)) if kind != PatchType::Apply => {
            patch_object(&current, kind, body, true)?
        }
        _ => {
            return Err(ApiError::method_not_allowed(format!(
                "{verb} is not supported on the scale subresource of {} by the devcluster",
                rt.plural
            )));
        }
    };
    let replicas = wanted["spec"]["replicas"]
        .as_i64()
        .filter(|r| *r >= 0)
        .ok_or_else(|| {
            ApiError::invalid(
                "Scale",
                "autoscaling",
                name,
                vec![crate::error::Cause {
                    reason: "FieldValueInvalid".into(),
                    field: "spec.replicas".into(),
                    message: format!(
                        "Invalid value: {}: must be greater than or equal to 0",
                        wanted["spec"]["replicas"]
                    ),
                }],
            )
        })?;
    let mut change = nested(&paths.spec_replicas, json!(replicas));
    if let Some(rv) = wanted["metadata"]["resourceVersion"]
        .as_str()
        .filter(|rv| !rv.is_empty())
    {
        change["metadata"] = json!({"resourceVersion": rv});
    }
    let body = serde_json::to_vec(&change).map_err(|e| ApiError::internal(e.to_string()))?;
    let opts = WriteOpts {
        subresource: "scale".into(),
        ..opts.clone()
    };
    let obj = cluster.patch(rt, version, ns, name, PatchType::Merge, &body, &opts)?;
    Ok(scale_of(paths, &obj))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_scale_shows_replicas_and_the_selector_as_a_string() {
        let paths = ScalePaths {
            spec_replicas: "spec.replicas".into(),
            status_replicas: "status.replicas".into(),
            label_selector: Some("spec.selector".into()),
        };
        let sts = json!({
            "metadata": {"name": "db", "namespace": "shop", "resourceVersion": "7"},
            "spec": {"replicas": 3, "selector": {"matchLabels": {"app": "db"},
                "matchExpressions": [{"key": "tier", "operator": "In", "values": ["a", "b"]}]}},
            "status": {"replicas": 2},
        });
        let scale = scale_of(&paths, &sts);
        assert_eq!(scale["spec"]["replicas"], 3);
        assert_eq!(scale["status"]["replicas"], 2);
        assert_eq!(scale["status"]["selector"], "app=db,tier in (a,b)");
        assert_eq!(scale["metadata"]["resourceVersion"], "7");
        assert_eq!(
            nested("spec.replicas", json!(5)),
            json!({"spec": {"replicas": 5}})
        );
    }
}
