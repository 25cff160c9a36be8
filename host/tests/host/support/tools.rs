//! The command-line tools some tests drive: helm and kubectl (from `$HELM` / `$KUBECTL`, or the
//! cache `deploy/helm/get-helm.sh` fills; `cargo xtask ci` runs it), and running a command with
//! its output in the failure message.

use std::{
    path::PathBuf,
    process::{Command, Output},
};

/// Where `deploy/helm/get-helm.sh` installs helm and kubectl (keep the two in step).
pub fn tools_dir() -> PathBuf {
    std::env::var_os("WINDLASS_TOOLS")
        .map(PathBuf::from)
        .or_else(|| {
            std::env::var_os("XDG_CACHE_HOME").map(|d| PathBuf::from(d).join("windlass-tools"))
        })
        .or_else(|| {
            std::env::var_os("HOME").map(|h| PathBuf::from(h).join(".cache/windlass-tools"))
        })
        .expect("neither HELM, WINDLASS_TOOLS, XDG_CACHE_HOME nor HOME is set")
}

/// `$HELM`, else where `deploy/helm/get-helm.sh` puts it; panics saying how to get it.
pub fn helm() -> PathBuf {
    if let Some(helm) = std::env::var_os("HELM").filter(|h| !h.is_empty()) {
        let helm = PathBuf::from(helm);
        assert!(
            helm.is_file(),
            "HELM={} does not exist: run deploy/helm/get-helm.sh (cargo xtask ci does) and set HELM to \
             the path it prints",
            helm.display()
        );
        return helm;
    }
    let helm = tools_dir().join("helm");
    assert!(
        helm.is_file(),
        "helm not found (HELM is unset and {} does not exist): run deploy/helm/get-helm.sh \
         (cargo xtask ci does) or set HELM to a helm binary",
        helm.display()
    );
    helm
}

/// `$KUBECTL`, else /usr/bin/kubectl, else the one `deploy/helm/get-helm.sh` unpacks.
pub fn kubectl() -> PathBuf {
    if let Some(kubectl) = std::env::var_os("KUBECTL").filter(|k| !k.is_empty()) {
        return PathBuf::from(kubectl);
    }
    let candidates = [
        PathBuf::from("/usr/bin/kubectl"),
        tools_dir().join("kubectl"),
    ];
    candidates
        .iter()
        .find(|k| k.is_file())
        .cloned()
        .unwrap_or_else(|| {
            panic!(
                "kubectl not found at {candidates:?}: install it, run deploy/helm/get-helm.sh \
                 (which unpacks one beside helm), or set KUBECTL"
            )
        })
}

/// Runs a command (with `stdin` as its input) and returns its stdout, or a message with its
/// stdout and stderr when it fails.
pub fn try_run(cmd: &mut Command, stdin: Option<&str>) -> Result<String, String> {
    use std::{io::Write as _, process::Stdio};
    let mut child = cmd
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .map_err(|e| format!("cannot run {cmd:?}: {e}"))?;
    let mut input = child.stdin.take().expect("stdin is piped");
    if let Some(text) = stdin {
        input
            .write_all(text.as_bytes())
            .map_err(|e| format!("writing to {cmd:?}: {e}"))?;
    }
    drop(input);
    let out: Output = child
        .wait_with_output()
        .map_err(|e| format!("waiting for {cmd:?}: {e}"))?;
    if out.status.success() {
        Ok(String::from_utf8_lossy(&out.stdout).into_owned())
    } else {
        Err(format!(
            "{cmd:?} failed ({}):\n{}\n{}",
            out.status,
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        ))
    }
}

/// [`try_run`], failing the test on error.
pub fn run(cmd: &mut Command) -> String {
    try_run(cmd, None).unwrap_or_else(|e| panic!("{e}"))
}

/// `$PROMTOOL`, else `promtool` on the PATH (Debian's `prometheus` package; `.ci/tools`
/// installs it); panics saying how to get it.
pub fn promtool() -> PathBuf {
    if let Some(promtool) = std::env::var_os("PROMTOOL").filter(|p| !p.is_empty()) {
        return PathBuf::from(promtool);
    }
    std::env::var_os("PATH")
        .into_iter()
        .flat_map(|path| std::env::split_paths(&path).collect::<Vec<_>>())
        .map(|dir| dir.join("promtool"))
        .find(|p| p.is_file())
        .unwrap_or_else(|| {
            panic!(
                "promtool not found on the PATH: install Debian's prometheus package (.ci/tools \
                 does) or set PROMTOOL"
            )
        })
}
