use std::time::Duration;

use sampledb_backup::{Backup, VOLUME_SNAPSHOT};
use windlass_sdk::{Output, Value, json, testing::Harness};

use sampledb_api::testing::{JobState, job};

use crate::{db, observed_sts, run, with_status};

fn pvc(name: &str) -> Value {
    json!({"apiVersion": "v1", "kind": "PersistentVolumeClaim", "metadata": {"name": name}})
}

fn snapshot(name: &str, status: Value) -> Value {
    json!({"apiVersion": "snapshot.storage.k8s.io/v1", "kind": "VolumeSnapshot",
        "metadata": {"name": name, "creationTimestamp": "2026-01-02T00:00:00Z"}, "status": status})
}

fn deleting(policy: &str) -> Harness {
    Harness::new(db())
        .with_parent(|p| {
            p["spec"]["deletionPolicy"] = json!(policy);
            p["metadata"]["deletionTimestamp"] = json!("2026-01-02T00:00:00Z");
        })
        .finalizing()
}

/// A SampleDB being deleted with three replicas and their volumes.
fn three_volumes() -> Harness {
    deleting("Snapshot").observed([
        observed_sts(3, 3),
        pvc("data-orders-1"),
        pvc("data-orders-0"),
        pvc("data-orders-2"),
        // Not this SampleDB's: another one called orders-2.
        pvc("data-orders-2-0"),
    ])
}

fn snapshots(out: &Output) -> Vec<&Value> {
    out.desired()
        .iter()
        .filter(|o| o["kind"] == "VolumeSnapshot")
        .collect()
}

#[test]
fn the_snapshot_policy_snapshots_every_data_volume_and_waits_for_them() {
    let out = run(&three_volumes());
    let snaps = snapshots(&out);
    assert_eq!(snaps.len(), 3);
    assert_eq!(snaps[0]["metadata"]["name"], "data-orders-0-final-4c1f0d6e");
    assert_eq!(
        snaps[2]["spec"]["source"]["persistentVolumeClaimName"],
        "data-orders-2"
    );
    assert_eq!(
        snaps[0]["metadata"]["labels"]["app.kubernetes.io/instance"],
        "orders"
    );
    assert!(snaps[0]["spec"].get("volumeSnapshotClassName").is_none());
    assert!(snaps[0]["metadata"].get("annotations").is_none());
    assert!(!out.is_finalized());
    assert_eq!(out.status_fragment()["phase"], "Deleting");
    let c = out.condition_of("Snapshotted").unwrap();
    assert!(!c.status);
    assert_eq!(c.reason, "WaitingForSnapshot");
    assert_eq!(out.requeue(), Some(Duration::from_secs(5)));
}

#[test]
fn the_sampledb_goes_only_once_every_snapshot_is_ready_to_use() {
    let ready = json!({"readyToUse": true});
    let two = three_volumes().observed([
        snapshot("data-orders-0-final-4c1f0d6e", ready.clone()),
        snapshot("data-orders-1-final-4c1f0d6e", ready.clone()),
        snapshot("data-orders-2-final-4c1f0d6e", json!({"readyToUse": false})),
    ]);
    let out = run(&two);
    assert!(!out.is_finalized());
    assert!(
        out.condition_of("Snapshotted")
            .unwrap()
            .message
            .starts_with("2/3")
    );
    let all = three_volumes().observed([
        snapshot("data-orders-0-final-4c1f0d6e", ready.clone()),
        snapshot("data-orders-1-final-4c1f0d6e", ready.clone()),
        snapshot("data-orders-2-final-4c1f0d6e", ready),
    ]);
    let out = run(&all);
    assert!(out.is_finalized());
    assert_eq!(snapshots(&out).len(), 3);
    let c = out.condition_of("Snapshotted").unwrap();
    assert!(c.status);
    assert_eq!(c.reason, "SnapshotsReady");
    assert_eq!(out.events()[0].reason, "Snapshotted");
    assert_eq!(out.requeue(), None);
}

#[test]
fn a_failed_snapshot_holds_the_finalizer_and_keeps_the_data() {
    let failed = three_volumes().observed([
        snapshot("data-orders-0-final-4c1f0d6e", json!({"readyToUse": true})),
        snapshot(
            "data-orders-1-final-4c1f0d6e",
            json!({"readyToUse": false, "error": {"message": "quota exceeded"}}),
        ),
    ]);
    let out = run(&failed);
    assert!(!out.is_finalized());
    let c = out.condition_of("Snapshotted").unwrap();
    assert!(!c.status);
    assert_eq!(c.reason, "SnapshotFailed");
    assert!(c.message.contains("quota exceeded"), "{}", c.message);
    assert!(out.events()[0].warning);
    assert_eq!(out.requeue(), Some(Duration::from_secs(30)));
    // Still wanted: a deleted failed snapshot is made again.
    assert_eq!(snapshots(&out).len(), 3);
    let shown = json!([{"type": "Snapshotted", "status": "False", "reason": "SnapshotFailed",
        "message": c.message}]);
    let out = run(&with_status(failed, "conditions", shown));
    assert!(out.events().is_empty());
    assert!(!out.is_finalized());
}

#[test]
fn a_snapshot_older_than_the_sampledb_does_not_count_as_its_copy() {
    let mut stale = snapshot("data-orders-0-final-4c1f0d6e", json!({"readyToUse": true}));
    stale["metadata"]["creationTimestamp"] = json!("2025-06-01T00:00:00Z");
    let out =
        run(&deleting("Snapshot").observed([observed_sts(1, 1), pvc("data-orders-0"), stale]));
    assert!(!out.is_finalized());
    assert_eq!(
        out.condition_of("Snapshotted").unwrap().reason,
        "SnapshotFailed"
    );
}

#[test]
fn the_fail_snapshot_test_hook_and_the_snapshot_class_are_passed_on() {
    let out = run(&three_volumes()
        .config(json!({"volumeSnapshotClassName": "csi-snap"}))
        .with_parent(|p| {
            p["metadata"]["annotations"] = json!({"devcluster.windlass.dev/fail-snapshot": "true"});
        }));
    for snap in snapshots(&out) {
        assert_eq!(
            snap["metadata"]["annotations"]["devcluster.windlass.dev/fail"],
            "true"
        );
        assert_eq!(snap["spec"]["volumeSnapshotClassName"], "csi-snap");
    }
}

#[test]
fn a_late_volume_cache_never_lets_data_go_unsnapshotted() {
    // The StatefulSet ran three replicas but no claim is observed yet.
    let out = run(&deleting("Snapshot").observed([observed_sts(3, 3)]));
    assert!(!out.is_finalized());
    assert_eq!(
        out.condition_of("Snapshotted").unwrap().reason,
        "WaitingForVolumes"
    );
    assert_eq!(out.requeue(), Some(Duration::from_secs(5)));
    // Two of three claims observed, both snapshotted: still waiting for the third.
    let out = run(&deleting("Snapshot").observed([
        observed_sts(3, 3),
        pvc("data-orders-0"),
        pvc("data-orders-1"),
        snapshot("data-orders-0-final-4c1f0d6e", json!({"readyToUse": true})),
        snapshot("data-orders-1-final-4c1f0d6e", json!({"readyToUse": true})),
    ]));
    assert!(!out.is_finalized());
    let c = out.condition_of("Snapshotted").unwrap();
    assert!(c.message.contains("data-orders-2"), "{}", c.message);
}

#[test]
fn with_no_statefulset_and_no_volume_there_is_nothing_to_snapshot() {
    let out = run(&deleting("Snapshot"));
    assert!(out.is_finalized());
    assert!(snapshots(&out).is_empty());
}

#[test]
fn retain_finalizes_at_once_and_says_the_volumes_are_kept() {
    let out = run(&deleting("Retain").observed([observed_sts(1, 1), pvc("data-orders-0")]));
    assert!(out.is_finalized());
    assert!(out.desired().is_empty());
    assert_eq!(out.events()[0].reason, "VolumesRetained");
    assert!(out.events()[0].message.contains("data-orders-0"));
}

#[test]
fn delete_finalizes_at_once() {
    let out = run(&deleting("Delete").observed([observed_sts(1, 1), pvc("data-orders-0")]));
    assert!(out.is_finalized());
    assert!(out.desired().is_empty());
}

#[test]
fn a_bad_backup_schedule_does_not_block_deletion() {
    let out =
        run(&deleting("Delete").with_parent(|p| p["spec"]["backup"]["schedule"] = json!("never")));
    assert!(out.is_finalized());
}

fn dumping() -> Harness {
    deleting("Snapshot")
        .config(json!({"finalBackup": "dumpJob"}))
        .observed([observed_sts(1, 1), pvc("data-orders-0")])
}

#[test]
fn a_final_dump_job_can_replace_the_snapshots() {
    let out = run(&dumping());
    assert!(snapshots(&out).is_empty());
    let job = out.find("batch/v1/Job", "orders-final-backup").unwrap();
    let c = &job["spec"]["template"]["spec"]["containers"][0];
    assert_eq!(
        c["command"],
        json!(["sampledb-backup", "--dir", "/backups"])
    );
    assert_eq!(c["env"][2]["name"], "BACKUP_NAME");
    assert!(!out.is_finalized());
    assert_eq!(
        out.condition_of("Snapshotted").unwrap().reason,
        "WaitingForFinalBackup"
    );
    let out = run(&dumping().observed([job_done()]));
    assert!(out.is_finalized());
    assert!(out.condition_of("Snapshotted").unwrap().status);
}

fn job_done() -> Value {
    job(
        "orders-final-backup",
        JobState::Complete("2026-01-02T00:01:00Z"),
    )
}

#[test]
fn a_failed_final_dump_holds_the_finalizer() {
    let out = run(&dumping().observed([job(
        "orders-final-backup",
        JobState::Failed("2026-01-02T00:01:00Z"),
    )]));
    assert!(!out.is_finalized());
    assert_eq!(
        out.condition_of("Snapshotted").unwrap().reason,
        "FinalBackupFailed"
    );
    assert!(out.events()[0].warning);
    assert_eq!(out.requeue(), Some(Duration::from_secs(30)));
}

#[test]
fn the_plugin_declares_what_it_makes_and_reads_and_that_it_finalizes() {
    use windlass_sdk::Plugin;
    let info = Backup::info();
    assert!(info.finalizes);
    assert!(info.child_kinds.contains(&VOLUME_SNAPSHOT.to_string()));
    assert!(info.child_kinds.contains(&"batch/v1/CronJob".to_string()));
    assert!(info.child_kinds.contains(&"batch/v1/Job".to_string()));
    assert!(
        info.reads_kinds
            .contains(&"v1/PersistentVolumeClaim".to_string())
    );
    assert!(
        info.reads_kinds
            .contains(&"apps/v1/StatefulSet".to_string())
    );
}

#[test]
fn a_spec_that_no_longer_parses_still_lets_the_policy_decide() {
    let broken = |policy: &str| {
        deleting(policy)
            .with_parent(|p| {
                p["spec"].as_object_mut().unwrap().remove("storage");
            })
            .observed([observed_sts(1, 1), pvc("data-orders-0")])
    };
    assert!(run(&broken("Delete")).is_finalized());
    let out = run(&broken("Snapshot"));
    assert!(!out.is_finalized());
    assert_eq!(snapshots(&out).len(), 1);
    // An unknown policy is treated as Snapshot: the data is never let go by mistake.
    let out = run(&broken("Nuke"));
    assert!(!out.is_finalized());
    assert_eq!(snapshots(&out).len(), 1);
}
