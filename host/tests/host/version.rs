//! `windlass version`: what a user quotes in a bug report.

use std::{path::Path, process::Command};

#[test]
fn windlass_version_names_the_commit_the_wasmtime_and_the_wit_it_was_built_with() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).parent().unwrap();
    let out = Command::new(env!("CARGO_BIN_EXE_windlass"))
        .arg("version")
        .output()
        .expect("windlass version runs");
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{stdout}{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let head = Command::new("git")
        .args(["rev-parse", "HEAD"])
        .current_dir(root)
        .output()
        .expect("git runs");
    assert!(head.status.success(), "this test runs in a git checkout");
    let head = String::from_utf8_lossy(&head.stdout).trim().to_string();
    let lock = std::fs::read_to_string(root.join("Cargo.lock")).expect("Cargo.lock");
    let wasmtime = lock
        .split("[[package]]")
        .find(|p| p.contains("\nname = \"wasmtime\"\n"))
        .and_then(|p| p.split("\nversion = \"").nth(1))
        .and_then(|v| v.split('"').next())
        .expect("wasmtime in Cargo.lock");
    let wit = std::fs::read_to_string(root.join("wit/plugin.wit")).expect("the WIT");
    let package = wit
        .lines()
        .find_map(|l| l.strip_prefix("package "))
        .expect("a package line")
        .trim_end_matches(';');
    assert_eq!(
        stdout.lines().collect::<Vec<_>>(),
        [
            format!("windlass {}", env!("CARGO_PKG_VERSION")),
            format!("commit:   {head}"),
            format!("wasmtime: {wasmtime}"),
            format!("wit:      {package}"),
        ]
    );
}
