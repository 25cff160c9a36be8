//! `windlass dev` as a user runs it: a process on the embedded devcluster with free ports,
//! writing its kubeconfig into a directory of the test's, stopped (killed) when dropped.

use std::{
    path::{Path, PathBuf},
    process::{Child, Command, Stdio},
};

/// A running `windlass dev`.
pub struct Running {
    child: Child,
    /// Where its log (stderr) goes.
    pub log_path: PathBuf,
    /// The kubeconfig it wrote.
    pub kubeconfig: PathBuf,
}

impl Running {
    /// Starts `windlass dev` on the embedded devcluster in the repository root, its kubeconfig
    /// at `kubeconfig`, and waits until it says it runs (its plugins loaded and the example
    /// applied), as a reader of the README would. Panics with its output when it stops first.
    pub fn start(kubeconfig: &Path) -> Running {
        Running::start_with(kubeconfig, &[])
    }

    /// [`Running::start`] with more arguments to `windlass dev`.
    pub fn start_with(kubeconfig: &Path, more: &[&std::ffi::OsStr]) -> Running {
        let mut args: Vec<std::ffi::OsString> = vec!["--kubeconfig-out".into()];
        args.push(kubeconfig.into());
        args.extend(more.iter().map(|a| a.to_os_string()));
        Running::spawn(&args, kubeconfig)
    }

    /// The same on the cluster of `kubeconfig` (a real control plane): `windlass dev
    /// --kubeconfig FILE --simulate-workloads`, which plays the kubelet over the API.
    pub fn on(kubeconfig: &Path) -> Running {
        let mut args: Vec<std::ffi::OsString> = vec!["--kubeconfig".into()];
        args.push(kubeconfig.into());
        args.push("--simulate-workloads".into());
        Running::spawn(&args, kubeconfig)
    }

    fn spawn(args: &[std::ffi::OsString], kubeconfig: &Path) -> Running {
        let root = Path::new(env!("CARGO_MANIFEST_DIR")).parent().unwrap();
        let log_path = kubeconfig.with_extension("log");
        let mut child = Command::new(env!("CARGO_BIN_EXE_windlass"))
            .args(["dev", "--admin-addr", "127.0.0.1:0", "--port", "0"])
            .args(args)
            .current_dir(root)
            .stdout(Stdio::piped())
            .stderr(std::fs::File::create(&log_path).unwrap())
            .spawn()
            .expect("windlass dev starts");
        let stdout = std::io::BufRead::lines(std::io::BufReader::new(child.stdout.take().unwrap()));
        let mut said = String::new();
        for line in stdout.map_while(Result::ok) {
            said.push_str(&line);
            said.push('\n');
            if line == "Ctrl-C stops it." {
                break;
            }
        }
        let running = Running {
            child,
            log_path,
            kubeconfig: kubeconfig.to_path_buf(),
        };
        assert!(
            said.ends_with("Ctrl-C stops it.\n"),
            "windlass dev stopped before it ran:\n{said}\n{}",
            running.log()
        );
        running
    }

    /// What it logged so far.
    pub fn log(&self) -> String {
        std::fs::read_to_string(&self.log_path).unwrap_or_default()
    }
}

impl Drop for Running {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// A directory holding `kubectl-windlass`, a link to the `windlass` binary: on the PATH,
/// kubectl runs it for `kubectl windlass …`.
pub fn kubectl_plugin_dir() -> tempfile::TempDir {
    let dir = tempfile::tempdir().unwrap();
    std::os::unix::fs::symlink(
        env!("CARGO_BIN_EXE_windlass"),
        dir.path().join("kubectl-windlass"),
    )
    .unwrap();
    dir
}

/// `PATH` with `dir` first.
pub fn path_with(dir: &Path) -> std::ffi::OsString {
    let mut paths = vec![dir.to_path_buf()];
    paths.extend(std::env::split_paths(
        &std::env::var_os("PATH").unwrap_or_default(),
    ));
    std::env::join_paths(paths).unwrap()
}
