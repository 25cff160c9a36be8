//! `windlass render` and `windlass plugin inspect`, run as a user would: the binary, files,
//! stdout and the exit code.

use std::{path::Path, process::Command};

use serde_json::Value;
use windlass_test_guests as guests;

fn windlass(args: &[&str]) -> (bool, String, String) {
    let out = Command::new(env!("CARGO_BIN_EXE_windlass"))
        .args(["--no-cache"])
        .args(args)
        .current_dir(Path::new(env!("CARGO_MANIFEST_DIR")).parent().unwrap())
        .output()
        .expect("windlass runs");
    (
        out.status.success(),
        String::from_utf8(out.stdout).unwrap(),
        String::from_utf8(out.stderr).unwrap(),
    )
}

#[test]
fn render_prints_the_statefulset_its_claim_template_and_the_services_for_the_example() {
    let (ok, stdout, stderr) = windlass(&[
        "render",
        "-f",
        "examples/sampledb.yaml",
        "--plugin",
        guests::STORAGE,
    ]);
    assert!(ok, "{stderr}");
    let docs = windlass::render::parse_docs(&stdout, "stdout").unwrap();
    let kinds: Vec<String> = docs.iter().map(windlass::policy::kind_of).collect();
    assert_eq!(
        kinds,
        [
            "v1/Service",
            "v1/Service",
            "v1/ConfigMap",
            "v1/Secret",
            "apps/v1/StatefulSet"
        ]
    );
    let sts = &docs[4];
    assert_eq!(sts["metadata"]["name"], "example-database");
    assert_eq!(sts["metadata"]["namespace"], "default");
    assert_eq!(sts["spec"]["replicas"], 3);
    assert_eq!(
        sts["spec"]["volumeClaimTemplates"][0]["spec"]["resources"]["requests"]["storage"],
        "10Gi"
    );
    assert!(
        stdout.contains("# produced by sampledb-storage (sha256:"),
        "{stdout}"
    );
    assert!(stdout.contains("#   phase: Provisioning"), "{stdout}");
    assert!(
        stdout.contains("#   reason: WaitingForReplicas"),
        "{stdout}"
    );
}

#[test]
fn render_uses_observed_objects_config_and_json_output() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(
        dir.path().join("sts.yaml"),
        "apiVersion: apps/v1\nkind: StatefulSet\nmetadata: {name: example-database, namespace: default}\nstatus: {readyReplicas: 3}\n",
    )
    .unwrap();
    let observed = dir.path().to_str().unwrap();
    let (ok, stdout, stderr) = windlass(&[
        "render",
        "-f",
        "examples/sampledb.yaml",
        "--plugin",
        guests::STORAGE,
        "--observed",
        observed,
        "--config",
        "sampledb-storage:image=mirror/sampledb",
        "--now",
        "2026-05-01T00:00:00Z",
        "-o",
        "json",
    ]);
    assert!(ok, "{stderr}");
    let out: Value = serde_json::from_str(&stdout).unwrap();
    // Every replica is ready; the one-time init Job is next.
    assert_eq!(out["status"]["phase"], "Initializing");
    assert_eq!(out["desired"][5]["kind"], "Job");
    let storage_ready = out["conditions"]
        .as_array()
        .unwrap()
        .iter()
        .find(|c| c["type"] == "StorageReady")
        .expect("a StorageReady condition");
    assert_eq!(storage_ready["status"], "True");
    assert_eq!(storage_ready["plugin"], "sampledb-storage");
    assert_eq!(
        out["desired"][4]["spec"]["template"]["spec"]["containers"][0]["image"],
        "mirror/sampledb:16.4"
    );
}

#[test]
fn render_fails_clearly_on_bad_input_and_misbehaving_plugins() {
    let (ok, _, stderr) = windlass(&[
        "render",
        "-f",
        "examples/missing.yaml",
        "--plugin",
        guests::STORAGE,
    ]);
    assert!(!ok);
    assert!(stderr.contains("reading examples/missing.yaml"), "{stderr}");

    let (ok, stdout, stderr) = windlass(&[
        "render",
        "-f",
        "examples/sampledb.yaml",
        "--plugin",
        guests::STORAGE,
        "--plugin",
        guests::MISBEHAVE,
        "--config",
        "guest-misbehave:do=panic",
    ]);
    assert!(!ok);
    assert!(
        stdout.is_empty(),
        "nothing is printed when the pipeline fails: {stdout}"
    );
    assert!(
        stderr.contains("error: plugin guest-misbehave: trapped:"),
        "{stderr}"
    );

    // A plugin that checks its config refuses a bad one before anything is rendered, as the
    // host does at load.
    let (ok, stdout, stderr) = windlass(&[
        "render",
        "-f",
        "examples/sampledb.yaml",
        "--plugin",
        guests::STORAGE,
        "--plugin",
        guests::UPGRADE,
        "--config",
        r#"sampledb-upgrade:supportedVersions=["16.4", "latest"]"#,
    ]);
    assert!(!ok, "{stdout}");
    assert!(
        stderr.contains(
            r#"error: plugin sampledb-upgrade: invalid config: supportedVersions[1]: "latest" is not a version like 16.4"#
        ),
        "{stderr}"
    );

    let (ok, _, stderr) = windlass(&[
        "render",
        "-f",
        "examples/sampledb.yaml",
        "--plugin",
        guests::STORAGE,
        "--config",
        "nosuch:x=1",
    ]);
    assert!(!ok);
    assert!(
        stderr.contains("config given for plugins that are not in the pipeline: [\"nosuch\"]"),
        "{stderr}"
    );

    let (ok, _, stderr) = windlass(&[
        "render",
        "-f",
        "examples/sampledb.yaml",
        "--plugin",
        guests::MISBEHAVE,
        "--config",
        "do=clusterRoleBinding",
    ]);
    assert!(!ok);
    assert!(
        stderr.contains("confers privileges and is not granted by name"),
        "{stderr}"
    );
    let (ok, stdout, stderr) = windlass(&[
        "render",
        "-f",
        "examples/sampledb.yaml",
        "--plugin",
        guests::MISBEHAVE,
        "--config",
        "do=clusterRoleBinding",
        "--grant",
        "rbac.authorization.k8s.io/v1/ClusterRoleBinding",
    ]);
    // Granted, it is still refused for a namespaced parent: nothing could ever clean it up.
    assert!(!ok, "{stdout}");
    assert!(
        stderr.contains("is cluster-scoped and the parent is namespaced"),
        "{stderr}"
    );
}

#[test]
fn render_refuses_what_the_host_refuses_lists_other_spellings_and_parent_kinds() {
    for (attack, why) in [
        (
            "list",
            "invalid output (InvalidObject): desired[0] v1/List: kind: kind List is a list",
        ),
        (
            "upperKind",
            "invalid output (InvalidObject): desired[0] rbac.authorization.k8s.io/v1/ROLEBINDING: kind: kind ROLEBINDING is not served: the API server serves RoleBinding",
        ),
        (
            "capacity",
            "invalid output (PrivilegedKind): desired[0] storage.k8s.io/v1/CSIStorageCapacity fast-zone-a: kind storage.k8s.io/v1/CSIStorageCapacity confers privileges",
        ),
    ] {
        let config = format!("attack={attack}");
        let args = [
            "render",
            "-f",
            "examples/sampledb.yaml",
            "--plugin",
            guests::HOSTILE_KINDS,
            "--config",
            &config,
        ];
        let (ok, stdout, stderr) = windlass(&args);
        assert!(!ok && stdout.is_empty(), "{attack}: {stdout}");
        assert!(
            stderr.contains(&format!("plugin guest-hostile-kinds: {why}")),
            "{attack}: {stderr}"
        );
    }
    // A child of a kind the host would serve as a parent: here the plugin's own parent kind.
    let (ok, _, stderr) = windlass(&[
        "render",
        "-f",
        "examples/sampledb.yaml",
        "--plugin",
        guests::HOSTILE_CONTROLLERS,
        "--config",
        "attack=parentKind",
    ]);
    assert!(!ok);
    assert!(
        stderr.contains("invalid output (ParentKind): desired[0] example.com/v1/Thing db-spawn"),
        "{stderr}"
    );
}

#[test]
fn render_runs_the_finalize_phase() {
    let (ok, stdout, stderr) = windlass(&[
        "render",
        "-f",
        "examples/sampledb.yaml",
        "--plugin",
        guests::STORAGE,
        "--phase",
        "finalize",
        "-o",
        "json",
    ]);
    assert!(ok, "{stderr}");
    let out: Value = serde_json::from_str(&stdout).unwrap();
    // Storage has no cleanup of its own: it is not called, and the pipeline is finalized.
    assert_eq!(out["finalized"], true);
    assert_eq!(out["desired"], serde_json::json!([]));
}

#[test]
fn inspect_prints_info_digest_size_and_imports() {
    let (ok, stdout, stderr) = windlass(&["plugin", "inspect", guests::STORAGE, "-o", "json"]);
    assert!(ok, "{stderr}");
    let out: Value = serde_json::from_str(&stdout).unwrap();
    assert_eq!(out["name"], "sampledb-storage");
    assert_eq!(
        out["childKinds"],
        serde_json::json!([
            "v1/Service",
            "apps/v1/StatefulSet",
            "v1/ConfigMap",
            "v1/Secret",
            "batch/v1/Job"
        ])
    );
    assert_eq!(
        out["size"],
        std::fs::metadata(guests::STORAGE).unwrap().len()
    );
    assert!(out["digest"].as_str().unwrap().starts_with("sha256:"));
    // Built with the Rust SDK: contract 0.2.0, which checks its config at load.
    assert_eq!(out["checksConfig"], true);
    let (ok, stdout, stderr) =
        windlass(&["plugin", "inspect", guests::HOSTILE_FINALIZE, "-o", "json"]);
    assert!(ok, "{stderr}");
    let old: Value = serde_json::from_str(&stdout).unwrap();
    assert_eq!(old["checksConfig"], false, "a 0.1.0 component");
    assert!(
        out["imports"]
            .as_array()
            .unwrap()
            .iter()
            .any(|i| i == "windlass:plugin/types@0.1.0")
    );

    // The same component gzip-compressed, as a ConfigMap may hold it: the same plugin, and the
    // digest and size of the component itself, which is what the host reports and pins check.
    let dir = tempfile::tempdir().unwrap();
    let packed = dir.path().join("storage.wasm.gz");
    let bytes = std::fs::read(guests::STORAGE).unwrap();
    std::fs::write(&packed, windlass::source::compressed::deflate(&bytes)).unwrap();
    let (ok, stdout, stderr) =
        windlass(&["plugin", "inspect", packed.to_str().unwrap(), "-o", "json"]);
    assert!(ok, "{stderr}");
    let compressed: Value = serde_json::from_str(&stdout).unwrap();
    assert_eq!(compressed["name"], "sampledb-storage");
    assert_eq!(compressed["digest"], out["digest"]);
    assert_eq!(compressed["digest"], windlass::runtime::digest(&bytes));
    assert_eq!(compressed["size"], out["size"]);

    let (ok, _, stderr) = windlass(&["plugin", "inspect", guests::FUTURE_CONTRACT]);
    assert!(!ok);
    assert!(
        stderr.contains("incompatible contract: it exports windlass:plugin/reconciler@9.0.0"),
        "{stderr}"
    );
}
