//! `windlass-image`: makes the host's container image from a static `windlass` binary, writes
//! it as an OCI image layout and, when asked, pushes it. `cargo xtask image` builds the binary
//! and runs this; see the library for what the image holds.

use std::path::PathBuf;

use anyhow::{Context, Result};
use clap::Parser;
use windlass_source::oci;

#[derive(Debug, Parser)]
#[command(about = "The Windlass host's container image, from a static binary")]
struct Args {
    /// The static `windlass` binary.
    #[arg(long)]
    binary: PathBuf,
    /// The version the image is labelled and tagged with.
    #[arg(long)]
    version: String,
    /// The source revision (a commit).
    #[arg(long)]
    revision: String,
    /// Where the source is.
    #[arg(long)]
    source: String,
    /// Seconds since the epoch: the time of every file and of the image (the commit's time,
    /// for builds that agree).
    #[arg(long, env = "SOURCE_DATE_EPOCH")]
    created: i64,
    /// Where to write the OCI image layout.
    #[arg(long)]
    layout: PathBuf,
    /// Also write the layer alone (the image's whole file system, gzip-compressed) here, which
    /// deploy/Dockerfile adds to an empty image.
    #[arg(long)]
    rootfs: Option<PathBuf>,
    /// Push the image to this reference (`registry/repository:tag`).
    #[arg(long)]
    push: Option<String>,
    /// Registry user name. Default: anonymous.
    #[arg(long, env = "WINDLASS_REGISTRY_USERNAME", requires = "password")]
    username: Option<String>,
    /// Registry password or token.
    #[arg(long, env = "WINDLASS_REGISTRY_PASSWORD", hide_env_values = true)]
    password: Option<String>,
    /// A registry (host:port) spoken to over plain HTTP; repeatable.
    #[arg(long = "insecure-registry")]
    insecure_registries: Vec<String>,
}

fn main() -> Result<()> {
    let args = Args::parse();
    let binary = std::fs::read(&args.binary)
        .with_context(|| format!("reading the binary {}", args.binary.display()))?;
    let spec = windlass_image::Spec {
        version: args.version.clone(),
        revision: args.revision.clone(),
        source: args.source.clone(),
        created: args.created,
    };
    let image = windlass_image::build(&binary, &spec)?;
    if args.layout.exists() {
        std::fs::remove_dir_all(&args.layout)
            .with_context(|| format!("removing the old layout {}", args.layout.display()))?;
    }
    image.write_layout(&args.layout, &args.version)?;
    if let Some(rootfs) = &args.rootfs {
        std::fs::write(rootfs, &image.layer)
            .with_context(|| format!("writing {}", rootfs.display()))?;
    }
    println!(
        "image {} ({} bytes of layer)",
        image.manifest_digest(),
        image.layer.len()
    );
    println!("layout {}:{}", args.layout.display(), args.version);
    let Some(reference) = &args.push else {
        return Ok(());
    };
    windlass_source::install_crypto_provider();
    let client = oci::Client::new(oci::Options {
        auth: match (&args.username, &args.password) {
            (Some(username), Some(password)) => Some(oci::RegistryAuth {
                username: username.clone(),
                password: password.clone(),
            }),
            _ => None,
        },
        insecure_registries: args.insecure_registries.clone(),
        ..oci::Options::default()
    });
    let blobs = image
        .blobs()
        .into_iter()
        .map(|(bytes, digest)| (bytes::Bytes::copy_from_slice(bytes), digest))
        .collect();
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()?;
    let digest = runtime.block_on(client.push_blobs_and_manifest(
        reference,
        blobs,
        image.manifest.clone(),
        windlass_image::MANIFEST_MEDIA_TYPE,
    ))?;
    let registry = oci::registry_of(reference)?;
    let repository = reference
        .strip_prefix(&format!("{registry}/"))
        .unwrap_or(reference);
    let repository = repository.split([':', '@']).next().unwrap_or(repository);
    println!("pushed {registry}/{repository}@{digest}");
    Ok(())
}
