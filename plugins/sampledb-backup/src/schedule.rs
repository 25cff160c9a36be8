//! Scheduled backups: the CronJob, and `status.lastBackup` from the Jobs it made.

use sampledb_api::{BACKUP_MOUNT, SampleDbSpec, names};
use windlass_sdk::{
    Context, Output, Result, Value,
    k8s_openapi::{
        api::batch::v1::{CronJob, CronJobSpec, JobTemplateSpec},
        apimachinery::pkg::apis::meta::v1::ObjectMeta,
    },
};

use crate::{
    Config,
    jobs::{self, JobState},
};

/// The `@` schedules CronJobs accept.
const MACROS: [&str; 7] = [
    "@yearly",
    "@annually",
    "@monthly",
    "@weekly",
    "@daily",
    "@midnight",
    "@hourly",
];

/// True for a schedule a CronJob accepts: five fields of `0-9 A-Z a-z * / , - ?`, or a macro.
pub fn is_cron_schedule(schedule: &str) -> bool {
    let s = schedule.trim();
    if s.starts_with('@') {
        return MACROS.contains(&s);
    }
    let fields: Vec<&str> = s.split_whitespace().collect();
    fields.len() == 5
        && fields.iter().all(|f| {
            f.chars()
                .all(|c| c.is_ascii_alphanumeric() || "*/,-?".contains(c))
        })
}

/// Adds the backup CronJob (when `spec.backup` is set; otherwise the host prunes an old one) and
/// reports the last backup. While `restoring`, the CronJob is suspended: a dump of a half-restored
/// database is worse than none.
pub(crate) fn reconcile(
    ctx: &Context,
    spec: &SampleDbSpec,
    config: &Config,
    restoring: bool,
    out: &mut Output,
) -> Result<()> {
    let name = ctx.name();
    if let Some(backup) = &spec.backup {
        let cronjob = names::backup_cronjob(name);
        let command = vec![
            "sampledb-backup".to_string(),
            "--dir".into(),
            BACKUP_MOUNT.into(),
            // The backup volume is shared by the namespace: prune only this database's dumps.
            "--prefix".into(),
            format!("{cronjob}-"),
            "--retain".into(),
            backup.retain.to_string(),
        ];
        let job = jobs::job_spec(ctx, spec, config, "backup", command, true);
        out.apply(&CronJob {
            metadata: jobs::meta(cronjob, name, "backup"),
            spec: Some(CronJobSpec {
                schedule: backup.schedule.trim().to_string(),
                concurrency_policy: Some("Forbid".into()),
                successful_jobs_history_limit: Some(backup.retain),
                failed_jobs_history_limit: Some(3),
                suspend: Some(restoring),
                job_template: JobTemplateSpec {
                    metadata: Some(ObjectMeta {
                        labels: Some(jobs::labels(name, "backup")),
                        ..ObjectMeta::default()
                    }),
                    spec: Some(job),
                },
                ..CronJobSpec::default()
            }),
            ..CronJob::default()
        })?;
    }
    report(ctx, out);
    Ok(())
}

/// A finished backup Job of the CronJob.
struct Finished<'a> {
    name: &'a str,
    at: Option<String>,
    state: JobState,
}

/// `status.lastBackup` and `lastBackupTime` from the newest completed Job of the CronJob
/// (keeping the previous values when history retention has deleted every completed Job), and
/// condition `BackupSucceeded` when there is something to say.
fn report(ctx: &Context, out: &mut Output) {
    let cronjob = names::backup_cronjob(ctx.name());
    let finished: Vec<Finished<'_>> = ctx
        .observed_json("batch/v1/Job")
        .filter(|j| controlled_by(j, &cronjob))
        .filter_map(|j| {
            let name = j.pointer("/metadata/name").and_then(Value::as_str)?;
            let state = jobs::job_state(j);
            let at = match &state {
                JobState::Running => return None,
                JobState::Complete { at } | JobState::Failed { at, .. } => at.clone(),
            };
            Some(Finished { name, at, state })
        })
        .collect();
    let newest = |complete: bool| {
        finished
            .iter()
            .filter(|f| matches!(f.state, JobState::Complete { .. }) == complete)
            .max_by_key(|f| (f.at.as_deref().and_then(jobs::parse_time), f.name))
    };
    let text = |p: &str| ctx.status(p).and_then(Value::as_str).map(str::to_string);
    let (previous, previous_at) = (text("/lastBackup"), text("/lastBackupTime"));
    let previous_time = previous_at.as_deref().and_then(jobs::parse_time);
    let (last, last_at) = match newest(true) {
        Some(f) if f.at.as_deref().and_then(jobs::parse_time) >= previous_time => {
            (Some(f.name.to_string()), f.at.clone())
        }
        _ => (previous.clone(), previous_at),
    };
    if let Some(last) = &last {
        out.status("lastBackup", last);
        if let Some(at) = &last_at {
            out.status("lastBackupTime", at);
        }
        if previous.as_ref() != Some(last) {
            out.event(
                "BackupCompleted",
                format!(
                    "backup {last} completed{}",
                    last_at
                        .as_deref()
                        .map_or(String::new(), |t| format!(" at {t}"))
                ),
            );
        }
    }
    let last_time = last_at.as_deref().and_then(jobs::parse_time);
    match newest(false) {
        Some(Finished {
            name,
            at,
            state: JobState::Failed { message, .. },
        }) if last.is_none() || at.as_deref().and_then(jobs::parse_time) > last_time => {
            crate::report_failure(
                ctx,
                out,
                "BackupSucceeded",
                "BackupFailed",
                format!("backup Job {name} failed: {message}"),
            );
        }
        _ => {
            if let Some(last) = &last {
                out.condition(
                    "BackupSucceeded",
                    true,
                    "BackupCompleted",
                    format!("the last backup is {last}"),
                );
            }
        }
    }
}

/// True when `job` names the CronJob `cronjob` among its owners.
fn controlled_by(job: &Value, cronjob: &str) -> bool {
    job.pointer("/metadata/ownerReferences")
        .and_then(Value::as_array)
        .is_some_and(|owners| {
            owners
                .iter()
                .any(|o| o["kind"] == "CronJob" && o["name"] == cronjob)
        })
}
