//! Discovery: `/version`, `/api`, `/apis`, group and group-version resource lists — the legacy
//! (unaggregated) documents, which kubectl falls back to when the server answers aggregated
//! discovery requests with plain JSON.

use crate::resources::{Registry, ResourceType};
use serde_json::{Value, json};
use std::collections::BTreeMap;
use std::sync::Arc;

/// `/version`: what `kubectl version` and kube's `apiserver_version` read.
pub fn version() -> Value {
    json!({"major": "1", "minor": "33", "gitVersion": "v1.33.0-devcluster", "gitCommit": "devcluster",
        "gitTreeState": "clean", "buildDate": "2026-01-01T00:00:00Z", "goVersion": "go1.24",
        "compiler": "gc", "platform": "linux/amd64"})
}

/// `/api`.
pub fn core_versions(addr: &str) -> Value {
    json!({"kind": "APIVersions", "versions": ["v1"],
        "serverAddressByClientCIDRs": [{"clientCIDR": "0.0.0.0/0", "serverAddress": addr}]})
}

fn groups(reg: &Registry) -> BTreeMap<String, Vec<String>> {
    let mut out: BTreeMap<String, Vec<String>> = BTreeMap::new();
    for (g, v, _, _) in super::review::REVIEWS {
        let versions = out.entry((*g).to_string()).or_default();
        if !versions.iter().any(|x| x == v) {
            versions.push((*v).to_string());
        }
    }
    for rt in reg.all().iter().filter(|r| !r.group.is_empty()) {
        let versions = out.entry(rt.group.clone()).or_default();
        for v in &rt.versions {
            if !versions.contains(v) {
                versions.push(v.clone());
            }
        }
    }
    out
}

fn group_json(name: &str, versions: &[String]) -> Value {
    let vs: Vec<Value> = versions
        .iter()
        .map(|v| json!({"groupVersion": format!("{name}/{v}"), "version": v}))
        .collect();
    json!({"name": name, "versions": vs, "preferredVersion": vs.first().cloned().unwrap_or(Value::Null)})
}

/// `/apis`.
pub fn group_list(reg: &Registry) -> Value {
    let groups: Vec<Value> = groups(reg)
        .iter()
        .map(|(g, vs)| group_json(g, vs))
        .collect();
    json!({"kind": "APIGroupList", "apiVersion": "v1", "groups": groups})
}

/// `/apis/<group>`, if served.
pub fn group(reg: &Registry, name: &str) -> Option<Value> {
    let all = groups(reg);
    let vs = all.get(name)?;
    let mut g = group_json(name, vs);
    g["kind"] = json!("APIGroup");
    g["apiVersion"] = json!("v1");
    Some(g)
}

/// The resources of one group version.
pub fn served_in(reg: &Registry, group: &str, version: &str) -> Vec<Arc<ResourceType>> {
    let mut v: Vec<_> = reg
        .all()
        .into_iter()
        .filter(|r| r.group == group && r.versions.iter().any(|x| x == version))
        .collect();
    v.sort_by(|a, b| a.plural.cmp(&b.plural));
    v
}

/// `/api/v1` or `/apis/<group>/<version>`, if served.
pub fn resource_list(reg: &Registry, group: &str, version: &str) -> Option<Value> {
    let served = served_in(reg, group, version);
    let mut resources = super::review::resources(group, version);
    if served.is_empty() && resources.is_empty() {
        return None;
    }
    for rt in served {
        let mut r = json!({"name": rt.plural, "singularName": rt.singular, "namespaced": rt.namespaced,
            "kind": rt.kind, "verbs": rt.verbs()});
        if !rt.short_names.is_empty() {
            r["shortNames"] = json!(rt.short_names);
        }
        if !rt.categories.is_empty() {
            r["categories"] = json!(rt.categories);
        }
        resources.push(r);
        if rt.status_subresource {
            resources.push(json!({"name": format!("{}/status", rt.plural), "singularName": "", "namespaced": rt.namespaced,
                "kind": rt.kind, "verbs": ["get", "patch", "update"]}));
        }
        if rt.scale.is_some() {
            resources.push(json!({"name": format!("{}/scale", rt.plural), "singularName": "", "namespaced": rt.namespaced,
                "group": "autoscaling", "version": "v1", "kind": "Scale", "verbs": ["get", "patch", "update"]}));
        }
    }
    let gv = if group.is_empty() {
        version.to_string()
    } else {
        format!("{group}/{version}")
    };
    Some(
        json!({"kind": "APIResourceList", "apiVersion": "v1", "groupVersion": gv, "resources": resources}),
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn apps_v1_lists_statefulsets_and_their_status_subresource() {
        let reg = Registry::default();
        let list = resource_list(&reg, "apps", "v1").expect("served");
        let names: Vec<&str> = list["resources"]
            .as_array()
            .into_iter()
            .flatten()
            .filter_map(|r| r["name"].as_str())
            .collect();
        assert!(names.contains(&"statefulsets") && names.contains(&"statefulsets/status"));
        assert!(
            names.contains(&"statefulsets/scale") && !names.contains(&"controllerrevisions/scale")
        );
        assert!(resource_list(&reg, "apps", "v2").is_none());
    }

    #[test]
    fn the_group_list_prefers_the_first_version() {
        let reg = Registry::default();
        let g = group(&reg, "batch").expect("batch served");
        assert_eq!(g["preferredVersion"]["groupVersion"], "batch/v1");
    }
}
