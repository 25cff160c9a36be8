#![allow(clippy::unwrap_used)] // Tests: a panic is the failure report.

use sampledb_api::testing::{JobState, job};
use sampledb_storage::*;
use windlass_sdk::{Error, Output, Value, json, testing::Harness};

/// When an observed Job finished.
const AT: &str = "2026-01-01T00:05:00Z";

fn db() -> Value {
    sampledb_api::testing::sampledb(json!({
        "version": "16.4", "replicas": 3,
        "storage": {"size": "10Gi", "storageClassName": "fast"},
        "config": {"max_connections": "200"},
    }))
}

const STS_READY: &str = "apiVersion: apps/v1\nkind: StatefulSet\nmetadata: {name: orders}\nstatus: {replicas: 3, readyReplicas: 3}";
const STS_ONE_READY: &str = "apiVersion: apps/v1\nkind: StatefulSet\nmetadata: {name: orders}\nstatus: {replicas: 3, readyReplicas: 1}";

fn run(h: Harness) -> Output {
    h.run::<Storage>().unwrap()
}

/// The init Job as observed (JSON, a YAML document), with the image it was made with.
fn init_job_observed(state: JobState<'_>) -> String {
    let mut job = job("orders-init", state);
    job["spec"] =
        json!({"template": {"spec": {"containers": [{"name": "init", "image": "sampledb:16.3"}]}}});
    job.to_string()
}
fn container(out: &Output) -> &Value {
    &out.find("apps/v1/StatefulSet", "orders").unwrap()["spec"]["template"]["spec"]["containers"][0]
}

fn assert_restricted(pod: &Value) {
    if let Err(e) = sampledb_api::pod::check_restricted(pod) {
        panic!("not restricted: {e}\n{pod:#}");
    }
}

fn secret_data(out: &Output) -> &Value {
    &out.find("v1/Secret", "orders-credentials").unwrap()["data"]
}

fn decode(b64: &Value) -> String {
    let bytes: windlass_sdk::k8s_openapi::ByteString = serde_json::from_value(b64.clone()).unwrap();
    String::from_utf8(bytes.0).unwrap()
}

#[test]
fn a_new_sampledb_gets_a_statefulset_with_a_claim_template_and_two_services() {
    let out = run(Harness::new(db()));
    let sts = out.find("apps/v1/StatefulSet", "orders").unwrap();
    assert_eq!(sts["spec"]["replicas"], 3);
    assert_eq!(sts["spec"]["serviceName"], "orders-headless");
    assert_eq!(container(&out)["name"], sampledb_api::CONTAINER);
    assert_eq!(container(&out)["image"], "sampledb:16.4");
    assert_eq!(
        container(&out)["volumeMounts"][0]["mountPath"],
        sampledb_api::DATA_MOUNT
    );
    let claim = &sts["spec"]["volumeClaimTemplates"][0];
    assert_eq!(claim["metadata"]["name"], "data");
    assert_eq!(claim["spec"]["resources"]["requests"]["storage"], "10Gi");
    assert_eq!(claim["spec"]["storageClassName"], "fast");
    assert_eq!(
        out.find("v1/Service", "orders-headless").unwrap()["spec"]["clusterIP"],
        "None"
    );
    assert_eq!(
        out.find("v1/Service", "orders").unwrap()["spec"]["type"],
        "ClusterIP"
    );
    // Services, ConfigMap, Secret, StatefulSet; no init Job before a replica is ready.
    assert_eq!(out.desired().len(), 5);
}

#[test]
fn the_config_map_holds_the_settings_and_the_connection_details() {
    let out = run(Harness::new(db()));
    let cm = out.find("v1/ConfigMap", "orders-config").unwrap();
    assert_eq!(
        cm["data"],
        json!({"max_connections": "200", "host": "orders.shop.svc", "port": "5432"})
    );
}

#[test]
fn reserved_or_invalid_config_keys_are_refused() {
    let err = Harness::new(db())
        .with_parent(|p| p["spec"]["config"]["host"] = "elsewhere".into())
        .run::<Storage>()
        .unwrap_err();
    assert!(matches!(err, Error::InvalidParent(m) if m.starts_with("spec.config.host")));
    let err = Harness::new(db())
        .with_parent(|p| p["spec"]["config"]["a key"] = "x".into())
        .run::<Storage>()
        .unwrap_err();
    assert!(matches!(err, Error::InvalidParent(m) if m.contains("\"a key\"")));
}

#[test]
fn the_container_reads_the_config_map_and_the_credentials() {
    let out = run(Harness::new(db()));
    let c = container(&out);
    assert_eq!(
        c["envFrom"],
        json!([{"configMapRef": {"name": "orders-config"}}])
    );
    assert_eq!(
        c["env"],
        json!([
            {"name": "SAMPLEDB_USER", "valueFrom": {"secretKeyRef": {"name": "orders-credentials", "key": "username"}}},
            {"name": "SAMPLEDB_PASSWORD", "valueFrom": {"secretKeyRef": {"name": "orders-credentials", "key": "password"}}},
        ])
    );
    // A Secret named by the spec is used, and none is generated.
    let out = run(Harness::new(db())
        .with_parent(|p| p["spec"]["credentials"] = json!({"secretName": "orders-admin"})));
    assert_eq!(
        container(&out)["env"][1]["valueFrom"]["secretKeyRef"]["name"],
        "orders-admin"
    );
    assert!(out.find("v1/Secret", "orders-credentials").is_none());
}

#[test]
fn a_generated_secret_is_immutable_with_a_random_32_character_password() {
    let (a, b) = (run(Harness::new(db())), run(Harness::new(db())));
    let secret = a.find("v1/Secret", "orders-credentials").unwrap();
    assert_eq!(secret["immutable"], true);
    assert_eq!(secret["type"], "Opaque");
    assert_eq!(decode(&secret_data(&a)["username"]), "sampledb");
    let (pa, pb) = (
        decode(&secret_data(&a)["password"]),
        decode(&secret_data(&b)["password"]),
    );
    for p in [&pa, &pb] {
        assert_eq!(p.len(), 32);
        assert!(p.chars().all(|c| c.is_ascii_alphanumeric()), "{p}");
    }
    assert_ne!(pa, pb, "two fresh databases share a password");
}

#[test]
fn an_observed_secret_is_never_rotated() {
    let observed = "apiVersion: v1\nkind: Secret\nmetadata: {name: orders-credentials}\ntype: Opaque\nimmutable: true\ndata: {username: c2FtcGxlZGI=, password: c2VjcmV0c2VjcmV0}";
    for _ in 0..2 {
        let out = run(Harness::new(db()).observed_yaml(observed));
        assert_eq!(
            *secret_data(&out),
            json!({"username": "c2FtcGxlZGI=", "password": "c2VjcmV0c2VjcmV0"})
        );
        assert_eq!(
            out.find("v1/Secret", "orders-credentials").unwrap()["immutable"],
            true
        );
    }
}

#[test]
fn claims_are_kept_on_scale_down_and_follow_the_deletion_policy() {
    let policy = |p: &str| {
        let out = run(Harness::new(db()).with_parent(|d| d["spec"]["deletionPolicy"] = p.into()));
        out.find("apps/v1/StatefulSet", "orders").unwrap()["spec"]
            ["persistentVolumeClaimRetentionPolicy"]
            .clone()
    };
    let delete = json!({"whenDeleted": "Delete", "whenScaled": "Retain"});
    assert_eq!(policy("Snapshot"), delete);
    assert_eq!(policy("Delete"), delete);
    assert_eq!(
        policy("Retain"),
        json!({"whenDeleted": "Retain", "whenScaled": "Retain"})
    );
    // Snapshot is the default.
    let out = run(Harness::new(db()));
    assert_eq!(
        out.find("apps/v1/StatefulSet", "orders").unwrap()["spec"]["persistentVolumeClaimRetentionPolicy"],
        delete
    );
}

#[test]
fn the_init_job_starts_only_once_a_replica_is_ready() {
    let out = run(Harness::new(db()));
    assert!(out.find("batch/v1/Job", "orders-init").is_none());
    let c = out.condition_of("Initialized").unwrap();
    assert_eq!((c.status, c.reason.as_str()), (false, "WaitingForPrimary"));
    assert_eq!(out.requeue(), Some(REQUEUE));

    let out = run(Harness::new(db()).observed_yaml(STS_ONE_READY));
    let job = out.find("batch/v1/Job", "orders-init").unwrap();
    let pod = &job["spec"]["template"]["spec"];
    assert_eq!(job["spec"]["backoffLimit"], 3);
    assert_eq!(pod["restartPolicy"], "Never");
    assert_eq!(pod["containers"][0]["image"], "sampledb:16.4");
    assert_eq!(pod["containers"][0]["command"], json!(["sampledb-init"]));
    assert_eq!(pod["containers"][0]["env"], container(&out)["env"]);
    assert_eq!(pod["containers"][0]["envFrom"], container(&out)["envFrom"]);
    // Its Pod must not look like a database Pod to the Services.
    assert!(job["spec"]["template"]["metadata"].is_null());
    assert_eq!(out.status_fragment()["phase"], "Provisioning");
    let c = out.condition_of("Initialized").unwrap();
    assert_eq!((c.status, c.reason.as_str()), (false, "InitJobRunning"));
}

#[test]
fn phase_goes_provisioning_initializing_ready() {
    let out = run(Harness::new(db()));
    assert_eq!(out.status_fragment()["phase"], "Provisioning");
    assert!(!out.condition_of("StorageReady").unwrap().status);
    let ready = |out: &Output| {
        let c = out.condition_of("Ready").unwrap();
        (c.status, c.reason.clone())
    };
    assert_eq!(ready(&out), (false, "WaitingForReplicas".into()));

    let out = run(Harness::new(db()).observed_yaml(STS_READY));
    assert_eq!(out.status_fragment()["phase"], "Initializing");
    assert!(out.condition_of("StorageReady").unwrap().status);
    assert_eq!(ready(&out), (false, "Initializing".into()));
    assert_eq!(out.status_fragment()["readyReplicas"], 3);
    assert_eq!(
        out.status_fragment()["endpoints"]["readWrite"],
        "orders.shop.svc:5432"
    );
    assert_eq!(out.requeue(), Some(REQUEUE));

    let done = format!(
        "{STS_READY}\n---\n{}",
        init_job_observed(JobState::Complete(AT))
    );
    let out = run(Harness::new(db()).observed_yaml(&done));
    assert_eq!(out.status_fragment()["phase"], "Ready");
    assert_eq!(out.status_fragment()["initialized"], true);
    let c = out.condition_of("Initialized").unwrap();
    assert_eq!((c.status, c.reason.as_str()), (true, "InitJobComplete"));
    assert_eq!(ready(&out), (true, "Serving".into()));
    assert_eq!(out.requeue(), None);
}

#[test]
fn a_completed_init_job_is_kept_until_the_status_records_it_and_never_runs_again() {
    let done = format!(
        "{STS_READY}\n---\n{}",
        init_job_observed(JobState::Complete(AT))
    );
    let out = run(Harness::new(db()).observed_yaml(&done));
    // Still desired in this run, so a stale read of the parent cannot recreate it.
    assert!(out.find("batch/v1/Job", "orders-init").is_some());

    let initialized =
        Harness::new(db()).with_parent(|p| p["status"] = json!({"initialized": true}));
    for observed in [done.as_str(), STS_READY, STS_ONE_READY] {
        let out = run(initialized.clone().observed_yaml(observed));
        assert!(
            out.find("batch/v1/Job", "orders-init").is_none(),
            "{observed}"
        );
        assert_eq!(out.status_fragment()["initialized"], true);
    }
    let out = run(initialized.observed_yaml(STS_READY));
    assert_eq!(out.status_fragment()["phase"], "Ready");
}

#[test]
fn a_running_init_job_stays_desired_with_its_own_image() {
    // The replica went away and the version moved on: the Job must neither go nor change.
    let out = run(Harness::new(db())
        .observed_yaml(&init_job_observed(JobState::Running))
        .with_parent(|p| p["spec"]["version"] = "16.5".into()));
    let job = out.find("batch/v1/Job", "orders-init").unwrap();
    assert_eq!(
        job["spec"]["template"]["spec"]["containers"][0]["image"],
        "sampledb:16.3"
    );
}

#[test]
fn a_failed_init_job_is_reported_and_kept() {
    let failed = format!(
        "{STS_READY}\n---\n{}",
        init_job_observed(JobState::Failed(AT))
    );
    let out = run(Harness::new(db()).observed_yaml(&failed));
    assert!(out.find("batch/v1/Job", "orders-init").is_some());
    let c = out.condition_of("Initialized").unwrap();
    assert_eq!((c.status, c.reason.as_str()), (false, "InitJobFailed"));
    assert!(c.message.contains("BackoffLimitExceeded"), "{}", c.message);
    assert_eq!(out.events().len(), 1);
    assert!(out.events()[0].warning);
    assert_eq!(out.events()[0].reason, "InitJobFailed");
    assert_eq!(out.status_fragment()["phase"], "Initializing");
    assert!(out.status_fragment().get("initialized").is_none());
    let ready = out.condition_of("Ready").unwrap();
    assert_eq!(
        (ready.status, ready.reason.as_str()),
        (false, "InitJobFailed")
    );
}

#[test]
fn a_restored_database_is_not_initialised() {
    let out = run(Harness::new(db())
        .with_parent(|p| p["spec"]["restoreFrom"] = "orders-backup-7".into())
        .observed_yaml(STS_READY));
    assert!(out.find("batch/v1/Job", "orders-init").is_none());
    assert_eq!(out.status_fragment()["phase"], "Ready");
    let c = out.condition_of("Initialized").unwrap();
    assert_eq!((c.status, c.reason.as_str()), (true, "RestoredFromBackup"));
    assert!(out.status_fragment().get("initialized").is_none());
}

#[test]
fn bad_specs_are_refused_naming_the_field() {
    let bad = |edit: fn(&mut Value)| {
        Harness::new(db())
            .with_parent(edit)
            .run::<Storage>()
            .unwrap_err()
    };
    assert_eq!(
        bad(|p| p["spec"]["replicas"] = 0.into()),
        Error::InvalidParent("spec.replicas: must be at least 1, got 0".into())
    );
    assert!(
        matches!(bad(|p| p["spec"]["version"] = "latest".into()), Error::InvalidParent(m) if m.starts_with("spec.version"))
    );
    assert!(
        matches!(bad(|p| p["spec"]["storage"]["size"] = "lots".into()), Error::InvalidParent(m) if m.starts_with("spec.storage.size"))
    );
    assert!(
        matches!(bad(|p| { p["spec"].as_object_mut().unwrap().remove("storage"); }), Error::InvalidParent(m) if m.contains("storage"))
    );
}

#[test]
fn the_image_comes_from_config_and_unknown_keys_are_refused() {
    let out = run(Harness::new(db())
        .config(json!({"image": "mirror/sampledb"}))
        .observed_yaml(STS_ONE_READY));
    assert_eq!(container(&out)["image"], "mirror/sampledb:16.4");
    assert_eq!(
        out.find("batch/v1/Job", "orders-init").unwrap()["spec"]["template"]["spec"]["containers"]
            [0]["image"],
        "mirror/sampledb:16.4"
    );
    let err = Harness::new(db())
        .config(json!({"imag": "x"}))
        .run::<Storage>()
        .unwrap_err();
    assert!(matches!(err, Error::InvalidConfig(m) if m.contains("imag")));
}

#[test]
fn objects_from_earlier_plugins_are_kept() {
    let earlier = json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "other"}});
    let out = run(Harness::new(db()).desired([earlier]));
    assert!(out.find("v1/ConfigMap", "other").is_some());
    assert_eq!(out.desired().len(), 6);
}

#[test]
fn the_database_and_init_pods_run_as_non_root_without_privileges_or_a_token() {
    let out = run(Harness::new(db()).observed_yaml(STS_ONE_READY));
    for (kind, name) in [
        ("apps/v1/StatefulSet", "orders"),
        ("batch/v1/Job", "orders-init"),
    ] {
        assert_restricted(&out.find(kind, name).unwrap()["spec"]["template"]["spec"]);
    }
}
