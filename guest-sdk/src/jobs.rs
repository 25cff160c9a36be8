//! Where a `batch/v1` Job a plugin observed stands: what plugins that run one-off work (init,
//! backup, restore, migration Jobs) ask of every reconcile.

use serde_json::Value;

/// How an observed Job stands, read from its conditions.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum JobState {
    /// Neither `Complete` nor `Failed` yet.
    Running,
    /// Condition `Complete=True`; `at` is `status.completionTime` (or the condition's
    /// transition time) as written.
    Complete {
        /// When it completed, RFC 3339.
        at: Option<String>,
    },
    /// Condition `Failed=True`.
    Failed {
        /// When it failed, RFC 3339 (the condition's transition time, else the Job's start).
        at: Option<String>,
        /// The condition's reason and message (`BackoffLimitExceeded: Job has reached …`), or
        /// whichever of the two it has.
        message: String,
    },
}

impl JobState {
    /// True once the Job completed.
    pub fn is_complete(&self) -> bool {
        matches!(self, JobState::Complete { .. })
    }
}

/// Reads a Job's (JSON) state from its conditions; `Failed` wins over `Complete`.
pub fn job_state(job: &Value) -> JobState {
    let holds = |kind: &str| {
        job.pointer("/status/conditions")
            .and_then(Value::as_array)
            .and_then(|cs| {
                cs.iter()
                    .find(|c| c["type"] == kind && c["status"] == "True")
            })
    };
    let text = |v: Option<&Value>| v.and_then(Value::as_str).map(str::to_string);
    if let Some(c) = holds("Failed") {
        let at = text(c.get("lastTransitionTime"))
            .or_else(|| text(job.pointer("/status/startTime")))
            .or_else(|| text(job.pointer("/metadata/creationTimestamp")));
        let message = match (text(c.get("reason")), text(c.get("message"))) {
            (Some(reason), Some(message)) => format!("{reason}: {message}"),
            (reason, message) => message
                .or(reason)
                .unwrap_or_else(|| "the Job failed".into()),
        };
        return JobState::Failed { at, message };
    }
    if let Some(c) = holds("Complete") {
        let at = text(job.pointer("/status/completionTime"))
            .or_else(|| text(c.get("lastTransitionTime")));
        return JobState::Complete { at };
    }
    JobState::Running
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn conditions_decide_and_a_failure_carries_its_message_or_reason() {
        assert_eq!(job_state(&json!({"status": {}})), JobState::Running);
        let done = json!({"status": {"completionTime": "2026-01-01T00:00:00Z",
            "conditions": [{"type": "Complete", "status": "True"}]}});
        assert_eq!(
            job_state(&done),
            JobState::Complete {
                at: Some("2026-01-01T00:00:00Z".into())
            }
        );
        let failed = json!({"status": {"conditions": [
            {"type": "Failed", "status": "True", "reason": "BackoffLimitExceeded"}]}});
        assert!(
            matches!(job_state(&failed), JobState::Failed { message, .. } if message == "BackoffLimitExceeded")
        );
    }
}
