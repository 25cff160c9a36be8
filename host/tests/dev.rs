//! `windlass dev`, the README's first command: the devcluster, the CRDs, the five SampleDB
//! plugins where `cargo xtask plugins` puts them (which `cargo xtask ci` runs first) and the
//! examples, reconciled.

use std::{path::Path, process::Command};

#[test]
fn windlass_dev_reconciles_the_example_sampledb_on_the_embedded_devcluster() {
    let dir = tempfile::tempdir().unwrap();
    let kubeconfig = dir.path().join("kubeconfig");
    let out = Command::new(env!("CARGO_BIN_EXE_windlass"))
        .args([
            "--no-cache",
            "dev",
            "--admin-addr",
            "127.0.0.1:0",
            "--exit-when-reconciled",
        ])
        .arg("--kubeconfig-out")
        .arg(&kubeconfig)
        .current_dir(Path::new(env!("CARGO_MANIFEST_DIR")).parent().unwrap())
        .output()
        .expect("windlass dev runs");
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "stdout:\n{stdout}\nstderr:\n{stderr}");
    assert!(
        stdout.contains("every example parent is reconciled"),
        "{stdout}"
    );
    assert!(
        stdout.contains(&format!("export KUBECONFIG={}", kubeconfig.display())),
        "{stdout}"
    );
    let written = std::fs::read_to_string(&kubeconfig).unwrap();
    assert!(written.contains("server: http://127.0.0.1:"), "{written}");
}
