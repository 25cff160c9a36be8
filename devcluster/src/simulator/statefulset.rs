//! StatefulSets: ordered Pods and their claims, readiness, revisions and rolling updates.

use super::{Sim, owner_ref};
use serde_json::{Value, json};
use std::sync::Arc;

/// The revision name of a Pod template: `<sts>-<hash>`, like a ControllerRevision's.
pub fn revision(name: &str, template: &Value) -> String {
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for b in template.to_string().bytes() {
        h ^= u64::from(b);
        h = h.wrapping_mul(0x0100_0000_01b3);
    }
    format!("{name}-{:x}", h & 0xff_ffff_ffff)
}

fn is_ready(pod: &Value) -> bool {
    pod["status"]["conditions"]
        .as_array()
        .into_iter()
        .flatten()
        .any(|c| c["type"] == "Ready" && c["status"] == "True")
}

/// Pod `ordinal` of the StatefulSet, from `template` (of revision `rev`).
fn pod_for(sts: &Value, name: &str, ordinal: i64, rev: &str, template: &Value) -> Value {
    let (ns, _) = super::ns_name(sts);
    let spec = &sts["spec"];
    let pod_name = format!("{name}-{ordinal}");
    let mut labels = template["metadata"]["labels"]
        .as_object()
        .cloned()
        .unwrap_or_default();
    labels.insert("statefulset.kubernetes.io/pod-name".into(), json!(pod_name));
    labels.insert("controller-revision-hash".into(), json!(rev));
    labels.insert(
        "apps.kubernetes.io/pod-index".into(),
        json!(ordinal.to_string()),
    );
    let mut pod_spec = template["spec"].clone();
    if !pod_spec.is_object() {
        pod_spec = json!({});
    }
    pod_spec["hostname"] = json!(pod_name);
    if let Some(svc) = spec["serviceName"].as_str() {
        pod_spec["subdomain"] = json!(svc);
    }
    let mut volumes = pod_spec["volumes"].as_array().cloned().unwrap_or_default();
    for claim in spec["volumeClaimTemplates"]
        .as_array()
        .into_iter()
        .flatten()
    {
        let claim_name = claim["metadata"]["name"].as_str().unwrap_or("data");
        if !volumes.iter().any(|v| v["name"] == claim_name) {
            volumes.push(json!({"name": claim_name, "persistentVolumeClaim": {"claimName": format!("{claim_name}-{pod_name}")}}));
        }
    }
    if !volumes.is_empty() {
        pod_spec["volumes"] = Value::Array(volumes);
    }
    json!({"apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": pod_name, "namespace": ns, "labels": labels,
            "annotations": template["metadata"]["annotations"], "ownerReferences": [owner_ref(sts)]},
        "spec": pod_spec})
}

/// The owner reference a StatefulSet puts on its claims when they go with it (not a controller
/// reference: the claim has no controller).
fn claim_owner(sts: &Value) -> Value {
    let mut r = owner_ref(sts);
    r["controller"] = json!(false);
    r
}

/// Brings a StatefulSet's Pods, claims and status towards its spec.
/// The component kube-controller-manager's StatefulSet controller records its events as.
const CONTROLLER: &str = "statefulset-controller";

/// Deletes one of the StatefulSet's Pods and records it, as the real controller does.
fn delete_pod(sim: &Sim, sts: &Value, pod: &Value) {
    let (ns, pod_name) = super::ns_name(pod);
    sim.delete("/pods", &ns, &pod_name);
    let set = sts["metadata"]["name"].as_str().unwrap_or_default();
    sim.record(
        CONTROLLER,
        sts,
        false,
        "SuccessfulDelete",
        &format!("Delete Pod {pod_name} in StatefulSet {set} successful"),
    );
}

pub(super) fn reconcile(sim: &Arc<Sim>, ns: &str, name: &str) {
    let Some(sts) = sim.get("apps/statefulsets", ns, name) else {
        sim.templates
            .lock()
            .expect("templates")
            .remove(&(ns.to_string(), name.to_string()));
        return;
    };
    if sts["metadata"].get("deletionTimestamp").is_some() {
        return;
    }
    let spec = &sts["spec"];
    let replicas = spec["replicas"].as_i64().unwrap_or(1);
    let update_rev = revision(name, &spec["template"]);
    let uid = sts["metadata"]["uid"].clone();
    let pods: Vec<Arc<Value>> = super::owned_pods(sim, ns, name, &uid);
    let ordinal = |p: &Value| {
        p["metadata"]["name"]
            .as_str()
            .and_then(|n| n.strip_prefix(&format!("{name}-")))
            .and_then(|o| o.parse::<i64>().ok())
    };
    // Claims first, as the real controller does, so that a Pod never waits for its volume.
    // With `persistentVolumeClaimRetentionPolicy.whenDeleted: Delete` the StatefulSet owns its
    // claims (so GC deletes them with it), as the real controller arranges.
    let delete_with_set = spec["persistentVolumeClaimRetentionPolicy"]["whenDeleted"] == "Delete";
    for i in 0..replicas {
        for claim in spec["volumeClaimTemplates"]
            .as_array()
            .into_iter()
            .flatten()
        {
            let claim_name = format!(
                "{}-{name}-{i}",
                claim["metadata"]["name"].as_str().unwrap_or("data")
            );
            match sim.get("/persistentvolumeclaims", ns, &claim_name) {
                None => {
                    let mut labels = claim["metadata"]["labels"]
                        .as_object()
                        .cloned()
                        .unwrap_or_default();
                    if let Some(selector) = spec["selector"]["matchLabels"].as_object() {
                        labels.extend(selector.clone());
                    }
                    let owners = if delete_with_set {
                        json!([claim_owner(&sts)])
                    } else {
                        json!([])
                    };
                    // The template's annotations too: the real controller copies the whole
                    // template's metadata onto the claim.
                    let mut metadata = json!({"name": claim_name, "namespace": ns, "labels": labels, "ownerReferences": owners});
                    if let Some(annotations) = claim["metadata"]
                        .get("annotations")
                        .filter(|a| a.is_object())
                    {
                        metadata["annotations"] = annotations.clone();
                    }
                    let pvc = json!({"apiVersion": "v1", "kind": "PersistentVolumeClaim",
                        "metadata": metadata, "spec": claim["spec"]});
                    if sim.create("/persistentvolumeclaims", pvc) {
                        sim.record(
                            CONTROLLER,
                            &sts,
                            false,
                            "SuccessfulCreate",
                            &format!(
                                "Create Claim {claim_name} Pod {name}-{i} in StatefulSet {name} success"
                            ),
                        );
                    }
                }
                Some(pvc) => {
                    let refs = pvc["metadata"]["ownerReferences"]
                        .as_array()
                        .cloned()
                        .unwrap_or_default();
                    let owned = refs.iter().any(|r| r["uid"] == uid);
                    if owned != delete_with_set {
                        let mut refs: Vec<Value> =
                            refs.into_iter().filter(|r| r["uid"] != uid).collect();
                        if delete_with_set {
                            refs.push(claim_owner(&sts));
                        }
                        sim.patch(
                            "/persistentvolumeclaims",
                            ns,
                            &claim_name,
                            "",
                            &json!({"metadata": {"ownerReferences": refs}}),
                        );
                    }
                }
            }
        }
    }
    let live: Vec<&Arc<Value>> = pods
        .iter()
        .filter(|p| p["metadata"].get("deletionTimestamp").is_none())
        .collect();
    let parallel = spec["podManagementPolicy"] == "Parallel";
    let on_delete = spec["updateStrategy"]["type"] == "OnDelete";
    // A rolling update's partition: Pods below it keep (and are made again from) the current
    // revision.
    let partition = if on_delete {
        0
    } else {
        spec["updateStrategy"]["rollingUpdate"]["partition"]
            .as_i64()
            .unwrap_or(0)
    };
    let current_before = sts["status"]["currentRevision"].as_str();
    let current_template = {
        let mut templates = sim.templates.lock().expect("templates");
        let kept = templates
            .entry((ns.to_string(), name.to_string()))
            .or_default();
        kept.retain(|(rev, _)| Some(rev.as_str()) == current_before && *rev != update_rev);
        let current = kept.first().cloned();
        kept.push((update_rev.clone(), spec["template"].clone()));
        current
    };
    for i in 0..replicas {
        if live.iter().any(|p| ordinal(p) == Some(i)) {
            continue;
        }
        // OrderedReady: Pod i only once 0..i-1 are ready.
        let predecessors_ready =
            (0..i).all(|j| live.iter().any(|p| ordinal(p) == Some(j) && is_ready(p)));
        let (rev, template) = match &current_template {
            Some((rev, template)) if i < partition => (rev.as_str(), template),
            _ => (update_rev.as_str(), &spec["template"]),
        };
        if (parallel || predecessors_ready)
            && sim.create("/pods", pod_for(&sts, name, i, rev, template))
        {
            sim.record(
                CONTROLLER,
                &sts,
                false,
                "SuccessfulCreate",
                &format!("Create Pod {name}-{i} in StatefulSet {name} successful"),
            );
        }
        if !parallel {
            break;
        }
    }
    for p in live
        .iter()
        .filter(|p| ordinal(p).is_some_and(|o| o >= replicas))
    {
        delete_pod(sim, &sts, p);
    }
    let in_range: Vec<&&Arc<Value>> = live
        .iter()
        .filter(|p| ordinal(p).is_some_and(|o| o < replicas))
        .collect();
    let updated = in_range
        .iter()
        .filter(|p| p["metadata"]["labels"]["controller-revision-hash"] == update_rev.as_str())
        .count();
    let ready = in_range.iter().filter(|p| is_ready(p)).count();
    // Rolling update: replace the highest outdated Pod at or above the partition once every
    // Pod is ready.
    if !on_delete
        && ready as i64 == replicas
        && (updated as i64) < replicas
        && let Some(p) = in_range
            .iter()
            .filter(|p| {
                p["metadata"]["labels"]["controller-revision-hash"] != update_rev.as_str()
                    && ordinal(p).is_some_and(|o| o >= partition)
            })
            .max_by_key(|p| ordinal(p))
    {
        delete_pod(sim, &sts, p);
    }
    let current_rev = if updated as i64 == replicas {
        update_rev.clone()
    } else {
        sts["status"]["currentRevision"]
            .as_str()
            .map(String::from)
            .unwrap_or_else(|| update_rev.clone())
    };
    let status = json!({"status": {"observedGeneration": sts["metadata"]["generation"], "replicas": in_range.len(),
        "readyReplicas": ready, "availableReplicas": ready, "currentReplicas": if current_rev == update_rev { updated } else { in_range.len() - updated },
        "updatedReplicas": updated, "currentRevision": current_rev, "updateRevision": update_rev,
        "collisionCount": 0}});
    let st = &sts["status"];
    let same = [
        "observedGeneration",
        "replicas",
        "readyReplicas",
        "availableReplicas",
        "currentReplicas",
        "updatedReplicas",
        "currentRevision",
        "updateRevision",
    ]
    .iter()
    .all(|k| st[*k] == status["status"][*k]);
    if !same {
        sim.patch("apps/statefulsets", ns, name, "status", &status);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_revision_changes_with_the_template_only() {
        let a = revision("db", &json!({"spec": {"containers": [{"image": "pg:15"}]}}));
        let b = revision("db", &json!({"spec": {"containers": [{"image": "pg:16"}]}}));
        assert_ne!(a, b);
        assert_eq!(
            a,
            revision("db", &json!({"spec": {"containers": [{"image": "pg:15"}]}}))
        );
        assert!(a.starts_with("db-"));
    }

    #[test]
    fn pods_get_their_claims_as_volumes_and_identity_labels() {
        let sts = json!({"apiVersion": "apps/v1", "kind": "StatefulSet", "metadata": {"name": "db", "namespace": "ns", "uid": "u"},
            "spec": {"serviceName": "db", "template": {"metadata": {"labels": {"app": "db"}}, "spec": {"containers": [{"name": "c"}]}},
            "volumeClaimTemplates": [{"metadata": {"name": "data"}}]}});
        let pod = pod_for(&sts, "db", 2, "db-1", &sts["spec"]["template"]);
        assert_eq!(pod["metadata"]["name"], "db-2");
        assert_eq!(
            pod["spec"]["volumes"][0]["persistentVolumeClaim"]["claimName"],
            "data-db-2"
        );
        assert_eq!(
            pod["metadata"]["labels"]["statefulset.kubernetes.io/pod-name"],
            "db-2"
        );
        assert_eq!(pod["metadata"]["ownerReferences"][0]["uid"], "u");
    }
}
