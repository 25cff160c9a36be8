//! Fixtures the SampleDB plugins' tests share (feature `testing`, a dev-dependency only): the
//! parent and the Jobs they observe, shaped as the API server shows them.

use serde_json::{Value, json};

use crate::{API_VERSION, KIND};

/// The uid of the test SampleDB `shop/orders`.
pub const UID: &str = "4c1f0d6e-0000-4000-8000-000000000001";

/// When the test SampleDB and its Jobs were created.
pub const CREATED: &str = "2026-01-01T00:00:00Z";

/// The SampleDB `shop/orders` with `spec`.
pub fn sampledb(spec: Value) -> Value {
    json!({
        "apiVersion": API_VERSION, "kind": KIND,
        "metadata": {"name": "orders", "namespace": "shop", "uid": UID, "creationTimestamp": CREATED},
        "spec": spec,
    })
}

/// How an observed Job stands.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum JobState<'a> {
    /// Its Pod runs.
    Running,
    /// It succeeded at this time.
    Complete(&'a str),
    /// It failed (its backoff limit reached) at this time.
    Failed(&'a str),
}

/// An observed Job `name`, started when it was created ([`CREATED`]).
pub fn job(name: &str, state: JobState<'_>) -> Value {
    let mut job = json!({
        "apiVersion": "batch/v1", "kind": "Job",
        "metadata": {"name": name, "creationTimestamp": CREATED},
        "status": {"startTime": CREATED},
    });
    match state {
        JobState::Running => job["status"]["active"] = json!(1),
        JobState::Complete(at) => {
            job["status"]["completionTime"] = json!(at);
            job["status"]["conditions"] =
                json!([{"type": "Complete", "status": "True", "lastTransitionTime": at}]);
        }
        JobState::Failed(at) => {
            job["status"]["conditions"] = json!([{"type": "Failed", "status": "True",
                "reason": "BackoffLimitExceeded", "message": "Job has reached the specified backoff limit",
                "lastTransitionTime": at}]);
        }
    }
    job
}

/// `job`, made by the CronJob `owner` (a scheduled run).
pub fn scheduled(mut job: Value, owner: &str) -> Value {
    job["metadata"]["ownerReferences"] = json!([{"apiVersion": "batch/v1", "kind": "CronJob",
        "name": owner, "uid": "x", "controller": true}]);
    job
}
