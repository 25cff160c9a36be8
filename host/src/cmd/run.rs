//! `windlass run`: the operator against a cluster, with leader election among replicas.

use std::{path::PathBuf, sync::Arc, time::Duration};

use anyhow::{Context as _, Result};
use windlass::{
    controller::{self, source::OciSettings},
    leader::Election,
    operator, policy,
    runtime::{Runtime, RuntimeConfig},
    source::oci,
};

use super::Global;

#[derive(Debug, clap::Args)]
pub struct Args {
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
    /// Seconds a lease stays valid after its last renewal (3 to 3600).
    #[arg(long, default_value_t = 15, value_parser = clap::value_parser!(u64).range(3..=3600))]
    lease_seconds: u64,
    /// Where /healthz, /readyz and /metrics listen.
    #[arg(long, env = "WINDLASS_ADMIN_ADDR", default_value = "0.0.0.0:8080")]
    admin_addr: std::net::SocketAddr,
    /// Parents reconciled at once per kind (at least 1).
    #[arg(long, default_value_t = 16, value_parser = clap::value_parser!(u16).range(1..))]
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
    /// A public key (PEM, ECDSA P-256) every OCI plugin must be signed by, in cosign's format;
    /// repeatable: a signature by any one is accepted. A WasmPlugin's own `verify.keys` are
    /// checked as well, never instead. The Helm chart passes `verifyPlugins.keys`.
    #[arg(long = "trusted-key", value_name = "FILE")]
    trusted_keys: Vec<std::path::PathBuf>,
    /// Seconds between re-resolutions of OCI tags; a moved tag is hot-swapped.
    #[arg(long, default_value_t = 300)]
    oci_poll_seconds: u64,
    /// The ServiceAccount the host runs as (in --namespace): no plugin's pod may run as it,
    /// whatever its WasmPlugin grants. The Helm chart sets it.
    #[arg(long, env = "WINDLASS_SERVICE_ACCOUNT")]
    service_account: Option<String>,
    /// Seconds a deleting parent's finalize phase may go uncompleted before the host reports
    /// it stuck (the FinalizeStuck condition, a Warning event, the finalize_stuck metric).
    #[arg(long, default_value_t = 600, value_parser = clap::value_parser!(u64).range(1..))]
    finalize_stuck_seconds: u64,
    /// Seconds the host, told to stop (SIGTERM), lets the reconciles already running finish,
    /// starting no new one, before it stops them halfway. With the Lease freed after it, keep
    /// it well inside the Pod's terminationGracePeriodSeconds (30 by default).
    #[arg(long, default_value_t = 10, value_parser = clap::value_parser!(u64).range(0..=600))]
    drain_seconds: u64,
    /// Record every plugin call of each parent annotated `windlass.dev/record: "true"` here, for
    /// `windlass render --replay FILE` (the newest 60 per parent). The files hold what plugins
    /// saw, Secrets they read included: keep the directory as private as the host.
    #[arg(long, env = "WINDLASS_RECORD_DIR")]
    record_dir: Option<std::path::PathBuf>,
}

impl Args {
    fn config(&self) -> Result<operator::Config> {
        let trusted_keys = self
            .trusted_keys
            .iter()
            .map(|path| {
                let pem = std::fs::read_to_string(path)
                    .with_context(|| format!("reading the trusted key {}", path.display()))?;
                // Named by the file's stem (`release-2026.pub` is `release-2026`), the name a
                // refusal's condition gives.
                let name = path
                    .file_stem()
                    .map(|stem| stem.to_string_lossy().into_owned())
                    .unwrap_or_else(|| path.display().to_string());
                Ok(oci::PublicKey::from_pem(&name, &pem)
                    .with_context(|| format!("the trusted key {}", path.display()))?)
            })
            .collect::<Result<Vec<_>>>()?;
        let identity = self
            .identity
            .clone()
            .or_else(|| std::env::var("HOSTNAME").ok())
            .unwrap_or_else(|| format!("windlass-{}", std::process::id()));
        Ok(operator::Config {
            admin_addr: self.admin_addr,
            election: self.leader_elect.then(|| Election {
                namespace: self.namespace.clone(),
                name: self.lease_name.clone(),
                identity: identity.clone(),
                duration: Duration::from_secs(self.lease_seconds),
                grace: Election::grace_for(Duration::from_secs(self.lease_seconds)),
            }),
            settings: controller::Settings {
                concurrency: self.concurrency,
                oci: OciSettings {
                    options: oci::Options {
                        insecure_registries: self.insecure_registries.clone(),
                        ..Default::default()
                    },
                    namespace: self.namespace.clone(),
                    trusted_keys,
                },
                oci_poll: Duration::from_secs(self.oci_poll_seconds.max(1)),
                finalize_stuck_after: Duration::from_secs(self.finalize_stuck_seconds),
                drain: Duration::from_secs(self.drain_seconds),
                record_dir: self.record_dir.clone(),
                host_account: self
                    .service_account
                    .as_ref()
                    .map(|name| policy::HostAccount {
                        namespace: self.namespace.clone(),
                        name: name.clone(),
                    }),
                ..Default::default()
            },
            identity,
        })
    }
}

pub async fn run(global: &Global, args: Args) -> Result<()> {
    let client = super::kube_client(args.kubeconfig.as_ref()).await?;
    let runtime = Runtime::new(RuntimeConfig {
        fuel: args.fuel,
        max_instances: args.max_instances,
        ..global.runtime_config()
    })?;
    let (stop, stopped) = tokio::sync::watch::channel(false);
    let (handle, task) =
        operator::start(client, args.config()?, Arc::new(runtime), stopped).await?;
    tracing::info!(admin = %handle.admin_addr, "windlass is running");
    super::stop_signal().await;
    tracing::info!("stopping");
    let _ = stop.send(true);
    let _ = task.await;
    tracing::info!("stopped");
    Ok(())
}

#[cfg(test)]
mod tests {
    use clap::Parser;

    #[derive(Debug, Parser)]
    struct Cli {
        #[command(flatten)]
        run: super::Args,
    }

    /// `--concurrency 0` once meant "unbounded" to kube-runtime; the host's gate has no such
    /// meaning, so it is refused, naming the flag, rather than quietly run as one.
    #[test]
    fn a_concurrency_of_zero_is_refused_naming_the_flag() {
        let err = Cli::try_parse_from(["windlass", "--concurrency", "0"]).unwrap_err();
        let text = err.to_string();
        assert!(text.contains("--concurrency"), "{text}");
        assert!(text.contains("0 is not in 1..=65535"), "{text}");
        let ok = Cli::try_parse_from(["windlass", "--concurrency", "1"]).unwrap();
        assert_eq!(ok.run.concurrency, 1);
    }
}
