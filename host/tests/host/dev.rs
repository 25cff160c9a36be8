//! `windlass dev`, the README's first command: the devcluster, the CRDs, the six SampleDB
//! plugins where `cargo xtask plugins` puts them (which `cargo xtask ci` runs first) and the
//! examples, reconciled.

use std::{path::Path, process::Command};

use crate::support;

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
    // Logs written to a pipe carry no colour codes.
    assert!(stderr.contains(" INFO "), "{stderr}");
    assert!(
        !stderr.contains('\x1b'),
        "colour codes in the log:\n{stderr}"
    );
}

/// Ctrl-C stops `windlass dev` cleanly: "stopped", exit 0, and no warning or error on the way
/// out (the operator's watches are stopped before the devcluster they watch).
#[test]
fn ctrl_c_stops_it_with_no_noise() {
    use std::io::{BufRead, BufReader};
    use std::process::Stdio;
    use std::sync::{Arc, Mutex};
    let dir = tempfile::tempdir().unwrap();
    let mut child = Command::new(env!("CARGO_BIN_EXE_windlass"))
        .args(["dev", "--admin-addr", "127.0.0.1:0", "--port", "0"])
        .arg("--kubeconfig-out")
        .arg(dir.path().join("kubeconfig"))
        .current_dir(Path::new(env!("CARGO_MANIFEST_DIR")).parent().unwrap())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("windlass dev starts");
    let log = Arc::new(Mutex::new(Vec::<String>::new()));
    let stderr = child.stderr.take().unwrap();
    let reader = {
        let log = log.clone();
        std::thread::spawn(move || {
            for line in BufReader::new(stderr).lines().map_while(Result::ok) {
                log.lock().unwrap().push(line);
            }
        })
    };
    let started = std::time::Instant::now();
    // Running: every plugin served, and a parent reconciled (watches open and in use).
    loop {
        let lines = log.lock().unwrap().clone();
        if lines.iter().any(|l| l.contains("reconciling object")) {
            break;
        }
        assert!(
            started.elapsed() < std::time::Duration::from_secs(120),
            "windlass dev never reconciled:\n{}",
            lines.join("\n")
        );
        std::thread::sleep(std::time::Duration::from_millis(200));
    }
    std::thread::sleep(std::time::Duration::from_secs(2));
    let before = log.lock().unwrap().len();
    let sent = Command::new("kill")
        .args(["-INT", &child.id().to_string()])
        .status()
        .expect("kill runs");
    assert!(sent.success());
    let mut stdout = String::new();
    std::io::Read::read_to_string(&mut child.stdout.take().unwrap(), &mut stdout).unwrap();
    let status = child.wait().expect("windlass dev exits");
    reader.join().unwrap();
    assert!(status.success(), "{status}\n{stdout}");
    assert_eq!(stdout.lines().last(), Some("stopped"), "{stdout}");
    let after: Vec<String> = log.lock().unwrap()[before..].to_vec();
    let noisy: Vec<&String> = after
        .iter()
        .filter(|l| l.contains(" WARN ") || l.contains(" ERROR "))
        .collect();
    assert!(
        noisy.is_empty(),
        "noise on the way out:\n{}",
        after.join("\n")
    );
}

/// A port in use is named in the error, with the flag that picks another — for the devcluster's
/// port and for the admin endpoints' — and nothing starts.
#[test]
fn a_port_in_use_is_named_with_the_flag_that_changes_it() {
    let taken = std::net::TcpListener::bind("127.0.0.1:0").expect("a port");
    let port = taken.local_addr().expect("its address").port();
    let dir = tempfile::tempdir().unwrap();
    for (args, flag) in [
        (
            vec![
                "--port".to_string(),
                port.to_string(),
                "--admin-addr".to_string(),
                "127.0.0.1:0".to_string(),
            ],
            "--port",
        ),
        (
            vec!["--admin-addr".to_string(), format!("127.0.0.1:{port}")],
            "--admin-addr",
        ),
    ] {
        let out = Command::new(env!("CARGO_BIN_EXE_windlass"))
            .args(["--no-cache", "dev", "--exit-when-reconciled"])
            .args(&args)
            .arg("--kubeconfig-out")
            .arg(dir.path().join("kubeconfig"))
            .current_dir(Path::new(env!("CARGO_MANIFEST_DIR")).parent().unwrap())
            .output()
            .expect("windlass dev runs");
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(!out.status.success(), "{flag}: started anyway:\n{stderr}");
        let error = stderr
            .lines()
            .find(|l| l.starts_with("error: "))
            .unwrap_or_else(|| panic!("{flag}: no error line:\n{stderr}"));
        assert!(
            error.contains(&format!("127.0.0.1:{port}")) && error.contains(flag),
            "{flag}: {error}"
        );
        assert!(error.contains("in use"), "{flag}: {error}");
    }
    drop(taken);
}

/// The same walkthrough on a real control plane (etcd, kube-apiserver, kube-controller-manager
/// built from source): `windlass dev --kubeconfig FILE --simulate-workloads` installs the CRDs,
/// the snapshot API and the plugins there, plays the kubelet over the API and reconciles the
/// examples; the control plane outlives it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn windlass_dev_reconciles_the_example_sampledb_on_a_real_control_plane() {
    let plane = windlass_kubeplane::ControlPlane::start()
        .await
        .expect("the control plane starts");
    let kubeconfig = plane.kubeconfig().to_path_buf();
    let out = tokio::task::spawn_blocking(move || {
        Command::new(env!("CARGO_BIN_EXE_windlass"))
            .args([
                "dev",
                "--admin-addr",
                "127.0.0.1:0",
                "--exit-when-reconciled",
            ])
            .arg("--kubeconfig")
            .arg(&kubeconfig)
            .arg("--simulate-workloads")
            .current_dir(Path::new(env!("CARGO_MANIFEST_DIR")).parent().unwrap())
            .output()
            .expect("windlass dev runs")
    })
    .await
    .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "stdout:\n{stdout}\nstderr:\n{stderr}");
    assert!(
        stdout.contains("every example parent is reconciled"),
        "{stdout}"
    );
    assert!(
        stdout.contains("the operator runs on the cluster of"),
        "{stdout}"
    );
    // The SampleDB is there after `windlass dev` stopped: the cluster was not its own.
    let client = plane.client().await.unwrap();
    let gvk = kube::core::GroupVersionKind::gvk("samples.windlass.dev", "v1alpha1", "SampleDB");
    let sdbs: kube::Api<kube::api::DynamicObject> = kube::Api::namespaced_with(
        client,
        "default",
        &kube::core::ApiResource::from_gvk_with_plural(&gvk, "sampledbs"),
    );
    assert!(sdbs.get("example-database").await.is_ok());
}

/// One command of the README's walkthrough, and what it must do.
#[derive(Debug)]
struct Step {
    text: String,
    expect: Expect,
}

#[derive(Debug, PartialEq)]
enum Expect {
    /// Exit 0.
    Success,
    /// A watch (`-w`): a reader stops it; it must still be running after a while (exit 124
    /// from `timeout`), not have failed.
    Watch,
    /// `# refused: TEXT`: it must fail, saying TEXT.
    Refused(String),
}

/// The commands of the README's walkthrough (the `sh` block after "With `cargo xtask dev`
/// running"): a line with its `\` continuations, or with the body of its here-document.
fn walkthrough(readme: &str) -> Vec<Step> {
    let start = readme
        .find("With `cargo xtask dev` running")
        .expect("the README's walkthrough");
    let block = readme[start..]
        .split_once("```sh\n")
        .and_then(|(_, rest)| rest.split_once("\n```"))
        .expect("its sh block")
        .0;
    let mut steps = Vec::new();
    let mut lines = block.lines();
    while let Some(line) = lines.next() {
        if line.trim().is_empty() || line.trim_start().starts_with('#') {
            continue;
        }
        let mut text = line.to_string();
        while text.ends_with('\\') {
            text.push('\n');
            text.push_str(lines.next().expect("a continued line"));
        }
        let heredoc = text.split_once("<<").map(|(_, w)| {
            w.split_whitespace()
                .next()
                .expect("a here-document's word")
                .to_string()
        });
        if let Some(word) = heredoc {
            for body in lines.by_ref() {
                text.push('\n');
                text.push_str(body);
                if body == word {
                    break;
                }
            }
        }
        let command = text.split("  #").next().unwrap_or_default();
        let expect = if let Some((_, said)) = text.split_once("# refused: ") {
            Expect::Refused(said.trim().to_string())
        } else if command.split_whitespace().any(|w| w == "-w") {
            Expect::Watch
        } else {
            Expect::Success
        };
        steps.push(Step { text, expect });
    }
    steps
}

#[test]
fn the_walkthrough_is_read_as_its_commands() {
    let steps = walkthrough(
        "With `cargo xtask dev` running, in another terminal:\n\n```sh\nexport A=b\n# a comment\n\
         kubectl get x -w   # watch\nkubectl patch p \\\n  -p '{}'   # refused: spec.replicas\n\
         kubectl create -f - <<END\nkind: X\nEND\n```\n",
    );
    let got: Vec<(&str, &Expect)> = steps.iter().map(|s| (s.text.as_str(), &s.expect)).collect();
    assert_eq!(
        got,
        [
            ("export A=b", &Expect::Success),
            ("kubectl get x -w   # watch", &Expect::Watch),
            (
                "kubectl patch p \\\n  -p '{}'   # refused: spec.replicas",
                &Expect::Refused("spec.replicas".into())
            ),
            ("kubectl create -f - <<END\nkind: X\nEND", &Expect::Success),
        ]
    );
}

/// The README's walkthrough, run as written against `windlass dev` (what `cargo xtask dev`
/// runs), so that the README cannot drift from what the project does: every command must
/// succeed, each watch must still be watching when stopped after a few seconds, and each
/// command marked `# refused: …` must fail saying so. The README's `kubectl wait` lines are
/// what check its claims (Ready, a backup, the failover, the upgrade, the refusals, the delete).
#[test]
fn the_readme_walkthrough_runs_as_written() {
    use std::fmt::Write;
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).parent().unwrap();
    let steps = walkthrough(&std::fs::read_to_string(root.join("README.md")).unwrap());
    assert!(
        steps.len() > 30 && steps.iter().filter(|s| s.expect == Expect::Watch).count() >= 3,
        "{steps:#?}"
    );
    assert_eq!(
        steps[0].text, "export KUBECONFIG=target/windlass-dev.kubeconfig",
        "the walkthrough starts where `cargo xtask dev` writes its kubeconfig"
    );
    let work = tempfile::tempdir().unwrap();
    std::fs::create_dir(work.path().join("target")).unwrap();
    let dev = support::dev::Running::start(&work.path().join("target/windlass-dev.kubeconfig"));
    // `kubectl windlass`: the binary linked as a kubectl plugin, as the README says.
    let plugins = support::dev::kubectl_plugin_dir();
    // One shell for the whole walkthrough (its variables and exports carry on), each command's
    // output kept, and the first one that does not do what it should ends it.
    let mut script = String::from("set -u\nout=$(mktemp -d)\n");
    for (i, step) in steps.iter().enumerate() {
        let run = match step.expect {
            Expect::Watch => format!("timeout 8 {}", step.text),
            _ => step.text.clone(),
        };
        let check = match &step.expect {
            Expect::Success => "[ $rc -eq 0 ]".to_string(),
            Expect::Watch => "[ $rc -eq 124 ] && [ -s \"$out/step\" ]".to_string(),
            Expect::Refused(said) => {
                format!("[ $rc -ne 0 ] && grep -qF -- '{said}' \"$out/step\"")
            }
        };
        writeln!(
            script,
            "{{ {run}\n}} > \"$out/step\" 2>&1; rc=$?\n\
             if ! {{ {check}; }}; then echo 'step {i} did not do what the README says (exit '$rc'):'; \
             cat <<'__STEP__'\n{text}\n__STEP__\necho '--- its output:'; cat \"$out/step\"; exit 1; fi\n\
             echo 'step {i} ok'",
            text = step.text
        )
        .unwrap();
    }
    let out = Command::new("bash")
        .arg("-c")
        .arg(&script)
        .current_dir(work.path())
        .env_remove("KUBECONFIG")
        .env("PATH", support::dev::path_with(plugins.path()))
        .output()
        .expect("bash runs");
    let log = dev.log();
    drop(dev);
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{stdout}\n{}\n--- windlass dev's log:\n{log}",
        String::from_utf8_lossy(&out.stderr),
    );
    assert_eq!(
        stdout.lines().filter(|l| l.ends_with(" ok")).count(),
        steps.len(),
        "{stdout}"
    );
}
