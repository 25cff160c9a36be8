//! Restore on create: load `spec.restoreFrom` into a new database, once.

use sampledb_api::{SampleDbSpec, names};
use windlass_sdk::{
    Context, Output, Result, Value,
    k8s_openapi::api::{apps::v1::StatefulSet, batch::v1::Job},
};

use crate::{
    Config,
    jobs::{self, JobState},
    report_failure,
};

/// How long to wait before looking again while a restore is pending or running.
const REQUEUE: std::time::Duration = std::time::Duration::from_secs(10);

/// Runs the restore Job when `spec.restoreFrom` asks for one that has not happened yet, and
/// reports it (phase `Restoring`, condition `Restored`, and `Ready` false while it has not
/// happened). Returns true while the database is being restored (or a restore failed): it must
/// not be reported ready nor backed up then.
///
/// A restore runs once, on create:
/// - once the Job completed, `status.restoredFrom` records it; the Job is kept until that status
///   is seen on the parent (so that a lost status write cannot start a second restore over a
///   database already in use), then left to the host to prune;
/// - a database restored from another backup, or one that already served (phase Ready or
///   Upgrading, no restore Job) is never overwritten by a changed or added `restoreFrom`.
pub(crate) fn reconcile(
    ctx: &Context,
    spec: &SampleDbSpec,
    config: &Config,
    out: &mut Output,
) -> Result<bool> {
    let Some(from) = spec.restore_from.as_deref() else {
        return Ok(false);
    };
    let name = ctx.name();
    let job_name = names::restore_job(name);
    let text = |p: &str| ctx.status(p).and_then(Value::as_str);
    let restored = text("/restoredFrom");
    if restored == Some(from) {
        out.condition(
            "Restored",
            true,
            "Restored",
            format!("restored from backup {from}"),
        );
        return Ok(false);
    }
    let observed = jobs::observed_job(ctx, &job_name);
    let refuse = |reason: &str, why: String, out: &mut Output| {
        let message = format!(
            "{why}; spec.restoreFrom only applies when the database is created, so backup {from} is not restored (restore it into a new SampleDB)"
        );
        // The spec asks for what will not happen: not ready until it stops asking.
        out.condition("Ready", false, reason, message.clone());
        report_failure(ctx, out, "Restored", reason, message);
    };
    if let Some(earlier) = restored {
        refuse(
            "RestoreSourceChanged",
            format!("the database was restored from backup {earlier}"),
            out,
        );
        return Ok(false);
    }
    if observed.is_none() && matches!(text("/phase"), Some("Ready" | "Upgrading")) {
        refuse(
            "AlreadyInUse",
            "the database already serves data".to_string(),
            out,
        );
        return Ok(false);
    }

    let job = Job {
        metadata: jobs::meta(job_name.clone(), name, "restore"),
        spec: Some(jobs::job_spec(
            ctx,
            spec,
            config,
            "restore",
            vec![
                "sampledb-restore".into(),
                "--from".into(),
                names::backup_file(from),
            ],
            false,
        )),
        ..Job::default()
    };
    match observed.map(jobs::job_state) {
        Some(JobState::Complete { .. }) => {
            out.apply(&job)?;
            out.status("restoredFrom", from);
            out.condition(
                "Restored",
                true,
                "Restored",
                format!("restored from backup {from}"),
            );
            out.event("Restored", format!("restored from backup {from}"));
            Ok(false)
        }
        Some(JobState::Failed { message, .. }) => {
            // Keep the failed Job (and its Pod's logs) for the user; never report ready.
            out.apply(&job)?;
            out.status("phase", "Restoring");
            let message = format!(
                "restore Job {job_name} from backup {from} failed: {message}; is backup {from} on the backup volume, and complete? Delete the Job to try again"
            );
            out.condition("Ready", false, "RestoreFailed", message.clone());
            report_failure(ctx, out, "Restored", "RestoreFailed", message);
            Ok(true)
        }
        Some(JobState::Running) => {
            out.apply(&job)?;
            out.status("phase", "Restoring");
            let message = format!("restoring from backup {from} (Job {job_name})");
            out.condition("Ready", false, "Restoring", message.clone());
            out.condition("Restored", false, "Restoring", message);
            out.requeue_after(REQUEUE);
            Ok(true)
        }
        None => {
            out.status("phase", "Restoring");
            let ready = ctx
                .observed_named::<StatefulSet>(&names::statefulset(name))
                .and_then(|s| s.status)
                .and_then(|s| s.ready_replicas)
                .unwrap_or(0);
            let (reason, message) = if ready >= 1 {
                out.apply(&job)?;
                (
                    "Restoring",
                    format!("restoring from backup {from} (Job {job_name})"),
                )
            } else {
                (
                    "WaitingForDatabase",
                    format!("waiting for a ready replica to restore backup {from} into"),
                )
            };
            out.condition("Ready", false, reason, message.clone());
            out.condition("Restored", false, reason, message);
            out.requeue_after(REQUEUE);
            Ok(true)
        }
    }
}
