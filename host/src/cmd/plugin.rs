//! `windlass plugin new | test | inspect | push | pull | diff | keygen | sign | verify`: a plugin
//! project from a template, a component against recorded cases, a component from a file or a
//! registry, a new version's preview on the live parents (`diff`, in `diff.rs`), and
//! signatures in cosign's format. The work is in `windlass::scaffold`, `windlass::cases`,
//! `windlass::source::oci` and `windlass::controller::preview`; this module reads files and
//! prints. `pull` and `new` build no plugin runtime.

use std::path::{Path, PathBuf};

use anyhow::{Context as _, Result, bail};
use windlass::{
    cases::{Case, Suite, Verdict},
    runtime::{LoadOptions, Runtime},
    scaffold::{self, Lang},
    source::oci,
};

use super::{Global, Output, print};

#[derive(Debug, clap::Subcommand)]
pub enum Command {
    /// Write a new plugin project: the plugin, its unit tests, cases for `plugin test`, a build
    /// script, the SDK, and a CRD and example to run it in `windlass dev`.
    New {
        /// The plugin's name (a DNS-1123 label, e.g. `hello`).
        name: String,
        /// The language.
        #[arg(long, value_enum)]
        lang: Lang,
        /// Where to write it. Default: ./NAME (must not exist or be empty).
        #[arg(long)]
        dir: Option<PathBuf>,
    },
    /// Run a component (any language) against directories of recorded cases, through the same
    /// runtime and output policy as the host; print a diff for each case that differs.
    Test {
        /// The component file.
        component: PathBuf,
        /// Directories of cases (or single cases). Default: ./cases.
        #[arg(default_value = "cases")]
        cases: Vec<PathBuf>,
        /// Record what the plugin produces now as each case's expectation (review the diff).
        #[arg(long)]
        bless: bool,
    },
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
        /// Refuse the plugin unless its manifest is signed by this public key (PEM file);
        /// repeatable: a signature by any one is accepted.
        #[arg(long = "key")]
        keys: Vec<PathBuf>,
        #[command(flatten)]
        registry: RegistryArgs,
    },
    /// Show what a new version of a WasmPlugin (a component file, a registry reference, or an
    /// edited WasmPlugin) would do to every live parent of its kind, applying nothing: the
    /// pipeline runs with it on each parent as observed now, and each object it would write is
    /// diffed against the live one through a server-side apply dry run. Exits non-zero when
    /// the version would be refused or fail on any parent.
    Diff(super::diff::Args),
    /// Write a new ECDSA P-256 key pair for signing plugins: PREFIX.key (PKCS#8, mode 0600) and
    /// PREFIX.pub, the public key to verify with (Windlass and `cosign verify --key` alike).
    Keygen {
        /// Where to write the two files. Default: ./windlass (windlass.key, windlass.pub).
        #[arg(default_value = "windlass")]
        prefix: PathBuf,
    },
    /// Sign a plugin in a registry, in cosign's format (a `sha256-<digest>.sig` image beside it),
    /// keeping signatures already there.
    Sign {
        /// registry/repository:tag (the manifest it points at now is signed) or …@sha256:….
        reference: String,
        /// The private key: a PEM PKCS#8 file (`windlass plugin keygen`).
        #[arg(long)]
        key: PathBuf,
        #[command(flatten)]
        registry: RegistryArgs,
    },
    /// Check that a plugin in a registry is signed by one of the keys; exits non-zero when not.
    Verify {
        /// registry/repository:tag or …@sha256:<manifest digest>.
        reference: String,
        /// A public key (PEM file); repeatable: a signature by any one is accepted.
        #[arg(long = "key", required = true)]
        keys: Vec<PathBuf>,
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
    /// The largest plugin a pull or inspect accepts (for a gzip-compressed file, inflated), in
    /// MiB.
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
        Command::Diff(args) => super::block_on(super::diff::run(global, args)),
        Command::New { name, lang, dir } => new(lang, &name, dir),
        Command::Test {
            component,
            cases,
            bless,
        } => test(&global.runtime()?, &component, &cases, bless),
        Command::Inspect {
            target,
            output,
            sha256,
            registry,
        } => {
            let runtime = global.runtime()?;
            if Path::new(&target).is_file() {
                let limit = registry.options().max_layer_bytes;
                inspect(&runtime, Path::new(&target), limit, output)
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
            keys,
            registry,
        } => super::block_on(pull(
            &reference,
            file,
            sha256.as_deref(),
            &read_public_keys(&keys)?,
            &registry.options(),
        )),
        Command::Keygen { prefix } => keygen(&prefix),
        Command::Sign {
            reference,
            key,
            registry,
        } => super::block_on(sign(&reference, &key, &registry.options())),
        Command::Verify {
            reference,
            keys,
            registry,
        } => super::block_on(verify(
            &reference,
            &read_public_keys(&keys)?,
            &registry.options(),
        )),
    }
}

/// Public keys from PEM files, each named by its file name.
fn read_public_keys(paths: &[PathBuf]) -> Result<Vec<oci::PublicKey>> {
    paths
        .iter()
        .map(|path| {
            let pem = std::fs::read_to_string(path)
                .with_context(|| format!("reading the key {}", path.display()))?;
            Ok(oci::PublicKey::from_pem(&path.display().to_string(), &pem)?)
        })
        .collect()
}

/// Writes PREFIX.key (0600, never over an existing file) and PREFIX.pub.
fn keygen(prefix: &Path) -> Result<()> {
    use std::io::Write as _;
    use std::os::unix::fs::OpenOptionsExt as _;
    let with = |ext: &str| {
        let mut name = prefix.as_os_str().to_owned();
        name.push(ext);
        PathBuf::from(name)
    };
    let (private, public) = (with(".key"), with(".pub"));
    let key = oci::SigningKey::generate()?;
    let name = public.display().to_string();
    let public_key = key.public_key(&name);
    for path in [&private, &public] {
        if path.exists() {
            bail!("{} exists; refusing to overwrite a key", path.display());
        }
    }
    let mut file = std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(0o600)
        .open(&private)
        .with_context(|| format!("creating {}", private.display()))?;
    file.write_all(key.to_pem()?.as_bytes())
        .with_context(|| format!("writing {}", private.display()))?;
    std::fs::write(&public, public_key.to_pem())
        .with_context(|| format!("writing {}", public.display()))?;
    print(&format!(
        "privateKey: {}\npublicKey: {}\nfingerprint: {}\n",
        private.display(),
        public.display(),
        public_key.fingerprint()
    ))
}

/// Signs what `reference` points at and prints where the signature went.
async fn sign(reference: &str, key: &Path, options: &oci::Options) -> Result<()> {
    let pem = std::fs::read_to_string(key)
        .with_context(|| format!("reading the key {}", key.display()))?;
    let key = oci::SigningKey::from_pem(&key.display().to_string(), &pem)?;
    let signed = oci::Client::new(options.clone())
        .sign(reference, &key)
        .await?;
    print(&format!(
        "signed: {reference}\nmanifestDigest: {}\nsignature: {}\nsignatures: {}\n",
        signed.manifest_digest, signed.signature_reference, signed.signatures
    ))
}

/// Resolves `reference` and checks its signature; prints the key that made it.
async fn verify(reference: &str, keys: &[oci::PublicKey], options: &oci::Options) -> Result<()> {
    let client = oci::Client::new(options.clone());
    let digest = client.resolve(reference).await?;
    let verified = client.verify(reference, &digest, keys).await?;
    print(&format!(
        "verified: {reference}\nmanifestDigest: {}\nkey: {}\nfingerprint: {}\n",
        verified.manifest_digest, verified.key, verified.fingerprint
    ))
}

fn new(lang: Lang, name: &str, dir: Option<PathBuf>) -> Result<()> {
    let dir = dir.unwrap_or_else(|| PathBuf::from(name));
    let written = scaffold::generate(lang, name, &dir)?;
    print(&format!(
        "wrote {} files into {}\n\
         next: cd {} && ./build.sh && windlass plugin test {name}.wasm cases\n\
         then: the README there says how to run it in `windlass dev`\n",
        written.len(),
        dir.display(),
        dir.display(),
    ))
}

/// Runs every case of every suite; fails naming how many cases failed.
fn test(runtime: &Runtime, component: &Path, suites: &[PathBuf], bless: bool) -> Result<()> {
    let bytes = windlass::render::read_plugin(component, oci::DEFAULT_MAX_LAYER_BYTES)?;
    let label = component
        .file_stem()
        .and_then(|s| s.to_str())
        .unwrap_or("plugin");
    let plugin = std::sync::Arc::new(runtime.load(label, &bytes, LoadOptions::default())?);
    let (mut passed, mut blessed, mut failed) = (0, 0, Vec::new());
    let mut report = String::new();
    for dir in suites {
        let suite = Suite::open(dir)?;
        for case_dir in &suite.cases {
            let name = case_dir.display().to_string();
            let verdict = Case::load(&suite, case_dir).and_then(|case| {
                let stage = suite.stage(plugin.clone(), &case);
                Ok(case.check(stage, bless)?.0)
            });
            match verdict {
                Ok(Verdict::Passed) => {
                    passed += 1;
                    report.push_str(&format!("ok       {name}\n"));
                }
                Ok(Verdict::Blessed) => {
                    blessed += 1;
                    report.push_str(&format!("blessed  {name}\n"));
                }
                Ok(Verdict::Failed(why)) => {
                    report.push_str(&format!("FAILED   {name}: {why}\n"));
                    failed.push(name);
                }
                Err(e) => {
                    report.push_str(&format!("FAILED   {name}: {e:#}\n"));
                    failed.push(name);
                }
            }
        }
    }
    report.push_str(&format!(
        "\n{passed} passed, {} failed{}\n",
        failed.len(),
        if bless {
            format!(", {blessed} blessed")
        } else {
            String::new()
        }
    ));
    print(&report)?;
    if !failed.is_empty() {
        bail!(
            "{} of {} cases failed (`--bless` records what the plugin produces now)",
            failed.len(),
            passed + blessed + failed.len()
        );
    }
    Ok(())
}

fn inspect(runtime: &Runtime, path: &Path, limit: u64, output: Output) -> Result<()> {
    let bytes = windlass::render::read_plugin(path, limit)?;
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
        "checksConfig": plugin.checks_config(),
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
    // A registry's layer is the component itself: a compressed file is pushed inflated.
    let bytes = windlass::render::read_plugin(file, options.max_layer_bytes)?;
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
    keys: &[oci::PublicKey],
    options: &oci::Options,
) -> Result<()> {
    let pulled = if keys.is_empty() {
        oci::pull(reference, options, pin).await?
    } else {
        let client = oci::Client::new(options.clone());
        let digest = client.resolve(reference).await?;
        client.pull_verified(reference, &digest, pin, keys).await?.0
    };
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
