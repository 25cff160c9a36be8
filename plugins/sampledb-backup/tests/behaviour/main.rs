//! The backup plugin's behaviour, run natively through the SDK's harness.
#![allow(clippy::unwrap_used)]

mod finalize;
mod pod_security;
mod restore;
mod schedule;

use sampledb_backup::Backup;
use windlass_sdk::{Output, Value, json, testing::Harness};

/// A SampleDB with scheduled backups.
pub const DB: &str = r#"
apiVersion: samples.windlass.dev/v1alpha1
kind: SampleDB
metadata:
  name: orders
  namespace: shop
  uid: 4c1f0d6e-0000-4000-8000-000000000001
  creationTimestamp: "2026-01-01T00:00:00Z"
spec:
  version: "16.4"
  replicas: 3
  storage: {size: 10Gi}
  backup: {schedule: "0 3 * * *", retain: 5}
"#;

/// Runs the plugin, which must succeed.
pub fn run(h: &Harness) -> Output {
    h.run::<Backup>().unwrap()
}

/// The StatefulSet storage wants (the desired set backup receives), with its image.
pub fn desired_sts(image: &str) -> Value {
    json!({
        "apiVersion": "apps/v1", "kind": "StatefulSet", "metadata": {"name": "orders"},
        "spec": {"template": {"spec": {"containers": [
            {"name": "exporter", "image": "exporter:1"},
            {"name": "sampledb", "image": image},
        ]}}},
    })
}

/// An observed StatefulSet with these replica counts.
pub fn observed_sts(replicas: i32, ready: i32) -> Value {
    json!({
        "apiVersion": "apps/v1", "kind": "StatefulSet", "metadata": {"name": "orders"},
        "spec": {"replicas": 3},
        "status": {"replicas": replicas, "readyReplicas": ready},
    })
}

/// An observed Job; `state` is `Complete`, `Failed` or `Running`; `at` the time it ended.
pub fn job(name: &str, owner: Option<&str>, state: &str, at: &str) -> Value {
    let mut job = json!({
        "apiVersion": "batch/v1", "kind": "Job",
        "metadata": {"name": name, "creationTimestamp": "2026-01-01T00:00:00Z"},
        "status": {"startTime": "2026-01-01T00:00:00Z"},
    });
    if let Some(owner) = owner {
        job["metadata"]["ownerReferences"] = json!([{"apiVersion": "batch/v1", "kind": "CronJob", "name": owner, "uid": "x", "controller": true}]);
    }
    match state {
        "Complete" => {
            job["status"]["completionTime"] = json!(at);
            job["status"]["conditions"] =
                json!([{"type": "Complete", "status": "True", "lastTransitionTime": at}]);
        }
        "Failed" => {
            job["status"]["conditions"] = json!([{"type": "Failed", "status": "True",
                "reason": "BackoffLimitExceeded", "message": "Job has reached the specified backoff limit",
                "lastTransitionTime": at}]);
        }
        _ => {}
    }
    job
}

/// Sets a field of the parent's status.
pub fn with_status(h: Harness, key: &str, value: Value) -> Harness {
    h.with_parent(|p| p["status"][key] = value)
}
