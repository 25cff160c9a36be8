//! The workload simulator (kwok-style): what controllers and kubelets would do, enough for an
//! operator to see its children come up.

use crate::api::Cluster;
use crate::cluster::Options;
use std::sync::Arc;
use std::time::Duration;

/// Simulator settings.
#[derive(Debug, Clone)]
pub struct Config {
    /// Delay before a Pod is ready, a Job completes, a snapshot is ready.
    pub ready_delay: Duration,
    /// CronJob clock speed-up.
    pub cron_speedup: f64,
}

impl From<&Options> for Config {
    fn from(o: &Options) -> Self {
        Self {
            ready_delay: o.ready_delay,
            cron_speedup: o.cron_speedup,
        }
    }
}

/// Runs the simulator until the task is dropped.
pub async fn run(cluster: Arc<Cluster>, config: Config) {
    let _ = (cluster, config);
}
