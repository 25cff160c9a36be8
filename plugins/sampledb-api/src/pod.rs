//! Pieces of Pod specs every SampleDB plugin that runs database work builds the same way.

use k8s_openapi::api::core::v1::{
    Capabilities, ConfigMapEnvSource, Container, EnvFromSource, EnvVar, EnvVarSource,
    PersistentVolumeClaimVolumeSource, PodSecurityContext, PodSpec, SeccompProfile,
    SecretKeySelector, SecurityContext, Volume, VolumeMount,
};

use crate::{BACKUP_MOUNT, SampleDbSpec, names};

/// The volume name of the backup volume in Job Pods.
pub const BACKUP_VOLUME: &str = "backups";

/// The uid and gid the database image runs as (its `sampledb` user), also the group that owns
/// the data and backup volumes.
pub const DATABASE_USER: i64 = 999;

/// `spec` made to pass the Pod Security Standard `restricted` and the host's own pod rules:
/// no service account token, the Pod runs as [`DATABASE_USER`] (never root) with the runtime's
/// default seccomp profile, and every container and init container runs without privilege
/// escalation and with all capabilities dropped.
///
/// # Why
///
/// The host refuses a pod spec that falls short (by default), so every SampleDB plugin that
/// builds a Pod template passes it through here rather than repeating the fields. None of the
/// Pods talks to the Kubernetes API, so they need no token. `fsGroup` makes the volumes
/// writable by the non-root user.
///
/// # Assumptions
///
/// The volumes are the ones `restricted` allows (the plugins use `persistentVolumeClaim`
/// only); this function does not check them.
pub fn restricted(mut spec: PodSpec) -> PodSpec {
    spec.automount_service_account_token = Some(false);
    spec.security_context = Some(PodSecurityContext {
        run_as_non_root: Some(true),
        run_as_user: Some(DATABASE_USER),
        run_as_group: Some(DATABASE_USER),
        fs_group: Some(DATABASE_USER),
        seccomp_profile: Some(SeccompProfile {
            type_: "RuntimeDefault".into(),
            ..SeccompProfile::default()
        }),
        ..PodSecurityContext::default()
    });
    let containers = spec.init_containers.iter_mut().flatten();
    for container in spec.containers.iter_mut().chain(containers) {
        restrict(container);
    }
    spec
}

/// Checks that a pod spec, as JSON, has what [`restricted`] gives it: no service account token,
/// non-root as [`DATABASE_USER`] with the default seccomp profile, every container and init
/// container without privilege escalation and with all capabilities dropped, and only
/// `persistentVolumeClaim` volumes. For the plugins' tests: the host enforces the standard
/// itself; this says a plugin did not forget to call [`restricted`].
///
/// # Errors
/// The first field that falls short, with its value.
pub fn check_restricted(pod: &serde_json::Value) -> Result<(), String> {
    use serde_json::{Value, json};
    let want = |path: &str, value: Value| {
        let got = pod.pointer(path).cloned().unwrap_or(Value::Null);
        if got == value {
            Ok(())
        } else {
            Err(format!("{path} is {got}, not {value}"))
        }
    };
    want("/automountServiceAccountToken", json!(false))?;
    want("/securityContext/runAsNonRoot", json!(true))?;
    want("/securityContext/runAsUser", json!(DATABASE_USER))?;
    want(
        "/securityContext/seccompProfile/type",
        json!("RuntimeDefault"),
    )?;
    let list = |key: &str| pod[key].as_array().cloned().unwrap_or_default();
    let containers = list("containers");
    if containers.is_empty() {
        return Err("the pod has no containers".into());
    }
    for c in containers.iter().chain(&list("initContainers")) {
        let security = &c["securityContext"];
        if security["allowPrivilegeEscalation"] != json!(false)
            || security["capabilities"]["drop"] != json!(["ALL"])
        {
            return Err(format!(
                "container {} has securityContext {security}",
                c["name"]
            ));
        }
    }
    for volume in list("volumes") {
        let allowed = volume.as_object().is_some_and(|v| {
            v.keys()
                .all(|k| k == "name" || k == "persistentVolumeClaim")
        });
        if !allowed {
            return Err(format!("volume {volume} is not a persistentVolumeClaim"));
        }
    }
    Ok(())
}

/// A container's part of [`restricted`].
fn restrict(container: &mut Container) {
    container.security_context = Some(SecurityContext {
        allow_privilege_escalation: Some(false),
        capabilities: Some(Capabilities {
            drop: Some(vec!["ALL".into()]),
            ..Capabilities::default()
        }),
        ..SecurityContext::default()
    });
}

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

#[cfg(test)]
#[allow(clippy::unwrap_used)] // Tests: a panic is the failure report.
mod tests {
    use super::*;

    #[test]
    fn a_restricted_pod_runs_as_the_database_user_and_every_container_drops_all() {
        let container = |name: &str| Container {
            name: name.into(),
            ..Container::default()
        };
        let spec = restricted(PodSpec {
            containers: vec![container("db"), container("exporter")],
            init_containers: Some(vec![container("setup")]),
            ..PodSpec::default()
        });
        let json = serde_json::to_value(&spec).unwrap();
        assert_eq!(json["automountServiceAccountToken"], false);
        assert_eq!(
            json["securityContext"],
            serde_json::json!({
                "runAsNonRoot": true, "runAsUser": 999, "runAsGroup": 999, "fsGroup": 999,
                "seccompProfile": {"type": "RuntimeDefault"},
            })
        );
        let containers = json["containers"].as_array().into_iter().flatten();
        let init = json["initContainers"].as_array().into_iter().flatten();
        let all: Vec<_> = containers.chain(init).collect();
        assert_eq!(all.len(), 3);
        for c in all {
            assert_eq!(
                c["securityContext"],
                serde_json::json!({"allowPrivilegeEscalation": false, "capabilities": {"drop": ["ALL"]}}),
                "{}",
                c["name"]
            );
        }
    }

    #[test]
    fn check_restricted_accepts_restricted_and_names_what_falls_short() {
        let container = |name: &str| Container {
            name: name.into(),
            ..Container::default()
        };
        let spec = PodSpec {
            containers: vec![container("db")],
            init_containers: Some(vec![container("setup")]),
            ..PodSpec::default()
        };
        let good = serde_json::to_value(restricted(spec.clone())).unwrap();
        assert_eq!(check_restricted(&good), Ok(()));
        let bare = serde_json::to_value(&spec).unwrap();
        assert_eq!(
            check_restricted(&bare),
            Err("/automountServiceAccountToken is null, not false".into())
        );
        let mut init = good.clone();
        init["initContainers"][0]["securityContext"]["allowPrivilegeEscalation"] = true.into();
        assert!(
            check_restricted(&init)
                .unwrap_err()
                .starts_with("container \"setup\"")
        );
        let mut host = good;
        host["volumes"] = serde_json::json!([{"name": "h", "hostPath": {"path": "/"}}]);
        assert!(check_restricted(&host).unwrap_err().contains("hostPath"));
    }
}
