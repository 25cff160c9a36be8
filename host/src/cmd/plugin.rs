//! `windlass plugin inspect | push | pull`: a component from a file or a registry. The registry
//! work is in `windlass::source::oci`; this module reads files and prints. Only `inspect` and
//! `push` build a plugin runtime (they load the component); `pull` does not.

use std::path::{Path, PathBuf};

use anyhow::{Context as _, Result};
use windlass::{
    runtime::{LoadOptions, Runtime},
    source::oci,
};

use super::{Global, Output, print};

#[derive(Debug, clap::Subcommand)]
pub enum Command {
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
pub struct RegistryArgs {
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

pub fn run(global: &Global, command: Command) -> Result<()> {
    match command {
        Command::Inspect {
            target,
            output,
            sha256,
            registry,
        } => {
            let runtime = global.runtime()?;
            if Path::new(&target).is_file() {
                inspect(&runtime, Path::new(&target), output)
            } else {
                super::block_on(inspect_remote(
                    &runtime,
                    &target,
                    sha256.as_deref(),
                    &registry.options(),
                    output,
                ))
            }
        }
        Command::Push {
            file,
            reference,
            registry,
        } => super::block_on(push(
            &global.runtime()?,
            &file,
            &reference,
            &registry.options(),
        )),
        Command::Pull {
            reference,
            file,
            sha256,
            registry,
        } => super::block_on(pull(
            &reference,
            file,
            sha256.as_deref(),
            &registry.options(),
        )),
    }
}

fn inspect(runtime: &Runtime, path: &Path, output: Output) -> Result<()> {
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
    output.print(&doc)
}

/// Loads the component (only a valid plugin is published), pushes it, prints the digests.
async fn push(
    runtime: &Runtime,
    file: &Path,
    reference: &str,
    options: &oci::Options,
) -> Result<()> {
    let bytes = std::fs::read(file).with_context(|| format!("reading {}", file.display()))?;
    let pushed = oci::push(reference, &bytes, runtime, options).await?;
    print(&format!(
        "pushed: {reference}\n\
         # pin this digest (the sha256 of the component):\n\
         digest: {}\n\
         manifestDigest: {}\n\
         pinnedReference: {}\n",
        pushed.layer_digest, pushed.manifest_digest, pushed.pinned_reference
    ))
}

/// Pulls and verifies a plugin and writes it to `file` (default: `<last segment>.wasm`).
async fn pull(
    reference: &str,
    file: Option<PathBuf>,
    pin: Option<&str>,
    options: &oci::Options,
) -> Result<()> {
    let pulled = oci::pull(reference, options, pin).await?;
    let file = file.unwrap_or_else(|| default_file(reference));
    std::fs::write(&file, &pulled.bytes).with_context(|| format!("writing {}", file.display()))?;
    print(&format!(
        "pulled: {reference}\ndigest: {}\nmanifestDigest: {}\nfile: {}\nsize: {}\n",
        pulled.layer_digest,
        pulled.manifest_digest,
        file.display(),
        pulled.bytes.len()
    ))
}

/// Pulls a plugin and prints what `inspect` prints for a file, plus where it came from.
async fn inspect_remote(
    runtime: &Runtime,
    reference: &str,
    pin: Option<&str>,
    options: &oci::Options,
    output: Output,
) -> Result<()> {
    oci::registry_of(reference)
        .with_context(|| format!("{reference} is neither an existing file nor a reference"))?;
    let pulled = oci::pull(reference, options, pin).await?;
    let mut extra = serde_json::Map::new();
    extra.insert("reference".into(), reference.into());
    extra.insert("manifestDigest".into(), pulled.manifest_digest.into());
    print_info(runtime, reference, &pulled.bytes, extra, output)
}

/// `registry/plugins/storage:v1` → `storage.wasm`.
fn default_file(reference: &str) -> PathBuf {
    let last = reference.rsplit('/').next().unwrap_or(reference);
    let name = last
        .split([':', '@'])
        .next()
        .filter(|n| !n.is_empty())
        .unwrap_or("plugin");
    PathBuf::from(format!("{name}.wasm"))
}
