//! The chart ships the CRDs `windlass crds` prints (deploy/helm/windlass/crds/crds.yaml); Helm
//! installs them before the templates. This fails when the copy falls behind `windlass::crds()`.

use std::{path::Path, process::Command};

const REGENERATE: &str = "cargo run -p windlass -- crds > deploy/helm/windlass/crds/crds.yaml";

fn chart_copy() -> String {
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("../deploy/helm/windlass/crds/crds.yaml");
    std::fs::read_to_string(&path).unwrap_or_else(|e| {
        panic!(
            "cannot read {}: {e}; regenerate it: {REGENERATE}",
            path.display()
        )
    })
}

#[test]
fn the_charts_crds_are_exactly_what_windlass_crds_prints() {
    let out = Command::new(env!("CARGO_BIN_EXE_windlass"))
        .arg("crds")
        .output()
        .expect("run windlass crds");
    assert!(
        out.status.success(),
        "windlass crds failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let printed = String::from_utf8(out.stdout).expect("UTF-8");
    assert!(
        printed == chart_copy(),
        "deploy/helm/windlass/crds/crds.yaml differs from `windlass crds`; regenerate it: {REGENERATE}"
    );
}

#[test]
fn the_charts_crds_are_crd_all_serialized() {
    // Compared as values so this names the CRD that differs, whatever the YAML layout.
    let copy: Vec<serde_json::Value> = chart_copy()
        .split("---\n")
        .filter(|doc| !doc.trim().is_empty())
        .map(|doc| serde_yaml::from_str(doc).expect("the chart's CRDs are YAML"))
        .collect();
    let want: Vec<serde_json::Value> = windlass::crds()
        .iter()
        .map(|crd| serde_json::to_value(crd).expect("a CRD serializes"))
        .collect();
    let names = |docs: &[serde_json::Value]| -> Vec<String> {
        docs.iter()
            .map(|d| d["metadata"]["name"].as_str().unwrap_or("?").to_string())
            .collect()
    };
    assert_eq!(
        names(&copy),
        names(&want),
        "the chart's CRDs are not windlass::crds(); regenerate: {REGENERATE}"
    );
    for (copy, want) in copy.iter().zip(&want) {
        assert!(
            copy == want,
            "CRD {} in the chart differs from windlass::crds(); regenerate it: {REGENERATE}",
            want["metadata"]["name"]
        );
    }
}
