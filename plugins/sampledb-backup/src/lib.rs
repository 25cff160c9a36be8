//! SampleDB backup: scheduled backups, restore on create, and a final copy of the data before a
//! SampleDB goes.
//!
//! - **Scheduled backups** ([`schedule`]): with `spec.backup`, a CronJob whose Jobs dump the
//!   database onto a namespace-wide backup volume (a PVC the user provides, config
//!   `backupClaim`). `status.lastBackup` names the newest completed backup: the name
//!   `spec.restoreFrom` takes.
//! - **Restore on create** ([`restore`]): with `spec.restoreFrom`, once the first replica is
//!   ready a restore Job loads that dump; the SampleDB reports phase `Restoring` until it has.
//!   A restore runs once: `status.restoredFrom` records it, and a database that has already
//!   served (phase Ready) is never overwritten by a `restoreFrom` added later.
//! - **Finalize** ([`finalize`]): with `deletionPolicy: Snapshot` (the default), a
//!   VolumeSnapshot of every data PVC (or, with config `finalBackup: dumpJob`, a final dump
//!   Job) must be ready before the SampleDB may go; a failed one holds the finalizer, so the
//!   data is kept.
//!
//! Config (all optional): `backupClaim` (default `sampledb-backups`), `image` (the image
//! repository used when the StatefulSet is not visible; default `sampledb`, tagged with
//! `spec.version`), `volumeSnapshotClassName`, `finalBackup` (`volumeSnapshot` | `dumpJob`).
//!
//! Test hook: a SampleDB annotated `devcluster.windlass.dev/fail-snapshot: "true"` gets its
//! final VolumeSnapshots annotated `devcluster.windlass.dev/fail: "true"`, which makes the
//! devcluster simulator fail them. Real CSI snapshotters ignore the annotation.

use sampledb_api::{KIND_KEY, SampleDbSpec};
use serde::Deserialize;
use windlass_sdk::{
    Context, Error, Info, Output, Plugin, Result,
    k8s_openapi::api::{
        apps::v1::StatefulSet,
        batch::v1::{CronJob, Job},
        core::v1::PersistentVolumeClaim,
    },
};

pub mod finalize;
mod jobs;
pub mod restore;
pub mod schedule;

/// The backup plugin.
#[derive(Debug)]
pub struct Backup;

/// The `group/version/Kind` of VolumeSnapshot (not in k8s-openapi).
pub const VOLUME_SNAPSHOT: &str = "snapshot.storage.k8s.io/v1/VolumeSnapshot";

/// The plugin's config (from its WasmPlugin).
#[derive(Debug, Clone, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct Config {
    /// The PVC holding the dumps, shared by the SampleDBs of a namespace; the user provides it.
    #[serde(default = "default_claim")]
    pub backup_claim: String,
    /// The image repository used when the StatefulSet's image is not visible.
    #[serde(default = "default_image")]
    pub image: String,
    /// The VolumeSnapshotClass of the final snapshots; the cluster's default when absent.
    #[serde(default)]
    pub volume_snapshot_class_name: Option<String>,
    /// How the final copy is taken when `deletionPolicy` is Snapshot.
    #[serde(default)]
    pub final_backup: FinalBackup,
}

/// How the final copy of the data is taken before a SampleDB with `deletionPolicy: Snapshot`
/// goes.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "camelCase")]
pub enum FinalBackup {
    /// A VolumeSnapshot of every data PVC.
    #[default]
    VolumeSnapshot,
    /// A dump Job onto the backup volume, like a scheduled backup.
    DumpJob,
}

fn default_claim() -> String {
    "sampledb-backups".to_string()
}

fn default_image() -> String {
    "sampledb".to_string()
}

windlass_sdk::export!(Backup);

impl Plugin for Backup {
    fn info() -> Info {
        Info::new("sampledb-backup", env!("CARGO_PKG_VERSION"))
            .parent(KIND_KEY)
            .child::<CronJob>()
            .child::<Job>()
            .child_kind(VOLUME_SNAPSHOT)
            .reads::<PersistentVolumeClaim>()
            .reads::<StatefulSet>()
            .finalizes()
    }

    fn reconcile(ctx: &Context) -> Result<Output> {
        let spec: SampleDbSpec = ctx.spec()?;
        let config: Config = ctx.config()?;
        validate(&spec)?;
        let mut out = ctx.output();
        let restoring = restore::reconcile(ctx, &spec, &config, &mut out)?;
        schedule::reconcile(ctx, &spec, &config, restoring, &mut out)?;
        Ok(out)
    }

    fn finalize(ctx: &Context) -> Result<Output> {
        let config: Config = ctx.config()?;
        let mut out = ctx.output();
        finalize::finalize(ctx, &config, &mut out)?;
        Ok(out)
    }
}

/// Refuses specs this plugin cannot act on, naming the field.
fn validate(spec: &SampleDbSpec) -> Result<()> {
    if let Some(backup) = &spec.backup {
        if !schedule::is_cron_schedule(&backup.schedule) {
            return Err(Error::InvalidParent(format!(
                "spec.backup.schedule: {:?} is not a cron schedule (five fields like \"0 3 * * *\", or @hourly, @daily, @weekly, @monthly, @yearly)",
                backup.schedule
            )));
        }
        if backup.retain < 1 {
            return Err(Error::InvalidParent(format!(
                "spec.backup.retain: must be at least 1, got {}",
                backup.retain
            )));
        }
    }
    if let Some(from) = &spec.restore_from
        && !is_dns_label(from)
    {
        // The name becomes a file name on the backup volume: no paths, no surprises.
        return Err(Error::InvalidParent(format!(
            "spec.restoreFrom: {from:?} is not a backup name (a DNS label like orders-backup-28901234)"
        )));
    }
    Ok(())
}

/// A DNS-1123 label: lowercase letters, digits and `-`, 1 to 63, starting and ending alphanumeric.
fn is_dns_label(s: &str) -> bool {
    let alnum = |c: char| c.is_ascii_lowercase() || c.is_ascii_digit();
    !s.is_empty()
        && s.len() <= 63
        && s.chars().all(|c| alnum(c) || c == '-')
        && s.starts_with(alnum)
        && s.ends_with(alnum)
}

/// True when the parent already carries condition `kind` as false with this reason and message:
/// the situation was reported before, so its Warning event need not be repeated.
fn already_reported(ctx: &Context, kind: &str, reason: &str, message: &str) -> bool {
    ctx.status("/conditions")
        .and_then(|c| c.as_array())
        .is_some_and(|conditions| {
            conditions.iter().any(|c| {
                c["type"] == kind
                    && (c["status"] == "False" || c["status"] == false)
                    && c["reason"] == reason
                    && c["message"] == message
            })
        })
}

/// Sets condition `kind` false and records a Warning event, unless the parent already shows
/// exactly this condition (then the event was recorded by an earlier run).
fn report_failure(ctx: &Context, out: &mut Output, kind: &str, reason: &str, message: String) {
    if !already_reported(ctx, kind, reason, &message) {
        out.warning(reason, message.clone());
    }
    out.condition(kind, false, reason, message);
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn backup_names_must_be_dns_labels() {
        assert!(is_dns_label("orders-backup-28901234"));
        assert!(!is_dns_label("../etc/passwd"));
        assert!(!is_dns_label("Orders"));
        assert!(!is_dns_label("-x"));
        assert!(!is_dns_label(""));
    }
}
