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
//! The Rust plugins only: `storage`, `backup`, `upgrade`. The Python, JavaScript and Go plugins
//! have no native build; a pipeline with them cannot run here.
//!
//! `native_engine --kubeconfig FILE --admin-addr ADDR --plugin storage=FILE [--plugin …]
//! [--concurrency N]`

use std::{net::SocketAddr, path::PathBuf, sync::Arc};

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
    /// the Rust plugin that stands in for it (storage, backup or upgrade). Repeatable.
    #[arg(long = "plugin", value_name = "NAME=FILE", required = true)]
    plugins: Vec<String>,
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
    for spec in &args.plugins {
        let (name, file) = spec
            .split_once('=')
            .with_context(|| format!("--plugin {spec:?}: expected NAME=FILE"))?;
        let bytes = std::fs::read(file).with_context(|| format!("--plugin {name}: {file}"))?;
        let plugin = match name {
            "storage" => native::<sampledb_storage::Storage>(),
            "backup" => native::<sampledb_backup::Backup>(),
            "upgrade" => native::<sampledb_upgrade::Upgrade>(),
            other => bail!("--plugin {other}: no native build (storage, backup or upgrade)"),
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
