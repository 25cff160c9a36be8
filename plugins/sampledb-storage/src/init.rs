//! The one-time init Job: it runs once the primary is up and never again.
//!
//! The Job stays desired until the parent's status records `initialized: true`: pruning it in
//! the same run that sees it complete would let a lagging read of the parent (status not yet
//! written) recreate it, and a second init would wipe a live database.

use sampledb_api::{SampleDbSpec, names, pod, selector_labels};
use windlass_sdk::{
    Context, Output, Result, Value,
    jobs::{JobState, job_state},
    k8s_openapi::api::{
        batch::v1::{Job, JobSpec},
        core::v1::{Container, PodSpec, PodTemplateSpec},
    },
};

use crate::objects::{connection_env, meta};

/// Where the init Job stands.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Init {
    /// The database is restored from a backup: no init Job.
    Restored(String),
    /// The parent's status records a completed init.
    Done,
    /// The Job completed in this run's observation (status now records it).
    Completed,
    /// Waiting for the primary to be ready before starting the Job.
    WaitingForPrimary,
    /// The Job is created or running.
    Running,
    /// The Job failed; it is kept (not retried) for someone to look at.
    Failed(String),
}

impl Init {
    /// True once the database holds its initial data (or gets it from a restore).
    pub(crate) fn settled(&self) -> bool {
        matches!(self, Init::Restored(_) | Init::Done | Init::Completed)
    }
}

/// Decides about the init Job, adds it to `out` when it must exist, and reports the
/// `Initialized` condition.
pub(crate) fn reconcile(
    ctx: &Context,
    spec: &SampleDbSpec,
    image: &str,
    ready: i32,
    out: &mut Output,
) -> Result<Init> {
    let name = ctx.name();
    let job_name = names::init_job(name);
    let init = if let Some(backup) = &spec.restore_from {
        Init::Restored(backup.clone())
    } else if ctx.status("/initialized").and_then(Value::as_bool) == Some(true) {
        Init::Done
    } else {
        let observed = ctx.find_observed("batch/v1/Job", &job_name);
        let state = match observed {
            Some(job) => match job_state(job) {
                JobState::Complete { .. } => Init::Completed,
                JobState::Failed { message, .. } => Init::Failed(message),
                JobState::Running => Init::Running,
            },
            None if ready >= 1 => Init::Running,
            None => Init::WaitingForPrimary,
        };
        if state != Init::WaitingForPrimary {
            // An existing Job keeps its image: a Job's template cannot change.
            let image = observed
                .and_then(|j| j.pointer("/spec/template/spec/containers/0/image"))
                .and_then(Value::as_str)
                .unwrap_or(image);
            out.apply(&job(name, spec, image))?;
        }
        state
    };
    match &init {
        Init::Restored(backup) => out.condition(
            "Initialized",
            true,
            "RestoredFromBackup",
            format!("the data comes from backup {backup}; no init Job runs"),
        ),
        Init::Done | Init::Completed => out.condition(
            "Initialized",
            true,
            "InitJobComplete",
            format!("init Job {job_name} completed"),
        ),
        Init::WaitingForPrimary => out.condition(
            "Initialized",
            false,
            "WaitingForPrimary",
            "the init Job starts once the first replica is ready",
        ),
        Init::Running => out.condition(
            "Initialized",
            false,
            "InitJobRunning",
            format!("init Job {job_name} is running"),
        ),
        Init::Failed(why) => {
            let message = format!(
                "init Job {job_name} failed ({why}); it is kept for inspection and not retried: \
                 delete it to run it again"
            );
            out.condition("Initialized", false, "InitJobFailed", message.clone());
            out.warning("InitJobFailed", message);
        }
    }
    if matches!(init, Init::Done | Init::Completed) {
        out.status("initialized", true);
    }
    Ok(init)
}

fn job(name: &str, spec: &SampleDbSpec, image: &str) -> Job {
    let mut labels = selector_labels(name);
    labels.insert("app.kubernetes.io/component".into(), "init".into());
    let (env_from, env) = connection_env(name, spec);
    Job {
        metadata: meta(names::init_job(name), &labels),
        spec: Some(JobSpec {
            backoff_limit: Some(3),
            // No Pod labels: the Services select the database Pods by the SampleDB's labels.
            template: PodTemplateSpec {
                metadata: None,
                spec: Some(pod::restricted(PodSpec {
                    restart_policy: Some("Never".into()),
                    containers: vec![Container {
                        name: "init".into(),
                        image: Some(image.into()),
                        command: Some(vec!["sampledb-init".into()]),
                        env_from: Some(env_from),
                        env: Some(env),
                        ..Container::default()
                    }],
                    ..PodSpec::default()
                })),
            },
            ..JobSpec::default()
        }),
        ..Job::default()
    }
}
