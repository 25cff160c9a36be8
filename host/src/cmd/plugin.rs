//! `windlass plugin new | test | inspect | push | pull`: a plugin project from a template, a
//! component against recorded cases, a component from a file or a registry. The work is in
//! `windlass::scaffold`, `windlass::cases` and `windlass::source::oci`; this module reads files
//! and prints. `pull` and `new` build no plugin runtime.

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
    let bytes =
        std::fs::read(component).with_context(|| format!("reading {}", component.display()))?;
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
