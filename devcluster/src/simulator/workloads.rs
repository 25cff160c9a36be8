//! Pods starting, Deployments, PVC binding, Service cluster IPs, VolumeSnapshots.

use super::{Sim, controller_of, marked_to_fail, ns_name};
use serde_json::{Value, json};
use std::sync::Arc;

/// A new Pod: Running and Ready after the delay; a Job's Pod instead terminates (Succeeded,
/// or Failed with the fail annotation).
pub(super) fn start_pod(sim: &Arc<Sim>, pod: &Value) {
    if pod["status"]["phase"].is_string() && pod["status"]["phase"] != "Pending" {
        return;
    }
    let (ns, name) = ns_name(pod);
    let uid = pod["metadata"]["uid"].clone();
    if !sim.first_schedule(&uid) {
        return;
    }
    if pod["spec"]["nodeName"].as_str().is_none_or(str::is_empty) {
        sim.bind(&ns, &name);
    }
    let job = controller_of(pod)
        .filter(|(k, _)| k == "Job")
        .map(|(_, j)| j);
    let of_job = job.is_some();
    // The fail annotation on the Pod, or on its Job (a real Job controller copies only the
    // template's annotations to the Pod).
    let fail = marked_to_fail(&pod["metadata"])
        || job
            .and_then(|j| sim.get("batch/jobs", &ns, &j))
            .is_some_and(|j| marked_to_fail(&j["metadata"]));
    let containers: Vec<Value> = pod["spec"]["containers"]
        .as_array()
        .cloned()
        .unwrap_or_default();
    let containers_of_pod = containers.clone();
    let dump = super::dumps::Command::of_pod(pod);
    let account = pod["spec"]["serviceAccountName"]
        .as_str()
        .unwrap_or("default")
        .to_string();
    sim.later(move |sim| {
        // Still the same Pod (not deleted and recreated meanwhile)?
        if sim.get("/pods", &ns, &name).is_none_or(|p| p["metadata"]["uid"] != uid) {
            return;
        }
        let now = crate::api::now();
        let ip = sim.ip();
        let phase = match (of_job, fail) {
            (true, true) => "Failed",
            (true, false) => "Succeeded",
            _ => "Running",
        };
        let pod_status = move |phase: &str, message: Option<String>| {
            let running = phase == "Running";
            let statuses: Vec<Value> = containers
                .iter()
                .map(|c| {
                    let state = if running {
                        json!({"running": {"startedAt": now}})
                    } else {
                        let mut terminated = json!({"exitCode": if phase == "Failed" { 1 } else { 0 }, "reason": if phase == "Failed" { "Error" } else { "Completed" }, "startedAt": now, "finishedAt": now});
                        if let Some(message) = &message {
                            terminated["message"] = json!(message);
                        }
                        json!({"terminated": terminated})
                    };
                    json!({"name": c["name"], "image": c["image"], "imageID": "", "ready": running, "started": running, "restartCount": 0, "state": state})
                })
                .collect();
            let ready = if running { "True" } else { "False" };
            json!({"status": {"phase": phase, "podIP": ip, "hostIP": "10.0.0.1", "startTime": now,
                "conditions": [
                    {"type": "PodScheduled", "status": "True", "lastTransitionTime": now},
                    {"type": "Initialized", "status": "True", "lastTransitionTime": now},
                    {"type": "ContainersReady", "status": ready, "lastTransitionTime": now},
                    {"type": "Ready", "status": ready, "lastTransitionTime": now}],
                "containerStatuses": statuses}})
        };
        // A dump tool writes or reads its backup volume; a restore of a missing dump fails.
        if phase == "Succeeded"
            && let Some(cmd) = &dump
        {
            let status = match sim.dumps.run(&ns, cmd) {
                Ok(()) => pod_status("Succeeded", None),
                Err(message) => pod_status("Failed", Some(message)),
            };
            sim.patch("/pods", &ns, &name, "status", &status);
            return;
        }
        // No container runs here: what a Job's Pod does through the API, the simulator does,
        // as the Pod's ServiceAccount; the Pod fails when kubectl would.
        if phase == "Succeeded"
            && let Some(cmd) = super::kubectl::command(&containers_of_pod)
        {
            let pod = super::backend::PodRef {
                namespace: ns.clone(),
                name: name.clone(),
            };
            sim.kubectl(
                pod,
                &account,
                cmd,
                Box::new(move |outcome| match outcome {
                    Ok(()) => pod_status("Succeeded", None),
                    Err(message) => pod_status("Failed", Some(message)),
                }),
            );
            return;
        }
        let status = pod_status(phase, None);
        sim.patch("/pods", &ns, &name, "status", &status);
    });
}

/// A Deployment reports all its replicas ready after the delay.
pub(super) fn deployment(sim: &Arc<Sim>, d: &Value) {
    let (ns, name) = ns_name(d);
    let replicas = d["spec"]["replicas"].as_i64().unwrap_or(1);
    let generation = d["metadata"]["generation"].clone();
    let st = &d["status"];
    if st["readyReplicas"].as_i64().unwrap_or(0) == replicas
        && st["observedGeneration"] == generation
    {
        return;
    }
    sim.later(move |sim| {
        let now = crate::api::now();
        let status = json!({"status": {"observedGeneration": generation, "replicas": replicas, "readyReplicas": replicas,
            "updatedReplicas": replicas, "availableReplicas": replicas,
            "conditions": [{"type": "Available", "status": "True", "reason": "MinimumReplicasAvailable", "lastTransitionTime": now, "lastUpdateTime": now},
                           {"type": "Progressing", "status": "True", "reason": "NewReplicaSetAvailable", "lastTransitionTime": now, "lastUpdateTime": now}]}});
        sim.patch("apps/deployments", &ns, &name, "status", &status);
    });
}

/// A PVC is Bound at once, with the requested capacity.
pub(super) fn bind_claim(sim: &Arc<Sim>, pvc: &Value) {
    if pvc["status"]["phase"] == "Bound" || !sim.first_schedule(&pvc["metadata"]["uid"]) {
        return;
    }
    let (ns, name) = ns_name(pvc);
    let status = json!({"status": {"phase": "Bound", "accessModes": pvc["spec"]["accessModes"],
        "capacity": {"storage": pvc["spec"]["resources"]["requests"]["storage"].as_str().unwrap_or("1Gi")}}});
    sim.patch("/persistentvolumeclaims", &ns, &name, "status", &status);
}

/// A Service without a clusterIP gets one (headless Services keep `None`).
pub(super) fn assign_cluster_ip(sim: &Arc<Sim>, svc: &Value) {
    let ip = svc["spec"]["clusterIP"].as_str().unwrap_or_default();
    if !ip.is_empty() || svc["spec"]["type"] == "ExternalName" {
        return;
    }
    let (ns, name) = ns_name(svc);
    let ip = sim.cluster_ip();
    sim.patch(
        "/services",
        &ns,
        &name,
        "",
        &json!({"spec": {"clusterIP": ip, "clusterIPs": [ip]}}),
    );
}

/// A VolumeSnapshot is ready to use after the delay, or reports an error when annotated to fail.
pub(super) fn snapshot(sim: &Arc<Sim>, vs: &Value) {
    if vs["status"]["readyToUse"] == true || !sim.first_schedule(&vs["metadata"]["uid"]) {
        return;
    }
    let (ns, name) = ns_name(vs);
    let fail = marked_to_fail(&vs["metadata"]);
    let uid = vs["metadata"]["uid"]
        .as_str()
        .unwrap_or_default()
        .to_string();
    sim.later(move |sim| {
        let now = crate::api::now();
        let status = if fail {
            json!({"status": {"readyToUse": false, "error": {"message": "snapshot failed (devcluster.windlass.dev/fail)", "time": now}}})
        } else {
            json!({"status": {"readyToUse": true, "creationTime": now, "restoreSize": "1Gi",
                "boundVolumeSnapshotContentName": format!("snapcontent-{uid}")}})
        };
        sim.patch("snapshot.storage.k8s.io/volumesnapshots", &ns, &name, "status", &status);
    });
}
