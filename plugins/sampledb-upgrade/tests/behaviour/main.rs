#![allow(clippy::unwrap_used)] // Tests: a panic is the failure report.

use sampledb_api::testing::JobState;
use sampledb_upgrade::*;
use windlass_sdk::{Error, Output, Plugin, Value, json, testing::Harness};

/// When an observed Job finished.
const AT: &str = "2026-01-01T00:05:00Z";

/// A SampleDB on 16.4 asked for 17.0.
fn db() -> Value {
    let mut db = sampledb_api::testing::sampledb(json!({
        "version": "17.0", "replicas": 3, "storage": {"size": "10Gi"},
    }));
    db["status"] = json!({"currentVersion": "16.4"});
    db
}

/// The StatefulSet storage would want for version `version`.
fn storage_sts(version: &str) -> Value {
    json!({
        "apiVersion": "apps/v1", "kind": "StatefulSet",
        "metadata": {"name": "orders"},
        "spec": {"replicas": 3, "template": {"spec": {"containers": [
            {"name": "sidecar", "image": "sidecar:1.0"},
            {"name": "sampledb", "image": format!("mirror/sampledb:{version}")},
        ]}}}
    })
}

/// An observed Job, as a YAML document (JSON) to add to the observed YAML.
fn job(name: &str, state: JobState<'_>) -> String {
    format!("{}\n---\n", sampledb_api::testing::job(name, state))
}
fn observed_sts(
    image: &str,
    generation: i64,
    observed_generation: i64,
    update_revision: &str,
) -> String {
    format!(
        "apiVersion: apps/v1\nkind: StatefulSet\nmetadata: {{name: orders, generation: {generation}}}\n\
         spec:\n  replicas: 3\n  template:\n    spec:\n      containers: [{{name: sampledb, image: \"{image}\"}}]\n\
         status: {{observedGeneration: {observed_generation}, replicas: 3, readyReplicas: 3, updatedReplicas: 3, \
         currentRevision: orders-2, updateRevision: {update_revision}}}\n---\n"
    )
}

fn harness(target: &str, observed: &str) -> Harness {
    Harness::new(db())
        .with_parent(|p| p["spec"]["version"] = target.into())
        .desired([storage_sts(target)])
        .observed_yaml(observed)
}

/// `harness` once the parent's status records the upgrade to `target` (`upgradingTo`).
fn recorded(target: &str, observed: &str) -> Harness {
    harness(target, observed).with_parent(|p| p["status"]["upgradingTo"] = target.into())
}

fn run(h: Harness) -> Output {
    h.run::<Upgrade>().unwrap()
}

fn image(out: &Output) -> &Value {
    &out.find("apps/v1/StatefulSet", "orders").unwrap()["spec"]["template"]["spec"]["containers"][1]
        ["image"]
}

fn assert_restricted(pod: &Value) {
    if let Err(e) = sampledb_api::pod::check_restricted(pod) {
        panic!("not restricted: {e}\n{pod:#}");
    }
}

fn reason(out: &Output) -> (bool, &str) {
    let c = out.condition_of("Upgrade").unwrap();
    (c.status, c.reason.as_str())
}

fn jobs(out: &Output) -> Vec<&str> {
    out.desired()
        .iter()
        .filter(|o| o["kind"] == "Job")
        .map(|o| o["metadata"]["name"].as_str().unwrap())
        .collect()
}

#[test]
fn a_new_database_records_its_version() {
    let out = run(harness("16.4", "").with_parent(|p| {
        p.as_object_mut().unwrap().remove("status");
    }));
    assert_eq!(out.status_fragment()["currentVersion"], "16.4");
    assert_eq!(reason(&out), (true, "UpToDate"));
    assert_eq!(image(&out), "mirror/sampledb:16.4");
    assert_eq!(out.desired().len(), 1);
    assert!(out.events().is_empty());
    assert_eq!(out.requeue(), None);
}

#[test]
fn the_same_version_needs_nothing() {
    let out = run(harness("16.4", ""));
    assert_eq!(out.status_fragment()["currentVersion"], "16.4");
    assert!(out.status_fragment().get("phase").is_none());
    assert_eq!(reason(&out), (true, "UpToDate"));
    assert!(
        out.condition_of("Ready").is_none(),
        "up to date: nothing to hold Ready for"
    );
    assert_eq!(out.desired(), &[storage_sts("16.4")]);
}

#[test]
fn a_downgrade_is_refused_and_the_image_held() {
    let out = run(harness("16.2", ""));
    assert_eq!(image(&out), "mirror/sampledb:16.4");
    assert_eq!(reason(&out), (false, "DowngradeRefused"));
    let message = &out.condition_of("Upgrade").unwrap().message;
    let ready = out.condition_of("Ready").unwrap();
    assert_eq!(
        (ready.status, ready.reason.as_str()),
        (false, "DowngradeRefused")
    );
    assert_eq!(&ready.message, message);
    assert!(
        message.contains("spec.version 16.2") && message.contains("16.4"),
        "{message}"
    );
    assert_eq!(out.events().len(), 1);
    assert!(out.events()[0].warning);
    assert!(jobs(&out).is_empty());
    assert_eq!(out.status_fragment()["currentVersion"], "16.4");
    // Other containers are left alone.
    assert_eq!(
        out.find("apps/v1/StatefulSet", "orders").unwrap()["spec"]["template"]["spec"]["containers"]
            [0]["image"],
        "sidecar:1.0"
    );
}

#[test]
fn skipping_a_major_version_is_refused() {
    let out = run(harness("18.1", ""));
    assert_eq!(image(&out), "mirror/sampledb:16.4");
    assert_eq!(reason(&out), (false, "UnsupportedUpgradePath"));
    assert!(
        out.condition_of("Upgrade")
            .unwrap()
            .message
            .contains("17.x")
    );
    assert!(out.events()[0].warning);
    assert!(jobs(&out).is_empty());
}

#[test]
fn an_upgrade_backs_up_then_migrates_then_rolls() {
    let backup = "orders-pre-upgrade-17-0";
    let migration = "orders-upgrade-17-0";

    // 1. The backup runs with the running version; the image is held.
    let out = run(harness("17.0", ""));
    assert_eq!(jobs(&out), [backup]);
    assert_eq!(image(&out), "mirror/sampledb:16.4");
    assert_eq!(reason(&out), (false, "PreUpgradeBackupRunning"));
    assert_eq!(out.status_fragment()["phase"], "Upgrading");
    assert_eq!(out.status_fragment()["currentVersion"], "16.4");
    assert_eq!(out.requeue(), Some(REQUEUE));
    let pod = &out.find("batch/v1/Job", backup).unwrap()["spec"]["template"]["spec"];
    assert_eq!(pod["containers"][0]["image"], "mirror/sampledb:16.4");
    assert_eq!(
        pod["containers"][0]["command"],
        json!([
            "sampledb-backup",
            "--out",
            "/backups/orders-pre-upgrade-17-0.dump"
        ])
    );
    assert_eq!(
        pod["containers"][0]["volumeMounts"][0]["mountPath"],
        "/backups"
    );
    assert_eq!(
        pod["volumes"][0]["persistentVolumeClaim"]["claimName"],
        "sampledb-backups"
    );
    assert_eq!(
        pod["containers"][0]["envFrom"],
        json!([{"configMapRef": {"name": "orders-config"}}])
    );
    assert_eq!(
        pod["containers"][0]["env"][1],
        json!({"name": "SAMPLEDB_PASSWORD", "valueFrom": {"secretKeyRef": {"name": "orders-credentials", "key": "password"}}})
    );
    assert_eq!(pod["restartPolicy"], "Never");

    // 2. The backup is done: first the upgrade is recorded, and nothing else starts...
    let observed = job(backup, JobState::Complete(AT))
        + &observed_sts("mirror/sampledb:16.4", 1, 1, "orders-2");
    let out = run(harness("17.0", &observed));
    assert_eq!(jobs(&out), [backup]);
    assert_eq!(image(&out), "mirror/sampledb:16.4");
    assert_eq!(reason(&out), (false, "UpgradeStarting"));
    assert_eq!(out.status_fragment()["upgradingTo"], "17.0");
    // ... then, once the status shows the record, the migration runs with the new image; the
    // image is still held.
    let out = run(recorded("17.0", &observed));
    assert_eq!(jobs(&out), [backup, migration]);
    assert_eq!(image(&out), "mirror/sampledb:16.4");
    assert_eq!(reason(&out), (false, "UpgradeJobRunning"));
    assert_eq!(out.status_fragment()["upgradingTo"], "17.0");
    let pod = &out.find("batch/v1/Job", migration).unwrap()["spec"]["template"]["spec"];
    assert_eq!(pod["containers"][0]["image"], "mirror/sampledb:17.0");
    assert_eq!(
        pod["containers"][0]["command"],
        json!(["sampledb-upgrade", "--from", "16.4", "--to", "17.0"])
    );

    // 3. Migrated: the image is released; the StatefulSet has not rolled yet.
    let observed = job(backup, JobState::Complete(AT))
        + &job(migration, JobState::Complete(AT))
        + &observed_sts("mirror/sampledb:16.4", 1, 1, "orders-2");
    let out = run(recorded("17.0", &observed));
    assert_eq!(jobs(&out), [backup, migration]);
    assert_eq!(image(&out), "mirror/sampledb:17.0");
    assert_eq!(reason(&out), (false, "RollingOut"));
    assert_eq!(out.status_fragment()["phase"], "Upgrading");
    assert_eq!(out.status_fragment()["currentVersion"], "16.4");

    // 4. Rolled: the new version is recorded, once.
    let observed = job(backup, JobState::Complete(AT))
        + &job(migration, JobState::Complete(AT))
        + &observed_sts("mirror/sampledb:17.0", 2, 2, "orders-2");
    let out = run(recorded("17.0", &observed));
    assert_eq!(image(&out), "mirror/sampledb:17.0");
    assert_eq!(reason(&out), (true, "Upgraded"));
    assert_eq!(out.status_fragment()["currentVersion"], "17.0");
    assert_eq!(out.status_fragment()["upgradingTo"], Value::Null);
    assert!(out.status_fragment().get("phase").is_none());
    assert_eq!(out.events().len(), 1);
    assert!(!out.events()[0].warning);
    assert_eq!(out.events()[0].reason, "Upgraded");
    // The Jobs go once the status records the new version.
    assert_eq!(jobs(&out), [backup, migration]);
    let out =
        run(harness("17.0", &observed)
            .with_parent(|p| p["status"]["currentVersion"] = "17.0".into()));
    assert!(jobs(&out).is_empty());
    assert_eq!(reason(&out), (true, "UpToDate"));
    assert!(out.events().is_empty());
}

#[test]
fn a_started_migration_is_finished_before_a_new_spec_version_counts() {
    let backup = "orders-pre-upgrade-17-0";
    let migration = "orders-upgrade-17-0";
    // Before the migration starts, changing course is safe: nothing is committed.
    let out = run(harness("17.0", ""));
    assert!(out.status_fragment().get("upgradingTo").is_none());
    let migrated = job(backup, JobState::Complete(AT))
        + &job(migration, JobState::Complete(AT))
        + &observed_sts("mirror/sampledb:16.4", 1, 1, "orders-2");
    let committed = |target: &str, observed: &str| {
        run(harness(target, observed).with_parent(|p| p["status"]["upgradingTo"] = "17.0".into()))
    };
    // The data is on 17.0 and the roll has not finished; spec.version goes back to 16.4, or on
    // to 17.1. Either way 17.0 keeps its image, its Jobs and its record.
    for target in ["16.4", "17.1"] {
        let out = committed(target, &migrated);
        assert_eq!(image(&out), "mirror/sampledb:17.0", "spec.version {target}");
        assert_eq!(jobs(&out), [backup, migration]);
        assert_eq!(reason(&out), (false, "RollingOut"));
        let message = &out.condition_of("Upgrade").unwrap().message;
        assert!(
            message.contains(&format!("spec.version is now {target}")),
            "{message}"
        );
        assert_eq!(out.status_fragment()["upgradingTo"], "17.0");
        assert_eq!(out.status_fragment()["currentVersion"], "16.4");
    }
    // Rolled: 17.0 is recorded and the commitment cleared.
    let rolled = job(backup, JobState::Complete(AT))
        + &job(migration, JobState::Complete(AT))
        + &observed_sts("mirror/sampledb:17.0", 2, 2, "orders-2");
    let out = committed("16.4", &rolled);
    assert_eq!(image(&out), "mirror/sampledb:17.0");
    assert_eq!(out.status_fragment()["currentVersion"], "17.0");
    assert_eq!(out.status_fragment()["upgradingTo"], Value::Null);
    // Then spec.version 16.4 is what it is: a downgrade, refused, 17.0 kept.
    let out = run(
        harness("16.4", &rolled).with_parent(|p| p["status"]["currentVersion"] = "17.0".into())
    );
    assert_eq!(image(&out), "mirror/sampledb:17.0");
    assert_eq!(reason(&out), (false, "DowngradeRefused"));
}

#[test]
fn a_roll_in_progress_is_not_taken_for_done() {
    let done = job("orders-pre-upgrade-17-0", JobState::Complete(AT))
        + &job("orders-upgrade-17-0", JobState::Complete(AT));
    for sts in [
        observed_sts("mirror/sampledb:17.0", 2, 1, "orders-2"),
        observed_sts("mirror/sampledb:17.0", 2, 2, "orders-3"),
        observed_sts("mirror/sampledb:16.4", 2, 2, "orders-2"),
        String::new(),
    ] {
        let out = run(recorded("17.0", &(done.clone() + &sts)));
        assert_eq!(reason(&out), (false, "RollingOut"), "{sts}");
    }
    let partly_ready = observed_sts("mirror/sampledb:17.0", 2, 2, "orders-2")
        .replace("readyReplicas: 3", "readyReplicas: 2");
    let out = run(recorded("17.0", &(done + &partly_ready)));
    assert_eq!(reason(&out), (false, "RollingOut"));
}

#[test]
fn minor_upgrades_take_the_same_path() {
    let out = run(harness("16.10", ""));
    assert_eq!(jobs(&out), ["orders-pre-upgrade-16-10"]);
    assert_eq!(image(&out), "mirror/sampledb:16.4");
}

#[test]
fn a_failed_backup_holds_the_upgrade_and_is_kept() {
    let out = run(harness(
        "17.0",
        &job("orders-pre-upgrade-17-0", JobState::Failed(AT)),
    ));
    assert_eq!(jobs(&out), ["orders-pre-upgrade-17-0"]);
    assert_eq!(image(&out), "mirror/sampledb:16.4");
    assert_eq!(reason(&out), (false, "PreUpgradeBackupFailed"));
    assert!(
        out.condition_of("Upgrade")
            .unwrap()
            .message
            .contains("BackoffLimitExceeded")
    );
    assert!(out.events()[0].warning);
    assert_eq!(out.events()[0].reason, "PreUpgradeBackupFailed");
}

#[test]
fn a_failed_migration_holds_the_image_and_is_kept() {
    let observed = job("orders-pre-upgrade-17-0", JobState::Complete(AT))
        + &job("orders-upgrade-17-0", JobState::Failed(AT));
    let out = run(recorded("17.0", &observed));
    assert_eq!(
        jobs(&out),
        ["orders-pre-upgrade-17-0", "orders-upgrade-17-0"]
    );
    assert_eq!(image(&out), "mirror/sampledb:16.4");
    assert_eq!(reason(&out), (false, "UpgradeJobFailed"));
    assert!(out.events()[0].warning);
    assert_eq!(out.events()[0].reason, "UpgradeJobFailed");
}

#[test]
fn the_backup_claim_comes_from_config_and_unknown_keys_are_refused() {
    let out = run(harness("17.0", "").config(json!({"backupClaim": "nightly"})));
    assert_eq!(
        out.find("batch/v1/Job", "orders-pre-upgrade-17-0").unwrap()["spec"]["template"]["spec"]["volumes"]
            [0]["persistentVolumeClaim"]["claimName"],
        "nightly"
    );
    let err = harness("17.0", "")
        .config(json!({"backupClam": "x"}))
        .run::<Upgrade>()
        .unwrap_err();
    assert!(matches!(err, Error::InvalidConfig(m) if m.contains("backupClam")));
}

#[test]
fn without_a_statefulset_the_version_logic_still_reports() {
    let h = |target: &str| Harness::new(db()).with_parent(|p| p["spec"]["version"] = target.into());
    let out = run(h("17.0"));
    assert_eq!(reason(&out), (false, "WaitingForStatefulSet"));
    assert!(out.desired().is_empty());
    assert_eq!(out.status_fragment()["currentVersion"], "16.4");
    let out = run(h("16.1"));
    assert_eq!(reason(&out), (false, "DowngradeRefused"));
    assert!(out.desired().is_empty());
}

#[test]
fn named_credentials_are_used_by_the_jobs() {
    let out = run(harness("17.0", "")
        .with_parent(|p| p["spec"]["credentials"] = json!({"secretName": "orders-admin"})));
    assert_eq!(
        out.find("batch/v1/Job", "orders-pre-upgrade-17-0").unwrap()["spec"]["template"]["spec"]["containers"]
            [0]["env"][0]["valueFrom"]["secretKeyRef"]["name"],
        "orders-admin"
    );
}

#[test]
fn bad_versions_are_refused() {
    let err = harness("latest", "").run::<Upgrade>().unwrap_err();
    assert!(matches!(err, Error::InvalidParent(m) if m.starts_with("spec.version")));
    let err = harness("17.0", "")
        .with_parent(|p| p["status"]["currentVersion"] = "banana".into())
        .run::<Upgrade>()
        .unwrap_err();
    assert!(matches!(err, Error::Failed(m) if m.contains("status.currentVersion")));
}

#[test]
fn finalizing_has_nothing_to_clean_up() {
    let out = harness("17.0", "").finalizing().run::<Upgrade>().unwrap();
    assert!(out.is_finalized());
}

#[test]
fn backup_and_migration_pods_run_as_non_root_without_privileges_or_a_token() {
    let observed = job("orders-pre-upgrade-17-0", JobState::Complete(AT))
        + &observed_sts("mirror/sampledb:16.4", 1, 1, "orders-2");
    let out = run(recorded("17.0", &observed));
    assert_eq!(
        jobs(&out),
        ["orders-pre-upgrade-17-0", "orders-upgrade-17-0"]
    );
    for job in jobs(&out) {
        assert_restricted(&out.find("batch/v1/Job", job).unwrap()["spec"]["template"]["spec"]);
    }
}

fn supported(h: Harness) -> Harness {
    h.config(json!({"supportedVersions": ["16.4", "17.0"]}))
}

#[test]
fn a_version_not_supported_is_refused_naming_the_supported_ones() {
    // A running database asked for 99.0 keeps running 16.4, and no upgrade starts.
    let out = run(supported(harness("99.0", "")));
    assert_eq!(reason(&out), (false, "UnsupportedVersion"));
    let message = &out.condition_of("Upgrade").unwrap().message;
    assert!(
        message.contains("spec.version 99.0")
            && message.contains("supported versions: 16.4, 17.0")
            && message.contains("keeps running 16.4"),
        "{message}"
    );
    assert_eq!(image(&out), "mirror/sampledb:16.4");
    assert!(jobs(&out).is_empty());
    assert_eq!(out.status_fragment()["currentVersion"], "16.4");
    let ready = out.condition_of("Ready").unwrap();
    assert_eq!(
        (ready.status, ready.reason.as_str()),
        (false, "UnsupportedVersion")
    );
    assert!(out.events()[0].warning);

    // A new database on 99.0: no StatefulSet, so no Pod runs an image that is not supported,
    // and no version recorded.
    let new = supported(harness("99.0", "")).with_parent(|p| p["status"] = json!({}));
    let out = run(new);
    assert_eq!(reason(&out), (false, "UnsupportedVersion"));
    assert!(out.find("apps/v1/StatefulSet", "orders").is_none());
    assert!(out.status_fragment().get("currentVersion").is_none());

    // A supported one goes on as before: the upgrade starts with its backup.
    let out = run(supported(harness("17.0", "")));
    assert_eq!(jobs(&out), ["orders-pre-upgrade-17-0"]);
    // Without the config, any version.
    let out = run(harness("16.9", ""));
    assert_ne!(reason(&out).1, "UnsupportedVersion");
}

#[test]
fn an_upgrade_under_way_is_finished_even_if_its_target_is_no_longer_supported() {
    let out = run(recorded(
        "17.0",
        &job("orders-pre-upgrade-17-0", JobState::Complete(AT)),
    )
    .config(json!({"supportedVersions": ["16.4"]})));
    assert_ne!(reason(&out).1, "UnsupportedVersion");
    assert!(
        jobs(&out).contains(&"orders-upgrade-17-0"),
        "{:?}",
        jobs(&out)
    );
}

#[test]
fn supported_versions_must_be_versions() {
    for (config, field) in [
        (json!({"supportedVersions": []}), "supportedVersions: empty"),
        (
            json!({"supportedVersions": ["16.4", "latest"]}),
            "supportedVersions[1]: \"latest\"",
        ),
    ] {
        let err = harness("16.4", "")
            .config(config.clone())
            .run::<Upgrade>()
            .unwrap_err();
        assert!(
            matches!(&err, Error::InvalidConfig(m) if m.starts_with(field)),
            "{err:?}"
        );
        // The same message where the host checks the config, at load.
        assert_eq!(Upgrade::validate_config(&config), Err(err));
    }
    // An unknown key too (a misspelt supportedVersions would otherwise allow any version).
    let err = Upgrade::validate_config(&json!({"supportedVersion": ["16.4"]})).unwrap_err();
    assert!(
        matches!(&err, Error::InvalidConfig(m) if m.contains("unknown field `supportedVersion`")),
        "{err:?}"
    );
    let shipped = json!({"backupClaim": "sampledb-backups", "supportedVersions": ["15.6", "16.2", "16.4", "17.0"]});
    assert_eq!(Upgrade::validate_config(&shipped), Ok(()));
    assert_eq!(Upgrade::validate_config(&json!({})), Ok(()));
}

/// The roll once the data is migrated, with `primary` recorded and `pods` observed as
/// `(ordinal, ready, updated)`; the observed StatefulSet already has the new template.
fn rolling(primary: Option<&str>, pods: &[(i64, bool, bool)]) -> Output {
    rolling_with(primary, pods, None, |h| h)
}

/// [`rolling`], the observed StatefulSet carrying a switchover request `(to, since)` when
/// given, the harness edited by `edit` (its `now`, the config).
fn rolling_with(
    primary: Option<&str>,
    pods: &[(i64, bool, bool)],
    asked: Option<(&str, &str)>,
    edit: impl FnOnce(Harness) -> Harness,
) -> Output {
    let mut sts = observed_sts("mirror/sampledb:17.0", 2, 2, "orders-new")
        .replace("updatedReplicas: 3", "updatedReplicas: 0");
    if let Some((to, since)) = asked {
        sts = sts.replace(
            "metadata: {name: orders, generation: 2}",
            &format!(
                "metadata: {{name: orders, generation: 2, annotations: {{\"{}\": {to}, \"{}\": \"{since}\"}}}}",
                sampledb_api::SWITCHOVER_TO,
                sampledb_api::SWITCHOVER_SINCE
            ),
        );
        assert!(
            sts.contains(since),
            "the request is in the observed StatefulSet"
        );
    }
    let mut observed = job("orders-pre-upgrade-17-0", JobState::Complete(AT))
        + &job("orders-upgrade-17-0", JobState::Complete(AT))
        + &sts;
    for (i, ready, updated) in pods {
        observed += &pod(*i, *ready, if *updated { "17.0" } else { "16.4" });
    }
    let h = recorded("17.0", &observed);
    run(edit(match primary {
        Some(p) => h.with_parent(|d| d["status"]["primary"] = p.into()),
        None => h,
    }))
}

/// When the switchover in the desired StatefulSet was asked.
fn since_of(out: &Output) -> Option<&str> {
    out.find("apps/v1/StatefulSet", "orders").unwrap()["metadata"]["annotations"]
        [sampledb_api::SWITCHOVER_SINCE]
        .as_str()
}

#[test]
fn a_switchover_not_done_in_time_is_given_up_and_the_old_primary_rolls() {
    let pods = [(0, true, false), (1, true, true), (2, true, true)];
    let at = |now: &'static str| move |h: Harness| h.now(now);
    // Asked for the first time: the request carries when, and the condition how long it is
    // waited for.
    let out = rolling_with(Some("orders-0"), &pods, None, at("2026-01-01T01:00:00Z"));
    assert_eq!(roll_of(&out), (1, Some("orders-1")));
    assert_eq!(since_of(&out), Some("2026-01-01T01:00:00Z"));
    assert!(
        message(&out).contains("(asked 0s ago; after 300s orders-0 is updated without it)"),
        "{}",
        message(&out)
    );
    // 299 s later, not done yet: still held, the time kept.
    let asked = Some(("orders-1", "2026-01-01T01:00:00Z"));
    let out = rolling_with(Some("orders-0"), &pods, asked, at("2026-01-01T01:04:59Z"));
    assert_eq!(roll_of(&out), (1, Some("orders-1")));
    assert_eq!(since_of(&out), Some("2026-01-01T01:00:00Z"));
    assert!(out.events().is_empty(), "{:?}", out.events());
    // 300 s: given up. The old primary's Pod is released with a Warning naming both Pods; the
    // request stays, in case the primary plugin comes back.
    let out = rolling_with(Some("orders-0"), &pods, asked, at("2026-01-01T01:05:00Z"));
    assert_eq!(roll_of(&out), (0, Some("orders-1")));
    assert_eq!(since_of(&out), Some("2026-01-01T01:00:00Z"));
    let warning = &out.events()[0];
    assert!(warning.warning);
    assert_eq!(warning.reason, "SwitchoverTimedOut");
    assert_eq!(
        warning.message,
        "no switchover from orders-0 to orders-1 within 300s of asking (is the primary plugin \
         serving?): orders-0 is updated without one, and the primary fails over"
    );
    assert_eq!(reason(&out), (false, "RollingOut"));
    assert!(
        message(&out).contains(&warning.message),
        "{}",
        message(&out)
    );
    // A request to another Pod is a new one: its wait starts now.
    let other = Some(("orders-2", "2026-01-01T00:00:00Z"));
    let out = rolling_with(Some("orders-0"), &pods, other, at("2026-01-01T01:05:00Z"));
    assert_eq!(roll_of(&out), (1, Some("orders-1")));
    assert_eq!(since_of(&out), Some("2026-01-01T01:05:00Z"));
    // The wait is the config's.
    let out = rolling_with(Some("orders-0"), &pods, asked, |h| {
        h.now("2026-01-01T01:01:00Z")
            .config(json!({"switchoverTimeoutSeconds": 60}))
    });
    assert_eq!(roll_of(&out), (0, Some("orders-1")));
    // A primary on the highest ordinal, every Pod held for its switchover, is released too.
    let top = [(0, true, false), (1, true, false), (2, true, false)];
    let asked_top = Some(("orders-0", "2026-01-01T01:00:00Z"));
    let out = rolling_with(
        Some("orders-2"),
        &top,
        asked_top,
        at("2026-01-01T01:04:00Z"),
    );
    assert_eq!(roll_of(&out), (3, Some("orders-0")));
    let out = rolling_with(
        Some("orders-2"),
        &top,
        asked_top,
        at("2026-01-01T01:05:00Z"),
    );
    assert_eq!(roll_of(&out), (0, Some("orders-0")));
}

#[test]
fn the_switchover_timeout_is_between_a_second_and_a_day() {
    for bad in [0, 86_401] {
        let err = Upgrade::validate_config(&json!({"switchoverTimeoutSeconds": bad})).unwrap_err();
        assert_eq!(
            err,
            Error::InvalidConfig(format!(
                "switchoverTimeoutSeconds: {bad} is not between 1 and 86400"
            ))
        );
    }
    assert_eq!(
        Upgrade::validate_config(&json!({"switchoverTimeoutSeconds": 86_400})),
        Ok(())
    );
}

/// Observed Pod `orders-<i>`, running `version`.
fn pod(i: i64, ready: bool, version: &str) -> String {
    format!(
        "apiVersion: v1\nkind: Pod\nmetadata:\n  name: orders-{i}\n  labels:\n    \
         app.kubernetes.io/instance: orders\n    statefulset.kubernetes.io/pod-name: orders-{i}\n\
         spec: {{containers: [{{name: sampledb, image: \"mirror/sampledb:{version}\"}}]}}\n\
         status: {{conditions: [{{type: Ready, status: \"{}\"}}]}}\n---\n",
        if ready { "True" } else { "False" }
    )
}

/// The partition and the switchover the roll asked for.
fn roll_of(out: &Output) -> (i64, Option<&str>) {
    let sts = out.find("apps/v1/StatefulSet", "orders").unwrap();
    assert_eq!(sts["spec"]["updateStrategy"]["type"], "RollingUpdate");
    let partition = sts["spec"]["updateStrategy"]["rollingUpdate"]["partition"]
        .as_i64()
        .unwrap();
    let to = sts["metadata"]["annotations"][sampledb_api::SWITCHOVER_TO].as_str();
    if to.is_some() {
        assert_eq!(
            sts["metadata"]["annotations"][sampledb_api::SWITCHOVER_FOR],
            "the upgrade to 17.0"
        );
        assert!(
            sts["metadata"]["annotations"][sampledb_api::SWITCHOVER_FROM]
                .as_str()
                .is_some_and(|from| from.starts_with("orders-")),
            "asked from the recorded primary: {sts}"
        );
    }
    (partition, to)
}

fn message(out: &Output) -> &str {
    &out.condition_of("Upgrade").unwrap().message
}

#[test]
fn the_replicas_roll_first_then_a_planned_switchover_then_the_old_primary() {
    // The primary on orders-0: the replicas above it are updated first, the primary held.
    let out = rolling(
        Some("orders-0"),
        &[(0, true, false), (1, true, false), (2, true, false)],
    );
    assert_eq!(image(&out), "mirror/sampledb:17.0");
    assert_eq!(roll_of(&out), (1, None));
    assert_eq!(reason(&out), (false, "RollingOut"));
    assert!(
        message(&out)
            .contains("updating the replicas orders-1, orders-2 to mirror/sampledb:17.0 first"),
        "{}",
        message(&out)
    );
    // One replica done, the other not yet: still no switchover.
    let out = rolling(
        Some("orders-0"),
        &[(0, true, false), (1, true, false), (2, true, true)],
    );
    assert_eq!(roll_of(&out), (1, None));
    // An updated replica that is not ready yet is not handed the primary, and the message says
    // what the roll waits for.
    let out = rolling(
        Some("orders-0"),
        &[(0, true, false), (1, false, true), (2, true, true)],
    );
    assert_eq!(roll_of(&out), (1, None));
    assert!(
        message(&out).contains("waiting for orders-1 to be ready"),
        "{}",
        message(&out)
    );
    // Every replica updated and ready: the primary is handed to the lowest of them; the
    // partition still holds the primary's Pod.
    let out = rolling(
        Some("orders-0"),
        &[(0, true, false), (1, true, true), (2, true, true)],
    );
    assert_eq!(roll_of(&out), (1, Some("orders-1")));
    assert!(message(&out).contains("planned switchover from orders-0 to orders-1"));
    assert!(out.events().is_empty(), "the primary plugin announces it");
    // Once the primary is an updated Pod, the rest rolls: the old primary last.
    let out = rolling(
        Some("orders-1"),
        &[(0, true, false), (1, true, true), (2, true, true)],
    );
    assert_eq!(roll_of(&out), (0, None));
}

#[test]
fn a_primary_in_the_middle_keeps_its_pod_until_the_replicas_above_it_run_the_new_version() {
    let out = rolling(
        Some("orders-1"),
        &[(0, true, false), (1, true, false), (2, true, false)],
    );
    assert_eq!(roll_of(&out), (2, None));
    let out = rolling(
        Some("orders-1"),
        &[(0, true, false), (1, true, false), (2, true, true)],
    );
    assert_eq!(roll_of(&out), (2, Some("orders-2")));
    let out = rolling(
        Some("orders-2"),
        &[(0, true, false), (1, true, false), (2, true, true)],
    );
    assert_eq!(roll_of(&out), (0, None));
}

#[test]
fn a_primary_on_the_highest_ordinal_is_handed_over_before_any_pod_rolls() {
    // The StatefulSet updates the highest ordinal first: every Pod is held, and the primary
    // goes to the lowest ready replica.
    let out = rolling(
        Some("orders-2"),
        &[(0, false, false), (1, true, false), (2, true, false)],
    );
    assert_eq!(roll_of(&out), (3, Some("orders-1")));
    assert!(message(&out).contains("planned switchover to orders-1 before the roll"));
    // An updated replica (a roll interrupted earlier) is preferred: no second change then.
    let out = rolling(
        Some("orders-2"),
        &[(0, true, false), (1, true, true), (2, true, false)],
    );
    assert_eq!(roll_of(&out), (3, Some("orders-1")));
    let out = rolling(
        Some("orders-2"),
        &[(0, true, false), (1, true, false), (2, true, false)],
    );
    assert_eq!(roll_of(&out), (3, Some("orders-0")));
    // No replica ready: nothing rolls, and the condition says what it waits for.
    let out = rolling(
        Some("orders-2"),
        &[(0, false, false), (1, false, false), (2, true, false)],
    );
    assert_eq!(roll_of(&out), (3, None));
    assert!(message(&out).contains("waiting for a ready replica to hand over to"));
}

#[test]
fn without_a_recorded_primary_or_replicas_to_hand_over_to_the_statefulset_just_rolls() {
    let out = rolling(
        None,
        &[(0, true, false), (1, true, false), (2, true, false)],
    );
    assert_eq!(roll_of(&out), (0, None));
    assert!(message(&out).contains("no primary recorded"));
    // A primary named that is no Pod of this StatefulSet is no primary to protect.
    let out = rolling(
        Some("other-0"),
        &[(0, true, false), (1, true, false), (2, true, false)],
    );
    assert_eq!(roll_of(&out), (0, None));
}

#[test]
fn a_pod_counts_as_updated_by_the_version_it_runs_whatever_the_statefulsets_status_says() {
    // Each partition change is a new generation: a run may see the StatefulSet's status behind
    // its spec (here an old updateRevision, not yet observed). The new primary orders-2 runs
    // 17.0: the rest rolls, and the primary is not handed back to an old Pod.
    let mut observed = job("orders-pre-upgrade-17-0", JobState::Complete(AT))
        + &job("orders-upgrade-17-0", JobState::Complete(AT))
        + &observed_sts("mirror/sampledb:17.0", 5, 4, "orders-old");
    observed += &(pod(0, true, "16.4") + &pod(1, true, "16.4") + &pod(2, true, "17.0"));
    let out = run(
        recorded("17.0", &observed).with_parent(|d| d["status"]["primary"] = "orders-2".into())
    );
    assert_eq!(roll_of(&out), (0, None));
    // And a replica made again below the partition from the old template is not updated.
    let out = rolling(
        Some("orders-0"),
        &[(0, true, false), (1, true, false), (2, true, true)],
    );
    assert_eq!(roll_of(&out), (1, None));
}
