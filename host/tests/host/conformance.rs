//! Data-driven conformance cases, run through the real wasm runtime and the output policy:
//! `cases/<plugin>/<case>/` holds `parent.yaml` and optionally `observed.yaml`, `config.yaml`,
//! `desired.yaml` (what earlier plugins of the pipeline produced) and `phase.txt` (`finalize`),
//! and either `expected.yaml` (desired, status, conditions, events, and `finalized` in the
//! finalize phase) or `error.txt` (the exact error). Every plugin runs them, whatever its language; Rust plugins also run natively
//! through the SDK, and both runs must agree.
//!
//! A generated secret cannot be predicted: in `expected.yaml` the string `<random:N>` matches
//! any string of exactly N characters (and nothing else).
//!
//! `WINDLASS_BLESS=1` rewrites `expected.yaml` from the wasm run (review the diff!).

use std::{
    path::{Path, PathBuf},
    sync::Arc,
};

use serde_json::{Value, json};
use windlass::{
    pipeline::{Pipeline, Stage},
    render,
    runtime::{LoadOptions, Phase, Runtime, RuntimeConfig},
};

/// A plugin under test: its component and, for Rust plugins, its native entry point.
struct Subject {
    dir: &'static str,
    component: &'static str,
    native: Option<Native>,
}

/// What a case gives the plugin.
struct Input {
    phase: Phase,
    parent: Value,
    observed: Vec<Value>,
    desired: Vec<Value>,
    config: Value,
    /// Whether the plugin is granted Secrets; if not, the host withholds earlier plugins'
    /// Secrets from it and passes them on after it.
    secrets: bool,
}

type Native = fn(&Input) -> Result<(Vec<Value>, Value), String>;

fn native<P: windlass_sdk::Plugin>(input: &Input) -> Result<(Vec<Value>, Value), String> {
    let Input {
        parent,
        observed,
        desired,
        config,
        secrets,
        ..
    } = input;
    // The host only shows a plugin the kinds it declared.
    let info = P::info();
    let observed: Vec<String> = observed
        .iter()
        .filter(|o| {
            let kind = windlass::policy::kind_of(o);
            info.child_kinds.contains(&kind) || info.reads_kinds.contains(&kind)
        })
        .map(Value::to_string)
        .collect();
    let (shown, withheld): (Vec<&Value>, Vec<&Value>) = desired
        .iter()
        .partition(|o| *secrets || windlass::policy::kind_of(o) != "v1/Secret");
    let earlier: Vec<String> = shown.into_iter().map(Value::to_string).collect();
    let phase = match input.phase {
        Phase::Reconcile => windlass_sdk::Phase::Reconcile,
        Phase::Finalize => windlass_sdk::Phase::Finalize,
    };
    let (desired, status) = windlass_sdk::testing::run_json::<P>(
        phase,
        &parent.to_string(),
        &observed,
        &earlier,
        &config.to_string(),
        "2026-01-01T00:00:00Z",
    )
    .map_err(|e| e.to_string())?;
    let desired = desired
        .iter()
        .map(|d| serde_json::from_str(d).expect("native output is JSON"))
        .chain(withheld.into_iter().cloned())
        .collect();
    let status = status.map_or(json!({}), |s| {
        serde_json::from_str(&s).expect("native status is JSON")
    });
    Ok((desired, status))
}

/// Every SampleDB plugin, with its cases in `cases/<name without sampledb->/`. The Rust ones
/// also run natively to compare with; Python (componentize-py) and JavaScript (jco, QuickJS)
/// have no native run: the same cases, the same runtime and policy.
fn subjects() -> Vec<Subject> {
    windlass_test_guests::SAMPLEDB
        .iter()
        .map(|(name, component)| {
            let dir = name.trim_start_matches("sampledb-");
            Subject {
                dir,
                component,
                native: match dir {
                    "storage" => Some(native::<sampledb_storage::Storage>),
                    "backup" => Some(native::<sampledb_backup::Backup>),
                    "upgrade" => Some(native::<sampledb_upgrade::Upgrade>),
                    _ => None,
                },
            }
        })
        .collect()
}

/// `got` with every string that `expected` holds as `<random:N>` at the same place, and that
/// has exactly N characters, replaced by that placeholder.
fn match_random(got: &mut Value, expected: &Value) {
    match (got, expected) {
        (Value::String(g), Value::String(e)) => {
            if let Some(n) = e
                .strip_prefix("<random:")
                .and_then(|r| r.strip_suffix('>'))
                .and_then(|n| n.parse::<usize>().ok())
                && g.chars().count() == n
            {
                *g = e.clone();
            }
        }
        (Value::Array(g), Value::Array(e)) => {
            for (g, e) in g.iter_mut().zip(e) {
                match_random(g, e);
            }
        }
        (Value::Object(g), Value::Object(e)) => {
            for (k, g) in g.iter_mut() {
                if let Some(e) = e.get(k) {
                    match_random(g, e);
                }
            }
        }
        _ => {}
    }
}

fn read_yaml(path: &Path) -> Option<Vec<Value>> {
    let text = std::fs::read_to_string(path).ok()?;
    Some(render::parse_docs(&text, &path.display().to_string()).expect("case YAML parses"))
}

#[test]
fn every_plugin_passes_its_conformance_cases() {
    let runtime = Runtime::new(RuntimeConfig {
        max_instances: 16,
        ..RuntimeConfig::default()
    })
    .expect("runtime");
    let bless = std::env::var_os("WINDLASS_BLESS").is_some();
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/cases");
    let mut ran = 0;
    let mut failed = Vec::new();
    for subject in subjects() {
        let plugin = Arc::new(
            runtime
                .load(
                    subject.dir,
                    &windlass_test_guests::bytes(subject.component),
                    LoadOptions::default(),
                )
                .expect("plugin loads"),
        );
        let mut cases: Vec<PathBuf> = std::fs::read_dir(root.join(subject.dir))
            .expect("case directory")
            .map(|e| e.expect("entry").path())
            .filter(|p| p.is_dir())
            .collect();
        cases.sort();
        assert!(!cases.is_empty(), "no cases for {}", subject.dir);
        for case in cases {
            let name = format!(
                "{}/{}",
                subject.dir,
                case.file_name().unwrap().to_string_lossy()
            );
            // Every case runs whatever an earlier one did: one report names all that fail.
            let run = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
                run_case(&subject, &plugin, &case, bless)
            }));
            match run {
                Ok(()) => ran += 1,
                Err(panic) => failed.push(format!("{name}: {}", panic_text(&*panic))),
            }
        }
    }
    assert!(
        failed.is_empty(),
        "{} of {} cases failed:\n{}",
        failed.len(),
        ran + failed.len(),
        failed.join("\n")
    );
    assert!(ran >= 40, "ran only {ran} cases");
}

/// The message a panic carried.
fn panic_text(panic: &(dyn std::any::Any + Send)) -> String {
    panic
        .downcast_ref::<String>()
        .cloned()
        .or_else(|| panic.downcast_ref::<&str>().map(|s| s.to_string()))
        .unwrap_or_else(|| "panicked".into())
}

/// Runs one case; panics (with the case's name) on any difference.
fn run_case(subject: &Subject, plugin: &Arc<windlass::runtime::Plugin>, case: &Path, bless: bool) {
    let name = format!(
        "{}/{}",
        subject.dir,
        case.file_name().unwrap().to_string_lossy()
    );
    let parent = read_yaml(&case.join("parent.yaml"))
        .expect("parent.yaml")
        .remove(0);
    let phase = match std::fs::read_to_string(case.join("phase.txt")) {
        Ok(p) if p.trim() == "finalize" => Phase::Finalize,
        Ok(p) if p.trim() == "reconcile" => Phase::Reconcile,
        Ok(p) => panic!("{name}: phase.txt says {p:?}"),
        Err(_) => Phase::Reconcile,
    };
    let mut config = read_yaml(&case.join("config.yaml")).map_or(json!({}), |mut c| c.remove(0));
    // As `windlass dev` and the Helm preset configure them: the operator names the
    // shared backup volume, which is what lets their pods mount it.
    if matches!(plugin.name(), "sampledb-backup" | "sampledb-upgrade")
        && config.get("backupClaim").is_none()
        && let Some(map) = config.as_object_mut()
    {
        map.insert("backupClaim".into(), json!(windlass::dev::BACKUP_CLAIM));
    }
    let input = Input {
        phase,
        parent,
        observed: read_yaml(&case.join("observed.yaml")).unwrap_or_default(),
        desired: read_yaml(&case.join("desired.yaml")).unwrap_or_default(),
        config,
        secrets: plugin.name() == "sampledb-storage",
    };
    let mut stage = Stage::new(plugin.clone());
    stage.config = input.config.clone();
    // As `windlass dev` and the Helm preset grant it: the storage plugin sees Secrets.
    if plugin.name() == "sampledb-storage" {
        stage.grants = windlass::policy::Grants::Kinds(
            windlass::dev::STORAGE_GRANTS
                .iter()
                .map(|s| s.to_string())
                .collect(),
        );
    }
    let pipeline = Pipeline {
        stages: vec![stage],
        policy: Default::default(),
    };
    let result = pipeline.run(windlass::pipeline::Input {
        earlier: &input.desired,
        ..windlass::pipeline::Input::new(
            phase,
            &input.parent,
            &input.observed,
            "2026-01-01T00:00:00Z",
        )
    });

    if let Ok(expected_error) = std::fs::read_to_string(case.join("error.txt")) {
        let err = result
            .err()
            .unwrap_or_else(|| panic!("{name}: expected an error"));
        assert_eq!(err.to_string(), expected_error.trim(), "{name}");
        if let Some(native) = subject.native {
            let native_err = native(&input).expect_err("native run fails too");
            assert!(
                expected_error.trim().ends_with(&native_err),
                "{name}: native said {native_err}"
            );
        }
        return;
    }
    let outcome = result.unwrap_or_else(|e| panic!("{name}: {e}"));
    let mut got = render::to_json(&outcome);
    let got_finalized = got["finalized"].take();
    let mut got = json!({
        "desired": got["desired"].take(),
        "status": got["status"].take(),
        "conditions": got["conditions"].take(),
        "events": got["events"].take(),
    });
    // In the finalize phase, whether the plugin let the parent go is the point.
    if phase == Phase::Finalize {
        got["finalized"] = got_finalized;
    }
    let expected_path = case.join("expected.yaml");
    // Placeholders the old expectation held survive a bless where they still match.
    if let Some(mut old) = read_yaml(&expected_path) {
        match_random(&mut got, &old.remove(0));
    }
    if bless {
        std::fs::write(&expected_path, serde_yaml::to_string(&got).unwrap()).unwrap();
    }
    let expected = read_yaml(&expected_path)
        .unwrap_or_else(|| panic!("{name}: no expected.yaml or error.txt"))
        .remove(0);
    match_random(&mut got, &expected);
    assert_eq!(got, expected, "{name}: wasm run differs from expected.yaml");
    if let Some(native) = subject.native {
        let (desired, mut status) =
            native(&input).unwrap_or_else(|e| panic!("{name}: native: {e}"));
        // The policy fills in the parent's namespace; the plugin itself may leave it
        // out: compare without it.
        let strip = |objects: Vec<Value>| {
            let mut objects = Value::Array(
                objects
                    .into_iter()
                    .map(|mut o| {
                        if let Some(m) = o["metadata"].as_object_mut() {
                            m.remove("namespace");
                        }
                        o
                    })
                    .collect(),
            );
            match_random(&mut objects, &expected["desired"]);
            objects
        };
        let wasm_desired = strip(
            outcome
                .desired
                .iter()
                .map(|d| d.object.object.clone())
                .collect(),
        );
        let desired_value = strip(desired);
        match_random(&mut status, &expected["status"]);
        assert_eq!(
            wasm_desired, desired_value,
            "{name}: native and wasm desired sets differ"
        );
        assert_eq!(
            got["status"], status,
            "{name}: native and wasm status differ"
        );
    }
}
