//! `windlass plugin diff` as a user runs it against live parents, on `windlass dev` and on a
//! real control plane (where the server-side apply dry run is the API server's own): the same
//! version changes nothing, an edited config shows the objects it changes, a version that traps
//! on one parent fails the gate naming it, and a version for another kind is refused.

use std::{
    path::Path,
    process::{Command, Output},
};

use serde_json::{Value, json};
use windlass_test_guests as guests;

use crate::support;

fn windlass(kubeconfig: &Path, args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_windlass"))
        .args(args)
        .arg("--kubeconfig")
        .arg(kubeconfig)
        .output()
        .expect("windlass runs")
}

fn kubectl(kubeconfig: &Path, args: &[&str], stdin: Option<&str>) -> String {
    use std::io::Write as _;
    let mut child = Command::new("kubectl")
        .args(args)
        .env("KUBECONFIG", kubeconfig)
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .expect("kubectl runs");
    child
        .stdin
        .take()
        .unwrap()
        .write_all(stdin.unwrap_or("").as_bytes())
        .unwrap();
    let out = child.wait_with_output().unwrap();
    assert!(
        out.status.success(),
        "kubectl {args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// WasmPlugin `name` as it is, changed by `edit`, written to `path`: a file for `-f`.
fn edit_wasm_plugin(
    kubeconfig: &Path,
    name: &str,
    path: &Path,
    edit: impl FnOnce(&mut Value),
) -> String {
    let mut wp: Value = serde_json::from_str(&kubectl(
        kubeconfig,
        &["get", "wasmplugin", name, "-o", "json"],
        None,
    ))
    .unwrap();
    edit(&mut wp);
    std::fs::write(path, wp.to_string()).unwrap();
    path.to_str().unwrap().to_string()
}

/// The verdict of each parent, by name.
fn verdicts(preview: &Value) -> Vec<(String, String)> {
    let mut v: Vec<(String, String)> = preview["parents"]
        .as_array()
        .unwrap()
        .iter()
        .map(|p| {
            (
                p["name"].as_str().unwrap().to_string(),
                p["verdict"].as_str().unwrap().to_string(),
            )
        })
        .collect();
    v.sort();
    v
}

fn json_of(out: &Output) -> Value {
    serde_json::from_slice(&out.stdout).unwrap_or_else(|e| {
        panic!(
            "{e}: {}\n{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        )
    })
}

/// Everything, against the cluster of `kubeconfig` where `windlass dev` runs; `work` for files.
fn previews(kubeconfig: &Path, work: &Path, log: &dyn Fn() -> String) {
    for name in ["db-1", "db-2"] {
        kubectl(
            kubeconfig,
            &["apply", "-f", "-"],
            Some(&format!(
                "apiVersion: samples.windlass.dev/v1alpha1\nkind: SampleDB\n\
                 metadata: {{name: {name}, namespace: default}}\n\
                 spec: {{version: \"16.4\", replicas: 1, storage: {{size: 1Gi}}}}\n"
            )),
        );
    }
    for name in ["example-database", "db-1", "db-2"] {
        kubectl(
            kubeconfig,
            &[
                "wait",
                "--for=condition=Ready",
                &format!("sdb/{name}"),
                "--timeout=3m",
            ],
            None,
        );
    }
    let storage = support::sampledb_plugins()
        .into_iter()
        .find(|p| p.0 == "sampledb-storage")
        .unwrap()
        .3;
    let storage = storage.to_str().unwrap();
    // The version that serves, as a file: nothing would change on any parent. A parent may
    // still be settling right after Ready (its status catching up): tried for a while.
    let mut last = None;
    for _ in 0..30 {
        let out = windlass(
            kubeconfig,
            &[
                "plugin",
                "diff",
                "sampledb-storage",
                "--component",
                storage,
                "-o",
                "json",
            ],
        );
        let preview = json_of(&out);
        let all_same = verdicts(&preview).iter().all(|(_, v)| v == "unchanged");
        if out.status.success() && all_same {
            last = None;
            break;
        }
        last = Some(preview);
        std::thread::sleep(std::time::Duration::from_secs(1));
    }
    assert!(last.is_none(), "{:#}\n{}", last.unwrap(), log());
    // An edited WasmPlugin: the conventions with other default resources. Each parent's
    // StatefulSet and backup CronJob would change, in those fields, and the gate passes.
    let edited = edit_wasm_plugin(
        kubeconfig,
        "sampledb-conventions",
        &work.join("conventions.json"),
        |wp| {
            wp["spec"]["config"] = json!({"resources": {
                "requests": {"cpu": "250m", "memory": "256Mi"}, "limits": {"memory": "1Gi"}}});
        },
    );
    let out = windlass(kubeconfig, &["plugin", "diff", "-f", &edited, "-o", "json"]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let preview = json_of(&out);
    assert_eq!(
        verdicts(&preview),
        [
            ("db-1".to_string(), "changed".to_string()),
            ("db-2".into(), "changed".into()),
            ("example-database".into(), "changed".into())
        ],
        "{preview:#}"
    );
    for parent in preview["parents"].as_array().unwrap() {
        let name = parent["name"].as_str().unwrap();
        let sts = parent["changes"]
            .as_array()
            .unwrap()
            .iter()
            .find(|c| c["object"] == format!("apps/v1/StatefulSet default/{name}"))
            .unwrap_or_else(|| panic!("no StatefulSet change: {parent:#}"));
        let resources = |side: &str| {
            sts[side]["spec"]["template"]["spec"]["containers"][0]["resources"].clone()
        };
        assert_eq!(resources("after")["requests"]["cpu"], "250m", "{sts:#}");
        assert_eq!(resources("live")["requests"]["cpu"], "100m", "{sts:#}");
        // Nothing but the resources differs.
        let (mut live, mut after) = (sts["live"].clone(), sts["after"].clone());
        for side in [&mut live, &mut after] {
            for c in side["spec"]["template"]["spec"]["containers"]
                .as_array_mut()
                .unwrap()
            {
                c.as_object_mut().unwrap().remove("resources");
            }
            for c in side["spec"]["template"]["spec"]["initContainers"]
                .as_array_mut()
                .into_iter()
                .flatten()
            {
                c.as_object_mut().unwrap().remove("resources");
            }
        }
        assert_eq!(live, after, "more than the resources would change");
    }
    // The same as text: a unified diff of the field, and the summary.
    let out = windlass(kubeconfig, &["plugin", "diff", "-f", &edited]);
    let text = String::from_utf8_lossy(&out.stdout);
    for want in [
        "default/db-1: changed",
        "apps/v1/StatefulSet default/db-1 would be changed",
        "-            cpu: 100m",
        "+            cpu: 250m",
        "3 parent(s): 0 unchanged, 3 changed, 0 refused by policy, 0 failing",
    ] {
        assert!(text.contains(want), "no {want:?} in:\n{text}");
    }
    // A new storage version from a registry, as the host would pull it: every parent changes,
    // by the label it adds to each of its objects and nothing else.
    let registry = crate::oci::Registry::start(false);
    let reference = registry.reference("plugins/storage:v2");
    let host = reference.split('/').next().unwrap().to_string();
    let pushed = Command::new(env!("CARGO_BIN_EXE_windlass"))
        .args([
            "plugin",
            "push",
            guests::STORAGE_V2,
            &reference,
            "--plain-http",
        ])
        .output()
        .unwrap();
    assert!(
        pushed.status.success(),
        "{}",
        String::from_utf8_lossy(&pushed.stderr)
    );
    let out = windlass(
        kubeconfig,
        &[
            "plugin",
            "diff",
            "sampledb-storage",
            "--oci",
            &reference,
            "--insecure-registry",
            &host,
            "-o",
            "json",
        ],
    );
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let preview = json_of(&out);
    assert_eq!(
        preview["digest"],
        crate::oci::digest_of(guests::STORAGE_V2),
        "{preview:#}"
    );
    assert!(
        verdicts(&preview).iter().all(|(_, v)| v == "changed"),
        "{preview:#}"
    );
    for parent in preview["parents"].as_array().unwrap() {
        for change in parent["changes"].as_array().unwrap() {
            let (mut live, mut after) = (change["live"].clone(), change["after"].clone());
            let label = "samples.windlass.dev/storage-version";
            assert_eq!(after["metadata"]["labels"][label], "2", "{change:#}");
            // Apart from the label, and the provenance annotation naming the new digest.
            for side in [&mut live, &mut after] {
                let meta = side["metadata"].as_object_mut().unwrap();
                if let Some(l) = meta.get_mut("labels").and_then(Value::as_object_mut) {
                    l.remove(label);
                }
                if let Some(a) = meta.get_mut("annotations").and_then(Value::as_object_mut) {
                    a.remove("windlass.dev/produced-by");
                }
                if let Some(t) = side
                    .pointer_mut("/spec/template/metadata/labels")
                    .and_then(Value::as_object_mut)
                {
                    t.remove(label);
                }
                if let Some(t) = side
                    .pointer_mut("/spec/template/metadata/annotations")
                    .and_then(Value::as_object_mut)
                {
                    t.remove("windlass.dev/produced-by");
                }
            }
            assert_eq!(live, after, "more than the label changes: {change:#}");
        }
    }
    // A broken new storage version: it traps on parents whose name ends in an even number.
    // db-2 fails, the others do not, and the gate says so with its exit status.
    let broken = edit_wasm_plugin(
        kubeconfig,
        "sampledb-storage",
        &work.join("flaky.json"),
        |wp| {
            wp["spec"]["source"] = json!({"file": {"path": guests::FLAKY_STORAGE}});
            wp["spec"]["config"] = json!({"misbehave": "trap", "every": 2});
        },
    );
    let out = windlass(kubeconfig, &["plugin", "diff", "-f", &broken, "-o", "json"]);
    assert!(
        !out.status.success(),
        "the gate passed a version that traps"
    );
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.contains("1 of 3 parents would be refused or fail"),
        "{stderr}"
    );
    let preview = json_of(&out);
    let v = verdicts(&preview);
    assert_eq!(
        v[1],
        ("db-2".to_string(), "failing".to_string()),
        "{preview:#}"
    );
    assert!(v[0].1 != "failing" && v[2].1 != "failing", "{preview:#}");
    let db2 = preview["parents"]
        .as_array()
        .unwrap()
        .iter()
        .find(|p| p["name"] == "db-2")
        .unwrap();
    assert!(
        db2["message"]
            .as_str()
            .unwrap()
            .contains("sampledb-storage"),
        "{db2:#}"
    );
    // A component for another parent kind is refused before any parent, naming it.
    let out = windlass(
        kubeconfig,
        &[
            "plugin",
            "diff",
            "sampledb-storage",
            "--component",
            guests::CHILDREN,
        ],
    );
    assert!(!out.status.success());
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.contains("previewing WasmPlugin sampledb-storage")
            && stderr.contains("samples.windlass.dev/v1alpha1/SampleDB"),
        "{stderr}"
    );
    // Nothing was applied: the StatefulSets keep the resources they had.
    let sts = kubectl(
        kubeconfig,
        &[
            "get",
            "statefulset",
            "db-1",
            "-o",
            "jsonpath={.spec.template.spec.containers[0].resources.requests.cpu}",
        ],
        None,
    );
    assert_eq!(sts, "100m");
}

#[test]
fn plugin_diff_previews_a_new_version_on_every_live_parent_of_windlass_dev() {
    let work = tempfile::tempdir().unwrap();
    let dev = support::dev::Running::start(&work.path().join("windlass-dev.kubeconfig"));
    previews(&dev.kubeconfig, work.path(), &|| dev.log());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn plugin_diff_previews_a_new_version_on_a_real_control_plane() {
    let plane = windlass_kubeplane::ControlPlane::start()
        .await
        .expect("the control plane starts");
    let kubeconfig = plane.kubeconfig().to_path_buf();
    tokio::task::spawn_blocking(move || {
        let work = tempfile::tempdir().unwrap();
        let dev = support::dev::Running::on(&kubeconfig);
        previews(&kubeconfig, work.path(), &|| dev.log());
    })
    .await
    .unwrap();
}

/// `rollout.diffGate`: the host runs a new version on every live parent before it serves. The
/// canary tries the first three (all fine here); the gate finds the one further on that the
/// version fails, and the old version keeps serving; fixed, it serves, and the status counts
/// the parents it changes.
#[test]
fn a_diff_gate_keeps_a_version_that_fails_on_any_live_parent_from_serving() {
    let work = tempfile::tempdir().unwrap();
    let dev = support::dev::Running::start(&work.path().join("windlass-dev.kubeconfig"));
    let kubeconfig = &dev.kubeconfig;
    // Listed by name: a-1, a-3, a-5 (the canary's three), example-database, z-2.
    let names = ["a-1", "a-3", "a-5", "z-2"];
    for name in names {
        kubectl(
            kubeconfig,
            &["apply", "-f", "-"],
            Some(&format!(
                "apiVersion: samples.windlass.dev/v1alpha1\nkind: SampleDB\n\
                 metadata: {{name: {name}, namespace: default}}\n\
                 spec: {{version: \"16.4\", replicas: 1, storage: {{size: 1Gi}}}}\n"
            )),
        );
    }
    let all_ready = || {
        for name in names.iter().chain(&["example-database"]) {
            kubectl(
                kubeconfig,
                &[
                    "wait",
                    "--for=condition=Ready",
                    &format!("sdb/{name}"),
                    "--timeout=3m",
                ],
                None,
            );
        }
    };
    all_ready();
    let storage = || -> Value {
        serde_json::from_str(&kubectl(
            kubeconfig,
            &["get", "wasmplugin", "sampledb-storage", "-o", "json"],
            None,
        ))
        .unwrap()
    };
    let serving = storage()["status"]["digest"].as_str().unwrap().to_string();
    let patch = |config: Value| {
        let body = json!({"spec": {
            "rollout": {"diffGate": true},
            "source": {"configMap": null, "file": {"path": guests::FLAKY_STORAGE}},
            "config": config,
        }});
        kubectl(
            kubeconfig,
            &[
                "patch",
                "wasmplugin",
                "sampledb-storage",
                "--type",
                "merge",
                "-p",
                &body.to_string(),
            ],
            None,
        );
    };
    let until = |what: &str, ok: &dyn Fn(&Value) -> bool| -> Value {
        for _ in 0..120 {
            let wp = storage();
            if ok(&wp) {
                return wp;
            }
            std::thread::sleep(std::time::Duration::from_millis(500));
        }
        panic!("{what}: {:#}\n{}", storage(), dev.log());
    };
    let ready = |wp: &Value| -> Value {
        wp["status"]["conditions"]
            .as_array()
            .into_iter()
            .flatten()
            .find(|c| c["type"] == "Ready")
            .cloned()
            .unwrap_or(Value::Null)
    };
    // A version that traps on z-2: refused by the gate, naming it; the old one serves on.
    patch(json!({"misbehave": "trap", "every": 2}));
    let wp = until("the gate refusing the version", &|wp| {
        ready(wp)["reason"] == "DiffGateRefused"
    });
    let message = ready(&wp)["message"].as_str().unwrap().to_string();
    assert!(
        message.contains("fail on 1 of 5 parents") && message.contains("default/z-2"),
        "{message}"
    );
    assert_eq!(wp["status"]["digest"], serving.as_str());
    assert!(wp["status"].get("rollout").is_none(), "{wp:#}");
    // The same version told to trap nowhere: it serves, and the status says what it changed.
    patch(json!({"misbehave": "trap", "every": 1_000_000}));
    let wp = until("the version serving", &|wp| {
        wp["status"]["digest"] != serving.as_str() && wp["status"].get("rollout").is_some()
    });
    let rollout = &wp["status"]["rollout"];
    assert_eq!(rollout["digest"], wp["status"]["digest"], "{wp:#}");
    assert_eq!(rollout["parents"], 5, "{wp:#}");
    assert_eq!(
        rollout["changed"].as_u64().unwrap() + rollout["unchanged"].as_u64().unwrap(),
        5,
        "{wp:#}"
    );
    assert_eq!(ready(&wp)["status"], "True", "{wp:#}");
    all_ready();
}
