//! What backup, restore and final dump Jobs share: the Pod that talks to the database, the
//! image it runs, and reading a Job's outcome.

use std::collections::BTreeMap;

use sampledb_api::{BACKUP_MOUNT, CONTAINER, SampleDbSpec, image_with_tag, names};
use windlass_sdk::{
    Context, Value,
    k8s_openapi::{
        api::{
            batch::v1::JobSpec,
            core::v1::{
                ConfigMapEnvSource, Container, EnvFromSource, EnvVar, EnvVarSource,
                ObjectFieldSelector, PersistentVolumeClaimVolumeSource, PodSpec, PodTemplateSpec,
                SecretKeySelector, Volume, VolumeMount,
            },
        },
        apimachinery::pkg::apis::meta::v1::{ObjectMeta, Time},
    },
};

use crate::Config;

/// The volume (in the Job's Pod) holding the backup claim.
const BACKUP_VOLUME: &str = "backups";

/// Labels of the Jobs and their Pods. Deliberately not the database's selector labels
/// (`app.kubernetes.io/name: sampledb`): the Services must not send clients to a backup Pod.
pub(crate) fn labels(name: &str, component: &str) -> BTreeMap<String, String> {
    BTreeMap::from([
        (
            "app.kubernetes.io/name".to_string(),
            "sampledb-backup".to_string(),
        ),
        ("app.kubernetes.io/instance".to_string(), name.to_string()),
        (
            "app.kubernetes.io/component".to_string(),
            component.to_string(),
        ),
    ])
}

/// Object metadata with a name and the Job labels.
pub(crate) fn meta(object: String, name: &str, component: &str) -> ObjectMeta {
    ObjectMeta {
        name: Some(object),
        labels: Some(labels(name, component)),
        ..ObjectMeta::default()
    }
}

/// The database image: the StatefulSet's as observed (the version that runs: during an upgrade
/// the storage plugin already wants the new image, and the upgrade plugin, later in the
/// pipeline, holds it back), else as an earlier plugin wants it (a new database), else config
/// `image` tagged with `spec.version`.
pub(crate) fn image(ctx: &Context, spec: &SampleDbSpec, config: &Config) -> String {
    let sts = names::statefulset(ctx.name());
    let from = |o: &Value| -> Option<String> {
        if o.pointer("/metadata/name").and_then(Value::as_str) != Some(sts.as_str()) {
            return None;
        }
        o.pointer("/spec/template/spec/containers")?
            .as_array()?
            .iter()
            .find(|c| c["name"] == CONTAINER)?["image"]
            .as_str()
            .map(str::to_string)
    };
    let is_sts = |o: &&Value| o["apiVersion"] == "apps/v1" && o["kind"] == "StatefulSet";
    ctx.observed_all()
        .iter()
        .filter(is_sts)
        .find_map(from)
        .or_else(|| ctx.desired().iter().filter(is_sts).find_map(from))
        .unwrap_or_else(|| image_with_tag(&config.image, &spec.version))
}

/// A Job's spec running `command` in the database image, connected to the database through
/// the config ConfigMap and the credentials Secret, with the backup volume mounted at
/// [`BACKUP_MOUNT`]. `writes` mounts it writable and sets `BACKUP_NAME` to the Job's name (the
/// dump is `<BACKUP_MOUNT>/<BACKUP_NAME>.dump`: the name `restoreFrom` takes).
pub(crate) fn job_spec(
    ctx: &Context,
    spec: &SampleDbSpec,
    config: &Config,
    component: &str,
    command: Vec<String>,
    writes: bool,
) -> JobSpec {
    let name = ctx.name();
    let secret = names::credentials_secret(name, spec);
    let secret_env = |var: &str, key: &str| EnvVar {
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
    let mut env = vec![
        secret_env("SAMPLEDB_USER", "username"),
        secret_env("SAMPLEDB_PASSWORD", "password"),
    ];
    if writes {
        env.push(EnvVar {
            name: "BACKUP_NAME".into(),
            value_from: Some(EnvVarSource {
                field_ref: Some(ObjectFieldSelector {
                    field_path: "metadata.labels['batch.kubernetes.io/job-name']".into(),
                    ..ObjectFieldSelector::default()
                }),
                ..EnvVarSource::default()
            }),
            ..EnvVar::default()
        });
    }
    let container = Container {
        name: component.into(),
        image: Some(image(ctx, spec, config)),
        command: Some(command),
        env_from: Some(vec![EnvFromSource {
            config_map_ref: Some(ConfigMapEnvSource {
                name: names::config_map(name),
                ..ConfigMapEnvSource::default()
            }),
            ..EnvFromSource::default()
        }]),
        env: Some(env),
        volume_mounts: Some(vec![VolumeMount {
            name: BACKUP_VOLUME.into(),
            mount_path: BACKUP_MOUNT.into(),
            read_only: (!writes).then_some(true),
            ..VolumeMount::default()
        }]),
        ..Container::default()
    };
    JobSpec {
        backoff_limit: Some(2),
        template: PodTemplateSpec {
            metadata: Some(ObjectMeta {
                labels: Some(labels(name, component)),
                ..ObjectMeta::default()
            }),
            spec: Some(PodSpec {
                restart_policy: Some("Never".into()),
                containers: vec![container],
                volumes: Some(vec![Volume {
                    name: BACKUP_VOLUME.into(),
                    persistent_volume_claim: Some(PersistentVolumeClaimVolumeSource {
                        claim_name: config.backup_claim.clone(),
                        ..PersistentVolumeClaimVolumeSource::default()
                    }),
                    ..Volume::default()
                }]),
                ..PodSpec::default()
            }),
        },
        ..JobSpec::default()
    }
}

pub(crate) use windlass_sdk::jobs::{JobState, job_state};

/// An RFC 3339 time, comparable; `None` when it does not parse.
pub(crate) fn parse_time(text: &str) -> Option<Time> {
    serde_json::from_value(Value::String(text.to_string())).ok()
}

/// The observed Job of this name.
pub(crate) fn observed_job<'a>(ctx: &'a Context, job: &str) -> Option<&'a Value> {
    ctx.observed_object("batch/v1/Job", job)
}
