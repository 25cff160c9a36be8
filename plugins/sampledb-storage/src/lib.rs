//! SampleDB storage: everything the database needs to run and be reached.
//!
//! - the StatefulSet that runs the database, with a volume claim template for its data, the
//!   connection environment (the ConfigMap, and `SAMPLEDB_USER` / `SAMPLEDB_PASSWORD` from the
//!   credentials Secret) and a claim retention policy from `spec.deletionPolicy` (claims go
//!   with the StatefulSet for `Snapshot` — the backup plugin's finalizer snapshots them first —
//!   and `Delete`; they stay for `Retain`; scaling down never deletes a claim);
//! - a headless Service giving each replica a stable DNS name, and the client Service;
//! - the ConfigMap `<name>-config`: `spec.config` plus the connection details `host` and
//!   `port` that Jobs read;
//! - when `spec.credentials` names no Secret, the Secret `<name>-credentials` (`username`,
//!   and a random 32-character `password`), immutable and never rotated: once it exists its
//!   observed data is emitted again;
//! - the one-time init Job `<name>-init`, started once the first replica is ready, unless the
//!   database is restored from a backup (`spec.restoreFrom`); its completion is recorded as
//!   `status.initialized` and it never runs again.
//!
//! Phase: Provisioning until every replica is ready, then Initializing until the init Job has
//! completed, then Ready. Conditions: `StorageReady`, `Initialized`, and `Ready` (true in phase
//! Ready; the host combines it with the other plugins' into the SampleDB's `Ready`).

mod credentials;
mod init;
mod objects;

use std::time::Duration;

use sampledb_api::{KIND_KEY, PORT, SampleDbSpec, names, parse_version};
use serde::Deserialize;
use windlass_sdk::{
    Context, Error, Info, Output, Plugin, Result, Value,
    k8s_openapi::api::{
        apps::v1::StatefulSet,
        batch::v1::Job,
        core::v1::{ConfigMap, Secret, Service},
    },
    kind_key,
};

use init::Init;

/// The storage plugin.
#[derive(Debug)]
pub struct Storage;

/// The plugin's config (from its WasmPlugin).
#[derive(Debug, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
struct Config {
    /// The image repository; the tag is the SampleDB's version.
    #[serde(default = "default_image")]
    image: String,
}

fn default_image() -> String {
    "sampledb".to_string()
}

/// How soon to look again while waiting on replicas or the init Job.
pub const REQUEUE: Duration = Duration::from_secs(10);

#[cfg(feature = "export")]
windlass_sdk::export!(Storage);

impl Plugin for Storage {
    fn info() -> Info {
        Info::new("sampledb-storage", env!("CARGO_PKG_VERSION"))
            .parent(KIND_KEY)
            .child::<Service>()
            .child::<StatefulSet>()
            .child::<ConfigMap>()
            .child::<Secret>()
            .child::<Job>()
    }

    fn reconcile(ctx: &Context) -> Result<Output> {
        let spec: SampleDbSpec = ctx.spec()?;
        let config: Config = ctx.config()?;
        validate(&spec)?;
        let name = ctx.name();
        let namespace = ctx.namespace().unwrap_or("default");
        let mut out = ctx.output();
        out.apply(&objects::headless_service(name))?;
        out.apply(&objects::client_service(name))?;
        out.apply(&objects::config_map(name, namespace, &spec))?;
        if spec.credentials.is_none() {
            out.apply(&credentials::generated_secret(ctx, name)?)?;
        }
        out.apply(&objects::statefulset(name, &spec, &config))?;
        // The one field, read where it is. Typing the whole observed StatefulSet cost 0.17 M
        // instructions a steady-state reconcile (of the guest's 2.25 M), and linked
        // k8s-openapi's PodSpec deserialisers, which built for speed (Cargo.toml) take the host
        // seconds and hundreds of MiB to compile.
        let ready = ctx
            .find_observed(&kind_key::<StatefulSet>(), &names::statefulset(name))
            .and_then(|s| s.pointer("/status/readyReplicas"))
            .and_then(Value::as_i64)
            .and_then(|n| i32::try_from(n).ok())
            .unwrap_or(0);
        let init = init::reconcile(ctx, &spec, &objects::image(&spec, &config), ready, &mut out)?;
        report(ctx, &spec, ready, &init, &mut out);
        Ok(out)
    }
}

fn validate(spec: &SampleDbSpec) -> Result<()> {
    if spec.replicas < 1 {
        return Err(Error::InvalidParent(format!(
            "spec.replicas: must be at least 1, got {}",
            spec.replicas
        )));
    }
    if parse_version(&spec.version).is_none() {
        return Err(Error::InvalidParent(format!(
            "spec.version: {:?} is not a version like 16.4",
            spec.version
        )));
    }
    if !is_quantity(&spec.storage.size) {
        return Err(Error::InvalidParent(format!(
            "spec.storage.size: {:?} is not a quantity like 10Gi",
            spec.storage.size
        )));
    }
    for key in spec.config.keys() {
        if objects::CONNECTION_KEYS.contains(&key.as_str()) {
            return Err(Error::InvalidParent(format!(
                "spec.config.{key}: reserved for the connection details the operator writes"
            )));
        }
        if !is_config_key(key) {
            return Err(Error::InvalidParent(format!(
                "spec.config: {key:?} is not a valid ConfigMap key (letters, digits, '-', '_', '.')"
            )));
        }
    }
    Ok(())
}

/// A Kubernetes quantity: a decimal number and an optional suffix.
fn is_quantity(q: &str) -> bool {
    let digits = q
        .find(|c: char| !(c.is_ascii_digit() || c == '.'))
        .unwrap_or(q.len());
    let (number, suffix) = q.split_at(digits);
    !number.is_empty()
        && number.parse::<f64>().is_ok()
        && [
            "", "Ki", "Mi", "Gi", "Ti", "Pi", "Ei", "k", "M", "G", "T", "P", "E",
        ]
        .contains(&suffix)
}

/// A ConfigMap data key: 1–253 of `[-._a-zA-Z0-9]`.
fn is_config_key(key: &str) -> bool {
    (1..=253).contains(&key.len())
        && key
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.'))
}

/// Phase, readiness and endpoints.
fn report(ctx: &Context, spec: &SampleDbSpec, ready: i32, init: &Init, out: &mut Output) {
    let name = ctx.name();
    let ns = ctx.namespace().unwrap_or("default");
    out.status("readyReplicas", ready);
    out.status(
        "endpoints",
        windlass_sdk::json!({
            "readWrite": format!("{}.{ns}.svc:{PORT}", names::client_service(name)),
            "replicas": format!("{}.{ns}.svc:{PORT}", names::headless_service(name)),
        }),
    );
    let replicas_ready = ready >= spec.replicas;
    out.condition(
        "StorageReady",
        replicas_ready,
        if replicas_ready {
            "ReplicasReady"
        } else {
            "WaitingForReplicas"
        },
        format!("{ready}/{} replicas ready", spec.replicas),
    );
    let phase = if !replicas_ready {
        "Provisioning"
    } else if !init.settled() {
        "Initializing"
    } else {
        "Ready"
    };
    out.status("phase", phase);
    // Ready as far as storage knows: the host combines it with the other plugins' (a restore or
    // an upgrade under way holds it too) into the SampleDB's one `Ready` condition.
    let (serving, reason, why) = match init {
        _ if !replicas_ready => (
            false,
            "WaitingForReplicas",
            format!("{ready}/{} replicas ready", spec.replicas),
        ),
        Init::Failed(_) => (
            false,
            "InitJobFailed",
            format!("the init Job {} failed", names::init_job(name)),
        ),
        _ if !init.settled() => (
            false,
            "Initializing",
            format!("waiting for the init Job {}", names::init_job(name)),
        ),
        _ => (
            true,
            "Serving",
            format!("{ready}/{} replicas ready, data initialized", spec.replicas),
        ),
    };
    out.condition("Ready", serving, reason, why);
    if phase != "Ready" {
        out.requeue_after(REQUEUE);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn quantities_and_config_keys_are_checked() {
        assert!(
            is_quantity("10Gi")
                && is_quantity("500M")
                && is_quantity("1.5Gi")
                && is_quantity("1024")
        );
        assert!(!is_quantity("Gi") && !is_quantity("10 Gi") && !is_quantity("10GB"));
        assert!(is_config_key("shared_buffers") && is_config_key("a.b-c"));
        assert!(!is_config_key("") && !is_config_key("a/b") && !is_config_key("a b"));
    }
}
