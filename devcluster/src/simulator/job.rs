//! Jobs: one Pod per Job; the Job completes or fails with it.

use super::{Sim, marked_to_fail, owner_ref};
use serde_json::{Value, json};
use std::sync::Arc;

fn condition(t: &str, reason: &str, now: &str) -> Value {
    json!({"type": t, "status": "True", "reason": reason, "lastProbeTime": now, "lastTransitionTime": now})
}

/// The component kube-controller-manager's Job controller records its events as.
const CONTROLLER: &str = "job-controller";

/// Starts a Job's Pod, and reports the Job's outcome once its Pod terminated.
pub(super) fn reconcile(sim: &Arc<Sim>, ns: &str, name: &str) {
    let Some(job) = sim.get("batch/jobs", ns, name) else {
        return;
    };
    let done = job["status"]["conditions"]
        .as_array()
        .into_iter()
        .flatten()
        .any(|c| (c["type"] == "Complete" || c["type"] == "Failed") && c["status"] == "True");
    if done || job["metadata"].get("deletionTimestamp").is_some() || job["spec"]["suspend"] == true
    {
        return;
    }
    let uid = job["metadata"]["uid"].clone();
    let pods: Vec<Arc<Value>> = super::owned_pods(sim, ns, name, &uid);
    let now = crate::api::now();
    let Some(pod) = pods.first() else {
        let template = &job["spec"]["template"];
        let mut labels = template["metadata"]["labels"]
            .as_object()
            .cloned()
            .unwrap_or_default();
        labels.insert("job-name".into(), json!(name));
        labels.insert("batch.kubernetes.io/job-name".into(), json!(name));
        labels.insert("controller-uid".into(), uid.clone());
        let mut annotations = template["metadata"]["annotations"]
            .as_object()
            .cloned()
            .unwrap_or_default();
        if marked_to_fail(&job["metadata"]) {
            annotations.insert(crate::FAIL_ANNOTATION.into(), json!("true"));
        }
        let suffix: String = uid
            .as_str()
            .unwrap_or("00000")
            .chars()
            .filter(|c| c.is_ascii_alphanumeric())
            .take(5)
            .collect();
        let pod = json!({"apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": format!("{name}-{suffix}"), "namespace": ns, "labels": labels, "annotations": annotations,
                "ownerReferences": [owner_ref(&job)]},
            "spec": template["spec"]});
        let pod_name = pod["metadata"]["name"]
            .as_str()
            .unwrap_or_default()
            .to_string();
        if sim.create("/pods", pod) {
            sim.record(
                CONTROLLER,
                &job,
                false,
                "SuccessfulCreate",
                &format!("Created pod: {pod_name}"),
            );
        }
        if job["status"]["startTime"].is_null() {
            sim.patch(
                "batch/jobs",
                ns,
                name,
                "status",
                &json!({"status": {"startTime": now, "active": 1}}),
            );
        }
        return;
    };
    let (status, warning, reason, message) = match pod["status"]["phase"].as_str() {
        Some("Succeeded") => (
            json!({"status": {"active": 0, "succeeded": 1, "ready": 0, "completionTime": now,
            "conditions": [condition("SuccessCriteriaMet", "CompletionsReached", &now), condition("Complete", "CompletionsReached", &now)]}}),
            false,
            "Completed",
            "Job completed",
        ),
        Some("Failed") => (
            json!({"status": {"active": 0, "failed": 1, "ready": 0,
            "conditions": [condition("FailureTarget", "BackoffLimitExceeded", &now), condition("Failed", "BackoffLimitExceeded", &now)]}}),
            true,
            "BackoffLimitExceeded",
            "Job has reached the specified backoff limit",
        ),
        _ => return,
    };
    sim.patch("batch/jobs", ns, name, "status", &status);
    sim.record(CONTROLLER, &job, warning, reason, message);
}
