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
    // Every contract version the host serves: 0.1.0 and, beside it, 0.2.0.
    let packages = ["wit/plugin.wit", "wit/0.2.0/plugin.wit"].map(|file| {
        let wit = std::fs::read_to_string(root.join(file)).expect("the WIT");
        wit.lines()
            .find_map(|l| l.strip_prefix("package "))
            .expect("a package line")
            .trim_end_matches(';')
            .to_string()
    });
    assert_eq!(packages, ["windlass:plugin@0.1.0", "windlass:plugin@0.2.0"]);
    assert_eq!(
        stdout.lines().collect::<Vec<_>>(),
        [
            format!("windlass {}", env!("CARGO_PKG_VERSION")),
            format!("commit:   {head}"),
            format!("wasmtime: {wasmtime}"),
            format!("wit:      {}", packages[0]),
            format!("wit:      {}", packages[1]),
        ]
    );
}

/// `windlass completions bash`, sourced by bash, completes subcommands and their flags.
#[test]
fn the_bash_completion_completes_subcommands_and_flags() {
    let script = Command::new(env!("CARGO_BIN_EXE_windlass"))
        .args(["completions", "bash"])
        .output()
        .expect("windlass completions runs");
    assert!(script.status.success());
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("windlass.bash");
    std::fs::write(&file, &script.stdout).unwrap();
    // What bash does on Tab: the words so far, the one being completed, then COMPREPLY.
    let complete = |words: &[&str]| {
        let program = format!(
            "source {}; COMP_WORDS=({}); COMP_CWORD={}; _windlass windlass '{}' '{}'; echo \"${{COMPREPLY[@]}}\"",
            file.display(),
            words.join(" "),
            words.len() - 1,
            words[words.len() - 1],
            words[words.len() - 2],
        );
        let out = Command::new("bash")
            .args(["-c", &program])
            .output()
            .expect("bash runs");
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        String::from_utf8_lossy(&out.stdout).trim().to_string()
    };
    assert_eq!(complete(&["windlass", "d"]), "dev");
    assert_eq!(complete(&["windlass", "run", "--admin-a"]), "--admin-addr");
    let plugin = complete(&["windlass", "plugin", ""]);
    assert!(plugin.contains("test"), "{plugin}");
    // Every shell clap knows: a script, or a clear refusal naming the ones there are.
    for shell in ["zsh", "fish", "elvish", "powershell"] {
        let out = Command::new(env!("CARGO_BIN_EXE_windlass"))
            .args(["completions", shell])
            .output()
            .expect("windlass completions runs");
        assert!(
            out.status.success() && out.stdout.len() > 100,
            "{shell}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
    }
    let out = Command::new(env!("CARGO_BIN_EXE_windlass"))
        .args(["completions", "tcsh"])
        .output()
        .expect("windlass completions runs");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        !out.status.success() && stderr.contains("bash, elvish, fish, powershell, zsh"),
        "{stderr}"
    );
}
