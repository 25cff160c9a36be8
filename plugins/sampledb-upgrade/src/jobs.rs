//! The pre-upgrade backup Job and the upgrade (migration) Job, and how observed Jobs stand.

use sampledb_api::{SampleDbSpec, names, pod, selector_labels};
use windlass_sdk::{
    Context,
    k8s_openapi::{
        api::{
            batch::v1::{Job, JobSpec},
            core::v1::{Container, PodSpec, PodTemplateSpec},
        },
        apimachinery::pkg::apis::meta::v1::ObjectMeta,
    },
};

/// Where an observed Job stands.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum JobState {
    /// Not observed (not created yet).
    Absent,
    /// Created, not finished.
    Running,
    /// Condition Complete=True.
    Complete,
    /// Condition Failed=True, with its message (or reason).
    Failed(String),
}

/// The state of the observed Job called `name`.
pub(crate) fn state(ctx: &Context, name: &str) -> JobState {
    use windlass_sdk::jobs::{self, JobState as Observed};
    match ctx.find_observed("batch/v1/Job", name).map(jobs::job_state) {
        None => JobState::Absent,
        Some(Observed::Running) => JobState::Running,
        Some(Observed::Complete { .. }) => JobState::Complete,
        Some(Observed::Failed { message, .. }) => JobState::Failed(message),
    }
}

/// The backup taken with the running version before upgrading to `target`.
pub(crate) fn pre_upgrade_backup(
    name: &str,
    spec: &SampleDbSpec,
    target: &str,
    image: &str,
    claim: &str,
) -> Job {
    let job_name = names::pre_upgrade_backup_job(name, target);
    let out = names::backup_file(&job_name);
    let command = ["sampledb-backup", "--out", out.as_str()];
    // Retrying a backup is harmless.
    job(name, job_name, spec, image, &command, claim, 3)
}

/// The migration of the data from `current` to `target`, run with the new version's image.
pub(crate) fn upgrade(
    name: &str,
    spec: &SampleDbSpec,
    current: &str,
    target: &str,
    image: &str,
    claim: &str,
) -> Job {
    let command = ["sampledb-upgrade", "--from", current, "--to", target];
    // A half-done migration needs a human, not a retry.
    let job_name = names::upgrade_job(name, target);
    job(name, job_name, spec, image, &command, claim, 0)
}

fn job(
    name: &str,
    job_name: String,
    spec: &SampleDbSpec,
    image: &str,
    command: &[&str],
    claim: &str,
    backoff_limit: i32,
) -> Job {
    let mut labels = selector_labels(name);
    labels.insert("app.kubernetes.io/component".into(), "upgrade".into());
    let (env_from, env) = pod::connection_env(name, spec);
    let (volume, mount) = pod::backup_volume(claim, false);
    Job {
        metadata: ObjectMeta {
            name: Some(job_name),
            labels: Some(labels),
            ..ObjectMeta::default()
        },
        spec: Some(JobSpec {
            backoff_limit: Some(backoff_limit),
            // No Pod labels: the Services select the database Pods by the SampleDB's labels.
            template: PodTemplateSpec {
                metadata: None,
                spec: Some(pod::restricted(PodSpec {
                    restart_policy: Some("Never".into()),
                    containers: vec![Container {
                        name: command[0].into(),
                        image: Some(image.into()),
                        command: Some(command.iter().map(|c| (*c).to_string()).collect()),
                        env_from: Some(env_from),
                        env: Some(env),
                        volume_mounts: Some(vec![mount]),
                        ..Container::default()
                    }],
                    volumes: Some(vec![volume]),
                    ..PodSpec::default()
                })),
            },
            ..JobSpec::default()
        }),
        ..Job::default()
    }
}
