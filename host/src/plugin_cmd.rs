//! `windlass plugin push | pull | inspect <reference>`: the registry commands. The work is in
//! `windlass::source::oci`; this module reads files and prints.

use std::{io::Write as _, path::PathBuf};

use anyhow::{Context as _, Result};
use windlass::{runtime::Runtime, source::oci};

use crate::{Output, print_info};

/// Loads the component (only a valid plugin is published), pushes it, prints the digests.
pub async fn push(
    runtime: &Runtime,
    file: &PathBuf,
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
pub async fn pull(
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
pub async fn inspect_remote(
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

fn print(text: &str) -> Result<()> {
    std::io::stdout()
        .write_all(text.as_bytes())
        .context("writing to stdout")
}
