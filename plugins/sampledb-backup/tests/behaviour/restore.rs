use std::time::Duration;

use sampledb_backup::Backup;
use windlass_sdk::{Error, Output, json, testing::Harness};

use sampledb_api::testing::{JobState, job};

use crate::{db, observed_sts, run, with_status};

fn restoring() -> Harness {
    Harness::new(db()).with_parent(|p| p["spec"]["restoreFrom"] = json!("orders-backup-2"))
}

fn restore_job(out: &Output) -> Option<&windlass_sdk::Value> {
    out.find("batch/v1/Job", "orders-restore")
}

#[test]
fn a_restore_waits_for_a_ready_replica() {
    let out = run(&restoring().observed([observed_sts(1, 0)]));
    assert!(restore_job(&out).is_none());
    assert_eq!(out.status_fragment()["phase"], "Restoring");
    let c = out.condition_of("Restored").unwrap();
    assert!(!c.status);
    assert_eq!(c.reason, "WaitingForDatabase");
    let ready = out.condition_of("Ready").unwrap();
    assert_eq!(
        (ready.status, ready.reason.as_str()),
        (false, "WaitingForDatabase")
    );
    assert_eq!(out.requeue(), Some(Duration::from_secs(10)));
    // No backups of a database that is not restored yet.
    assert_eq!(
        out.find("batch/v1/CronJob", "orders-backup").unwrap()["spec"]["suspend"],
        true
    );
}

#[test]
fn once_a_replica_is_ready_the_restore_job_loads_the_backup() {
    let out = run(&restoring().observed([observed_sts(3, 1)]));
    let restore = restore_job(&out).unwrap();
    assert_eq!(restore["spec"]["backoffLimit"], 2);
    let pod = &restore["spec"]["template"]["spec"];
    assert_eq!(pod["restartPolicy"], "Never");
    let c = &pod["containers"][0];
    assert_eq!(
        c["command"],
        json!([
            "sampledb-restore",
            "--from",
            "/backups/orders-backup-2.dump"
        ])
    );
    assert_eq!(c["envFrom"][0]["configMapRef"]["name"], "orders-config");
    assert_eq!(c["env"][1]["valueFrom"]["secretKeyRef"]["key"], "password");
    assert_eq!(c["volumeMounts"][0]["readOnly"], true);
    assert_eq!(out.status_fragment()["phase"], "Restoring");
    assert_eq!(out.condition_of("Restored").unwrap().reason, "Restoring");
    assert_eq!(out.requeue(), Some(Duration::from_secs(10)));
    // Still running: still wanted, still restoring.
    let out =
        run(&restoring().observed([observed_sts(3, 1), job("orders-restore", JobState::Running)]));
    assert!(restore_job(&out).is_some());
    assert_eq!(out.status_fragment()["phase"], "Restoring");
}

#[test]
fn a_completed_restore_is_recorded_and_its_job_kept_until_the_status_shows_it() {
    let done = restoring().observed([
        observed_sts(3, 3),
        job("orders-restore", JobState::Complete("2026-01-01T00:05:00Z")),
    ]);
    let out = run(&done);
    assert_eq!(out.status_fragment()["restoredFrom"], "orders-backup-2");
    assert!(out.status_fragment().get("phase").is_none());
    let c = out.condition_of("Restored").unwrap();
    assert!(c.status);
    assert_eq!(out.events()[0].reason, "Restored");
    assert!(!out.events()[0].warning);
    assert!(
        restore_job(&out).is_some(),
        "kept until restoredFrom is recorded"
    );
    assert_eq!(
        out.find("batch/v1/CronJob", "orders-backup").unwrap()["spec"]["suspend"],
        false
    );
    // Recorded: the Job is no longer wanted (the host prunes it) and never runs again.
    let out = run(&with_status(done, "restoredFrom", json!("orders-backup-2")));
    assert!(restore_job(&out).is_none());
    assert!(out.condition_of("Restored").unwrap().status);
    assert!(out.events().is_empty());
    assert!(out.status_fragment().get("phase").is_none());
}

#[test]
fn a_failed_restore_keeps_its_job_and_never_reports_ready() {
    let failed = restoring().observed([
        observed_sts(3, 3),
        job("orders-restore", JobState::Failed("2026-01-01T00:05:00Z")),
    ]);
    let out = run(&failed);
    assert!(restore_job(&out).is_some());
    assert_eq!(out.status_fragment()["phase"], "Restoring");
    let c = out.condition_of("Restored").unwrap();
    assert!(!c.status);
    assert_eq!(c.reason, "RestoreFailed");
    assert!(c.message.contains("backoff limit"), "{}", c.message);
    assert!(
        c.message.contains("backup orders-backup-2"),
        "{}",
        c.message
    );
    let ready = out.condition_of("Ready").unwrap();
    assert_eq!(
        (ready.status, ready.reason.as_str()),
        (false, "RestoreFailed")
    );
    assert_eq!(ready.message, c.message);
    assert!(out.events()[0].warning);
    assert!(out.status_fragment().get("restoredFrom").is_none());
    let shown = json!([{"type": "Restored", "status": "False", "reason": "RestoreFailed",
        "message": c.message}]);
    assert!(
        run(&with_status(failed, "conditions", shown))
            .events()
            .is_empty()
    );
}

#[test]
fn a_database_already_in_use_is_never_overwritten_by_an_added_restore_from() {
    let out =
        run(&with_status(restoring(), "phase", json!("Ready")).observed([observed_sts(3, 3)]));
    assert!(restore_job(&out).is_none());
    assert!(out.status_fragment().get("phase").is_none());
    let c = out.condition_of("Restored").unwrap();
    assert!(!c.status);
    assert_eq!(c.reason, "AlreadyInUse");
    assert!(out.events()[0].warning);
}

#[test]
fn a_changed_restore_from_does_not_restore_again() {
    let h = with_status(restoring(), "restoredFrom", json!("orders-backup-1"));
    let out = run(&h.observed([observed_sts(3, 3)]));
    assert!(restore_job(&out).is_none());
    assert_eq!(
        out.condition_of("Restored").unwrap().reason,
        "RestoreSourceChanged"
    );
}

#[test]
fn restore_from_must_be_a_backup_name() {
    let err = Harness::new(db())
        .with_parent(|p| p["spec"]["restoreFrom"] = json!("../../etc/passwd"))
        .run::<Backup>()
        .unwrap_err();
    assert!(matches!(err, Error::InvalidParent(m) if m.starts_with("spec.restoreFrom")));
}

#[test]
fn without_restore_from_nothing_is_restored() {
    let out = run(&Harness::new(db()).observed([observed_sts(3, 3)]));
    assert!(restore_job(&out).is_none());
    assert!(out.condition_of("Restored").is_none());
}
