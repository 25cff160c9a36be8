//! What the subcommands share: the global options, the one async runtime, output formats, the
//! API client and the stop signal.

pub mod crds;
#[cfg(feature = "dev")]
pub mod dev;
pub mod diff;
pub mod plugin;
pub mod probe;
pub mod render;
pub mod run;
pub mod trace;
pub mod version;

use std::{io::Write as _, path::PathBuf};

use anyhow::{Context as _, Result};
use clap::ValueEnum;
use windlass::runtime::{Runtime, RuntimeConfig};

/// Options of every subcommand.
#[derive(Debug, clap::Args)]
pub struct Global {
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
}

#[derive(Debug, Clone, Copy, ValueEnum)]
enum LogFormat {
    Text,
    Json,
}

impl Global {
    /// Logs to stderr in the chosen format, filtered by `RUST_LOG` (default `info`), in colour
    /// only on a terminal and without `NO_COLOR`; and, when the standard `OTEL_*` variables
    /// name an OTLP endpoint, exports the spans (a reconcile, a plugin call) there. The
    /// returned guard sends what is left when it is dropped.
    pub fn init_logging(&self) -> Telemetry {
        use std::io::IsTerminal as _;
        use tracing_subscriber::{
            Layer as _, layer::SubscriberExt as _, util::SubscriberInitExt as _,
        };
        let filter = tracing_subscriber::EnvFilter::try_from_default_env()
            .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("info"));
        let fmt = tracing_subscriber::fmt::layer()
            .with_ansi(colour(
                std::io::stderr().is_terminal(),
                std::env::var_os("NO_COLOR").as_deref(),
            ))
            .with_writer(std::io::stderr);
        // RUST_LOG filters the log only: traces keep every span at INFO and above.
        let fmt = match self.log_format {
            LogFormat::Text => fmt.with_filter(filter).boxed(),
            LogFormat::Json => fmt.json().with_filter(filter).boxed(),
        };
        let (provider, problem) = match otlp_traces(|k| std::env::var(k).ok()) {
            Ok(provider) => (provider, None),
            Err(e) => (None, Some(e)),
        };
        let traces = provider.as_ref().map(|p| {
            use opentelemetry::trace::TracerProvider as _;
            tracing_opentelemetry::layer()
                .with_tracer(p.tracer("windlass"))
                .with_filter(tracing_subscriber::filter::LevelFilter::INFO)
        });
        tracing_subscriber::registry().with(fmt).with(traces).init();
        if let Some(e) = problem {
            tracing::warn!("traces are not exported: {e:#}");
        } else if provider.is_some() {
            tracing::info!("exporting traces over OTLP/HTTP, as the OTEL_* variables configure");
        }
        Telemetry(provider)
    }

    /// The runtime's settings: the precompiled cache unless `--no-cache`.
    pub fn runtime_config(&self) -> RuntimeConfig {
        RuntimeConfig {
            cache_dir: if self.no_cache {
                None
            } else {
                self.cache_dir.clone().or_else(default_cache_dir)
            },
            ..RuntimeConfig::default()
        }
    }

    /// A plugin runtime with [`Global::runtime_config`].
    pub fn runtime(&self) -> Result<Runtime> {
        Ok(Runtime::new(self.runtime_config())?)
    }
}

/// The OTLP trace pipeline, when configured: what is buffered is sent when it is dropped.
#[must_use = "dropping it stops exporting traces"]
pub struct Telemetry(Option<opentelemetry_sdk::trace::SdkTracerProvider>);

impl Drop for Telemetry {
    fn drop(&mut self) {
        if let Some(provider) = self.0.take()
            && let Err(e) = provider.shutdown()
        {
            eprintln!("warning: sending the last traces: {e}");
        }
    }
}

/// The trace exporter the standard OpenTelemetry variables (read through `var`) ask for: none
/// unless `OTEL_EXPORTER_OTLP_TRACES_ENDPOINT` or `OTEL_EXPORTER_OTLP_ENDPOINT` names an
/// endpoint, and none with `OTEL_SDK_DISABLED=true` or `OTEL_TRACES_EXPORTER=none`. The
/// exporter itself reads the endpoint, headers and timeout; the service name is `windlass`
/// unless `OTEL_SERVICE_NAME` or `OTEL_RESOURCE_ATTRIBUTES` says otherwise.
///
/// # Errors
/// A setting Windlass cannot honour (another exporter, OTLP over gRPC or JSON), or an exporter
/// that cannot be built.
pub fn otlp_traces(
    var: impl Fn(&str) -> Option<String>,
) -> Result<Option<opentelemetry_sdk::trace::SdkTracerProvider>> {
    let var = |k: &str| var(k).filter(|v| !v.trim().is_empty());
    if var("OTEL_SDK_DISABLED").is_some_and(|v| v.trim().eq_ignore_ascii_case("true")) {
        return Ok(None);
    }
    match var("OTEL_TRACES_EXPORTER").as_deref().map(str::trim) {
        None | Some("otlp") => {}
        Some("none") => return Ok(None),
        Some(other) => anyhow::bail!(
            "OTEL_TRACES_EXPORTER={other}: Windlass exports traces over OTLP only (otlp or none)"
        ),
    }
    if var("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT").is_none()
        && var("OTEL_EXPORTER_OTLP_ENDPOINT").is_none()
    {
        return Ok(None);
    }
    // The signal's own setting wins over the general one.
    let protocol = [
        "OTEL_EXPORTER_OTLP_TRACES_PROTOCOL",
        "OTEL_EXPORTER_OTLP_PROTOCOL",
    ]
    .into_iter()
    .find_map(|key| var(key).map(|v| (key, v)));
    if let Some((key, protocol)) = protocol {
        if protocol.trim() != "http/protobuf" {
            anyhow::bail!(
                "{key}={protocol}: Windlass sends OTLP over HTTP as protobuf (http/protobuf); \
                 point the endpoint at the collector's OTLP/HTTP port (4318)"
            );
        }
    }
    use opentelemetry_otlp::WithExportConfig as _;
    let exporter = opentelemetry_otlp::SpanExporter::builder()
        .with_http()
        .with_protocol(opentelemetry_otlp::Protocol::HttpBinary)
        .build()
        .context("building the OTLP span exporter")?;
    let named = var("OTEL_SERVICE_NAME").is_some()
        || var("OTEL_RESOURCE_ATTRIBUTES").is_some_and(|a| a.contains("service.name="));
    let mut resource = opentelemetry_sdk::Resource::builder().with_attribute(
        opentelemetry::KeyValue::new("service.version", env!("CARGO_PKG_VERSION")),
    );
    if !named {
        resource = resource.with_service_name("windlass");
    }
    Ok(Some(
        opentelemetry_sdk::trace::SdkTracerProvider::builder()
            .with_batch_exporter(exporter)
            .with_resource(resource.build())
            .build(),
    ))
}

/// Whether logs are coloured: on a terminal, unless `NO_COLOR` is set to anything but the
/// empty string (no-color.org).
fn colour(terminal: bool, no_color: Option<&std::ffi::OsStr>) -> bool {
    terminal && no_color.is_none_or(|v| v.is_empty())
}

fn default_cache_dir() -> Option<PathBuf> {
    std::env::var_os("XDG_CACHE_HOME")
        .map(PathBuf::from)
        .or_else(|| std::env::var_os("HOME").map(|h| PathBuf::from(h).join(".cache")))
        .map(|d| d.join("windlass"))
}

/// How a command prints a document.
#[derive(Debug, Clone, Copy, ValueEnum)]
pub enum Output {
    Yaml,
    Json,
}

impl Output {
    /// Prints `doc` on stdout in this format.
    pub fn print(self, doc: &impl serde::Serialize) -> Result<()> {
        let text = match self {
            Output::Yaml => serde_yaml::to_string(doc)?,
            Output::Json => serde_json::to_string_pretty(doc)? + "\n",
        };
        print(&text)
    }
}

/// Writes `text` to stdout.
pub fn print(text: &str) -> Result<()> {
    std::io::stdout()
        .write_all(text.as_bytes())
        .context("writing to stdout")
}

/// Runs a command's future to completion: the one async runtime of the process.
pub fn block_on(future: impl std::future::Future<Output = Result<()>>) -> Result<()> {
    tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .context("starting the async runtime")?
        .block_on(future)
}

/// kubectl's flags for where to work: `-n`, `-A`, `--kubeconfig`, `--context`.
#[derive(Debug, clap::Args)]
pub struct KubeArgs {
    /// The namespace. Default: the kubeconfig context's, else `default`.
    #[arg(short, long)]
    pub namespace: Option<String>,
    /// Every namespace.
    #[arg(short = 'A', long, conflicts_with = "namespace")]
    pub all_namespaces: bool,
    /// The kubeconfig file. Default: $KUBECONFIG, ~/.kube/config, or in-cluster.
    #[arg(long)]
    pub kubeconfig: Option<PathBuf>,
    /// The kubeconfig context to use.
    #[arg(long)]
    pub context: Option<String>,
}

impl KubeArgs {
    /// The client, the context's namespace, and the kubeconfig file when one was read.
    pub async fn connect(
        &self,
    ) -> Result<(kube::Client, String, Option<kube::config::Kubeconfig>)> {
        use kube::config::{KubeConfigOptions, Kubeconfig};
        let options = KubeConfigOptions {
            context: self.context.clone(),
            ..Default::default()
        };
        let file = match &self.kubeconfig {
            Some(path) => Some(
                Kubeconfig::read_from(path)
                    .with_context(|| format!("reading kubeconfig {}", path.display()))?,
            ),
            None => Kubeconfig::read().ok(),
        };
        let config = match &file {
            Some(file) => kube::Config::from_custom_kubeconfig(file.clone(), &options)
                .await
                .context("loading the kubeconfig")?,
            None if self.context.is_some() => {
                anyhow::bail!("--context given, but no kubeconfig was found")
            }
            None => kube::Config::infer()
                .await
                .context("no kubeconfig and not in a cluster")?,
        };
        let namespace = config.default_namespace.clone();
        Ok((kube::Client::try_from(config)?, namespace, file))
    }
}

/// A client from a kubeconfig file, or else `$KUBECONFIG`, `~/.kube/config` or the in-cluster
/// config.
pub async fn kube_client(kubeconfig: Option<&PathBuf>) -> Result<kube::Client> {
    Ok(kube::Client::try_from(kube_config(kubeconfig).await?)?)
}

/// The client configuration from `kubeconfig`, or inferred (in-cluster, `KUBECONFIG`, ~/.kube).
pub async fn kube_config(kubeconfig: Option<&PathBuf>) -> Result<kube::Config> {
    Ok(match kubeconfig {
        Some(path) => {
            let kubeconfig = kube::config::Kubeconfig::read_from(path)
                .with_context(|| format!("reading kubeconfig {}", path.display()))?;
            kube::Config::from_custom_kubeconfig(kubeconfig, &Default::default()).await?
        }
        None => kube::Config::infer()
            .await
            .context("no kubeconfig and not in a cluster")?,
    })
}

/// Resolves when the process is asked to stop (Ctrl-C or SIGTERM).
pub async fn stop_signal() {
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

#[cfg(test)]
mod tests {
    use super::{colour, otlp_traces};
    use std::ffi::OsStr;

    /// `otlp_traces` with these variables set and no others.
    fn traces(vars: &[(&str, &str)]) -> Result<bool, String> {
        windlass::source::install_crypto_provider();
        otlp_traces(|k| {
            vars.iter()
                .find(|(name, _)| *name == k)
                .map(|(_, v)| v.to_string())
        })
        .map(|p| p.is_some())
        .map_err(|e| format!("{e:#}"))
    }

    #[test]
    fn traces_go_out_only_when_the_otel_variables_name_an_endpoint_windlass_can_serve() {
        const AT: (&str, &str) = ("OTEL_EXPORTER_OTLP_ENDPOINT", "http://127.0.0.1:4318");
        assert_eq!(traces(&[]), Ok(false), "off by default");
        assert_eq!(traces(&[AT]), Ok(true));
        assert_eq!(
            traces(&[(
                "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT",
                "http://127.0.0.1:4318/v1/traces"
            )]),
            Ok(true)
        );
        assert_eq!(
            traces(&[("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", " ")]),
            Ok(false),
            "an empty endpoint is none"
        );
        assert_eq!(
            traces(&[
                AT,
                ("OTEL_EXPORTER_OTLP_PROTOCOL", "grpc"),
                ("OTEL_EXPORTER_OTLP_TRACES_PROTOCOL", "http/protobuf"),
            ]),
            Ok(true),
            "the signal's own protocol wins"
        );
        assert_eq!(traces(&[AT, ("OTEL_SDK_DISABLED", "true")]), Ok(false));
        assert_eq!(traces(&[AT, ("OTEL_TRACES_EXPORTER", "none")]), Ok(false));
        assert_eq!(traces(&[AT, ("OTEL_TRACES_EXPORTER", "otlp")]), Ok(true));
        assert_eq!(
            traces(&[AT, ("OTEL_EXPORTER_OTLP_PROTOCOL", "http/protobuf")]),
            Ok(true)
        );
        let zipkin = traces(&[AT, ("OTEL_TRACES_EXPORTER", "zipkin")]).unwrap_err();
        assert!(zipkin.contains("OTEL_TRACES_EXPORTER=zipkin"), "{zipkin}");
        let grpc = traces(&[AT, ("OTEL_EXPORTER_OTLP_TRACES_PROTOCOL", "grpc")]).unwrap_err();
        assert!(
            grpc.contains("OTEL_EXPORTER_OTLP_TRACES_PROTOCOL=grpc") && grpc.contains("4318"),
            "{grpc}"
        );
    }

    #[test]
    fn logs_are_coloured_only_on_a_terminal_without_no_color() {
        assert!(colour(true, None));
        assert!(colour(true, Some(OsStr::new(""))));
        assert!(!colour(true, Some(OsStr::new("1"))));
        assert!(!colour(false, None));
        assert!(!colour(false, Some(OsStr::new(""))));
    }
}
