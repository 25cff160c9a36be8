//! The operator process: admin endpoints, leader election, and the controller while leading.

use std::{
    net::SocketAddr,
    sync::{Arc, atomic::Ordering},
    time::Duration,
};

use anyhow::Context as _;
use kube::Client;
use tokio::sync::watch;

use windlass_contract::Engine;

use crate::{
    admin::{self, Health},
    controller::{Settings, Shared, kinds, plugins},
    leader::{self, Election},
    metrics::Metrics,
};

/// How to run the operator.
#[derive(Debug, Clone)]
pub struct Config {
    /// Where `/healthz`, `/readyz` and `/metrics` listen.
    pub admin_addr: SocketAddr,
    /// Leader election; none runs the controller at once (a single replica, `windlass dev`).
    pub election: Option<Election>,
    /// Controller settings.
    pub settings: Settings,
    /// This instance's name in events and the Lease.
    pub identity: String,
}

/// A running operator's handles, for tests and `windlass dev`.
#[derive(Debug, Clone)]
pub struct Handle {
    /// Readiness and metrics.
    pub health: Arc<Health>,
    /// The admin server's address.
    pub admin_addr: SocketAddr,
}

/// Starts the operator, loading plugins with `engine`; it runs until `shutdown` turns true.
///
/// # Errors
/// When the admin address cannot be bound, or leader election cannot start.
pub async fn start(
    client: Client,
    config: Config,
    engine: Arc<dyn Engine>,
    shutdown: watch::Receiver<bool>,
) -> anyhow::Result<(Handle, tokio::task::JoinHandle<()>)> {
    let metrics = Arc::new(Metrics::default());
    let health = Arc::new(Health {
        started: Default::default(),
        leading: Default::default(),
        metrics: metrics.clone(),
        runs: Default::default(),
        record_dir: config.settings.record_dir.clone(),
    });
    let admin_addr = admin::serve(config.admin_addr, health.clone(), stopped(shutdown.clone()))
        .await
        .with_context(|| {
            format!(
                "/healthz, /readyz and /metrics cannot listen on {} (--admin-addr sets another \
                 address; port 0 picks a free one)",
                config.admin_addr
            )
        })?;
    let shared = Shared::new(
        client.clone(),
        engine,
        metrics.clone(),
        health.runs.clone(),
        config.settings.clone(),
        &config.identity,
    );
    let (leading, campaign) = match &config.election {
        Some(election) => {
            let (leading, campaign) = leader::elect(client, election).await?;
            (Some(leading), Some(campaign))
        }
        None => (None, None),
    };
    health.started.store(true, Ordering::Relaxed);
    let task = {
        let health = health.clone();
        tokio::spawn(async move {
            lead(shared.clone(), health, leading, shutdown).await;
            shared.stop();
            // The controllers have stopped and the election's receiver is gone: it frees the
            // Lease, so that a standby takes over at once (bounded: the API may be away).
            if let Some(campaign) = campaign {
                let _ = tokio::time::timeout(Duration::from_secs(3), campaign).await;
            }
        })
    };
    Ok((Handle { health, admin_addr }, task))
}

/// Runs the controller whenever this instance leads (always, without an election).
async fn lead(
    shared: Arc<Shared>,
    health: Arc<Health>,
    mut leading: Option<watch::Receiver<bool>>,
    mut shutdown: watch::Receiver<bool>,
) {
    loop {
        if let Some(leading) = &mut leading {
            tokio::select! {
                r = leading.wait_for(|l| *l) => if r.is_err() { return },
                _ = shutdown.wait_for(|s| *s) => return,
            }
            tracing::info!("leading: starting the controllers");
        }
        shared.metrics.leader.set(1);
        health.leading.store(true, Ordering::Relaxed);
        run_controllers(shared.clone(), leading.clone(), shutdown.clone()).await;
        health.leading.store(false, Ordering::Relaxed);
        shared.metrics.leader.set(0);
        // A standby serves nothing and queues nothing: what the leader it was reported goes,
        // or a dashboard summing replicas (and an alert on a plugin not serving) would count
        // it for ever.
        shared.metrics.stopped_leading();
        if *shutdown.borrow() {
            return;
        }
        tracing::warn!("lost the lease: controllers stopped, standing by");
    }
}

/// Runs the plugin loader and the per-kind controllers until the lease is lost (`leading`
/// turns false; never without an election) or the host is asked to stop. Stopping, it lets
/// the reconciles running then finish, up to `Settings::drain`, and starts no new one; not
/// when the lease is lost, before or meanwhile: another instance may lead already.
async fn run_controllers(
    shared: Arc<Shared>,
    mut leading: Option<watch::Receiver<bool>>,
    mut shutdown: watch::Receiver<bool>,
) {
    let plugins = tokio::spawn(plugins::run(shared.clone()));
    let kinds = tokio::spawn(kinds::run(shared.clone()));
    let lost = async {
        match &mut leading {
            Some(leading) => {
                let _ = leading.wait_for(|l| !*l).await;
            }
            None => std::future::pending().await,
        }
    };
    tokio::pin!(lost);
    let stopping = tokio::select! {
        () = &mut lost => false,
        _ = shutdown.wait_for(|s| *s) => true,
    };
    if stopping {
        tokio::select! {
            cut = shared.running.drain(shared.settings.drain) => if cut > 0 {
                tracing::warn!(
                    reconciles = cut,
                    drain = ?shared.settings.drain,
                    "stopping: the reconciles still running after the drain are stopped halfway"
                );
            },
            () = &mut lost => tracing::warn!(
                "lost the lease while stopping: the reconciles still running are stopped halfway"
            ),
        }
    }
    plugins.abort();
    kinds.abort();
    let _ = plugins.await;
    let _ = kinds.await;
    // The controllers `kinds` ran are tasks of their own, aborted as it was dropped; an
    // aborted task is dropped when the runtime next reaches it, not when `abort` returns. Wait
    // until their cut reconciles are gone — each has told its span and been counted
    // `cancelled` by then — so that nothing of this leadership still runs once this returns
    // and the Lease is freed. Not draining: a host that lost the lease may lead again.
    let left = shared.running.none_running(CUT_GONE).await;
    if left > 0 {
        tracing::warn!(
            reconciles = left,
            "stopped controllers' reconciles not gone yet"
        );
    }
}

/// How long the reconciles of aborted controllers get to be dropped (the next turn of the
/// runtime; this is only a bound).
const CUT_GONE: std::time::Duration = std::time::Duration::from_secs(2);

async fn stopped(mut shutdown: watch::Receiver<bool>) {
    let _ = shutdown.wait_for(|s| *s).await;
}
