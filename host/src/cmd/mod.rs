//! What the subcommands share: the global options, the one async runtime, output formats, the
//! API client and the stop signal.

pub mod crds;
#[cfg(feature = "dev")]
pub mod dev;
pub mod plugin;
pub mod probe;
pub mod render;
pub mod run;
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
    /// only on a terminal and without `NO_COLOR`.
    pub fn init_logging(&self) {
        use std::io::IsTerminal as _;
        let filter = tracing_subscriber::EnvFilter::try_from_default_env()
            .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("info"));
        let builder = tracing_subscriber::fmt()
            .with_env_filter(filter)
            .with_ansi(colour(
                std::io::stderr().is_terminal(),
                std::env::var_os("NO_COLOR").as_deref(),
            ))
            .with_writer(std::io::stderr);
        match self.log_format {
            LogFormat::Text => builder.init(),
            LogFormat::Json => builder.json().init(),
        }
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
    use super::colour;
    use std::ffi::OsStr;

    #[test]
    fn logs_are_coloured_only_on_a_terminal_without_no_color() {
        assert!(colour(true, None));
        assert!(colour(true, Some(OsStr::new(""))));
        assert!(!colour(true, Some(OsStr::new("1"))));
        assert!(!colour(false, None));
        assert!(!colour(false, Some(OsStr::new(""))));
    }
}
