use windlass_sdk::{Value, json, testing::Harness};

use crate::{db, observed_sts, run};

fn assert_restricted(pod: &Value) {
    if let Err(e) = sampledb_api::pod::check_restricted(pod) {
        panic!("not restricted: {e}\n{pod:#}");
    }
}

#[test]
fn backup_restore_and_final_dump_pods_run_as_non_root_without_privileges_or_a_token() {
    let scheduled = run(&Harness::new(db()));
    let cronjob = scheduled.find("batch/v1/CronJob", "orders-backup").unwrap();
    assert_restricted(&cronjob["spec"]["jobTemplate"]["spec"]["template"]["spec"]);

    let restoring = Harness::new(db())
        .with_parent(|p| p["spec"]["restoreFrom"] = json!("orders-backup-2"))
        .observed([observed_sts(3, 1)]);
    let restore = run(&restoring);
    let job = restore.find("batch/v1/Job", "orders-restore").unwrap();
    assert_restricted(&job["spec"]["template"]["spec"]);

    let dumping = Harness::new(db())
        .with_parent(|p| p["metadata"]["deletionTimestamp"] = json!("2026-01-02T00:00:00Z"))
        .finalizing()
        .config(json!({"finalBackup": "dumpJob"}))
        .observed([observed_sts(1, 1)]);
    let dump = run(&dumping);
    let job = dump.find("batch/v1/Job", "orders-final-backup").unwrap();
    assert_restricted(&job["spec"]["template"]["spec"]);
}
