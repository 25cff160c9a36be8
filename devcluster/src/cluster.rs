//! [`DevCluster`]: start the server in-process, get clients and a kubeconfig, inject faults,
//! shut down.

use crate::api::Cluster;
use crate::faults::Faults;
use crate::http::{self, AppState};
use crate::{gc, kubeconfig, server, simulator};
use std::net::SocketAddr;
use std::path::Path;
use std::sync::Arc;
use std::time::Duration;
use tokio::sync::watch;
use tokio::task::JoinHandle;

/// How to start a devcluster. `Options::default()` is what tests want: an ephemeral port,
/// the simulator on with short delays.
#[derive(Debug, Clone)]
pub struct Options {
    /// Port on 127.0.0.1; 0 (default) picks a free one.
    pub port: u16,
    /// Run the workload simulator (default true).
    pub simulator: bool,
    /// How long a simulated Pod takes to become ready, a Job to finish, a VolumeSnapshot to be
    /// ready to use (default 200 ms).
    pub ready_delay: Duration,
    /// CronJob time runs this many times faster than the clock (default 1.0; 60.0 makes a
    /// `* * * * *` schedule fire every second).
    pub cron_speedup: f64,
    /// Watch events kept for watches from an older resourceVersion (default 20,000); older
    /// ones get 410 Gone.
    pub history: usize,
    /// Interval between watch bookmarks (default 5 s).
    pub bookmark_interval: Duration,
}

/// The simulator's settings out of the cluster's (here, so that the simulator does not depend
/// on the cluster that runs it).
impl From<&Options> for simulator::Config {
    fn from(o: &Options) -> Self {
        Self {
            ready_delay: o.ready_delay,
            cron_speedup: o.cron_speedup,
        }
    }
}

impl Default for Options {
    fn default() -> Self {
        Self {
            port: 0,
            simulator: true,
            ready_delay: Duration::from_millis(200),
            cron_speedup: 1.0,
            history: 20_000,
            bookmark_interval: Duration::from_secs(5),
        }
    }
}

/// A running devcluster. Dropping it without [`DevCluster::shutdown`] leaves the server
/// running until the runtime ends.
#[derive(Debug)]
pub struct DevCluster {
    addr: SocketAddr,
    cluster: Arc<Cluster>,
    stop: watch::Sender<bool>,
    tasks: Vec<JoinHandle<()>>,
}

/// Errors starting a devcluster.
#[derive(Debug, thiserror::Error)]
pub enum StartError {
    /// The port could not be bound.
    #[error(
        "the devcluster cannot listen on 127.0.0.1:{port}: {source} (--port sets another port; 0 \
         picks a free one)"
    )]
    Bind {
        /// The port asked for.
        port: u16,
        /// Why.
        source: std::io::Error,
    },
}

impl DevCluster {
    /// Starts the server (and the simulator and garbage collector) on the current tokio runtime.
    ///
    /// # Errors
    /// [`StartError::Bind`] when the port is taken.
    pub async fn start(options: Options) -> Result<Self, StartError> {
        let listener = tokio::net::TcpListener::bind(("127.0.0.1", options.port))
            .await
            .map_err(|source| StartError::Bind {
                port: options.port,
                source,
            })?;
        let addr = listener.local_addr().map_err(|source| StartError::Bind {
            port: options.port,
            source,
        })?;
        let cluster = Arc::new(Cluster::new(options.history));
        let (stop, stop_rx) = watch::channel(false);
        let state = AppState {
            cluster: cluster.clone(),
            addr: addr.to_string(),
            bookmark_every: options.bookmark_interval,
        };
        let router = http::router(state);
        let mut tasks = vec![
            tokio::spawn(server::serve(listener, router, cluster.clone(), stop_rx)),
            tokio::spawn(gc::run(cluster.clone())),
        ];
        if options.simulator {
            tasks.push(tokio::spawn(simulator::run(
                cluster.clone(),
                simulator::Config::from(&options),
            )));
        }
        Ok(Self {
            addr,
            cluster,
            stop,
            tasks,
        })
    }

    /// `http://127.0.0.1:<port>`.
    pub fn base_url(&self) -> String {
        format!("http://{}", self.addr)
    }

    /// The bound address.
    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// The kube client configuration for this devcluster (namespace `default`). kube's
    /// clients retry 429/503/504 by default (`default_retry`); turn it off to see injected
    /// 429s directly.
    pub fn config(&self) -> kube::Config {
        let uri: axum::http::Uri = self.base_url().parse().unwrap_or_default();
        let mut config = kube::Config::new(uri);
        config.default_namespace = "default".into();
        config.read_timeout = Some(Duration::from_secs(300));
        config
    }

    /// A kube client talking to this devcluster over HTTP.
    pub fn client(&self) -> kube::Client {
        // Building a client from an http:// config with no TLS and no auth cannot fail.
        kube::Client::try_from(self.config())
            .unwrap_or_else(|e| panic!("kube client for a devcluster: {e}"))
    }

    /// The kubeconfig text.
    pub fn kubeconfig(&self) -> String {
        kubeconfig::render(&self.base_url())
    }

    /// Writes a kubeconfig for kubectl (context `devcluster`, namespace `default`).
    ///
    /// # Errors
    /// I/O errors.
    pub fn write_kubeconfig(&self, path: &Path) -> std::io::Result<()> {
        kubeconfig::write(path, &self.base_url())
    }

    /// Fault injection.
    pub fn faults(&self) -> &Faults {
        &self.cluster.faults
    }

    /// Drops all watch history, so that any watch from an earlier resourceVersion gets 410 Gone.
    pub fn compact(&self) {
        self.cluster.store.compact();
    }

    /// Every change from now on, as the store records it: what an observer sees without going
    /// through the API (so without its injected faults). The channel keeps 65,536 events; a
    /// receiver that falls further behind is told it lagged.
    pub fn events(&self) -> tokio::sync::broadcast::Receiver<std::sync::Arc<crate::store::Event>> {
        self.cluster.store.subscribe()
    }

    /// The current resourceVersion.
    pub fn resource_version(&self) -> u64 {
        self.cluster.store.current_rv()
    }

    /// Number of stored objects.
    pub fn object_count(&self) -> usize {
        self.cluster.store.len()
    }

    /// Stops serving, closes every connection, stops the simulator and the collector.
    pub async fn shutdown(self) {
        let _ = self.stop.send(true);
        for t in self.tasks {
            t.abort();
            let _ = t.await;
        }
    }
}
