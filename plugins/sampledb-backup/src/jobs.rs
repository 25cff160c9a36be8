//! What backup, restore and final dump Jobs share: the Pod that talks to the database, the
//! image it runs, and reading a Job's outcome.

use std::collections::BTreeMap;

use sampledb_api::{CONTAINER, SampleDbSpec, image_with_tag, names, pod};
use windlass_sdk::{
    Context, Value,
    k8s_openapi::{
        api::{
            batch::v1::JobSpec,
            core::v1::{
                Container, EnvVar, EnvVarSource, ObjectFieldSelector, PodSpec, PodTemplateSpec,
            },
        },
        apimachinery::pkg::apis::meta::v1::{ObjectMeta, Time},
    },
};

use crate::Config;

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
/// [`BACKUP_MOUNT`], in a Pod that passes the Pod Security Standard `restricted`
/// ([`pod::restricted`]). `writes` mounts it writable and sets `BACKUP_NAME` to the Job's name
/// (the dump is `<BACKUP_MOUNT>/<BACKUP_NAME>.dump`: the name `restoreFrom` takes).
pub(crate) fn job_spec(
    ctx: &Context,
    spec: &SampleDbSpec,
    config: &Config,
    component: &str,
    command: Vec<String>,
    writes: bool,
) -> JobSpec {
    let name = ctx.name();
    let (env_from, mut env) = pod::connection_env(name, spec);
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
    let (volume, mount) = pod::backup_volume(&config.backup_claim, !writes);
    let container = Container {
        name: component.into(),
        image: Some(image(ctx, spec, config)),
        command: Some(command),
        env_from: Some(env_from),
        env: Some(env),
        volume_mounts: Some(vec![mount]),
        ..Container::default()
    };
    JobSpec {
        backoff_limit: Some(2),
        template: PodTemplateSpec {
            metadata: Some(ObjectMeta {
                labels: Some(labels(name, component)),
                ..ObjectMeta::default()
            }),
            spec: Some(pod::restricted(PodSpec {
                restart_policy: Some("Never".into()),
                containers: vec![container],
                volumes: Some(vec![volume]),
                ..PodSpec::default()
            })),
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
    ctx.find_observed("batch/v1/Job", job)
}
