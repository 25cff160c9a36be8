//! The backup plugin's behaviour, run natively through the SDK's harness.
#![allow(clippy::unwrap_used)]

mod finalize;
mod pod_security;
mod restore;
mod schedule;

use sampledb_backup::Backup;
use windlass_sdk::{Output, Value, json, testing::Harness};

/// A SampleDB with scheduled backups.
pub fn db() -> Value {
    sampledb_api::testing::sampledb(json!({
        "version": "16.4", "replicas": 3, "storage": {"size": "10Gi"},
        "backup": {"schedule": "0 3 * * *", "retain": 5},
    }))
}

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

/// Sets a field of the parent's status.
pub fn with_status(h: Harness, key: &str, value: Value) -> Harness {
    h.with_parent(|p| p["status"][key] = value)
}
