//! The `windlass` command line.

use std::{io::Write as _, path::PathBuf, time::Duration};

use anyhow::{Context as _, Result};
use clap::{Parser, Subcommand, ValueEnum};
use windlass::{
    render,
    runtime::{InstanceMode, Limits, LoadOptions, Phase, Runtime, RuntimeConfig},
    source::oci,
};

mod plugin_cmd;

/// A Kubernetes operator host whose reconcile logic runs as sandboxed WebAssembly plugins.
#[derive(Debug, Parser)]
#[command(name = "windlass", version, about)]
struct Cli {
    /// Log format on stderr.
    #[arg(long, value_enum, default_value_t = LogFormat::Text, env = "WINDLASS_LOG_FORMAT", global = true)]
    log_format: LogFormat,

    /// Where precompiled plugins are kept across runs. Default: $XDG_CACHE_HOME/windlass or
    /// ~/.cache/windlass.
    #[arg(long, env = "WINDLASS_CACHE_DIR", global = true)]
    cache_dir: Option<PathBuf>,

    /// Do not use the precompiled cache.
    #[arg(long, global = true)]
    no_cache: bool,

    #[command(subcommand)]
    command: Command,
}

#[derive(Debug, Clone, Copy, ValueEnum)]
enum LogFormat {
    Text,
    Json,
}

#[derive(Debug, Subcommand)]
enum Command {
    /// Run the operator against a cluster (in-cluster config or a kubeconfig).
    Run(RunArgs),
    /// Start the embedded devcluster with the SampleDB plugins and the examples, and run the
    /// operator on it until Ctrl-C: the embedded default.
    Dev(DevArgs),
    /// Print the CustomResourceDefinitions (WasmPlugin, SampleDB) as YAML.
    Crds,
    /// Run a pipeline of plugins on a parent from a file and print what the host would apply.
    Render(RenderArgs),
    /// Work with plugin components.
    #[command(subcommand)]
    Plugin(PluginCommand),
}

#[derive(Debug, clap::Args)]
struct DevArgs {
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
}

/// The SampleDB plugins `windlass dev` loads by default, in pipeline order, where
/// `cargo xtask plugins` writes them.
const DEFAULT_DEV_PLUGINS: &[(&str, &str)] = &[
    (
        "sampledb-storage",
        "target/wasm/wasm32-wasip2/release/windlass_plugin_storage.wasm",
    ),
    (
        "sampledb-backup",
        "target/wasm/wasm32-wasip2/release/windlass_plugin_backup.wasm",
    ),
    (
        "sampledb-upgrade",
        "target/wasm/wasm32-wasip2/release/windlass_plugin_upgrade.wasm",
    ),
    (
        "sampledb-primary",
        "target/wasm/plugins/sampledb-primary.wasm",
    ),
    (
        "sampledb-conventions",
        "target/wasm/plugins/sampledb-conventions.wasm",
    ),
];

#[derive(Debug, clap::Args)]
struct RunArgs {
    /// A kubeconfig file; default: $KUBECONFIG, ~/.kube/config, or the in-cluster config.
    #[arg(long)]
    kubeconfig: Option<PathBuf>,
    /// Elect a leader among replicas on a Lease; only the leader reconciles.
    #[arg(long, default_value_t = true, action = clap::ArgAction::Set)]
    leader_elect: bool,
    /// Namespace of the Lease (the namespace the host runs in).
    #[arg(long, env = "POD_NAMESPACE", default_value = "windlass-system")]
    namespace: String,
    /// Name of the Lease.
    #[arg(long, default_value = "windlass-leader")]
    lease_name: String,
    /// This instance's identity in the Lease and in events. Default: $POD_NAME or the host name.
    #[arg(long, env = "POD_NAME")]
    identity: Option<String>,
    /// Seconds a lease stays valid after its last renewal.
    #[arg(long, default_value_t = 15)]
    lease_seconds: u64,
    /// Where /healthz, /readyz and /metrics listen.
    #[arg(long, env = "WINDLASS_ADMIN_ADDR", default_value = "0.0.0.0:8080")]
    admin_addr: std::net::SocketAddr,
    /// Parents reconciled at once per kind.
    #[arg(long, default_value_t = 16)]
    concurrency: u16,
    /// Count fuel so that WasmPlugins may set a fuel limit (costs a few percent per call).
    #[arg(long)]
    fuel: bool,
    /// Plugin instances that may exist at once (pool slots).
    #[arg(long, default_value_t = 256)]
    max_instances: u32,
    /// A registry (`host:port`, as in references) to pull plugins from over plain HTTP.
    #[arg(long = "insecure-registry")]
    insecure_registries: Vec<String>,
    /// Seconds between re-resolutions of OCI tags; a moved tag is hot-swapped.
    #[arg(long, default_value_t = 300)]
    oci_poll_seconds: u64,
    /// The ServiceAccount the host runs as (in --namespace): no plugin's pod may run as it,
    /// whatever its WasmPlugin grants. The Helm chart sets it.
    #[arg(long, env = "WINDLASS_SERVICE_ACCOUNT")]
    service_account: Option<String>,
}

#[derive(Debug, clap::Args)]
struct RenderArgs {
    /// The parent object (YAML or JSON).
    #[arg(short = 'f', long = "filename")]
    parent: PathBuf,
    /// A plugin component; repeat in pipeline order.
    #[arg(long = "plugin", required = true)]
    plugins: Vec<PathBuf>,
    /// Observed objects: a file or a directory of YAML/JSON files.
    #[arg(long)]
    observed: Option<PathBuf>,
    /// Config as [PLUGIN:]KEY=VALUE (KEY may be dotted; VALUE is JSON or a string). Without
    /// PLUGIN: it applies to every plugin.
    #[arg(long = "config")]
    config: Vec<String>,
    /// A YAML mapping of plugin name (or `*`) to config.
    #[arg(long)]
    config_file: Option<PathBuf>,
    /// Grant a kind by name (group/version/Kind) on top of what each plugin declared; needed for
    /// cluster-scoped and privileged kinds.
    #[arg(long = "grant")]
    grants: Vec<String>,
    /// Which phase to run.
    #[arg(long, value_enum, default_value_t = PhaseArg::Reconcile)]
    phase: PhaseArg,
    /// The time given to plugins (RFC 3339). Default: now.
    #[arg(long)]
    now: Option<String>,
    /// Time limit per plugin call, in milliseconds.
    #[arg(long, default_value_t = 2_000)]
    timeout_ms: u64,
    /// Memory limit per plugin instance, in MiB.
    #[arg(long, default_value_t = 128)]
    memory_mib: usize,
    /// Output format.
    #[arg(short, long, value_enum, default_value_t = Output::Yaml)]
    output: Output,
}

#[derive(Debug, Clone, Copy, ValueEnum)]
enum PhaseArg {
    Reconcile,
    Finalize,
}

#[derive(Debug, Clone, Copy, ValueEnum)]
enum Output {
    Yaml,
    Json,
}

#[derive(Debug, Subcommand)]
enum PluginCommand {
    /// Print a component's info, digest, size and the imports it needs.
    Inspect {
        /// A component file or, when no such file exists, a registry reference.
        target: String,
        /// Output format.
        #[arg(short, long, value_enum, default_value_t = Output::Yaml)]
        output: Output,
        /// Refuse a pulled plugin whose digest is not this one (sha256:<hex>).
        #[arg(long)]
        sha256: Option<String>,
        #[command(flatten)]
        registry: RegistryArgs,
    },
    /// Publish a component to a registry as a WebAssembly artifact and print the digest to pin.
    Push {
        /// The component file.
        file: PathBuf,
        /// Where to push it: registry/repository:tag.
        reference: String,
        #[command(flatten)]
        registry: RegistryArgs,
    },
    /// Download a plugin from a registry, verified.
    Pull {
        /// registry/repository:tag or registry/repository@sha256:<manifest digest>.
        reference: String,
        /// Where to write the component. Default: <last repository segment>.wasm.
        #[arg(short = 'o', long = "output")]
        file: Option<PathBuf>,
        /// Refuse the plugin unless its digest is this one (sha256:<hex>).
        #[arg(long)]
        sha256: Option<String>,
        #[command(flatten)]
        registry: RegistryArgs,
    },
}

#[derive(Debug, clap::Args)]
struct RegistryArgs {
    /// Registry user name. Default: anonymous.
    #[arg(long, env = "WINDLASS_REGISTRY_USERNAME", requires = "password")]
    username: Option<String>,
    /// Registry password or token.
    #[arg(long, env = "WINDLASS_REGISTRY_PASSWORD", hide_env_values = true)]
    password: Option<String>,
    /// Speak plain HTTP (no TLS) to the registry. Default: HTTPS.
    #[arg(long)]
    plain_http: bool,
    /// A registry (host:port) spoken to over plain HTTP; repeatable. Default: none.
    #[arg(long = "insecure-registry")]
    insecure_registries: Vec<String>,
    /// The largest plugin a pull or inspect accepts, in MiB.
    #[arg(long, default_value_t = 64)]
    max_size_mib: u64,
}

impl RegistryArgs {
    fn options(&self) -> oci::Options {
        oci::Options {
            auth: match (&self.username, &self.password) {
                (Some(username), Some(password)) => Some(oci::RegistryAuth {
                    username: username.clone(),
                    password: password.clone(),
                }),
                _ => None,
            },
            plain_http: self.plain_http,
            insecure_registries: self.insecure_registries.clone(),
            max_layer_bytes: self.max_size_mib << 20,
        }
    }
}

fn main() -> std::process::ExitCode {
    let cli = Cli::parse();
    init_logging(cli.log_format);
    windlass::source::install_crypto_provider();
    match run(cli) {
        Ok(()) => std::process::ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("error: {e:#}");
            std::process::ExitCode::FAILURE
        }
    }
}

fn init_logging(format: LogFormat) {
    let filter = tracing_subscriber::EnvFilter::try_from_default_env()
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("info"));
    let builder = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr);
    match format {
        LogFormat::Text => builder.init(),
        LogFormat::Json => builder.json().init(),
    }
}

fn runtime(cli: &Cli) -> Result<Runtime> {
    Ok(Runtime::new(runtime_config(cli))?)
}

fn default_cache_dir() -> Option<PathBuf> {
    std::env::var_os("XDG_CACHE_HOME")
        .map(PathBuf::from)
        .or_else(|| std::env::var_os("HOME").map(|h| PathBuf::from(h).join(".cache")))
        .map(|d| d.join("windlass"))
}

fn run(cli: Cli) -> Result<()> {
    match &cli.command {
        Command::Run(args) => return tokio_main(run_operator(&cli, args)),
        Command::Dev(args) => return tokio_main(run_dev(&cli, args)),
        Command::Crds => return print_crds(),
        _ => {}
    }
    let runtime = runtime(&cli)?;
    match cli.command {
        Command::Run(_) | Command::Dev(_) | Command::Crds => unreachable!("handled above"),
        Command::Render(args) => render_cmd(&runtime, args),
        Command::Plugin(PluginCommand::Inspect {
            target,
            output,
            sha256,
            registry,
        }) => {
            if std::path::Path::new(&target).is_file() {
                inspect(&runtime, &PathBuf::from(target), output)
            } else {
                block_on(plugin_cmd::inspect_remote(
                    &runtime,
                    &target,
                    sha256.as_deref(),
                    &registry.options(),
                    output,
                ))
            }
        }
        Command::Plugin(PluginCommand::Push {
            file,
            reference,
            registry,
        }) => block_on(plugin_cmd::push(
            &runtime,
            &file,
            &reference,
            &registry.options(),
        )),
        Command::Plugin(PluginCommand::Pull {
            reference,
            file,
            sha256,
            registry,
        }) => block_on(plugin_cmd::pull(
            &reference,
            file,
            sha256.as_deref(),
            &registry.options(),
        )),
    }
}

fn tokio_main(fut: impl std::future::Future<Output = Result<()>>) -> Result<()> {
    tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .context("starting the async runtime")?
        .block_on(fut)
}

fn print_crds() -> Result<()> {
    let mut out = String::new();
    for crd in windlass::crd::all() {
        out.push_str("---\n");
        out.push_str(&serde_yaml::to_string(&crd)?);
    }
    std::io::stdout()
        .write_all(out.as_bytes())
        .context("writing to stdout")?;
    Ok(())
}

fn runtime_config(cli: &Cli) -> RuntimeConfig {
    RuntimeConfig {
        cache_dir: if cli.no_cache {
            None
        } else {
            cli.cache_dir.clone().or_else(default_cache_dir)
        },
        ..RuntimeConfig::default()
    }
}

/// Resolves when the process is asked to stop (Ctrl-C or SIGTERM).
async fn stop_signal() {
    let ctrl_c = tokio::signal::ctrl_c();
    #[cfg(unix)]
    {
        let mut term =
            match tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()) {
                Ok(term) => term,
                Err(_) => {
                    let _ = ctrl_c.await;
                    return;
                }
            };
        tokio::select! {
            _ = ctrl_c => {},
            _ = term.recv() => {},
        }
    }
    #[cfg(not(unix))]
    let _ = ctrl_c.await;
}

async fn kube_client(kubeconfig: Option<&PathBuf>) -> Result<kube::Client> {
    let config = match kubeconfig {
        Some(path) => {
            let kubeconfig = kube::config::Kubeconfig::read_from(path)
                .with_context(|| format!("reading kubeconfig {}", path.display()))?;
            kube::Config::from_custom_kubeconfig(kubeconfig, &Default::default()).await?
        }
        None => kube::Config::infer()
            .await
            .context("no kubeconfig and not in a cluster")?,
    };
    Ok(kube::Client::try_from(config)?)
}

async fn run_dev(cli: &Cli, args: &DevArgs) -> Result<()> {
    let (api_version, kind) = args
        .parent
        .rsplit_once('/')
        .with_context(|| format!("--parent {:?}: expected group/version/Kind", args.parent))?;
    let plugins = if args.plugins.is_empty() {
        DEFAULT_DEV_PLUGINS
            .iter()
            .map(|(name, path)| (name.to_string(), PathBuf::from(path)))
            .collect()
    } else {
        args.plugins
            .iter()
            .map(|p| {
                let (name, path) = p
                    .split_once('=')
                    .with_context(|| format!("--plugin {p:?}: expected NAME=FILE"))?;
                Ok((name.to_string(), PathBuf::from(path)))
            })
            .collect::<Result<Vec<_>>>()?
    };
    if let Some(dir) = args
        .kubeconfig_out
        .parent()
        .filter(|d| !d.as_os_str().is_empty())
    {
        std::fs::create_dir_all(dir).with_context(|| format!("creating {}", dir.display()))?;
    }
    let config = windlass::dev::DevConfig {
        port: args.port,
        kubeconfig: args.kubeconfig_out.clone(),
        plugins: plugins
            .into_iter()
            .map(|(name, path)| (name, api_version.to_string(), kind.to_string(), path))
            .collect(),
        manifests: args.manifests.clone(),
        operator: windlass::operator::Config {
            admin_addr: args.admin_addr,
            election: None,
            settings: Default::default(),
            runtime: runtime_config(cli),
            identity: "windlass-dev".into(),
        },
        cron_speedup: args.cron_speedup,
    };
    let mut simulator = None;
    let dev = match &args.kubeconfig {
        None => windlass::dev::start(config).await?,
        Some(path) => {
            let client = kube_client(Some(path)).await?;
            if args.simulate_workloads {
                windlass_devcluster::simulator::remote::install_snapshot_api(&client)
                    .await
                    .map_err(anyhow::Error::msg)?;
                simulator = Some(tokio::spawn(windlass_devcluster::simulator::remote::run(
                    client.clone(),
                    windlass_devcluster::simulator::Config::from(
                        &windlass_devcluster::Options::default(),
                    ),
                )));
            }
            windlass::dev::start_on(client, config).await?
        }
    };
    let kubeconfig = args.kubeconfig.as_ref().unwrap_or(&args.kubeconfig_out);
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
    println!("  curl http://{}/metrics", dev.operator.admin_addr);
    println!();
    if args.exit_when_reconciled {
        let result = dev.wait_reconciled(Duration::from_secs(60)).await;
        dev.shutdown().await;
        if let Some(simulator) = &simulator {
            simulator.abort();
        }
        result?;
        println!("every example parent is reconciled");
        return Ok(());
    }
    println!("Ctrl-C stops it.");
    stop_signal().await;
    dev.shutdown().await;
    if let Some(simulator) = &simulator {
        simulator.abort();
    }
    Ok(())
}

async fn run_operator(cli: &Cli, args: &RunArgs) -> Result<()> {
    let client = kube_client(args.kubeconfig.as_ref()).await?;
    let identity = args
        .identity
        .clone()
        .or_else(|| std::env::var("HOSTNAME").ok())
        .unwrap_or_else(|| format!("windlass-{}", std::process::id()));
    let config = windlass::operator::Config {
        admin_addr: args.admin_addr,
        election: args
            .leader_elect
            .then(|| windlass::controller::leader::Election {
                namespace: args.namespace.clone(),
                name: args.lease_name.clone(),
                identity: identity.clone(),
                duration: Duration::from_secs(args.lease_seconds),
                grace: Duration::from_secs((args.lease_seconds / 3).max(1)),
            }),
        settings: windlass::controller::Settings {
            concurrency: args.concurrency,
            oci: windlass::controller::fetch::OciSettings {
                options: windlass::source::oci::Options {
                    insecure_registries: args.insecure_registries.clone(),
                    ..Default::default()
                },
                namespace: args.namespace.clone(),
            },
            oci_poll: Duration::from_secs(args.oci_poll_seconds.max(1)),
            host_account: args
                .service_account
                .as_ref()
                .map(|name| windlass::policy::HostAccount {
                    namespace: args.namespace.clone(),
                    name: name.clone(),
                }),
            ..Default::default()
        },
        runtime: RuntimeConfig {
            fuel: args.fuel,
            max_instances: args.max_instances,
            ..runtime_config(cli)
        },
        identity,
    };
    let (stop, stopped) = tokio::sync::watch::channel(false);
    let (handle, task) = windlass::operator::start(client, config, stopped).await?;
    tracing::info!(admin = %handle.admin_addr, "windlass is running");
    stop_signal().await;
    tracing::info!("stopping");
    let _ = stop.send(true);
    let _ = task.await;
    Ok(())
}

/// Runs one registry command on a single-threaded tokio runtime.
fn block_on(future: impl std::future::Future<Output = Result<()>>) -> Result<()> {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .context("starting the async runtime")?
        .block_on(future)
}

fn render_cmd(runtime: &Runtime, args: RenderArgs) -> Result<()> {
    let mut config = match &args.config_file {
        Some(path) => render::read_config_file(path)?,
        None => Default::default(),
    };
    for assignment in &args.config {
        render::set_config(&mut config, assignment)?;
    }
    let input = render::Input {
        parent: render::read_parent(&args.parent)?,
        plugins: args.plugins,
        observed: match &args.observed {
            Some(path) => render::read_observed(path)?,
            None => Vec::new(),
        },
        config,
        grants: args.grants,
        phase: match args.phase {
            PhaseArg::Reconcile => Phase::Reconcile,
            PhaseArg::Finalize => Phase::Finalize,
        },
        now: args.now.unwrap_or_else(windlass::k8s::now_rfc3339),
        options: LoadOptions {
            limits: Limits {
                timeout: Duration::from_millis(args.timeout_ms),
                memory_bytes: args.memory_mib << 20,
                fuel: None,
            },
            mode: InstanceMode::Fresh,
        },
    };
    let outcome = render::render(runtime, &input)?;
    let text = match args.output {
        Output::Yaml => render::to_yaml(&outcome)?,
        Output::Json => serde_json::to_string_pretty(&render::to_json(&outcome))? + "\n",
    };
    std::io::stdout()
        .write_all(text.as_bytes())
        .context("writing to stdout")?;
    Ok(())
}

fn inspect(runtime: &Runtime, path: &PathBuf, output: Output) -> Result<()> {
    let bytes = std::fs::read(path).with_context(|| format!("reading {}", path.display()))?;
    let label = path
        .file_stem()
        .and_then(|s| s.to_str())
        .unwrap_or("plugin");
    print_info(runtime, label, &bytes, serde_json::Map::new(), output)
}

/// Loads a component and prints its info, digest, size and imports, then `extra`.
fn print_info(
    runtime: &Runtime,
    label: &str,
    bytes: &[u8],
    extra: serde_json::Map<String, serde_json::Value>,
    output: Output,
) -> Result<()> {
    let plugin = runtime.load(label, bytes, LoadOptions::default())?;
    let info = plugin.info();
    let mut doc = serde_json::json!({
        "name": info.name,
        "version": info.version,
        "digest": plugin.digest(),
        "size": plugin.size(),
        "parentKinds": info.parent_kinds,
        "childKinds": info.child_kinds,
        "readsKinds": info.reads_kinds,
        "finalizes": info.finalizes,
        "imports": plugin.imports(),
    });
    if let Some(map) = doc.as_object_mut() {
        map.extend(extra);
    }
    let text = match output {
        Output::Yaml => serde_yaml::to_string(&doc)?,
        Output::Json => serde_json::to_string_pretty(&doc)? + "\n",
    };
    std::io::stdout()
        .write_all(text.as_bytes())
        .context("writing to stdout")?;
    Ok(())
}
