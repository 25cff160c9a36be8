//! `windlass plugin new` in every language, as a plugin author goes: the project is generated,
//! its unit tests pass with the language's own runner, `./build.sh` makes a component, the
//! component passes the project's cases under `windlass plugin test`, and `windlass dev` with
//! the project's CRD reconciles its example Greeting. Templates cannot rot unnoticed.
//!
//! The toolchains come from `cargo xtask ci` (`.ci/tools-plugins`, the wasm32-wasip2 target, Go).

use std::{
    path::{Path, PathBuf},
    process::Command,
};

fn root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .unwrap()
        .to_path_buf()
}

/// Runs a command in `dir` and returns its stdout; panics with both streams when it fails.
fn run(what: &str, command: &mut Command, dir: &Path) -> String {
    let out = command
        .current_dir(dir)
        .output()
        .unwrap_or_else(|e| panic!("{what}: cannot start: {e}"));
    let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        out.status.success(),
        "{what} failed ({}):\nstdout:\n{stdout}\nstderr:\n{stderr}",
        out.status
    );
    stdout
}

fn windlass() -> Command {
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_windlass"));
    // Python and Go components take seconds to compile in a debug build: compile each once.
    cmd.arg("--cache-dir")
        .arg(root().join("target").join("e2e-plugin-cache"));
    cmd
}

/// The language's own test runner, as the template's README says.
fn unit_tests(lang: &str) -> Command {
    match lang {
        "rust" => {
            let mut cmd = Command::new("cargo");
            cmd.args(["test", "--quiet"]);
            cmd
        }
        "python" => {
            // PyYAML, which the SDK's harness reads cases with, is in the tools' venv.
            let tools = std::env::var_os("WINDLASS_TOOLS").map_or_else(
                || {
                    std::env::var_os("XDG_CACHE_HOME")
                        .map(PathBuf::from)
                        .unwrap_or_else(|| {
                            PathBuf::from(std::env::var_os("HOME").expect("HOME")).join(".cache")
                        })
                        .join("windlass-tools")
                },
                PathBuf::from,
            );
            let mut cmd = Command::new(tools.join("python/bin/python"));
            cmd.args(["-m", "unittest", "-v"]);
            cmd
        }
        "js" => {
            let mut cmd = Command::new("node");
            cmd.arg("--test");
            cmd
        }
        "go" => {
            let mut cmd = Command::new("go");
            cmd.args(["test", "./..."]);
            cmd
        }
        other => panic!("no test runner for {other}"),
    }
}

fn template_works_end_to_end(lang: &str) {
    let work = tempfile::tempdir().unwrap();
    let name = format!("hello-{lang}");
    let project = work.path().join(&name);
    let said = run(
        "windlass plugin new",
        windlass().args(["plugin", "new", "--lang", lang, &name]),
        work.path(),
    );
    assert!(said.contains("wrote"), "{said}");

    let target = root().join("target").join("template-rust");
    let tests = run(
        "the unit tests",
        unit_tests(lang).env("CARGO_TARGET_DIR", &target),
        &project,
    );
    if lang == "rust" || lang == "go" {
        assert!(tests.contains("ok"), "{tests}");
    }

    // One target dir for every generated Rust project (and cached across runs).
    let mut build = Command::new(project.join("build.sh"));
    build.env("CARGO_TARGET_DIR", &target);
    run("./build.sh", &mut build, &project);
    let component = project.join(format!("{name}.wasm"));
    assert!(component.is_file(), "no {}", component.display());

    let report = run(
        "windlass plugin test",
        windlass()
            .args(["plugin", "test"])
            .arg(&component)
            .arg("cases"),
        &project,
    );
    assert!(report.contains("4 passed, 0 failed"), "{report}");

    let dev = run(
        "windlass dev",
        windlass()
            .args([
                "dev",
                "--admin-addr",
                "127.0.0.1:0",
                "--exit-when-reconciled",
            ])
            .arg("--kubeconfig-out")
            .arg(work.path().join("kubeconfig"))
            .args(["--crd", "deploy/crd.yaml"])
            .arg("--plugin")
            .arg(format!("{name}={}", component.display()))
            .args(["--parent", "example.windlass.dev/v1alpha1/Greeting"])
            .args(["--manifest", "deploy/greeting.yaml"]),
        &project,
    );
    assert!(dev.contains("every example parent is reconciled"), "{dev}");
}

#[test]
fn the_rust_template_builds_tests_and_reconciles() {
    template_works_end_to_end("rust");
}

#[test]
fn the_python_template_builds_tests_and_reconciles() {
    template_works_end_to_end("python");
}

#[test]
fn the_js_template_builds_tests_and_reconciles() {
    template_works_end_to_end("js");
}

#[test]
fn the_go_template_builds_tests_and_reconciles() {
    template_works_end_to_end("go");
}

/// A case that differs fails under `windlass plugin test` with a diff naming the case, and
/// `--bless` records what the plugin produces; the other cases still run and pass.
#[test]
fn plugin_test_prints_a_diff_and_blesses() {
    let work = tempfile::tempdir().unwrap();
    let cases = work.path().join("cases");
    copy_dir(&root().join("host/tests/cases/primary"), &cases);
    let n = std::fs::read_dir(&cases)
        .unwrap()
        .filter(|e| e.as_ref().is_ok_and(|e| e.path().is_dir()))
        .count();
    assert!(n >= 4, "{n} cases");
    let expected = cases.join("failover/expected.yaml");
    let text = std::fs::read_to_string(&expected).unwrap();
    let broken = text.replace("reason: FailedOver", "reason: SomethingElse");
    assert_ne!(text, broken, "the case has a FailedOver event");
    std::fs::write(&expected, &broken).unwrap();
    let component = windlass_test_guests::SAMPLEDB
        .iter()
        .find(|(name, _)| *name == "sampledb-primary")
        .map(|(_, path)| PathBuf::from(path))
        .unwrap();

    let out = windlass()
        .args(["plugin", "test"])
        .arg(&component)
        .arg(&cases)
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success(), "{stdout}");
    assert!(
        stdout.contains("FAILED") && stdout.contains("failover"),
        "{stdout}"
    );
    assert!(
        stdout.contains("-  reason: SomethingElse") && stdout.contains("+  reason: FailedOver"),
        "{stdout}"
    );
    assert!(
        stdout.contains(&format!("{} passed, 1 failed", n - 1)),
        "{stdout}"
    );
    assert!(
        stderr.contains(&format!("1 of {n} cases failed")),
        "{stderr}"
    );

    let blessed = run(
        "windlass plugin test --bless",
        windlass()
            .args(["plugin", "test", "--bless"])
            .arg(&component)
            .arg(&cases),
        work.path(),
    );
    assert!(blessed.contains("1 blessed"), "{blessed}");
    assert_eq!(std::fs::read_to_string(&expected).unwrap(), text);
    let again = run(
        "windlass plugin test",
        windlass()
            .args(["plugin", "test"])
            .arg(&component)
            .arg(&cases),
        work.path(),
    );
    assert!(again.contains(&format!("{n} passed, 0 failed")), "{again}");
}

fn copy_dir(from: &Path, to: &Path) {
    std::fs::create_dir_all(to).unwrap();
    for entry in std::fs::read_dir(from).unwrap() {
        let entry = entry.unwrap();
        let target = to.join(entry.file_name());
        if entry.path().is_dir() {
            copy_dir(&entry.path(), &target);
        } else {
            std::fs::copy(entry.path(), target).unwrap();
        }
    }
}
