//! When a SampleDB is deleted: take the final copy its `deletionPolicy` asks for before the
//! finalizer goes (after which ownerReference GC removes the StatefulSet, and its PVC retention
//! policy decides about the data volumes).

use std::time::Duration;

use sampledb_api::{BACKUP_MOUNT, DeletionPolicy, SampleDbSpec, names, selector_labels};
use windlass_sdk::{
    Context, Output, Result, Value, json,
    k8s_openapi::api::{apps::v1::StatefulSet, batch::v1::Job},
};

use crate::{
    Config, FinalBackup, VOLUME_SNAPSHOT,
    jobs::{self, JobState},
    report_failure,
};

/// Look again this soon while a snapshot or the final dump is on its way.
const WAITING: Duration = Duration::from_secs(5);
/// Look again this late after a failure (the user has to act; the data is kept meanwhile).
const FAILED: Duration = Duration::from_secs(30);
/// The condition reporting the final copy.
const CONDITION: &str = "Snapshotted";
/// The annotation on the SampleDB that makes the devcluster simulator fail its snapshots.
pub const FAIL_SNAPSHOT_HOOK: &str = "devcluster.windlass.dev/fail-snapshot";
/// The annotation the devcluster simulator reads on a VolumeSnapshot.
pub const DEVCLUSTER_FAIL: &str = "devcluster.windlass.dev/fail";

/// The final dump Job (config `finalBackup: dumpJob`); its dump is restorable under this name.
pub use sampledb_api::names::final_backup_job;

/// Runs the finalize phase: reports `finalized` only once the data is safe to let go.
///
/// A spec that no longer parses (a bad edit, an older CRD version) must not decide about the
/// data: the deletion policy is then read on its own, and an unreadable one means Snapshot (the
/// safe default). Only the final dump Job needs the whole spec.
pub(crate) fn finalize(ctx: &Context, config: &Config, out: &mut Output) -> Result<()> {
    out.status("phase", "Deleting");
    let spec: Result<SampleDbSpec> = ctx.spec();
    let policy = match &spec {
        Ok(spec) => spec.deletion_policy,
        Err(_) => ctx
            .parent()
            .pointer("/spec/deletionPolicy")
            .cloned()
            .and_then(|p| serde_json::from_value(p).ok())
            .unwrap_or_default(),
    };
    match policy {
        DeletionPolicy::Delete => out.finalized(true),
        DeletionPolicy::Retain => {
            let pvcs = data_pvcs(ctx);
            let kept = if pvcs.is_empty() {
                format!("{}-{}-*", names::DATA_VOLUME, ctx.name())
            } else {
                pvcs.join(", ")
            };
            out.event(
                "VolumesRetained",
                format!("deletionPolicy Retain: the data volumes ({kept}) are kept"),
            );
            out.finalized(true);
        }
        DeletionPolicy::Snapshot => match config.final_backup {
            FinalBackup::VolumeSnapshot => snapshot(ctx, config, out),
            FinalBackup::DumpJob => dump(ctx, &spec?, config, out)?,
        },
    }
    Ok(())
}

/// The observed data PVCs of this SampleDB (`data-<name>-<ordinal>`), by ordinal.
fn data_pvcs(ctx: &Context) -> Vec<String> {
    let prefix = format!("{}-{}-", names::DATA_VOLUME, ctx.name());
    let mut pvcs: Vec<(u32, String)> = ctx
        .observed_json("v1/PersistentVolumeClaim")
        .filter_map(|p| {
            let name = p.pointer("/metadata/name")?.as_str()?;
            let ordinal = name.strip_prefix(&prefix)?;
            if ordinal.is_empty() || !ordinal.bytes().all(|b| b.is_ascii_digit()) {
                return None;
            }
            Some((ordinal.parse().ok()?, name.to_string()))
        })
        .collect();
    pvcs.sort();
    pvcs.into_iter().map(|(_, n)| n).collect()
}

/// How many replicas the observed StatefulSet has run (each has a data PVC).
fn replicas_running(ctx: &Context) -> i32 {
    ctx.observed_named::<StatefulSet>(&names::statefulset(ctx.name()))
        .and_then(|s| s.status)
        .map_or(0, |s| s.replicas)
}

/// PVCs that must exist (a replica ran) but are not observed yet: a late cache, not absent data.
fn missing_pvcs(ctx: &Context, pvcs: &[String]) -> Vec<String> {
    (0..replicas_running(ctx))
        .map(|i| names::data_pvc(ctx.name(), i))
        .filter(|p| !pvcs.contains(p))
        .collect()
}

/// Where one final snapshot stands.
enum Snap {
    Pending,
    Ready,
    Failed(String),
}

/// `deletionPolicy: Snapshot`: a VolumeSnapshot of every data PVC; finalized once all are ready.
fn snapshot(ctx: &Context, config: &Config, out: &mut Output) {
    let name = ctx.name();
    let pvcs = data_pvcs(ctx);
    let missing = missing_pvcs(ctx, &pvcs);
    let fail_hook = ctx
        .parent()
        .pointer("/metadata/annotations")
        .and_then(|a| a.get(FAIL_SNAPSHOT_HOOK))
        .and_then(Value::as_str)
        == Some("true");
    let mut failures = Vec::new();
    let mut pending = Vec::new();
    let mut ready = Vec::new();
    for pvc in &pvcs {
        let snap = names::final_snapshot(pvc, ctx.uid());
        let mut object = json!({
            "apiVersion": "snapshot.storage.k8s.io/v1",
            "kind": "VolumeSnapshot",
            "metadata": {"name": snap, "labels": selector_labels(name)},
            "spec": {"source": {"persistentVolumeClaimName": pvc}},
        });
        if let Some(class) = &config.volume_snapshot_class_name {
            object["spec"]["volumeSnapshotClassName"] = json!(class);
        }
        if fail_hook {
            // Test hook: the devcluster simulator fails snapshots annotated so.
            object["metadata"]["annotations"] = json!({ DEVCLUSTER_FAIL: "true" });
        }
        if let Err(e) = out.apply(&object) {
            failures.push(format!("{snap}: {e}"));
            continue;
        }
        match snapshot_state(ctx, &snap) {
            Snap::Ready => ready.push(snap),
            Snap::Pending => pending.push(snap),
            Snap::Failed(message) => failures.push(format!("{snap} of {pvc}: {message}")),
        }
    }
    if !failures.is_empty() {
        report_failure(
            ctx,
            out,
            CONDITION,
            "SnapshotFailed",
            format!(
                "final snapshot failed: {}; the SampleDB and its data volumes are kept (delete the failed VolumeSnapshot to try again, or set deletionPolicy Retain)",
                failures.join("; ")
            ),
        );
        out.requeue_after(FAILED);
        out.finalized(false);
    } else if !missing.is_empty() {
        out.condition(
            CONDITION,
            false,
            "WaitingForVolumes",
            format!(
                "waiting to see the data volumes {} before snapshotting",
                missing.join(", ")
            ),
        );
        out.requeue_after(WAITING);
        out.finalized(false);
    } else if !pending.is_empty() {
        out.condition(
            CONDITION,
            false,
            "WaitingForSnapshot",
            format!(
                "{}/{} final snapshots ready; waiting for {}",
                ready.len(),
                pvcs.len(),
                pending.join(", ")
            ),
        );
        out.requeue_after(WAITING);
        out.finalized(false);
    } else if ready.is_empty() {
        out.condition(CONDITION, true, "NoVolumes", "no data volume to snapshot");
        out.finalized(true);
    } else {
        let message = format!("final snapshots ready: {}", ready.join(", "));
        out.event("Snapshotted", message.clone());
        out.condition(CONDITION, true, "SnapshotsReady", message);
        out.finalized(true);
    }
}

/// The observed state of final snapshot `snap`. A snapshot created before this SampleDB was
/// (left by an earlier SampleDB of the same name: snapshots outlive their SampleDB) holds none
/// of this database's data, so it does not count as ready.
fn snapshot_state(ctx: &Context, snap: &str) -> Snap {
    let Some(observed) = ctx
        .observed_json(VOLUME_SNAPSHOT)
        .find(|o| o.pointer("/metadata/name").and_then(Value::as_str) == Some(snap))
    else {
        return Snap::Pending;
    };
    let time = |v: &Value| {
        v.pointer("/metadata/creationTimestamp")
            .and_then(Value::as_str)
            .and_then(jobs::parse_time)
    };
    if let (Some(made), Some(born)) = (time(observed), time(ctx.parent()))
        && made < born
    {
        return Snap::Failed(format!(
            "a VolumeSnapshot {snap} older than this SampleDB already exists (not taken of this SampleDB's data); rename or delete it"
        ));
    }
    if let Some(message) = observed.pointer("/status/error").map(|e| {
        e.get("message")
            .and_then(Value::as_str)
            .unwrap_or("the snapshot failed")
            .to_string()
    }) {
        return Snap::Failed(message);
    }
    if observed.pointer("/status/readyToUse") == Some(&Value::Bool(true)) {
        Snap::Ready
    } else {
        Snap::Pending
    }
}

/// Config `finalBackup: dumpJob`: a final dump onto the backup volume; finalized once complete.
fn dump(ctx: &Context, spec: &SampleDbSpec, config: &Config, out: &mut Output) -> Result<()> {
    let name = ctx.name();
    let pvcs = data_pvcs(ctx);
    if pvcs.is_empty() && replicas_running(ctx) == 0 {
        out.condition(CONDITION, true, "NoVolumes", "no data to back up");
        out.finalized(true);
        return Ok(());
    }
    let job_name = final_backup_job(name);
    out.apply(&Job {
        metadata: jobs::meta(job_name.clone(), name, "final-backup"),
        spec: Some(jobs::job_spec(
            ctx,
            spec,
            config,
            "final-backup",
            vec![
                "sampledb-backup".into(),
                "--dir".into(),
                BACKUP_MOUNT.into(),
            ],
            true,
        )),
        ..Job::default()
    })?;
    match jobs::observed_job(ctx, &job_name).map(jobs::job_state) {
        Some(JobState::Complete { .. }) => {
            let message = format!(
                "final backup {job_name} completed (restore it with restoreFrom: {job_name})"
            );
            out.event("FinalBackupCompleted", message.clone());
            out.condition(CONDITION, true, "FinalBackupCompleted", message);
            out.finalized(true);
        }
        Some(JobState::Failed { message, .. }) => {
            report_failure(
                ctx,
                out,
                CONDITION,
                "FinalBackupFailed",
                format!(
                    "final backup Job {job_name} failed: {message}; the SampleDB and its data volumes are kept (delete the Job to try again, or set deletionPolicy Retain)"
                ),
            );
            out.requeue_after(FAILED);
            out.finalized(false);
        }
        _ => {
            out.condition(
                CONDITION,
                false,
                "WaitingForFinalBackup",
                format!("waiting for the final backup Job {job_name}"),
            );
            out.requeue_after(WAITING);
            out.finalized(false);
        }
    }
    Ok(())
}
