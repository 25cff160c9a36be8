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
//! The plugins run natively as `common/sampledb_native.rs` says: the Rust ones compiled in, the
//! others in processes of their own language, `--workers N` such processes per plugin (default
//! 2, the cores of the project's machines). The host's pipeline runs on blocking threads, so a
//! call waiting on a pipe blocks nothing else. What a process costs in memory is its own:
//! the benchmark adds the processes' peak RSS to this one's.
//!
//! `native_engine --kubeconfig FILE --admin-addr ADDR --plugin storage=FILE [--plugin …]
//! [--concurrency N] [--workers N]`

use std::{net::SocketAddr, path::PathBuf, sync::Arc};

use anyhow::Context as _;
use clap::Parser;
use windlass::{controller, operator};
use windlass_contract::testing::NativeEngine;

#[path = "common/sampledb_native.rs"]
mod sampledb_native;

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
        let plugin = sampledb_native::sampledb(name, &scratch, args.workers)
            .with_context(|| format!("--plugin {name}"))?;
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
