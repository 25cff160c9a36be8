//! CronJobs: Jobs on schedule, on a clock that runs `cron_speedup` times faster than the wall
//! clock from each CronJob's creation, and the history limits.

use super::{Sim, ns_name, owner_ref};
use chrono::{DateTime, Utc};
use serde_json::{Value, json};
use std::collections::HashMap;
use std::str::FromStr;
use std::sync::Arc;

/// The `cron` crate wants a seconds field; Kubernetes schedules have five fields (or `@hourly`…).
pub fn parse(schedule: &str) -> Option<cron::Schedule> {
    let s = schedule.trim();
    let s = s
        .strip_prefix("TZ=")
        .map_or(s, |rest| rest.split_once(' ').map_or(rest, |(_, r)| r));
    let expr = if s.starts_with('@') {
        s.to_string()
    } else {
        format!("0 {s}")
    };
    cron::Schedule::from_str(&expr).ok()
}

/// The latest scheduled time in `(after, until]`, if any.
pub fn latest_due(
    schedule: &cron::Schedule,
    after: DateTime<Utc>,
    until: DateTime<Utc>,
) -> Option<DateTime<Utc>> {
    schedule
        .after(&after)
        .take(100_000)
        .take_while(|t| *t <= until)
        .last()
}

fn parse_time(v: &Value) -> Option<DateTime<Utc>> {
    v.as_str()
        .and_then(|s| DateTime::parse_from_rfc3339(s).ok())
        .map(|t| t.with_timezone(&Utc))
}

/// The component kube-controller-manager's CronJob controller records its events as.
const CONTROLLER: &str = "cronjob-controller";

/// Checks every CronJob once.
pub(super) fn tick(sim: &Arc<Sim>) {
    let cronjobs = sim.list_all("batch/cronjobs");
    if cronjobs.is_empty() {
        return;
    }
    // Each CronJob's Jobs, by owner uid: one pass over the Jobs per tick, not one per CronJob
    // (with hundreds of each, ten ticks a second, that pass was most of the simulator's work).
    let mut jobs_by_owner: HashMap<String, Vec<Arc<Value>>> = HashMap::new();
    for job in sim.list_all("batch/jobs") {
        let owners: Vec<String> = job["metadata"]["ownerReferences"]
            .as_array()
            .into_iter()
            .flatten()
            .filter_map(|r| r["uid"].as_str().map(str::to_string))
            .collect();
        for uid in owners {
            jobs_by_owner.entry(uid).or_default().push(job.clone());
        }
    }
    for cj in cronjobs {
        if cj["spec"]["suspend"] == true || cj["metadata"].get("deletionTimestamp").is_some() {
            continue;
        }
        let Some(created) = parse_time(&cj["metadata"]["creationTimestamp"]) else {
            continue;
        };
        let Some(schedule) = cj["spec"]["schedule"].as_str().and_then(parse) else {
            continue;
        };
        let elapsed =
            (Utc::now() - created).num_milliseconds().max(0) as f64 * sim.config.cron_speedup;
        let virtual_now = created + chrono::Duration::milliseconds(elapsed as i64);
        let last = parse_time(&cj["status"]["lastScheduleTime"]).unwrap_or(created);
        if let Some(due) = latest_due(&schedule, last, virtual_now) {
            run_job(sim, &cj, due);
        }
        let uid = cj["metadata"]["uid"].as_str().unwrap_or_default();
        prune_history(sim, &cj, jobs_by_owner.remove(uid).unwrap_or_default());
    }
}

fn run_job(sim: &Arc<Sim>, cj: &Value, due: DateTime<Utc>) {
    let (ns, name) = ns_name(cj);
    let job_name = format!("{name}-{}", due.timestamp() / 60);
    let template = &cj["spec"]["jobTemplate"];
    let mut annotations = template["metadata"]["annotations"]
        .as_object()
        .cloned()
        .unwrap_or_default();
    annotations.insert(
        "batch.kubernetes.io/cronjob-scheduled-timestamp".into(),
        json!(due.to_rfc3339()),
    );
    let job = json!({"apiVersion": "batch/v1", "kind": "Job",
        "metadata": {"name": job_name, "namespace": ns, "labels": template["metadata"]["labels"], "annotations": annotations,
            "ownerReferences": [owner_ref(cj)]},
        "spec": template["spec"]});
    if sim.create("batch/jobs", job) {
        sim.record(
            CONTROLLER,
            cj,
            false,
            "SuccessfulCreate",
            &format!("Created job {job_name}"),
        );
    }
    let stamp = due.to_rfc3339_opts(chrono::SecondsFormat::Secs, true);
    sim.patch(
        "batch/cronjobs",
        &ns,
        &name,
        "status",
        &json!({"status": {"lastScheduleTime": stamp,
        "active": [{"apiVersion": "batch/v1", "kind": "Job", "name": job_name, "namespace": ns}]}}),
    );
}

/// Deletes the CronJob's finished Jobs beyond its history limits (`jobs`: the ones it owns).
fn prune_history(sim: &Arc<Sim>, cj: &Value, mut jobs: Vec<Arc<Value>>) {
    let finished = |j: &Value, t: &str| {
        j["status"]["conditions"]
            .as_array()
            .into_iter()
            .flatten()
            .any(|c| c["type"] == t && c["status"] == "True")
    };
    jobs.sort_by(|a, b| {
        a["metadata"]["name"]
            .as_str()
            .cmp(&b["metadata"]["name"].as_str())
    });
    for (kind, limit_field, default) in [
        ("Complete", "successfulJobsHistoryLimit", 3),
        ("Failed", "failedJobsHistoryLimit", 1),
    ] {
        let limit = cj["spec"][limit_field].as_u64().unwrap_or(default) as usize;
        let done: Vec<&Arc<Value>> = jobs.iter().filter(|j| finished(j, kind)).collect();
        for j in done.iter().take(done.len().saturating_sub(limit)) {
            let (jns, jname) = ns_name(j);
            sim.delete("batch/jobs", &jns, &jname);
            if j["metadata"].get("deletionTimestamp").is_none() {
                sim.record(
                    CONTROLLER,
                    cj,
                    false,
                    "SuccessfulDelete",
                    &format!("Deleted job {jname}"),
                );
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn five_field_schedules_and_macros_parse() {
        assert!(parse("*/5 * * * *").is_some());
        assert!(parse("@hourly").is_some());
        assert!(parse("not a schedule").is_none());
    }

    #[test]
    fn only_the_latest_missed_run_is_due() {
        let s = parse("* * * * *").expect("every minute");
        let t0 = DateTime::parse_from_rfc3339("2026-01-01T00:00:30Z")
            .expect("time")
            .with_timezone(&Utc);
        let due = latest_due(&s, t0, t0 + chrono::Duration::minutes(5)).expect("due");
        assert_eq!(due.to_rfc3339(), "2026-01-01T00:05:00+00:00");
        assert!(latest_due(&s, t0, t0 + chrono::Duration::seconds(10)).is_none());
    }
}
