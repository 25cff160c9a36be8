//! Data-driven conformance cases, run through the real wasm runtime and the output policy:
//! `cases/<plugin>/<case>/{parent.yaml, observed.yaml?, config.yaml?}` and either
//! `expected.yaml` (desired, status, conditions, events) or `error.txt` (the exact error).
//! Rust plugins also run natively through the SDK, and both runs must agree.
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
    native: Option<fn(&Value, &[Value], &Value) -> Result<(Vec<Value>, Value), String>>,
}

fn native<P: windlass_sdk::Plugin>(
    parent: &Value,
    observed: &[Value],
    config: &Value,
) -> Result<(Vec<Value>, Value), String> {
    // The host only shows a plugin the kinds it declared.
    let info = P::info();
    let observed: Vec<String> = observed
        .iter()
        .filter(|o| {
            let kind = windlass::pipeline::kind_of(o);
            info.child_kinds.contains(&kind) || info.reads_kinds.contains(&kind)
        })
        .map(Value::to_string)
        .collect();
    let (desired, status) = windlass_sdk::testing::run_json::<P>(
        windlass_sdk::Phase::Reconcile,
        &parent.to_string(),
        &observed,
        &[],
        &config.to_string(),
        "2026-01-01T00:00:00Z",
    )
    .map_err(|e| e.to_string())?;
    let desired = desired
        .iter()
        .map(|d| serde_json::from_str(d).expect("native output is JSON"))
        .collect();
    let status = status.map_or(json!({}), |s| {
        serde_json::from_str(&s).expect("native status is JSON")
    });
    Ok((desired, status))
}

fn subjects() -> Vec<Subject> {
    vec![Subject {
        dir: "storage",
        component: windlass_test_guests::STORAGE,
        native: Some(native::<storage_plugin::Storage>),
    }]
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
            let parent = read_yaml(&case.join("parent.yaml"))
                .expect("parent.yaml")
                .remove(0);
            let observed = read_yaml(&case.join("observed.yaml")).unwrap_or_default();
            let config =
                read_yaml(&case.join("config.yaml")).map_or(json!({}), |mut c| c.remove(0));
            let mut stage = Stage::new(plugin.clone());
            stage.config = config.clone();
            let pipeline = Pipeline {
                stages: vec![stage],
                policy: Default::default(),
            };
            let result = pipeline.run(Phase::Reconcile, &parent, &observed, "2026-01-01T00:00:00Z");

            if let Ok(expected_error) = std::fs::read_to_string(case.join("error.txt")) {
                let err = result
                    .err()
                    .unwrap_or_else(|| panic!("{name}: expected an error"));
                assert_eq!(err.to_string(), expected_error.trim(), "{name}");
                if let Some(native) = subject.native {
                    let native_err =
                        native(&parent, &observed, &config).expect_err("native run fails too");
                    assert!(
                        expected_error.trim().ends_with(&native_err),
                        "{name}: native said {native_err}"
                    );
                }
                ran += 1;
                continue;
            }
            let outcome = result.unwrap_or_else(|e| panic!("{name}: {e}"));
            let mut got = render::to_json(&outcome);
            let got = json!({
                "desired": got["desired"].take(),
                "status": got["status"].take(),
                "conditions": got["conditions"].take(),
                "events": got["events"].take(),
            });
            let expected_path = case.join("expected.yaml");
            if bless {
                std::fs::write(&expected_path, serde_yaml::to_string(&got).unwrap()).unwrap();
            }
            let expected = read_yaml(&expected_path)
                .unwrap_or_else(|| panic!("{name}: no expected.yaml or error.txt"))
                .remove(0);
            assert_eq!(got, expected, "{name}: wasm run differs from expected.yaml");
            if let Some(native) = subject.native {
                let (desired, status) = native(&parent, &observed, &config)
                    .unwrap_or_else(|e| panic!("{name}: native: {e}"));
                // The policy fills in the parent's namespace; the plugin itself leaves it out.
                let wasm_desired: Vec<Value> = outcome
                    .desired
                    .iter()
                    .map(|d| {
                        let mut o = d.object.object.clone();
                        if desired
                            .iter()
                            .all(|n| n.pointer("/metadata/namespace").is_none())
                        {
                            o["metadata"].as_object_mut().unwrap().remove("namespace");
                        }
                        o
                    })
                    .collect();
                assert_eq!(
                    wasm_desired, desired,
                    "{name}: native and wasm desired sets differ"
                );
                assert_eq!(
                    got["status"], status,
                    "{name}: native and wasm status differ"
                );
            }
            ran += 1;
        }
    }
    assert!(ran >= 6, "ran only {ran} cases");
}
