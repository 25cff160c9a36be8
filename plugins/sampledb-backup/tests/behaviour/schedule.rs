use sampledb_backup::{Backup, schedule::is_cron_schedule};
use windlass_sdk::{Error, Value, json, testing::Harness};

use sampledb_api::testing::{JobState, job, scheduled};

use crate::{db, desired_sts, observed_sts, run, with_status};

fn cronjob_pod(out: &windlass_sdk::Output) -> Value {
    out.find("batch/v1/CronJob", "orders-backup").unwrap()["spec"]["jobTemplate"]["spec"]
        ["template"]
        .clone()
}

#[test]
fn a_backup_schedule_makes_a_cronjob_that_dumps_with_the_database_image_and_connection_details() {
    let out = run(&Harness::new(db()).desired([desired_sts("mirror/sampledb:16.4")]));
    let cj = out.find("batch/v1/CronJob", "orders-backup").unwrap();
    assert_eq!(cj["spec"]["schedule"], "0 3 * * *");
    assert_eq!(cj["spec"]["concurrencyPolicy"], "Forbid");
    assert_eq!(cj["spec"]["successfulJobsHistoryLimit"], 5);
    assert_eq!(cj["spec"]["failedJobsHistoryLimit"], 3);
    assert_eq!(cj["spec"]["suspend"], false);
    assert_eq!(cj["spec"]["jobTemplate"]["spec"]["backoffLimit"], 2);
    let pod = cronjob_pod(&out);
    assert_eq!(pod["spec"]["restartPolicy"], "Never");
    let c = &pod["spec"]["containers"][0];
    assert_eq!(c["image"], "mirror/sampledb:16.4");
    assert_eq!(
        c["command"],
        json!([
            "sampledb-backup",
            "--dir",
            "/backups",
            "--prefix",
            "orders-backup-",
            "--retain",
            "5"
        ])
    );
    assert_eq!(c["envFrom"][0]["configMapRef"]["name"], "orders-config");
    let env = c["env"].as_array().unwrap();
    let var = |n: &str| env.iter().find(|e| e["name"] == n).unwrap()["valueFrom"].clone();
    assert_eq!(
        var("SAMPLEDB_USER")["secretKeyRef"],
        json!({"name": "orders-credentials", "key": "username"})
    );
    assert_eq!(
        var("SAMPLEDB_PASSWORD")["secretKeyRef"],
        json!({"name": "orders-credentials", "key": "password"})
    );
    assert_eq!(
        var("BACKUP_NAME")["fieldRef"]["fieldPath"],
        "metadata.labels['batch.kubernetes.io/job-name']"
    );
    assert_eq!(c["volumeMounts"][0]["mountPath"], "/backups");
    assert!(c["volumeMounts"][0].get("readOnly").is_none());
    assert_eq!(
        pod["spec"]["volumes"][0]["persistentVolumeClaim"]["claimName"],
        "sampledb-backups"
    );
    // The earlier plugin's StatefulSet is passed on untouched.
    assert_eq!(out.desired().len(), 2);
}

#[test]
fn backup_pods_are_never_selected_by_the_database_services() {
    let out = run(&Harness::new(db()));
    let labels = &cronjob_pod(&out)["metadata"]["labels"];
    assert_eq!(labels["app.kubernetes.io/instance"], "orders");
    assert_ne!(labels["app.kubernetes.io/name"], "sampledb");
}

#[test]
fn the_image_comes_from_the_observed_statefulset_then_from_config() {
    let mut sts = desired_sts("reg:5000/sampledb:16.3");
    sts["status"] = json!({"replicas": 3});
    // What runs wins over what storage wants (during an upgrade they differ).
    let out = run(&Harness::new(db())
        .observed([sts])
        .desired([desired_sts("reg:5000/sampledb:17.0")]));
    assert_eq!(
        cronjob_pod(&out)["spec"]["containers"][0]["image"],
        "reg:5000/sampledb:16.3"
    );
    let out = run(&Harness::new(db()).config(json!({"image": "mirror/sampledb"})));
    assert_eq!(
        cronjob_pod(&out)["spec"]["containers"][0]["image"],
        "mirror/sampledb:16.4"
    );
    let out = run(&Harness::new(db()));
    assert_eq!(
        cronjob_pod(&out)["spec"]["containers"][0]["image"],
        "sampledb:16.4"
    );
}

#[test]
fn the_backup_claim_and_a_named_credentials_secret_are_used() {
    let out = run(&Harness::new(db())
        .config(json!({"backupClaim": "nightly"}))
        .with_parent(|p| p["spec"]["credentials"] = json!({"secretName": "orders-admin"})));
    let pod = cronjob_pod(&out);
    assert_eq!(
        pod["spec"]["volumes"][0]["persistentVolumeClaim"]["claimName"],
        "nightly"
    );
    assert_eq!(
        pod["spec"]["containers"][0]["env"][0]["valueFrom"]["secretKeyRef"]["name"],
        "orders-admin"
    );
}

#[test]
fn without_a_backup_schedule_there_is_no_cronjob() {
    let h = Harness::new(db()).with_parent(|p| {
        p["spec"].as_object_mut().unwrap().remove("backup");
    });
    let out = run(&h);
    assert!(out.desired().is_empty());
    assert!(out.status_fragment().is_empty());
    assert!(out.conditions().is_empty());
}

#[test]
fn the_last_backup_is_the_newest_completed_job_of_the_cronjob() {
    let h = Harness::new(db()).observed([
        scheduled(
            job(
                "orders-backup-1",
                JobState::Complete("2026-01-01T03:01:00Z"),
            ),
            "orders-backup",
        ),
        scheduled(
            job(
                "orders-backup-2",
                JobState::Complete("2026-01-02T03:01:00Z"),
            ),
            "orders-backup",
        ),
        scheduled(job("orders-backup-3", JobState::Running), "orders-backup"),
        scheduled(
            job("other-backup-9", JobState::Complete("2026-01-05T03:01:00Z")),
            "other-backup",
        ),
        job("orders-restore", JobState::Complete("2026-01-06T03:01:00Z")),
        observed_sts(3, 3),
    ]);
    let out = run(&h);
    assert_eq!(out.status_fragment()["lastBackup"], "orders-backup-2");
    assert_eq!(
        out.status_fragment()["lastBackupTime"],
        "2026-01-02T03:01:00Z"
    );
    let c = out.condition_of("BackupSucceeded").unwrap();
    assert!(c.status);
    assert_eq!(c.reason, "BackupCompleted");
    assert_eq!(out.events().len(), 1);
    assert_eq!(out.events()[0].reason, "BackupCompleted");
    // Once recorded, the same backup is not announced again.
    let h = with_status(h, "lastBackup", json!("orders-backup-2"));
    let h = with_status(h, "lastBackupTime", json!("2026-01-02T03:01:00Z"));
    assert!(run(&h).events().is_empty());
}

#[test]
fn the_previous_last_backup_is_kept_when_retention_deleted_every_completed_job() {
    let h = with_status(Harness::new(db()), "lastBackup", json!("orders-backup-7"));
    let h = with_status(h, "lastBackupTime", json!("2026-01-07T03:01:00Z"));
    let out = run(&h);
    assert_eq!(out.status_fragment()["lastBackup"], "orders-backup-7");
    assert_eq!(
        out.status_fragment()["lastBackupTime"],
        "2026-01-07T03:01:00Z"
    );
    assert!(out.condition_of("BackupSucceeded").unwrap().status);
    assert!(out.events().is_empty());
    // An older completed Job does not replace a newer recorded backup.
    let out = run(&h.observed([scheduled(
        job(
            "orders-backup-5",
            JobState::Complete("2026-01-05T03:01:00Z"),
        ),
        "orders-backup",
    )]));
    assert_eq!(out.status_fragment()["lastBackup"], "orders-backup-7");
}

#[test]
fn no_backup_yet_means_no_backup_condition() {
    let out = run(&Harness::new(db()));
    assert!(out.condition_of("BackupSucceeded").is_none());
    assert!(out.status_fragment().get("lastBackup").is_none());
}

#[test]
fn a_backup_that_failed_after_the_last_success_is_a_warning_reported_once() {
    let h = Harness::new(db()).observed([
        scheduled(
            job(
                "orders-backup-1",
                JobState::Complete("2026-01-01T03:01:00Z"),
            ),
            "orders-backup",
        ),
        scheduled(
            job("orders-backup-2", JobState::Failed("2026-01-02T03:05:00Z")),
            "orders-backup",
        ),
    ]);
    let out = run(&h);
    assert_eq!(out.status_fragment()["lastBackup"], "orders-backup-1");
    let c = out.condition_of("BackupSucceeded").unwrap();
    assert!(!c.status);
    assert_eq!(c.reason, "BackupFailed");
    assert!(c.message.contains("orders-backup-2"), "{}", c.message);
    let warnings: Vec<_> = out.events().iter().filter(|e| e.warning).collect();
    assert_eq!(warnings.len(), 1);
    assert_eq!(warnings[0].reason, "BackupFailed");
    // The parent already shows this failure: no second Warning event.
    let shown = json!([{"type": "BackupSucceeded", "status": "False", "reason": "BackupFailed",
        "message": c.message}]);
    let h = with_status(h, "conditions", shown);
    let h = with_status(h, "lastBackup", json!("orders-backup-1"));
    let out = run(&h);
    assert!(!out.condition_of("BackupSucceeded").unwrap().status);
    assert!(out.events().is_empty());
}

#[test]
fn a_failure_without_any_success_is_reported_too() {
    let out = run(&Harness::new(db()).observed([scheduled(
        job("orders-backup-1", JobState::Failed("2026-01-01T03:05:00Z")),
        "orders-backup",
    )]));
    assert_eq!(
        out.condition_of("BackupSucceeded").unwrap().reason,
        "BackupFailed"
    );
}

#[test]
fn an_older_failure_does_not_hide_a_newer_success() {
    let out = run(&Harness::new(db()).observed([
        scheduled(
            job("orders-backup-1", JobState::Failed("2026-01-01T03:05:00Z")),
            "orders-backup",
        ),
        scheduled(
            job(
                "orders-backup-2",
                JobState::Complete("2026-01-02T03:01:00Z"),
            ),
            "orders-backup",
        ),
    ]));
    assert!(out.condition_of("BackupSucceeded").unwrap().status);
    assert!(out.events().iter().all(|e| !e.warning));
}

#[test]
fn bad_schedules_and_retention_are_refused_naming_the_field() {
    let bad = |edit: fn(&mut Value)| {
        Harness::new(db())
            .with_parent(edit)
            .run::<Backup>()
            .unwrap_err()
    };
    assert!(matches!(
        bad(|p| p["spec"]["backup"]["schedule"] = json!("every night")),
        Error::InvalidParent(m) if m.starts_with("spec.backup.schedule: \"every night\"")
    ));
    assert!(matches!(
        bad(|p| p["spec"]["backup"]["schedule"] = json!("0 3 * *")),
        Error::InvalidParent(m) if m.starts_with("spec.backup.schedule")
    ));
    assert_eq!(
        bad(|p| p["spec"]["backup"]["retain"] = json!(0)),
        Error::InvalidParent("spec.backup.retain: must be at least 1, got 0".into())
    );
}

#[test]
fn cron_schedules_are_five_fields_or_a_macro() {
    for ok in [
        "0 3 * * *",
        "*/15 * * * *",
        "0 3 * * MON-FRI",
        "@daily",
        "@hourly",
        " 0 3 1,15 * * ",
    ] {
        assert!(is_cron_schedule(ok), "{ok}");
    }
    for bad in [
        "",
        "@reboot",
        "@every 1h",
        "0 3 * * * *",
        "0 3 * *",
        "0 3 * * $(rm)",
    ] {
        assert!(!is_cron_schedule(bad), "{bad}");
    }
}

#[test]
fn unknown_config_keys_are_refused_naming_the_key() {
    let err = Harness::new(db())
        .config(json!({"backupClaims": "x"}))
        .run::<Backup>()
        .unwrap_err();
    assert!(matches!(err, Error::InvalidConfig(m) if m.contains("backupClaims")));
    let err = Harness::new(db())
        .config(json!({"finalBackup": "tape"}))
        .run::<Backup>()
        .unwrap_err();
    assert!(matches!(err, Error::InvalidConfig(m) if m.contains("tape")));
}
