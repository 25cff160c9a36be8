//! The SampleDB plugins run natively, shared by the host benchmark's native variants
//! (`native_engine`, `native_sampledb`): each answers the contract's requests
//! (`windlass_contract::Request`) as a [`Native`] reconciler.
//!
//! The Rust plugins (`storage`, `backup`, `upgrade`) are compiled in and run on the same
//! request the component would get: the JSON texts parsed, run and serialised back exactly as
//! the component's export does (`windlass_sdk::testing::run_parts`). The others run natively
//! in processes of their own language, each serving the contract's requests on its stdin and
//! stdout through its SDK (one line per request and per answer, the same JSON texts inside;
//! the plugin's info as the first line): `primary` in CPython (`python3 -m windlass.serve`,
//! guest-sdk/python), `conventions` in Node (`node guest-sdk/js/serve.js`), `chaos` as the
//! same Go package built for this machine (`go build`; its `main` calls `windlass.Serve`).
//! `workers` such processes per plugin; a call takes an idle one or waits for one, so a call
//! blocks its thread while it waits on a pipe.

use std::{
    io::{BufRead as _, BufReader, Write as _},
    path::Path,
    process::{Child, ChildStdin, ChildStdout, Command, Stdio},
    sync::{Arc, Condvar, Mutex},
};

use anyhow::{Context as _, bail};
use windlass_contract::{Error, PluginErrorKind, PluginInfo, Request, Response, testing::Native};
use windlass_sdk::{Phase, Plugin, testing::run_parts};

/// The SampleDB plugin `name` (storage, backup, upgrade, primary, conventions or chaos) run
/// natively; `scratch` holds the Go plugin's build, `workers` is the processes per plugin that
/// runs in a process of its own.
pub fn sampledb(name: &str, scratch: &tempfile::TempDir, workers: u16) -> anyhow::Result<Native> {
    Ok(match name {
        "storage" => native::<sampledb_storage::Storage>(),
        "backup" => native::<sampledb_backup::Backup>(),
        "upgrade" => native::<sampledb_upgrade::Upgrade>(),
        "primary" | "conventions" | "chaos" => {
            Processes::start(name, &serve_command(name, scratch)?, workers)?.native()
        }
        other => bail!(
            "{other}: no native build (storage, backup, upgrade, primary, conventions or chaos)"
        ),
    })
}

/// A Rust plugin as a native reconciler answering the contract's requests.
fn native<P: Plugin>() -> Native {
    let info = P::info();
    let name = info.name.clone();
    let info = PluginInfo {
        name: info.name,
        version: info.version,
        parent_kinds: info.parent_kinds,
        child_kinds: info.child_kinds,
        reads_kinds: info.reads_kinds,
        finalizes: info.finalizes,
    };
    Native::new(info, move |req: &Request| call::<P>(&name, req))
}

/// One call, as the component's export makes it (`windlass_sdk::__private::reconcile`).
fn call<P: Plugin>(plugin: &str, req: &Request) -> windlass_contract::Result<Response> {
    let phase = match req.phase {
        windlass_contract::Phase::Reconcile => Phase::Reconcile,
        windlass_contract::Phase::Finalize => Phase::Finalize,
    };
    let parts = run_parts::<P>(
        phase,
        &req.parent,
        &req.observed,
        &req.desired,
        &req.config,
        &req.now,
    )
    .map_err(|e| {
        let (kind, message) = match e {
            windlass_sdk::Error::InvalidParent(m) => (PluginErrorKind::InvalidParent, m),
            windlass_sdk::Error::InvalidConfig(m) => (PluginErrorKind::InvalidConfig, m),
            windlass_sdk::Error::Failed(m) => (PluginErrorKind::Failed, m),
        };
        Error::Plugin {
            plugin: plugin.to_string(),
            kind,
            message,
        }
    })?;
    Ok(Response {
        desired: parts.desired,
        status: parts.status,
        conditions: parts
            .conditions
            .into_iter()
            .map(|c| windlass_contract::Condition {
                kind: c.kind,
                status: c.status,
                reason: c.reason,
                message: c.message,
            })
            .collect(),
        events: parts
            .events
            .into_iter()
            .map(|e| windlass_contract::Event {
                warning: e.warning,
                reason: e.reason,
                message: e.message,
            })
            .collect(),
        requeue_after_secs: parts.requeue_after_secs,
        finalized: parts.finalized,
    })
}

/// The repository (this file is host/examples/common/sampledb_native.rs).
fn root() -> &'static Path {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .expect("host/ is in the repository")
}

/// How the SampleDB plugin `name` serves natively: the command that starts one process.
fn serve_command(name: &str, scratch: &tempfile::TempDir) -> anyhow::Result<Vec<String>> {
    let root = root();
    let path = |p: &str| root.join(p).display().to_string();
    Ok(match name {
        "primary" => vec![
            "env".into(),
            format!(
                "PYTHONPATH={}:{}",
                path("guest-sdk/python"),
                path("plugins/sampledb-primary")
            ),
            "PYTHONDONTWRITEBYTECODE=1".into(),
            "python3".into(),
            "-m".into(),
            "windlass.serve".into(),
            "primary:Primary".into(),
        ],
        "conventions" => vec![
            "node".into(),
            path("guest-sdk/js/serve.js"),
            path("plugins/sampledb-conventions/conventions.js"),
        ],
        "chaos" => {
            let binary = scratch.path().join("sampledb-chaos");
            let status = Command::new("go")
                .args(["build", "-o"])
                .arg(&binary)
                .arg(".")
                .current_dir(root.join("plugins/sampledb-chaos"))
                .status()
                .context("running go build for the chaos plugin")?;
            if !status.success() {
                bail!("go build of plugins/sampledb-chaos failed: {status}");
            }
            vec![binary.display().to_string()]
        }
        other => bail!("{other}: not a plugin that serves in a process"),
    })
}

/// One serving process.
struct Worker {
    child: Child,
    stdin: ChildStdin,
    stdout: BufReader<ChildStdout>,
}

impl Worker {
    fn start(command: &[String]) -> anyhow::Result<(Self, PluginInfo)> {
        let mut child = Command::new(&command[0])
            .args(&command[1..])
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .spawn()
            .with_context(|| format!("starting {}", command.join(" ")))?;
        let stdin = child.stdin.take().context("no stdin")?;
        let mut stdout = BufReader::new(child.stdout.take().context("no stdout")?);
        let mut line = String::new();
        stdout
            .read_line(&mut line)
            .with_context(|| format!("reading the info line of {}", command.join(" ")))?;
        let info: InfoLine = serde_json::from_str(&line).with_context(|| {
            format!(
                "{}: the first line is not the plugin's info: {line:?}",
                command.join(" ")
            )
        })?;
        let info = PluginInfo {
            name: info.name,
            version: info.version,
            parent_kinds: info.parent_kinds,
            child_kinds: info.child_kinds,
            reads_kinds: info.reads_kinds,
            finalizes: info.finalizes,
        };
        Ok((
            Worker {
                child,
                stdin,
                stdout,
            },
            info,
        ))
    }

    /// One request and its answer; an I/O error or an answer that does not parse means the
    /// process is broken.
    fn ask(&mut self, req: &Request, line: &mut String) -> anyhow::Result<Answer> {
        let phase = match req.phase {
            windlass_contract::Phase::Reconcile => "reconcile",
            windlass_contract::Phase::Finalize => "finalize",
        };
        let mut text = serde_json::to_vec(&RequestLine {
            phase,
            parent: &req.parent,
            observed: &req.observed,
            desired: &req.desired,
            config: &req.config,
            now: &req.now,
        })?;
        text.push(b'\n');
        self.stdin.write_all(&text)?;
        self.stdin.flush()?;
        line.clear();
        if self.stdout.read_line(line)? == 0 {
            bail!("the process ended ({:?})", self.child.try_wait());
        }
        Ok(serde_json::from_str(line)?)
    }
}

/// A plugin's serving processes, each taken by one call at a time.
struct Processes {
    name: String,
    info: PluginInfo,
    idle: Mutex<Vec<Worker>>,
    freed: Condvar,
}

impl Processes {
    fn start(name: &str, command: &[String], workers: u16) -> anyhow::Result<Arc<Self>> {
        let mut idle = Vec::new();
        let mut info = None;
        for _ in 0..workers {
            let (worker, i) = Worker::start(command)?;
            idle.push(worker);
            info = Some(i);
        }
        Ok(Arc::new(Processes {
            name: name.to_string(),
            info: info.context("no workers")?,
            idle: Mutex::new(idle),
            freed: Condvar::new(),
        }))
    }

    fn native(self: Arc<Self>) -> Native {
        let info = self.info.clone();
        Native::new(info, move |req: &Request| self.call(req))
    }

    fn call(&self, req: &Request) -> windlass_contract::Result<Response> {
        let mut worker = {
            let mut idle = self.idle.lock().expect("not poisoned");
            loop {
                if let Some(w) = idle.pop() {
                    break w;
                }
                idle = self.freed.wait(idle).expect("not poisoned");
            }
        };
        let mut line = String::new();
        let answer = match worker.ask(req, &mut line) {
            Ok(answer) => answer,
            // A benchmark's stand-in that breaks makes every figure after it meaningless.
            Err(e) => {
                eprintln!(
                    "the {} plugin's process failed: {e:#}; last line {line:?}",
                    self.name
                );
                std::process::exit(1);
            }
        };
        self.idle.lock().expect("not poisoned").push(worker);
        self.freed.notify_one();
        match answer {
            Answer::Ok(r) => Ok(Response {
                desired: r.desired,
                status: r.status,
                conditions: r
                    .conditions
                    .into_iter()
                    .map(|c| windlass_contract::Condition {
                        kind: c.kind,
                        status: c.status,
                        reason: c.reason,
                        message: c.message,
                    })
                    .collect(),
                events: r
                    .events
                    .into_iter()
                    .map(|e| windlass_contract::Event {
                        warning: e.warning,
                        reason: e.reason,
                        message: e.message,
                    })
                    .collect(),
                requeue_after_secs: r.requeue_after_secs,
                finalized: r.finalized,
            }),
            Answer::Err { tag, val } => Err(Error::Plugin {
                plugin: self.info.name.clone(),
                kind: match tag.as_str() {
                    "invalid-parent" => PluginErrorKind::InvalidParent,
                    "invalid-config" => PluginErrorKind::InvalidConfig,
                    _ => PluginErrorKind::Failed,
                },
                message: val,
            }),
        }
    }
}

/// The WIT `plugin-info`, as a serving process's first line.
#[derive(serde::Deserialize)]
#[serde(rename_all = "camelCase")]
struct InfoLine {
    name: String,
    version: String,
    parent_kinds: Vec<String>,
    child_kinds: Vec<String>,
    reads_kinds: Vec<String>,
    finalizes: bool,
}

/// The WIT `request`, as a line to a serving process.
#[derive(serde::Serialize)]
struct RequestLine<'a> {
    phase: &'static str,
    parent: &'a str,
    observed: &'a [String],
    desired: &'a [String],
    config: &'a str,
    now: &'a str,
}

/// A serving process's answer: the WIT `response` or `plugin-error`.
#[derive(serde::Deserialize)]
enum Answer {
    #[serde(rename = "ok")]
    Ok(ResponseLine),
    #[serde(rename = "err")]
    Err { tag: String, val: String },
}

#[derive(serde::Deserialize)]
#[serde(rename_all = "camelCase")]
struct ResponseLine {
    desired: Vec<String>,
    status: Option<String>,
    conditions: Vec<ConditionLine>,
    events: Vec<EventLine>,
    requeue_after_secs: Option<u32>,
    finalized: bool,
}

#[derive(serde::Deserialize)]
struct ConditionLine {
    kind: String,
    status: bool,
    reason: String,
    message: String,
}

#[derive(serde::Deserialize)]
struct EventLine {
    warning: bool,
    reason: String,
    message: String,
}
