//! Record and replay: `windlass dev --record-dir` records every plugin call of a SampleDB
//! annotated `windlass.dev/record: "true"`, and `windlass render --replay` reproduces each one
//! offline byte for byte with the component that made it — the Python plugin's, whose
//! interpreter draws randomness as it starts, too — and shows the difference a changed plugin
//! makes.

use std::{path::Path, process::Command};

use serde_json::Value;
use windlass_test_guests as guests;

use crate::support;

fn replay(recording: &Path, plugin: &str) -> std::process::Output {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).parent().unwrap();
    Command::new(env!("CARGO_BIN_EXE_windlass"))
        .arg("--cache-dir")
        .arg(root.join("target/e2e-plugin-cache"))
        .args(["render", "--replay"])
        .arg(recording)
        .args(["--plugin", plugin])
        .output()
        .expect("windlass runs")
}

#[test]
fn a_recorded_reconcile_replays_byte_for_byte_and_a_changed_plugin_shows_its_diff() {
    let work = tempfile::tempdir().unwrap();
    let records = work.path().join("records");
    let dev = support::dev::Running::start_with(
        &work.path().join("windlass-dev.kubeconfig"),
        &["--record-dir".as_ref(), records.as_os_str()],
    );
    let kubectl = |args: &[&str]| {
        let out = Command::new("kubectl")
            .args(args)
            .env("KUBECONFIG", &dev.kubeconfig)
            .output()
            .unwrap();
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
    };
    kubectl(&[
        "wait",
        "--for=condition=Ready",
        "sdb/example-database",
        "--timeout=2m",
    ]);
    // Nothing is recorded until the parent asks.
    assert!(!records.exists(), "recorded without the annotation");
    kubectl(&[
        "annotate",
        "sdb",
        "example-database",
        "windlass.dev/record=true",
    ]);
    let dir = records.join("default/example-database");
    let mut files = Vec::new();
    for _ in 0..120 {
        files = std::fs::read_dir(&dir)
            .map(|d| d.filter_map(|e| e.ok().map(|e| e.path())).collect())
            .unwrap_or_default();
        if files.len() >= 6 {
            break;
        }
        std::thread::sleep(std::time::Duration::from_millis(250));
    }
    files.sort();
    let run: Vec<&std::path::PathBuf> = files.iter().take(6).collect();
    assert_eq!(run.len(), 6, "{files:?}\n{}", dev.log());
    // One reconcile: every plugin's call, in pipeline order, the same request time.
    let read =
        |p: &Path| -> Value { serde_json::from_str(&std::fs::read_to_string(p).unwrap()).unwrap() };
    let recorded: Vec<Value> = run.iter().map(|p| read(p)).collect();
    let plugins: Vec<&str> = recorded
        .iter()
        .map(|r| r["plugin"].as_str().unwrap())
        .collect();
    assert_eq!(
        plugins,
        [
            "sampledb-storage",
            "sampledb-backup",
            "sampledb-upgrade",
            "sampledb-primary",
            "sampledb-conventions",
            "sampledb-chaos"
        ]
    );
    assert!(
        recorded
            .iter()
            .all(|r| r["request"]["now"] == recorded[0]["request"]["now"])
    );
    let primary = &recorded[3];
    assert!(
        !primary["entropy"].as_str().unwrap().is_empty(),
        "the Python interpreter drew no randomness: {primary:#}"
    );
    // Each replays byte for byte with its own component.
    for (path, (name, component)) in run.iter().zip(guests::SAMPLEDB) {
        let out = replay(path, component);
        let said = String::from_utf8_lossy(&out.stdout);
        assert!(
            out.status.success() && said.starts_with(&format!("reproduced: {name}@sha256:")),
            "{name}: {said}\n{}",
            String::from_utf8_lossy(&out.stderr)
        );
    }
    // A changed storage plugin: the same request, another answer, shown as a diff; exit 1.
    let out = replay(run[0], guests::STORAGE_V2);
    let said = String::from_utf8_lossy(&out.stdout);
    assert!(!out.status.success(), "{said}");
    assert!(
        said.contains("sampledb-storage: replayed with sha256:")
            && said.contains("its answer differs")
            && said.contains("+      samples.windlass.dev/storage-version: '2'"),
        "{said}"
    );
}
