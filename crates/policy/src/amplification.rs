//! The work an object makes the cluster do. One small object can ask the cluster's controllers
//! for a million Pods (`replicas`, a Job's `parallelism` and `completions`, a CronJob whose
//! Jobs pile up), and the controllers will try. So every workload a plugin returns is bounded by
//! its WasmPlugin's `limits.maxPods` ([`DEFAULT_MAX_PODS`] unless raised): each field alone, and
//! the Pods all of the plugin's own objects may run at once together.
//!
//! # Why a CronJob needs a bound on its Jobs
//! With `concurrencyPolicy: Allow` (the API's default) a new Job starts at every tick whether
//! or not the last one finished, so the Pods it runs at once have no bound. `Forbid` or
//! `Replace` keep one Job at a time; `Allow` is accepted only with the Job template's
//! `activeDeadlineSeconds`, which bounds how many can overlap: with ticks at most once a
//! minute, `deadline / 60 + 1` Jobs.
//!
//! A DaemonSet runs one Pod per node: bounded by the cluster, not by the plugin, and not counted.
//! An autoscaler's `maxReplicas` counts beside its target's `replicas` (an over-count: the
//! bound errs on the side of the cluster). Pods that are shutting down are not counted.

use crate::At as _;
use serde_json::Value;

use crate::group_kind;

/// Pods one workload may ask for, and all of one plugin's objects together, unless the
/// WasmPlugin's `limits.maxPods` says otherwise.
pub const DEFAULT_MAX_PODS: u32 = 100;

/// A field over the bound: (field, why).
pub type Over = (String, String);

/// How many Pods `object` (of kind `group/version/Kind`) may run at once, checking each field
/// against `max`.
///
/// # Errors
/// The first field over `max`, or a CronJob whose Jobs may pile up without bound.
pub fn pods_at_once(kind: &str, object: &Value, max: u32) -> Result<u64, Over> {
    let (group, kind_name) = group_kind(kind);
    let max = u64::from(max);
    let count = |pointer: &str, default: u64| -> Result<u64, Over> {
        let field = pointer.trim_start_matches('/').replace('/', ".");
        let n = match object.at(pointer) {
            None | Some(Value::Null) => default,
            Some(v) => v.as_u64().ok_or_else(|| {
                (
                    field.clone(),
                    format!("{v} is not a whole number of at least 0"),
                )
            })?,
        };
        if n > max {
            return Err((
                field,
                format!(
                    "{n} is more than the {max} Pods this plugin may ask for (the WasmPlugin's limits.maxPods)"
                ),
            ));
        }
        Ok(n)
    };
    match (group, kind_name) {
        ("apps", "Deployment" | "StatefulSet" | "ReplicaSet") | ("", "ReplicationController") => {
            count("/spec/replicas", 1)
        }
        // A Pod without a spec is a labels-only edit of one that runs already.
        ("", "Pod") => Ok(u64::from(object.get("spec").is_some())),
        ("batch", "Job") => job(&count, "/spec"),
        ("batch", "CronJob") => {
            let per_job = job(&count, "/spec/jobTemplate/spec")?;
            let policy = object
                .at("/spec/concurrencyPolicy")
                .and_then(Value::as_str)
                .unwrap_or("Allow");
            let jobs = if policy == "Allow" {
                let Some(deadline) = object
                    .at("/spec/jobTemplate/spec/activeDeadlineSeconds")
                    .and_then(Value::as_u64)
                else {
                    return Err((
                        "spec.concurrencyPolicy".into(),
                        "Allow (the default) starts a Job at every tick however many still run, so the Pods at once have no bound; set Forbid or Replace, or bound each Job with spec.jobTemplate.spec.activeDeadlineSeconds".into(),
                    ));
                };
                deadline / 60 + 1
            } else {
                1
            };
            let pods = per_job.saturating_mul(jobs);
            if pods > max {
                return Err((
                    "spec.jobTemplate.spec.activeDeadlineSeconds".into(),
                    format!(
                        "with concurrencyPolicy Allow up to {jobs} Jobs of {per_job} Pods overlap, {pods} Pods: more than the {max} this plugin may ask for (the WasmPlugin's limits.maxPods)"
                    ),
                ));
            }
            Ok(pods)
        }
        // What it may scale its target to counts as well as the target's own replicas.
        ("autoscaling", "HorizontalPodAutoscaler") => count("/spec/maxReplicas", 0),
        _ => Ok(0),
    }
}

/// A Job spec's Pods at once (`parallelism`, default 1), with `completions` bounded too: each
/// completion is a Pod made.
fn job(count: &impl Fn(&str, u64) -> Result<u64, Over>, spec: &str) -> Result<u64, Over> {
    count(&format!("{spec}/completions"), 1)?;
    count(&format!("{spec}/parallelism"), 1)
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn replicas_parallelism_and_completions_are_bounded_field_by_field() {
        let deploy = json!({"spec": {"replicas": 1_000_000}});
        let (field, why) = pods_at_once("apps/v1/Deployment", &deploy, 100).unwrap_err();
        assert_eq!(field, "spec.replicas");
        assert!(
            why.starts_with("1000000 is more than the 100 Pods"),
            "{why}"
        );
        assert_eq!(
            pods_at_once(
                "apps/v1/StatefulSet",
                &json!({"spec": {"replicas": 3}}),
                100
            ),
            Ok(3)
        );
        assert_eq!(
            pods_at_once("apps/v1/ReplicaSet", &json!({"spec": {}}), 100),
            Ok(1)
        );
        let job = json!({"spec": {"parallelism": 2, "completions": 1_000_000}});
        assert_eq!(
            pods_at_once("batch/v1/Job", &job, 100).unwrap_err().0,
            "spec.completions"
        );
        let job = json!({"spec": {"parallelism": 101}});
        assert_eq!(
            pods_at_once("batch/v1/Job", &job, 100).unwrap_err().0,
            "spec.parallelism"
        );
        let rc = json!({"spec": {"replicas": -1}});
        let (field, why) = pods_at_once("v1/ReplicationController", &rc, 100).unwrap_err();
        assert_eq!(
            (field.as_str(), why.as_str()),
            ("spec.replicas", "-1 is not a whole number of at least 0")
        );
        let hpa = json!({"spec": {"maxReplicas": 500}});
        assert_eq!(
            pods_at_once("autoscaling/v2/HorizontalPodAutoscaler", &hpa, 100)
                .unwrap_err()
                .0,
            "spec.maxReplicas"
        );
        assert_eq!(pods_at_once("v1/ConfigMap", &json!({}), 100), Ok(0));
        assert_eq!(
            pods_at_once("v1/Pod", &json!({"metadata": {"labels": {}}}), 100),
            Ok(0)
        );
        assert_eq!(pods_at_once("v1/Pod", &json!({"spec": {}}), 100), Ok(1));
        let hpa = json!({"spec": {"maxReplicas": 40}});
        assert_eq!(
            pods_at_once("autoscaling/v2/HorizontalPodAutoscaler", &hpa, 100),
            Ok(40)
        );
    }

    #[test]
    fn a_cronjob_whose_jobs_may_pile_up_without_bound_is_refused() {
        let every_minute = json!({"spec": {"schedule": "* * * * *", "jobTemplate": {"spec": {}}}});
        let (field, why) = pods_at_once("batch/v1/CronJob", &every_minute, 100).unwrap_err();
        assert_eq!(field, "spec.concurrencyPolicy");
        assert!(why.starts_with("Allow (the default)"), "{why}");
        let forbid = json!({"spec": {"concurrencyPolicy": "Forbid", "jobTemplate": {"spec": {"parallelism": 4}}}});
        assert_eq!(pods_at_once("batch/v1/CronJob", &forbid, 100), Ok(4));
        let bounded = json!({"spec": {"concurrencyPolicy": "Allow",
            "jobTemplate": {"spec": {"parallelism": 10, "activeDeadlineSeconds": 600}}}});
        let (field, why) = pods_at_once("batch/v1/CronJob", &bounded, 100).unwrap_err();
        assert_eq!(field, "spec.jobTemplate.spec.activeDeadlineSeconds");
        assert!(
            why.contains("up to 11 Jobs of 10 Pods overlap, 110 Pods"),
            "{why}"
        );
        assert_eq!(pods_at_once("batch/v1/CronJob", &bounded, 110), Ok(110));
        let wide = json!({"spec": {"concurrencyPolicy": "Replace", "jobTemplate": {"spec": {"completions": 1000}}}});
        assert_eq!(
            pods_at_once("batch/v1/CronJob", &wide, 100).unwrap_err().0,
            "spec.jobTemplate.spec.completions"
        );
    }
}
