//! Pieces of Pod specs every SampleDB plugin that runs database work builds the same way.

use k8s_openapi::api::core::v1::{
    ConfigMapEnvSource, EnvFromSource, EnvVar, EnvVarSource, PersistentVolumeClaimVolumeSource,
    SecretKeySelector, Volume, VolumeMount,
};

use crate::{BACKUP_MOUNT, SampleDbSpec, names};

/// The volume name of the backup volume in Job Pods.
pub const BACKUP_VOLUME: &str = "backups";

/// What every container talking to the database gets: the config ConfigMap (settings and the
/// connection details `host`, `port`) as environment, and `SAMPLEDB_USER` / `SAMPLEDB_PASSWORD`
/// from the credentials Secret.
pub fn connection_env(name: &str, spec: &SampleDbSpec) -> (Vec<EnvFromSource>, Vec<EnvVar>) {
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
    (
        vec![EnvFromSource {
            config_map_ref: Some(ConfigMapEnvSource {
                name: names::config_map(name),
                ..ConfigMapEnvSource::default()
            }),
            ..EnvFromSource::default()
        }],
        vec![
            from_secret("SAMPLEDB_USER", "username"),
            from_secret("SAMPLEDB_PASSWORD", "password"),
        ],
    )
}

/// The backup volume (the claim `claim`) and its mount at [`BACKUP_MOUNT`], read-only for Jobs
/// that only read dumps.
pub fn backup_volume(claim: &str, read_only: bool) -> (Volume, VolumeMount) {
    (
        Volume {
            name: BACKUP_VOLUME.into(),
            persistent_volume_claim: Some(PersistentVolumeClaimVolumeSource {
                claim_name: claim.into(),
                ..PersistentVolumeClaimVolumeSource::default()
            }),
            ..Volume::default()
        },
        VolumeMount {
            name: BACKUP_VOLUME.into(),
            mount_path: BACKUP_MOUNT.into(),
            read_only: read_only.then_some(true),
            ..VolumeMount::default()
        },
    )
}
