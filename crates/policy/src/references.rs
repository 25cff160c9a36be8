//! References by name. A pod can read every Secret and mount every claim of its namespace that
//! it names, and a claim or a snapshot can copy any volume it names: the name *is* the access.
//! So what a plugin produces may name a Secret, a PersistentVolumeClaim, a VolumeSnapshot (or
//! any other data source), or the target of a HorizontalPodAutoscaler, only when that object
//! belongs to the parent's own [`Family`]:
//!
//! - an object in the desired set, or an observed child of this parent;
//! - a claim a StatefulSet of the family makes from its `volumeClaimTemplates`
//!   (`<template>-<statefulset>-<ordinal>`);
//! - or a name written in the parent's `spec` (the user who created the parent named it, as
//!   SampleDB's `spec.credentials.secretName`) or in the plugin's config (the operator who
//!   installed the plugin named it, as the backup plugin's `backupClaim`).
//!
//! Anything else — another application's Secret or volume in the same namespace — is refused
//! ([`super::Rule::ForeignReference`]). ConfigMaps are not checked: Kubernetes does not treat
//! them as confidential, and neither does RBAC's view role. A data source in another namespace
//! (`dataSourceRef.namespace`) is always refused.

use crate::At as _;
use std::collections::HashSet;

use serde_json::Value;

use super::{group_kind, pod_security::pod_specs};

/// The objects a parent's outputs may name: (`group`, `Kind`, name) of its desired and observed
/// objects, the claim-name prefixes of its StatefulSets, and the names written in the parent's
/// spec and the plugin's config.
#[derive(Debug, Clone, Default)]
pub struct Family {
    objects: HashSet<(String, String, String)>,
    claim_prefixes: Vec<String>,
    named: HashSet<String>,
}

impl Family {
    /// A family knowing only the names written in `parent.spec` and in `config`.
    pub fn named_in(parent: &Value, config: &Value) -> Self {
        let mut family = Family::default();
        for value in [parent.get("spec"), Some(config)].into_iter().flatten() {
            collect_strings(value, &mut family.named);
        }
        family
    }

    /// Adds every string written in `value` (a plugin's config) to the names that may be
    /// referred to.
    pub fn add_names(&mut self, value: &Value) {
        collect_strings(value, &mut self.named);
    }

    /// Adds one object of kind `kind` (`group/version/Kind`) to the family.
    pub fn add(&mut self, kind: &str, object: &Value) {
        let (group, kind_name) = group_kind(kind);
        let Some(name) = object.at("/metadata/name").and_then(Value::as_str) else {
            return;
        };
        if group == "apps" && kind_name == "StatefulSet" {
            for (_, template) in items(object.at("/spec/volumeClaimTemplates")) {
                if let Some(t) = template.at("/metadata/name").and_then(Value::as_str) {
                    self.claim_prefixes.push(format!("{t}-{name}-"));
                }
            }
        }
        self.objects
            .insert((group.to_string(), kind_name.to_string(), name.to_string()));
    }

    /// Whether an object of `group`/`kind` named `name` may be referred to.
    fn allows(&self, group: &str, kind: &str, name: &str) -> bool {
        self.named.contains(name)
            || self
                .objects
                .contains(&(group.to_string(), kind.to_string(), name.to_string()))
            || (group.is_empty()
                && kind == "PersistentVolumeClaim"
                && self.claim_prefixes.iter().any(|prefix| {
                    name.strip_prefix(prefix.as_str()).is_some_and(|ordinal| {
                        !ordinal.is_empty() && ordinal.chars().all(|c| c.is_ascii_digit())
                    })
                }))
    }
}

/// A refused reference: (field, why). `volume_name` says whether it is a claim template naming
/// `volumeName` (privileged content, not a foreign reference).
#[derive(Debug, PartialEq, Eq)]
pub struct Refused {
    /// The JSON path of the reference.
    pub field: String,
    /// What is wrong.
    pub why: String,
    /// True when the refusal is a claim template's `volumeName` (needs a content grant).
    pub volume_name: bool,
}

/// Checks every reference by name in `object` (of kind `group/version/Kind`) against the
/// families: `base` (observed children and names from spec and config) and `desired` (the
/// desired set). `earlier` is the same object as an earlier plugin produced it, when this
/// plugin edited one: the references it already held were checked against their producer's
/// config and stay allowed (a plugin that adds labels to the backup CronJob need not name the
/// backup volume). `volume_name_granted` allows claim templates to name `volumeName`.
///
/// # Errors
/// The first reference to an object outside the family.
pub fn check(
    kind: &str,
    object: &Value,
    families: [&Family; 2],
    earlier: Option<&Value>,
    volume_name_granted: bool,
) -> Result<(), Refused> {
    let before: HashSet<(String, String, String)> = earlier
        .map(|e| collect(kind, e))
        .unwrap_or_default()
        .into_iter()
        .filter_map(|r| match r {
            Ref::Object {
                group, kind, name, ..
            } => Some((group, kind, name)),
            _ => None,
        })
        .collect();
    let allows = |group: &str, k: &str, name: &str| {
        families.iter().any(|f| f.allows(group, k, name))
            || before.contains(&(group.to_string(), k.to_string(), name.to_string()))
    };
    for r in collect(kind, object) {
        match r {
            Ref::Object {
                field,
                group,
                kind,
                name,
            } => {
                if name.is_empty() || allows(&group, &kind, &name) {
                    continue;
                }
                let what = if group.is_empty() {
                    kind
                } else {
                    format!("{group}/{kind}")
                };
                return Err(Refused {
                    field,
                    why: format!(
                        "names {what} {name:?}, which is neither an object of this parent nor named in the parent's spec or the plugin's config"
                    ),
                    volume_name: false,
                });
            }
            Ref::Malformed { field, why } => {
                return Err(Refused {
                    field,
                    why,
                    volume_name: false,
                });
            }
            Ref::VolumeName { field } => {
                if volume_name_granted {
                    continue;
                }
                return Err(Refused {
                    field,
                    why: format!(
                        "a claim template that names a volume can bind a volume holding someone else's data; this needs the grant {} by name",
                        super::content::VOLUME_NAME
                    ),
                    volume_name: true,
                });
            }
        }
    }
    Ok(())
}

/// Every reference by name in `object`, of kind `kind`.
fn collect(kind: &str, object: &Value) -> Vec<Ref> {
    let mut refs = Vec::new();
    for (prefix, spec) in pod_specs(kind, object) {
        let mut path = prefix;
        pod_refs(spec, &mut path, &mut refs);
    }
    let (group, kind_name) = group_kind(kind);
    match (group, kind_name) {
        ("", "PersistentVolumeClaim") => claim_refs(object.get("spec"), "spec", &mut refs),
        ("apps", "StatefulSet") => {
            for (i, template) in items(object.at("/spec/volumeClaimTemplates")) {
                let path = format!("spec.volumeClaimTemplates[{i}].spec");
                claim_refs(template.get("spec"), &path, &mut refs);
            }
        }
        ("snapshot.storage.k8s.io", "VolumeSnapshot") => {
            let source = object.at("/spec/source");
            if let Some(pvc) = source.and_then(|s| s.get("persistentVolumeClaimName")) {
                refs.push(Ref::named(
                    "spec.source.persistentVolumeClaimName",
                    "",
                    "PersistentVolumeClaim",
                    pvc,
                ));
            }
            if let Some(content) = source.and_then(|s| s.get("volumeSnapshotContentName")) {
                refs.push(Ref::named(
                    "spec.source.volumeSnapshotContentName",
                    "snapshot.storage.k8s.io",
                    "VolumeSnapshotContent",
                    content,
                ));
            }
        }
        ("autoscaling", "HorizontalPodAutoscaler") => {
            // An autoscaler drives the replicas of whatever it names.
            if let Some(target) = object.at("/spec/scaleTargetRef") {
                let api_version = target.get("apiVersion").and_then(Value::as_str);
                let group = api_version
                    .and_then(|v| v.rsplit_once('/'))
                    .map_or("", |(g, _)| g);
                let kind = target.get("kind").and_then(Value::as_str).unwrap_or("");
                let name = target.get("name").unwrap_or(&Value::Null);
                refs.push(Ref::named("spec.scaleTargetRef.name", group, kind, name));
            }
        }
        _ => {}
    }
    refs
}

/// One reference found in an object.
enum Ref {
    Object {
        field: String,
        group: String,
        kind: String,
        name: String,
    },
    Malformed {
        field: String,
        why: String,
    },
    VolumeName {
        field: String,
    },
}

impl Ref {
    /// A reference whose name is `value`; anything but a string is malformed.
    fn named(field: impl Into<String>, group: &str, kind: &str, value: &Value) -> Ref {
        let field = field.into();
        match value {
            Value::String(name) => Ref::Object {
                field,
                group: group.into(),
                kind: kind.into(),
                name: name.clone(),
            },
            Value::Null => Ref::Object {
                field,
                group: group.into(),
                kind: kind.into(),
                name: String::new(),
            },
            other => Ref::Malformed {
                field,
                why: format!("is {other}, not a name"),
            },
        }
    }
}

/// Walks a pod spec for Secret and claim references: `secretKeyRef`, `secretRef`, any
/// `…SecretRef` (CSI's `nodePublishSecretRef`), `secretName`, a projected source's `secret`,
/// `imagePullSecrets`, `persistentVolumeClaim.claimName`, and ephemeral volumes' claim templates.
///
/// `path` is the field path so far, a buffer grown and cut back as the walk goes: a path is
/// written out only for a reference found (this runs on every pod template of every reconcile).
fn pod_refs(value: &Value, path: &mut String, refs: &mut Vec<Ref>) {
    match value {
        Value::Object(map) => {
            for (key, v) in map {
                let len = path.len();
                path.push('.');
                path.push_str(key);
                let secret = "Secret";
                let descend = match key.as_str() {
                    "secretKeyRef" | "secretRef" | "secret" if v.get("name").is_some() => {
                        refs.push(Ref::named(format!("{path}.name"), "", secret, &v["name"]));
                        true
                    }
                    k if k.ends_with("SecretRef") && v.get("name").is_some() => {
                        refs.push(Ref::named(format!("{path}.name"), "", secret, &v["name"]));
                        true
                    }
                    "secretName" => {
                        refs.push(Ref::named(path.clone(), "", secret, v));
                        true
                    }
                    "imagePullSecrets" => {
                        for (i, item) in items(Some(v)) {
                            if let Some(name) = item.get("name") {
                                let field = format!("{path}[{i}].name");
                                refs.push(Ref::named(field, "", secret, name));
                            }
                        }
                        false
                    }
                    // A pod's resourceClaims (`resourceClaimName`, or under `source` in
                    // older versions) hand it a device another application claimed.
                    "resourceClaimName" => {
                        let claim = "ResourceClaim";
                        refs.push(Ref::named(path.clone(), "resource.k8s.io", claim, v));
                        false
                    }
                    "persistentVolumeClaim" => {
                        if let Some(claim) = v.get("claimName") {
                            let field = format!("{path}.claimName");
                            refs.push(Ref::named(field, "", "PersistentVolumeClaim", claim));
                        }
                        true
                    }
                    "volumeClaimTemplate" => {
                        claim_refs(v.get("spec"), &format!("{path}.spec"), refs);
                        false
                    }
                    _ => true,
                };
                if descend {
                    pod_refs(v, path, refs);
                }
                path.truncate(len);
            }
        }
        Value::Array(list) => {
            for (i, v) in list.iter().enumerate() {
                let len = path.len();
                // Writing to a String cannot fail.
                let _ = std::fmt::Write::write_fmt(path, format_args!("[{i}]"));
                pod_refs(v, path, refs);
                path.truncate(len);
            }
        }
        _ => {}
    }
}

/// A claim spec's references: `dataSource` and `dataSourceRef` (never in another namespace),
/// and `volumeName`.
fn claim_refs(spec: Option<&Value>, path: &str, refs: &mut Vec<Ref>) {
    let Some(spec) = spec else {
        return;
    };
    for key in ["dataSource", "dataSourceRef"] {
        let Some(source) = spec.get(key).filter(|s| !s.is_null()) else {
            continue;
        };
        let field = format!("{path}.{key}");
        if let Some(ns) = source
            .get("namespace")
            .and_then(Value::as_str)
            .filter(|ns| !ns.is_empty())
        {
            refs.push(Ref::Malformed {
                field: format!("{field}.namespace"),
                why: format!("names namespace {ns}: a data source in another namespace copies another application's data"),
            });
            continue;
        }
        let group = source.get("apiGroup").and_then(Value::as_str).unwrap_or("");
        let kind = source.get("kind").and_then(Value::as_str).unwrap_or("");
        let name = source.get("name").unwrap_or(&Value::Null);
        refs.push(Ref::named(format!("{field}.name"), group, kind, name));
    }
    if spec
        .get("volumeName")
        .and_then(Value::as_str)
        .is_some_and(|v| !v.is_empty())
    {
        refs.push(Ref::VolumeName {
            field: format!("{path}.volumeName"),
        });
    }
}

fn items(value: Option<&Value>) -> impl Iterator<Item = (usize, &Value)> {
    value
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
        .enumerate()
}

fn collect_strings(value: &Value, out: &mut HashSet<String>) {
    match value {
        Value::String(s) => {
            out.insert(s.clone());
        }
        Value::Array(list) => list.iter().for_each(|v| collect_strings(v, out)),
        Value::Object(map) => map.values().for_each(|v| collect_strings(v, out)),
        _ => {}
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)] // Tests: a panic is the failure report.
mod tests {
    use super::*;
    use serde_json::json;

    fn parent() -> Value {
        json!({"metadata": {"name": "db"}, "spec": {"credentials": {"secretName": "users-secret"}}})
    }

    fn family() -> Family {
        let mut f = Family::named_in(&parent(), &json!({"backupClaim": "backups"}));
        f.add(
            "apps/v1/StatefulSet",
            &json!({"metadata": {"name": "db"}, "spec": {"volumeClaimTemplates": [{"metadata": {"name": "data"}}]}}),
        );
        f.add(
            "v1/Secret",
            &json!({"metadata": {"name": "db-credentials"}}),
        );
        f
    }

    fn job(pod: Value) -> Value {
        json!({"apiVersion": "batch/v1", "kind": "Job", "metadata": {"name": "j"},
            "spec": {"template": {"spec": pod}}})
    }

    fn refused(kind: &str, object: &Value) -> Refused {
        check(kind, object, [&family(), &Family::default()], None, false).unwrap_err()
    }

    #[test]
    fn a_pod_may_name_the_familys_secrets_and_claims() {
        let pod = json!({
            "containers": [{"name": "c", "env": [
                {"name": "A", "valueFrom": {"secretKeyRef": {"name": "db-credentials", "key": "k"}}},
                {"name": "B", "valueFrom": {"secretKeyRef": {"name": "users-secret", "key": "k"}}}]}],
            "volumes": [
                {"name": "b", "persistentVolumeClaim": {"claimName": "backups"}},
                {"name": "d", "persistentVolumeClaim": {"claimName": "data-db-2"}},
                {"name": "s", "secret": {"secretName": "db-credentials"}}]});
        assert_eq!(
            check(
                "batch/v1/Job",
                &job(pod),
                [&family(), &Family::default()],
                None,
                false
            ),
            Ok(())
        );
    }

    #[test]
    fn every_way_a_pod_names_a_foreign_secret_is_refused_with_its_field() {
        let cases = [
            (
                json!({"containers": [{"name": "c", "env": [{"name": "X", "valueFrom": {"secretKeyRef": {"name": "other", "key": "k"}}}]}]}),
                "spec.template.spec.containers[0].env[0].valueFrom.secretKeyRef.name",
            ),
            (
                json!({"initContainers": [{"name": "c", "envFrom": [{"secretRef": {"name": "other"}}]}]}),
                "spec.template.spec.initContainers[0].envFrom[0].secretRef.name",
            ),
            (
                json!({"volumes": [{"name": "v", "secret": {"secretName": "other"}}]}),
                "spec.template.spec.volumes[0].secret.secretName",
            ),
            (
                json!({"volumes": [{"name": "v", "projected": {"sources": [{"secret": {"name": "other"}}]}}]}),
                "spec.template.spec.volumes[0].projected.sources[0].secret.name",
            ),
            (
                json!({"volumes": [{"name": "v", "csi": {"driver": "d", "nodePublishSecretRef": {"name": "other"}}}]}),
                "spec.template.spec.volumes[0].csi.nodePublishSecretRef.name",
            ),
            (
                json!({"imagePullSecrets": [{"name": "other"}]}),
                "spec.template.spec.imagePullSecrets[0].name",
            ),
        ];
        for (pod, field) in cases {
            let r = refused("batch/v1/Job", &job(pod));
            assert_eq!(r.field, field);
            assert!(r.why.starts_with("names Secret \"other\""), "{}", r.why);
        }
    }

    #[test]
    fn foreign_claims_snapshots_and_data_sources_are_refused() {
        let pod = json!({"volumes": [{"name": "v", "persistentVolumeClaim": {"claimName": "data-other-0"}}]});
        let r = refused("batch/v1/Job", &job(pod));
        assert_eq!(
            r.field,
            "spec.template.spec.volumes[0].persistentVolumeClaim.claimName"
        );
        // A claim name that only looks like the StatefulSet's.
        let pod = json!({"volumes": [{"name": "v", "persistentVolumeClaim": {"claimName": "data-db-x"}}]});
        assert!(refused("batch/v1/Job", &job(pod)).why.contains("data-db-x"));
        let snap = json!({"metadata": {"name": "s"}, "spec": {"source": {"persistentVolumeClaimName": "data-other-0"}}});
        let r = refused("snapshot.storage.k8s.io/v1/VolumeSnapshot", &snap);
        assert_eq!(r.field, "spec.source.persistentVolumeClaimName");
        let snap = json!({"metadata": {"name": "s"}, "spec": {"source": {"volumeSnapshotContentName": "theirs"}}});
        let r = refused("snapshot.storage.k8s.io/v1/VolumeSnapshot", &snap);
        assert!(
            r.why
                .starts_with("names snapshot.storage.k8s.io/VolumeSnapshotContent \"theirs\""),
            "{}",
            r.why
        );
        let clone = json!({"metadata": {"name": "c"}, "spec": {"dataSource": {"kind": "PersistentVolumeClaim", "name": "theirs"}}});
        let r = refused("v1/PersistentVolumeClaim", &clone);
        assert_eq!(r.field, "spec.dataSource.name");
        let cross = json!({"metadata": {"name": "c"}, "spec": {"dataSourceRef": {"kind": "PersistentVolumeClaim", "name": "data-db-0", "namespace": "prod"}}});
        assert_eq!(
            refused("v1/PersistentVolumeClaim", &cross).field,
            "spec.dataSourceRef.namespace"
        );
        let restore = json!({"metadata": {"name": "c"}, "spec": {"dataSource": {"apiGroup": "snapshot.storage.k8s.io", "kind": "VolumeSnapshot", "name": "theirs"}}});
        assert!(
            refused("v1/PersistentVolumeClaim", &restore)
                .why
                .contains("VolumeSnapshot \"theirs\"")
        );
        // Its own claim, cloned, is fine.
        let own = json!({"metadata": {"name": "c"}, "spec": {"dataSource": {"kind": "PersistentVolumeClaim", "name": "data-db-0"}}});
        assert!(
            check(
                "v1/PersistentVolumeClaim",
                &own,
                [&family(), &Family::default()],
                None,
                false
            )
            .is_ok()
        );
    }

    #[test]
    fn claim_templates_are_checked_like_claims_and_need_a_grant_to_name_a_volume() {
        let sts = json!({"metadata": {"name": "db"}, "spec": {"volumeClaimTemplates": [
            {"metadata": {"name": "data"}, "spec": {"volumeName": "pv-of-someone"}}]}});
        let r = refused("apps/v1/StatefulSet", &sts);
        assert_eq!(
            (r.field.as_str(), r.volume_name),
            ("spec.volumeClaimTemplates[0].spec.volumeName", true)
        );
        assert!(
            check(
                "apps/v1/StatefulSet",
                &sts,
                [&family(), &Family::default()],
                None,
                true
            )
            .is_ok()
        );
        let eph = job(
            json!({"volumes": [{"name": "v", "ephemeral": {"volumeClaimTemplate": {"spec": {
            "dataSource": {"kind": "PersistentVolumeClaim", "name": "theirs"}}}}}]}),
        );
        assert_eq!(
            refused("batch/v1/Job", &eph).field,
            "spec.template.spec.volumes[0].ephemeral.volumeClaimTemplate.spec.dataSource.name"
        );
        let eph = job(
            json!({"volumes": [{"name": "v", "ephemeral": {"volumeClaimTemplate": {"spec": {
            "volumeName": "pv-1"}}}}]}),
        );
        assert!(refused("batch/v1/Job", &eph).volume_name);
    }

    #[test]
    fn a_name_that_is_not_a_string_is_refused() {
        let pod = json!({"volumes": [{"name": "v", "secret": {"secretName": ["other"]}}]});
        let r = refused("batch/v1/Job", &job(pod));
        assert_eq!(r.why, "is [\"other\"], not a name");
    }

    #[test]
    fn an_autoscaler_may_drive_only_the_familys_workloads() {
        let hpa = |name: &str| {
            json!({"metadata": {"name": "h"}, "spec": {"scaleTargetRef": {
                "apiVersion": "apps/v1", "kind": "StatefulSet", "name": name}}})
        };
        let kind = "autoscaling/v2/HorizontalPodAutoscaler";
        assert!(
            check(
                kind,
                &hpa("db"),
                [&family(), &Family::default()],
                None,
                false
            )
            .is_ok()
        );
        let r = refused(kind, &hpa("payments"));
        assert_eq!(r.field, "spec.scaleTargetRef.name");
        assert!(
            r.why.starts_with("names apps/StatefulSet \"payments\""),
            "{}",
            r.why
        );
    }

    #[test]
    fn an_edited_object_keeps_the_references_its_producer_made_but_no_new_ones() {
        let claim =
            |name: &str| json!({"name": name, "persistentVolumeClaim": {"claimName": name}});
        let earlier = job(json!({"volumes": [claim("shared")]}));
        let mut labelled = earlier.clone();
        labelled["metadata"]["labels"] = json!({"team": "a"});
        let families = [&family(), &Family::default()];
        assert!(check("batch/v1/Job", &labelled, families, Some(&earlier), false).is_ok());
        // Without the earlier version, `shared` is nobody's.
        assert!(check("batch/v1/Job", &labelled, families, None, false).is_err());
        let added = job(json!({"volumes": [claim("shared"), claim("other")]}));
        let r = check("batch/v1/Job", &added, families, Some(&earlier), false).unwrap_err();
        assert_eq!(
            r.field,
            "spec.template.spec.volumes[1].persistentVolumeClaim.claimName"
        );
    }

    #[test]
    fn a_pod_may_use_only_the_familys_resource_claims() {
        let pod =
            json!({"resourceClaims": [{"name": "gpu", "resourceClaimName": "other-app-gpu"}]});
        let r = refused("batch/v1/Job", &job(pod));
        assert_eq!(
            r.field,
            "spec.template.spec.resourceClaims[0].resourceClaimName"
        );
        assert!(
            r.why
                .contains("resource.k8s.io/ResourceClaim \"other-app-gpu\""),
            "{}",
            r.why
        );
        let old = json!({"resourceClaims": [{"name": "gpu", "source": {"resourceClaimName": "other-app-gpu"}}]});
        let r = refused("batch/v1/Job", &job(old));
        assert_eq!(
            r.field,
            "spec.template.spec.resourceClaims[0].source.resourceClaimName"
        );
    }
}
