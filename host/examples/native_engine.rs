//! `windlass run`'s host with a native [`Engine`]: the variant (c) of the host benchmark
//! (`cargo xtask bench host`), the like-for-like measure of what the sandbox costs inside the
//! real host.
//!
//! Everything is the host's own — the operator (`windlass::operator::start`), its controllers,
//! watches, gate, policy checks, pruning, status, events and metrics, with `windlass run`'s
//! default settings and no leader election — except the engine. Where `windlass run` compiles
//! a WasmPlugin's component with wasmtime, this one looks the component's bytes up among the
//! plugins it was given (`--plugin NAME=FILE`) and answers each call by running that plugin's
//! Rust logic compiled into this binary, on the same request the component would get: the JSON
//! texts the host serialised, parsed, run and serialised back exactly as the component's
//! export does (`windlass_sdk::testing::run_parts`). The digest is the component's, so the
//! pipeline, its provenance annotations and the children are the same as the wasm host's.
//!
//! The Rust plugins (`storage`, `backup`, `upgrade`) are compiled in. The others run natively
//! in processes of their own language, each serving the contract's requests on its stdin and
//! stdout through its SDK (one line per request and per answer, the same JSON texts inside;
//! the plugin's info as the first line): `primary` in CPython (`python3 -m windlass.serve`,
//! guest-sdk/python), `conventions` in Node (`node guest-sdk/js/serve.js`), `chaos` as the
//! same Go package built for this machine (`go build`; its `main` calls `windlass.Serve`).
//! `--workers N` such processes per plugin (default 2, the cores of the project's machines);
//! a call takes an idle one or waits for one. The host's pipeline runs on blocking threads, so
//! a call waiting on a pipe blocks nothing else. What a process costs in memory is its own:
//! the benchmark adds the processes' peak RSS to this one's.
//!
//! `native_engine --kubeconfig FILE --admin-addr ADDR --plugin storage=FILE [--plugin …]
//! [--concurrency N] [--workers N]`

use std::{
    io::{BufRead as _, BufReader, Write as _},
    net::SocketAddr,
    path::{Path, PathBuf},
    process::{Child, ChildStdin, ChildStdout, Command, Stdio},
    sync::{Arc, Condvar, Mutex},
};

use anyhow::{Context as _, bail};
use clap::Parser;
use windlass::{controller, operator};
use windlass_contract::{
    Error, PluginErrorKind, PluginInfo, Request, Response,
    testing::{Native, NativeEngine},
};
use windlass_sdk::{Phase, Plugin, testing::run_parts};

#[derive(Debug, Parser)]
struct Args {
    /// A kubeconfig file; default: $KUBECONFIG.
    #[arg(long, env = "KUBECONFIG")]
    kubeconfig: PathBuf,
    /// Where /healthz, /readyz and /metrics listen.
    #[arg(long, default_value = "127.0.0.1:0")]
    admin_addr: SocketAddr,
    /// Parents reconciled at once per kind (the host's default is 16).
    #[arg(long, default_value_t = 16, value_parser = clap::value_parser!(u16).range(1..))]
    concurrency: u16,
    /// `NAME=FILE`: the component a WasmPlugin loads (FILE, the bytes its ConfigMap holds) and
    /// the native plugin that stands in for it (storage, backup, upgrade, primary,
    /// conventions or chaos). Repeatable.
    #[arg(long = "plugin", value_name = "NAME=FILE", required = true)]
    plugins: Vec<String>,
    /// Processes per plugin that runs in a process of its own (primary, conventions, chaos).
    #[arg(long, default_value_t = 2, value_parser = clap::value_parser!(u16).range(1..))]
    workers: u16,
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

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let args = Args::parse();
    // As `windlass run` logs (text, `RUST_LOG`, default info), so that (a) and (c) do the same
    // logging work and a failing run's log says why.
    tracing_subscriber::fmt()
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_default_env()
                .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("info")),
        )
        .with_writer(std::io::stderr)
        .init();
    windlass::source::install_crypto_provider();
    let engine = NativeEngine::new();
    // The Go plugin's native build.
    let scratch = tempfile::tempdir()?;
    for spec in &args.plugins {
        let (name, file) = spec
            .split_once('=')
            .with_context(|| format!("--plugin {spec:?}: expected NAME=FILE"))?;
        let bytes = std::fs::read(file).with_context(|| format!("--plugin {name}: {file}"))?;
        let plugin = match name {
            "storage" => native::<sampledb_storage::Storage>(),
            "backup" => native::<sampledb_backup::Backup>(),
            "upgrade" => native::<sampledb_upgrade::Upgrade>(),
            "primary" | "conventions" | "chaos" => {
                Processes::start(name, &serve_command(name, &scratch)?, args.workers)?.native()
            }
            other => bail!(
                "--plugin {other}: no native build (storage, backup, upgrade, primary, \
                 conventions or chaos)"
            ),
        };
        engine.add(bytes, plugin);
    }
    let kubeconfig = kube::config::Kubeconfig::read_from(&args.kubeconfig)
        .with_context(|| format!("reading kubeconfig {}", args.kubeconfig.display()))?;
    let config = kube::Config::from_custom_kubeconfig(kubeconfig, &Default::default()).await?;
    let client = kube::Client::try_from(config)?;
    let (_stop, stopped) = tokio::sync::watch::channel(false);
    let (handle, task) = operator::start(
        client,
        operator::Config {
            admin_addr: args.admin_addr,
            election: None,
            settings: controller::Settings {
                concurrency: args.concurrency,
                ..Default::default()
            },
            identity: format!("native-engine-{}", std::process::id()),
        },
        Arc::new(engine),
        stopped,
    )
    .await?;
    eprintln!("native_engine: running, admin on {}", handle.admin_addr);
    task.await?;
    Ok(())
}

/// The repository (this example is host/examples/native_engine.rs).
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
                    "native_engine: the {} plugin's process failed: {e:#}; last line {line:?}",
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
