//! `windlass dev`: the embedded devcluster with the SampleDB plugins and the examples (the work
//! is in `windlass::dev`). Built only with the `dev` feature: its defaults are paths in this
//! repository.

use std::{path::PathBuf, time::Duration};

use anyhow::{Context as _, Result};
use windlass::dev::{Dev, DevConfig};
use windlass_devcluster::simulator;

use super::Global;

#[derive(Debug, clap::Args)]
pub struct Args {
    /// Port of the devcluster on 127.0.0.1; 0 picks a free one.
    #[arg(long, default_value_t = 0)]
    port: u16,
    /// Where to write the kubeconfig for kubectl.
    #[arg(long, default_value = "target/windlass-dev.kubeconfig")]
    kubeconfig_out: PathBuf,
    /// A plugin as NAME=FILE; repeat in pipeline order. Default: the SampleDB plugins built by
    /// `cargo xtask plugins`.
    #[arg(long = "plugin")]
    plugins: Vec<String>,
    /// The parent kind the plugins reconcile.
    #[arg(long, default_value = "samples.windlass.dev/v1alpha1/SampleDB")]
    parent: String,
    /// A CustomResourceDefinition file to create before the plugins load (the parent kind of
    /// your own plugin); repeat.
    #[arg(long = "crd")]
    crds: Vec<PathBuf>,
    /// Manifests to apply; repeat.
    #[arg(
        long = "manifest",
        default_values = ["examples/backup-volume.yaml", "examples/sampledb.yaml"]
    )]
    manifests: Vec<PathBuf>,
    /// Where /healthz, /readyz and /metrics listen.
    #[arg(long, default_value = "127.0.0.1:8080")]
    admin_addr: std::net::SocketAddr,
    /// How many times faster than the clock CronJobs fire in the simulator.
    #[arg(long, default_value_t = 60.0)]
    cron_speedup: f64,
    /// Exit 0 once every example parent is reconciled (exit 1 after a minute): for tests.
    #[arg(long, hide = true)]
    exit_when_reconciled: bool,
    /// Run on the cluster of this kubeconfig instead of the embedded devcluster (for example
    /// the real control plane of `tools/kube/up.sh`); `--port`, `--kubeconfig-out` and
    /// `--cron-speedup` do not apply.
    #[arg(long)]
    kubeconfig: Option<PathBuf>,
    /// With `--kubeconfig`: play the kubelet, volume binding and the snapshot controller over
    /// the API, for a control plane without nodes (the devcluster's workload simulator); the
    /// snapshot API's CRDs are created if the cluster has none.
    #[arg(long, requires = "kubeconfig")]
    simulate_workloads: bool,
    /// Record every plugin call of each parent annotated `windlass.dev/record: "true"` here, for
    /// `windlass render --replay FILE` (the newest 60 per parent).
    #[arg(long, env = "WINDLASS_RECORD_DIR")]
    record_dir: Option<PathBuf>,
}

impl Args {
    /// Whether this process serves the devcluster (no `--kubeconfig` of another cluster).
    pub fn serves_devcluster(&self) -> bool {
        self.kubeconfig.is_none()
    }

    fn config(&self, global: &Global) -> Result<DevConfig> {
        let (api_version, kind) = self
            .parent
            .rsplit_once('/')
            .with_context(|| format!("--parent {:?}: expected group/version/Kind", self.parent))?;
        let plugins = if self.plugins.is_empty() {
            windlass::dev::sampledb_plugins()
        } else {
            self.plugins
                .iter()
                .map(|p| {
                    let (name, path) = p
                        .split_once('=')
                        .with_context(|| format!("--plugin {p:?}: expected NAME=FILE"))?;
                    Ok((name.to_string(), PathBuf::from(path)))
                })
                .collect::<Result<Vec<_>>>()?
        };
        Ok(DevConfig {
            port: self.port,
            kubeconfig: self.kubeconfig_out.clone(),
            plugins: plugins
                .into_iter()
                .map(|(name, path)| (name, api_version.to_string(), kind.to_string(), path))
                .collect(),
            crds: self.crds.clone(),
            manifests: self.manifests.clone(),
            operator: windlass::operator::Config {
                admin_addr: self.admin_addr,
                election: None,
                settings: windlass::controller::Settings {
                    record_dir: self.record_dir.clone(),
                    ..Default::default()
                },
                identity: "windlass-dev".into(),
            },
            runtime: global.runtime_config(),
            cron_speedup: self.cron_speedup,
        })
    }
}

pub async fn run(global: &Global, args: Args) -> Result<()> {
    if let Some(dir) = args
        .kubeconfig_out
        .parent()
        .filter(|d| !d.as_os_str().is_empty())
    {
        std::fs::create_dir_all(dir).with_context(|| format!("creating {}", dir.display()))?;
    }
    let config = args.config(global)?;
    let mut workloads = None;
    let dev = match &args.kubeconfig {
        None => windlass::dev::start(config).await?,
        Some(path) => {
            let kube_config = super::kube_config(Some(path)).await?;
            let client = kube::Client::try_from(kube_config.clone())?;
            if args.simulate_workloads {
                simulator::remote::install_snapshot_api(&client)
                    .await
                    .map_err(anyhow::Error::msg)?;
                workloads = Some(tokio::spawn(simulator::remote::run(
                    kube_config,
                    simulator::Config::from(&windlass_devcluster::Options::default()),
                )));
            }
            windlass::dev::start_on(client, config).await?
        }
    };
    if args.kubeconfig.is_none() {
        // Its own kubeconfig only (never one the user gave): `windlass trace` finds the host's
        // admin address there.
        record_admin(&args.kubeconfig_out, dev.operator.admin_addr)?;
    }
    print_welcome(
        &dev,
        args.kubeconfig.as_ref().unwrap_or(&args.kubeconfig_out),
    );
    let result = if args.exit_when_reconciled {
        dev.wait_reconciled(Duration::from_secs(60)).await
    } else {
        println!("Ctrl-C stops it.");
        super::stop_signal().await;
        Ok(())
    };
    dev.shutdown().await;
    if let Some(workloads) = &workloads {
        workloads.abort();
    }
    result?;
    if args.exit_when_reconciled {
        println!("every example parent is reconciled");
    } else {
        println!("stopped");
    }
    Ok(())
}

/// Writes the admin address into the kubeconfig's clusters as the `windlass.dev` extension
/// (`{admin: http://…}`), where `windlass trace` reads it.
fn record_admin(kubeconfig: &std::path::Path, admin: std::net::SocketAddr) -> Result<()> {
    let mut admin = admin;
    if admin.ip().is_unspecified() {
        admin.set_ip(std::net::Ipv4Addr::LOCALHOST.into());
    }
    let read = || -> Result<serde_yaml::Value> {
        Ok(serde_yaml::from_str(&std::fs::read_to_string(kubeconfig)?)?)
    };
    let mut file = read().with_context(|| format!("reading {}", kubeconfig.display()))?;
    let extension: serde_yaml::Value = serde_yaml::from_str(&format!(
        "[{{name: {}, extension: {{admin: 'http://{admin}'}}}}]",
        super::trace::KUBECONFIG_EXTENSION
    ))?;
    for cluster in file
        .get_mut("clusters")
        .and_then(serde_yaml::Value::as_sequence_mut)
        .into_iter()
        .flatten()
    {
        if let Some(cluster) = cluster.get_mut("cluster") {
            cluster["extensions"] = extension.clone();
        }
    }
    std::fs::write(kubeconfig, serde_yaml::to_string(&file)?)
        .with_context(|| format!("writing {}", kubeconfig.display()))
}

fn print_welcome(dev: &Dev, kubeconfig: &std::path::Path) {
    match &dev.cluster {
        Some(cluster) => println!(
            "windlass dev: the devcluster is at {} with the operator running",
            cluster.base_url()
        ),
        None => println!(
            "windlass dev: the operator runs on the cluster of {}",
            kubeconfig.display()
        ),
    }
    let kubeconfig = kubeconfig.display();
    println!();
    println!("  export KUBECONFIG={kubeconfig}");
    println!("  kubectl get wasmplugins               # the plugins and the version each serves");
    println!("  kubectl get sdb                       # SampleDBs: version, phase, ready replicas");
    println!("  kubectl get statefulsets,services,pods,pvc");
    println!(
        "  kubectl edit sdb example-database     # change replicas; watch the StatefulSet follow"
    );
    println!("  windlass trace sdb/example-database   # its children, drift, last run and events");
    println!("  curl http://{}/metrics", dev.operator.admin_addr);
    println!();
}
