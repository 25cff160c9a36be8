//! The pre-upgrade backup Job and the upgrade (migration) Job, and how observed Jobs stand.

use sampledb_api::{BACKUP_MOUNT, SampleDbSpec, names, selector_labels};
use windlass_sdk::{
    Context,
    k8s_openapi::{
        api::{
            batch::v1::{Job, JobSpec},
            core::v1::{
                ConfigMapEnvSource, Container, EnvFromSource, EnvVar, EnvVarSource,
                PersistentVolumeClaimVolumeSource, PodSpec, PodTemplateSpec, SecretKeySelector,
                Volume, VolumeMount,
            },
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
    match ctx
        .observed_object("batch/v1/Job", name)
        .map(jobs::job_state)
    {
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
    let secret = names::credentials_secret(name, spec);
    let from_secret = |var: &str, key: &str| EnvVar {
        name: var.into(),
        value_from: Some(EnvVarSource {
            secret_key_ref: Some(SecretKeySelector {
                name: secret.clone(),
                key: key.into(),
                ..SecretKeySelector::default()
            }),
            ..EnvVarSource::default()
        }),
        ..EnvVar::default()
    };
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
                spec: Some(PodSpec {
                    restart_policy: Some("Never".into()),
                    containers: vec![Container {
                        name: command[0].into(),
                        image: Some(image.into()),
                        command: Some(command.iter().map(|c| (*c).to_string()).collect()),
                        env_from: Some(vec![EnvFromSource {
                            config_map_ref: Some(ConfigMapEnvSource {
                                name: names::config_map(name),
                                ..ConfigMapEnvSource::default()
                            }),
                            ..EnvFromSource::default()
                        }]),
                        env: Some(vec![
                            from_secret("SAMPLEDB_USER", "username"),
                            from_secret("SAMPLEDB_PASSWORD", "password"),
                        ]),
                        volume_mounts: Some(vec![VolumeMount {
                            name: "backups".into(),
                            mount_path: BACKUP_MOUNT.into(),
                            ..VolumeMount::default()
                        }]),
                        ..Container::default()
                    }],
                    volumes: Some(vec![Volume {
                        name: "backups".into(),
                        persistent_volume_claim: Some(PersistentVolumeClaimVolumeSource {
                            claim_name: claim.into(),
                            ..PersistentVolumeClaimVolumeSource::default()
                        }),
                        ..Volume::default()
                    }]),
                    ..PodSpec::default()
                }),
            },
            ..JobSpec::default()
        }),
        ..Job::default()
    }
}
