//! `windlass trace` on `windlass dev`, run as a kubectl plugin as a user would: the example
//! SampleDB's tree with each child's plugin and digest, readiness, a drift someone else made,
//! the last run plugin by plugin from the host's admin address, conditions and events.

use std::process::{Command, Output};

use serde_json::Value;

use crate::support;

fn kubectl(kubeconfig: &std::path::Path, path: &std::ffi::OsStr, args: &[&str]) -> Output {
    Command::new("kubectl")
        .args(args)
        .env("KUBECONFIG", kubeconfig)
        .env("PATH", path)
        .output()
        .expect("kubectl runs")
}

fn ok(out: &Output, what: &str) -> String {
    assert!(
        out.status.success(),
        "{what} failed: {}\n{}",
        String::from_utf8_lossy(&out.stderr),
        String::from_utf8_lossy(&out.stdout)
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// Every node of a tree, depth first.
fn nodes(node: &Value) -> Vec<&Value> {
    let mut all = vec![node];
    for child in node["children"].as_array().into_iter().flatten() {
        all.extend(nodes(child));
    }
    all
}

#[test]
fn trace_shows_a_parents_children_their_plugins_drift_and_its_last_run() {
    let work = tempfile::tempdir().unwrap();
    let dev = support::dev::Running::start(&work.path().join("windlass-dev.kubeconfig"));
    let plugins = support::dev::kubectl_plugin_dir();
    let path = support::dev::path_with(plugins.path());
    let k = |args: &[&str]| kubectl(&dev.kubeconfig, &path, args);
    ok(
        &k(&[
            "wait",
            "--for=condition=Ready",
            "sdb/example-database",
            "--timeout=2m",
        ]),
        "waiting for Ready",
    );
    // Someone labels a child by hand: the host keeps what it applied, and the label is drift.
    ok(
        &k(&[
            "label",
            "configmap",
            "example-database-config",
            "team=payments",
        ]),
        "labelling",
    );
    // The digest each WasmPlugin serves, to hold the provenance against.
    let served: Value = serde_json::from_str(&ok(
        &k(&["get", "wasmplugins", "-o", "json"]),
        "listing WasmPlugins",
    ))
    .unwrap();
    let digest_of = |plugin: &str| -> String {
        served["items"]
            .as_array()
            .unwrap()
            .iter()
            .find(|p| p["metadata"]["name"] == plugin)
            .and_then(|p| p["status"]["digest"].as_str())
            .unwrap_or_else(|| panic!("no digest served for {plugin}"))
            .to_string()
    };
    let out = k(&[
        "windlass",
        "trace",
        "sdb/example-database",
        "-n",
        "default",
        "-o",
        "json",
    ]);
    let report: Value = serde_json::from_str(&ok(&out, "kubectl windlass trace -o json"))
        .unwrap_or_else(|e| panic!("{e}: {}", String::from_utf8_lossy(&out.stdout)));
    let tree = &report["tree"];
    assert_eq!(tree["kind"], "SampleDB");
    assert_eq!(tree["ready"], true, "{tree:#}");
    let all = nodes(tree);
    let find = |kind: &str, name: &str| -> &Value {
        all.iter()
            .find(|n| n["kind"] == kind && n["name"] == name)
            .unwrap_or_else(|| panic!("no {kind}/{name} in {tree:#}"))
    };
    // Every child the host applied says which plugin made it, with the digest that plugin
    // serves; the Pods the StatefulSet made sit under it.
    let sts = find("StatefulSet", "example-database");
    assert_eq!(sts["ready"], true, "{sts:#}");
    let pods: Vec<&str> = sts["children"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|c| c["kind"] == "Pod")
        .map(|c| c["name"].as_str().unwrap())
        .collect();
    assert_eq!(
        pods,
        [
            "example-database-0",
            "example-database-1",
            "example-database-2"
        ]
    );
    for child in tree["children"].as_array().unwrap() {
        let plugin = child["plugin"]
            .as_str()
            .unwrap_or_else(|| panic!("{} {} has no plugin", child["kind"], child["name"]));
        if child["kind"] != "PersistentVolumeClaim" {
            assert_eq!(child["digest"], digest_of(plugin), "{child:#}");
        }
    }
    find("Service", "example-database");
    find("Secret", "example-database-credentials");
    // The label is drift, by kubectl, of that field; nothing else has drifted.
    let cm = find("ConfigMap", "example-database-config");
    assert_eq!(cm["drift"][0]["manager"], "kubectl-label", "{cm:#}");
    assert_eq!(
        cm["drift"][0]["fields"][0], "metadata.labels.team",
        "{cm:#}"
    );
    let drifted: Vec<&Value> = all
        .iter()
        .filter(|n| n.get("drift").is_some())
        .copied()
        .collect();
    assert_eq!(drifted.len(), 1, "{drifted:#?}");
    // The last run, from the admin address `windlass dev` wrote into its kubeconfig: every
    // plugin in pipeline order, each with the digest it ran and how it ended.
    let run = &report["lastRun"];
    assert!(
        ["success", "requeue_after"].contains(&run["result"].as_str().unwrap_or_default()),
        "{report:#}"
    );
    let calls: Vec<(&str, &str)> = run["plugins"]
        .as_array()
        .unwrap()
        .iter()
        .map(|p| (p["name"].as_str().unwrap(), p["result"].as_str().unwrap()))
        .collect();
    assert_eq!(
        calls,
        [
            ("sampledb-storage", "ok"),
            ("sampledb-backup", "ok"),
            ("sampledb-upgrade", "ok"),
            ("sampledb-primary", "ok"),
            ("sampledb-conventions", "ok"),
            ("sampledb-chaos", "ok"),
        ]
    );
    for p in run["plugins"].as_array().unwrap() {
        assert_eq!(p["digest"], digest_of(p["name"].as_str().unwrap()));
        assert!(p["durationMs"].as_f64().unwrap() > 0.0, "{p:#}");
        assert!(p["memoryBytes"].as_u64().unwrap() > 0, "{p:#}");
    }
    let conditions: Vec<(&str, &str)> = report["conditions"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| (c["type"].as_str().unwrap(), c["status"].as_str().unwrap()))
        .collect();
    assert!(conditions.contains(&("Ready", "True")), "{conditions:?}");
    assert!(
        conditions.contains(&("Reconciled", "True")),
        "{conditions:?}"
    );
    assert!(
        report["events"]
            .as_array()
            .unwrap()
            .iter()
            .any(|e| e["reason"] == "Elected"),
        "{:#}",
        report["events"]
    );
    // The tree as text, from the binary itself, with the kubeconfig from the environment.
    let out = Command::new(env!("CARGO_BIN_EXE_windlass"))
        .args(["trace", "sampledb", "example-database"])
        .env("KUBECONFIG", &dev.kubeconfig)
        .output()
        .unwrap();
    let text = ok(&out, "windlass trace");
    for want in [
        "SampleDB/example-database",
        "└─ StatefulSet/example-database",
        "   ├─ Pod/example-database-0",
        "Drifted",
        "changed by kubectl-label",
        "Last run: ",
        "sampledb-primary",
        "Conditions:",
        "Events:",
    ] {
        assert!(text.contains(want), "no {want:?} in:\n{text}");
    }
    // A kind that no WasmPlugin reconciles, and a parent that is not there, are named.
    let out = k(&["windlass", "trace", "deployments/x"]);
    assert!(!out.status.success());
    let said = String::from_utf8_lossy(&out.stderr);
    assert!(
        said.contains("`deployments` is not a kind the WasmPlugins reconcile")
            && said.contains("SampleDB (")
            && said.contains("sdb"),
        "{said}"
    );
    let out = k(&["windlass", "trace", "sdb/nope", "-n", "default"]);
    assert!(!out.status.success());
    let said = String::from_utf8_lossy(&out.stderr);
    assert!(
        said.contains("SampleDB nope not found in namespace default"),
        "{said}"
    );
    // Without the host's admin address the tree is still there, and says why the run is not.
    let mut plain: serde_yaml::Value =
        serde_yaml::from_str(&std::fs::read_to_string(&dev.kubeconfig).unwrap()).unwrap();
    plain["clusters"][0]["cluster"]
        .as_mapping_mut()
        .unwrap()
        .remove("extensions");
    let bare = work.path().join("bare.kubeconfig");
    std::fs::write(&bare, serde_yaml::to_string(&plain).unwrap()).unwrap();
    let out = Command::new(env!("CARGO_BIN_EXE_windlass"))
        .args(["trace", "sdb/example-database", "--kubeconfig"])
        .arg(&bare)
        .env_remove("WINDLASS_ADMIN")
        .output()
        .unwrap();
    let text = ok(&out, "windlass trace without the admin address");
    assert!(
        text.contains("└─ StatefulSet/example-database")
            && text.contains("Last run: unknown: the host's admin address is not known"),
        "{text}\n{}",
        dev.log()
    );
}
