//! `windlass-devcluster`: serve a devcluster on a port and write a kubeconfig for it.

use clap::Parser;
use std::path::PathBuf;
use std::time::Duration;
use windlass_devcluster::{DevCluster, Options};

/// An embedded Kubernetes-compatible API server for development and tests.
#[derive(Debug, Parser)]
#[command(version)]
struct Cli {
    /// Port on 127.0.0.1 (0 picks a free one).
    #[arg(long, env = "DEVCLUSTER_PORT", default_value_t = 6443)]
    port: u16,
    /// Where to write the kubeconfig.
    #[arg(
        long,
        env = "DEVCLUSTER_KUBECONFIG",
        default_value = "devcluster.kubeconfig"
    )]
    kubeconfig: PathBuf,
    /// Turn the workload simulator off.
    #[arg(long)]
    no_simulator: bool,
    /// Milliseconds before simulated Pods are ready and Jobs complete.
    #[arg(long, default_value_t = 1000)]
    ready_delay_ms: u64,
    /// CronJob clock speed-up factor.
    #[arg(long, default_value_t = 1.0)]
    cron_speedup: f64,
}

fn main() -> anyhow::Result<()> {
    // Parsed first: `--help` and errors end the process before it is executed again.
    let cli = Cli::parse();
    windlass_devcluster::malloc::tune();
    tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()?
        .block_on(serve(cli))
}

async fn serve(cli: Cli) -> anyhow::Result<()> {
    tracing_subscriber::fmt()
        .with_env_filter(tracing_subscriber::EnvFilter::from_default_env())
        .init();
    let options = Options {
        port: cli.port,
        simulator: !cli.no_simulator,
        ready_delay: Duration::from_millis(cli.ready_delay_ms),
        cron_speedup: cli.cron_speedup,
        ..Options::default()
    };
    let dc = DevCluster::start(options).await?;
    dc.write_kubeconfig(&cli.kubeconfig)?;
    println!("devcluster serving at {}", dc.base_url());
    println!("export KUBECONFIG={}", cli.kubeconfig.display());
    tokio::signal::ctrl_c().await?;
    dc.shutdown().await;
    Ok(())
}
