//! The Windlass host's container image, made from a static `windlass` binary by this code alone
//! (no container engine, no base image): one layer, an image config and a manifest in the OCI
//! image format, written as an OCI image layout and pushed with the project's registry client
//! (`cargo xtask image`).
//!
//! # What the image holds
//! - `/usr/local/bin/windlass`, the entrypoint: `windlass run`, the chart's arguments appended.
//! - `/var/cache/windlass/`, owned by the image's user: the one path the host writes
//!   (precompiled plugins; the chart mounts an emptyDir there over a read-only root).
//! - `/etc/passwd` and `/etc/group` naming the user `nonroot`, uid and gid 65532, which the
//!   image runs as; `/tmp/`.
//! - `/etc/ssl/certs/ca-certificates.crt`: the Mozilla roots of the `webpki-root-certs` crate,
//!   for registries over HTTPS (the Kubernetes API is verified against the service account's
//!   own CA).
//!
//! # Guarantees
//! - Reproducible: the same binary and [`Spec`] give the same bytes, so the same digests. Every
//!   entry has the time [`Spec::created`] and numeric owners, the entries come in one fixed
//!   order, and the gzip header has neither a name nor a time.
//! - The config's `rootfs.diff_ids` is the digest of the uncompressed layer, and the
//!   manifest's descriptors give each blob's digest and size, as the OCI image spec requires.

use std::io::Write as _;

use anyhow::{Context, Result};
use base64::Engine as _;
use serde_json::json;
use sha2::{Digest as _, Sha256};

/// The image's name, where the project publishes it (`cargo xtask image --push
/// ghcr.io/windlass-dev/windlass:<version>`): the chart's default `image.repository`.
pub const REPOSITORY: &str = "ghcr.io/windlass-dev/windlass";
/// Where the binary is in the image.
pub const BINARY_PATH: &str = "/usr/local/bin/windlass";
/// The directory the host writes: its plugin cache (`WINDLASS_CACHE_DIR`).
pub const CACHE_DIR: &str = "/var/cache/windlass";
/// The image's user and group: `nonroot`, as distroless images name it.
pub const USER_ID: u64 = 65532;
/// Where the CA certificates are, as Debian puts them (and rustls-native-certs looks).
pub const CA_BUNDLE: &str = "/etc/ssl/certs/ca-certificates.crt";
/// Media type of the image manifest.
pub const MANIFEST_MEDIA_TYPE: &str = "application/vnd.oci.image.manifest.v1+json";
/// Media type of the image config.
pub const CONFIG_MEDIA_TYPE: &str = "application/vnd.oci.image.config.v1+json";
/// Media type of the one layer.
pub const LAYER_MEDIA_TYPE: &str = "application/vnd.oci.image.layer.v1.tar+gzip";

/// What the image is made of, besides the binary.
#[derive(Debug, Clone)]
pub struct Spec {
    /// The version it is labelled with (`org.opencontainers.image.version`).
    pub version: String,
    /// The source revision it was built from (`org.opencontainers.image.revision`).
    pub revision: String,
    /// Where the source is (`org.opencontainers.image.source`).
    pub source: String,
    /// Seconds since the epoch: the time of every entry and the `created` of the image. Take
    /// it from the revision (its commit time), not the clock, so that builds agree.
    pub created: i64,
}

/// One image: its blobs and manifest, each with its digest.
#[derive(Debug, Clone)]
pub struct Image {
    /// The gzip-compressed layer.
    pub layer: Vec<u8>,
    /// The image config (JSON).
    pub config: Vec<u8>,
    /// The manifest (JSON), naming the config and the layer.
    pub manifest: Vec<u8>,
}

/// `sha256:<hex>` of `bytes`.
pub fn digest(bytes: &[u8]) -> String {
    format!("sha256:{}", hex::encode(Sha256::digest(bytes)))
}

impl Image {
    /// The manifest's digest: what a pinned reference (`…@sha256:…`) names.
    pub fn manifest_digest(&self) -> String {
        digest(&self.manifest)
    }

    /// The blobs a registry must hold before the manifest: the layer, then the config, each
    /// with its digest.
    pub fn blobs(&self) -> [(&[u8], String); 2] {
        [
            (&self.layer, digest(&self.layer)),
            (&self.config, digest(&self.config)),
        ]
    }

    /// Writes the image as an OCI image layout (`oci-layout`, `index.json`, `blobs/sha256/…`)
    /// into `dir`, tagged `tag`, which `skopeo copy oci:DIR:TAG …` and other tools read.
    ///
    /// # Errors
    /// When `dir` cannot be written.
    pub fn write_layout(&self, dir: &std::path::Path, tag: &str) -> Result<()> {
        let blobs = dir.join("blobs").join("sha256");
        std::fs::create_dir_all(&blobs).with_context(|| format!("creating {}", blobs.display()))?;
        let manifest = (self.manifest.as_slice(), self.manifest_digest());
        for (bytes, digest) in self.blobs().into_iter().chain([manifest]) {
            let path = blobs.join(digest.trim_start_matches("sha256:"));
            std::fs::write(&path, bytes).with_context(|| format!("writing {}", path.display()))?;
        }
        let index = json!({
            "schemaVersion": 2,
            "mediaType": "application/vnd.oci.image.index.v1+json",
            "manifests": [{
                "mediaType": MANIFEST_MEDIA_TYPE,
                "digest": self.manifest_digest(),
                "size": self.manifest.len(),
                "annotations": {"org.opencontainers.image.ref.name": tag},
            }],
        });
        let files = [
            ("oci-layout", json!({"imageLayoutVersion": "1.0.0"})),
            ("index.json", index),
        ];
        for (name, value) in files {
            let path = dir.join(name);
            std::fs::write(&path, serde_json::to_vec(&value)?)
                .with_context(|| format!("writing {}", path.display()))?;
        }
        Ok(())
    }
}

/// The image of `binary` (a static `windlass`, as `cargo xtask image` builds it).
///
/// # Errors
/// When `spec.created` is not a time, or the layer cannot be written (it is written to memory).
pub fn build(binary: &[u8], spec: &Spec) -> Result<Image> {
    let created = jiff::Timestamp::from_second(spec.created)
        .with_context(|| format!("created {} is not a time", spec.created))?
        .to_string();
    let tar = layer_tar(binary, spec.created)?;
    let diff_id = digest(&tar);
    let mut gz = flate2::GzBuilder::new()
        .mtime(0)
        .operating_system(255)
        .write(Vec::new(), flate2::Compression::best());
    gz.write_all(&tar)?;
    let layer = gz.finish()?;
    let labels = json!({
        "org.opencontainers.image.title": "windlass",
        "org.opencontainers.image.description": "A Kubernetes operator host whose reconcile logic runs as sandboxed WebAssembly components",
        "org.opencontainers.image.version": spec.version,
        "org.opencontainers.image.revision": spec.revision,
        "org.opencontainers.image.source": spec.source,
        "org.opencontainers.image.created": created,
        "org.opencontainers.image.licenses": "Apache-2.0",
    });
    let config = json!({
        "created": created,
        "architecture": "amd64",
        "os": "linux",
        "config": {
            "User": format!("{USER_ID}:{USER_ID}"),
            "Entrypoint": [BINARY_PATH, "run"],
            "Env": [
                "PATH=/usr/local/bin",
                format!("WINDLASS_CACHE_DIR={CACHE_DIR}"),
                "WINDLASS_LOG_FORMAT=json",
                format!("SSL_CERT_FILE={CA_BUNDLE}"),
            ],
            "WorkingDir": "/",
            // /healthz, /readyz, /metrics
            "ExposedPorts": {"8080/tcp": {}},
            "Labels": labels,
        },
        "rootfs": {"type": "layers", "diff_ids": [diff_id]},
        "history": [{"created": created, "created_by": "cargo xtask image"}],
    });
    let config = serde_json::to_vec(&config)?;
    let manifest = json!({
        "schemaVersion": 2,
        "mediaType": MANIFEST_MEDIA_TYPE,
        "config": {"mediaType": CONFIG_MEDIA_TYPE, "digest": digest(&config), "size": config.len()},
        "layers": [{"mediaType": LAYER_MEDIA_TYPE, "digest": digest(&layer), "size": layer.len()}],
        "annotations": labels,
    });
    Ok(Image {
        manifest: serde_json::to_vec(&manifest)?,
        layer,
        config,
    })
}

/// One entry of the layer: its path (no leading `/`; directories end in `/`), mode, owner and
/// content (`None` for a directory).
type Entry<'a> = (&'static str, u32, u64, Option<&'a [u8]>);

/// The layer, uncompressed: every directory before what it holds, in this one order.
fn layer_tar(binary: &[u8], mtime: i64) -> Result<Vec<u8>> {
    let passwd = format!(
        "root:x:0:0:root:/root:/sbin/nologin\nnonroot:x:{USER_ID}:{USER_ID}:nonroot:/home/nonroot:/sbin/nologin\n"
    );
    let group = format!("root:x:0:\nnonroot:x:{USER_ID}:\n");
    let roots = ca_bundle();
    let entries: [Entry<'_>; 14] = [
        ("etc/", 0o755, 0, None),
        ("etc/group", 0o644, 0, Some(group.as_bytes())),
        ("etc/passwd", 0o644, 0, Some(passwd.as_bytes())),
        ("etc/ssl/", 0o755, 0, None),
        ("etc/ssl/certs/", 0o755, 0, None),
        (
            "etc/ssl/certs/ca-certificates.crt",
            0o644,
            0,
            Some(roots.as_bytes()),
        ),
        ("home/", 0o755, 0, None),
        ("home/nonroot/", 0o700, USER_ID, None),
        ("tmp/", 0o1777, 0, None),
        ("usr/", 0o755, 0, None),
        ("usr/local/", 0o755, 0, None),
        ("usr/local/bin/", 0o755, 0, None),
        ("usr/local/bin/windlass", 0o755, 0, Some(binary)),
        ("var/", 0o755, 0, None),
    ];
    let cache: [Entry<'_>; 2] = [
        ("var/cache/", 0o755, 0, None),
        ("var/cache/windlass/", 0o755, USER_ID, None),
    ];
    let mtime = u64::try_from(mtime).context("a time before 1970")?;
    let mut tar = tar::Builder::new(Vec::new());
    for (path, mode, owner, content) in entries.into_iter().chain(cache) {
        let mut header = tar::Header::new_ustar();
        header.set_path(path)?;
        header.set_mode(mode);
        header.set_uid(owner);
        header.set_gid(owner);
        header.set_mtime(mtime);
        header.set_entry_type(if content.is_some() {
            tar::EntryType::Regular
        } else {
            tar::EntryType::Directory
        });
        let content = content.unwrap_or_default();
        header.set_size(content.len() as u64);
        header.set_cksum();
        tar.append(&header, content)?;
    }
    Ok(tar.into_inner()?)
}

/// The `webpki-root-certs` roots as one PEM file.
fn ca_bundle() -> String {
    let mut pem = String::new();
    for cert in webpki_root_certs::TLS_SERVER_ROOT_CERTS {
        pem.push_str("-----BEGIN CERTIFICATE-----\n");
        let b64 = base64::engine::general_purpose::STANDARD.encode(cert.as_ref());
        for line in b64.as_bytes().chunks(64) {
            pem.push_str(std::str::from_utf8(line).unwrap_or_default());
            pem.push('\n');
        }
        pem.push_str("-----END CERTIFICATE-----\n");
    }
    pem
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use std::io::Read as _;

    use super::*;

    fn spec() -> Spec {
        Spec {
            version: "0.1.0".into(),
            revision: "0123456789abcdef".into(),
            source: "https://example.com/windlass".into(),
            created: 1_796_256_000,
        }
    }

    fn entries(image: &Image) -> Vec<(String, u32, u64, u64, Vec<u8>)> {
        let tar = flate2::read::GzDecoder::new(image.layer.as_slice());
        let mut archive = tar::Archive::new(tar);
        archive
            .entries()
            .unwrap()
            .map(|e| {
                let mut e = e.unwrap();
                let h = e.header().clone();
                let mut content = Vec::new();
                e.read_to_end(&mut content).unwrap();
                (
                    h.path().unwrap().display().to_string(),
                    h.mode().unwrap(),
                    h.uid().unwrap(),
                    h.mtime().unwrap(),
                    content,
                )
            })
            .collect()
    }

    #[test]
    fn the_same_binary_and_spec_give_the_same_digests() {
        let a = build(b"\x7fELF binary", &spec()).unwrap();
        let b = build(b"\x7fELF binary", &spec()).unwrap();
        assert_eq!(a.layer, b.layer);
        assert_eq!(a.config, b.config);
        assert_eq!(a.manifest_digest(), b.manifest_digest());
        let other = build(b"\x7fELF other binary", &spec()).unwrap();
        assert_ne!(a.manifest_digest(), other.manifest_digest());
        let later = build(
            b"\x7fELF binary",
            &Spec {
                created: spec().created + 1,
                ..spec()
            },
        )
        .unwrap();
        assert_ne!(a.layer, later.layer, "the time is in every entry");
    }

    #[test]
    fn the_layer_holds_the_binary_the_cache_and_the_user() {
        let image = build(b"\x7fELF binary", &spec()).unwrap();
        let entries = entries(&image);
        let find = |path: &str| {
            entries
                .iter()
                .find(|e| e.0 == path)
                .unwrap_or_else(|| panic!("{path} is in the layer: {entries:?}"))
        };
        let binary = find("usr/local/bin/windlass");
        assert_eq!((binary.1, binary.2), (0o755, 0));
        assert_eq!(binary.4, b"\x7fELF binary");
        let cache = find("var/cache/windlass/");
        assert_eq!((cache.1, cache.2), (0o755, USER_ID));
        assert_eq!(find("tmp/").1, 0o1777);
        let passwd = String::from_utf8(find("etc/passwd").4.clone()).unwrap();
        assert!(passwd.contains("nonroot:x:65532:65532:"), "{passwd}");
        let roots = String::from_utf8(find("etc/ssl/certs/ca-certificates.crt").4.clone()).unwrap();
        assert_eq!(
            roots.matches("-----BEGIN CERTIFICATE-----").count(),
            webpki_root_certs::TLS_SERVER_ROOT_CERTS.len()
        );
        assert!(webpki_root_certs::TLS_SERVER_ROOT_CERTS.len() > 100);
        assert!(entries.iter().all(|e| e.3 == 1_796_256_000));
        // Every directory comes before what it holds.
        for (i, e) in entries.iter().enumerate() {
            let parent = e.0.trim_end_matches('/').rsplit_once('/').map(|(p, _)| p);
            if let Some(parent) = parent {
                let at = entries.iter().position(|d| d.0 == format!("{parent}/"));
                assert!(at.is_some_and(|at| at < i), "{} before its directory", e.0);
            }
        }
    }

    #[test]
    fn config_and_manifest_describe_the_blobs() {
        let image = build(b"\x7fELF binary", &spec()).unwrap();
        let config: serde_json::Value = serde_json::from_slice(&image.config).unwrap();
        let manifest: serde_json::Value = serde_json::from_slice(&image.manifest).unwrap();
        let mut tar = Vec::new();
        flate2::read::GzDecoder::new(image.layer.as_slice())
            .read_to_end(&mut tar)
            .unwrap();
        assert_eq!(config["rootfs"]["diff_ids"][0], digest(&tar));
        assert_eq!(config["config"]["User"], "65532:65532");
        assert_eq!(
            config["config"]["Entrypoint"],
            json!(["/usr/local/bin/windlass", "run"])
        );
        assert_eq!(config["created"], "2026-12-03T00:00:00Z");
        let labels = &config["config"]["Labels"];
        assert_eq!(labels["org.opencontainers.image.version"], "0.1.0");
        assert_eq!(
            labels["org.opencontainers.image.revision"],
            "0123456789abcdef"
        );
        assert_eq!(manifest["config"]["digest"], digest(&image.config));
        assert_eq!(manifest["config"]["size"], image.config.len());
        assert_eq!(manifest["layers"][0]["digest"], digest(&image.layer));
        assert_eq!(manifest["layers"][0]["size"], image.layer.len());
        assert_eq!(manifest["layers"][0]["mediaType"], LAYER_MEDIA_TYPE);
        assert_eq!(image.blobs()[0].1, digest(&image.layer));
    }

    #[test]
    fn the_chart_runs_this_image_by_default() {
        let values = include_str!("../../../deploy/helm/windlass/values.yaml");
        let image = values
            .split("\nimage:\n")
            .nth(1)
            .expect("values.yaml has an image section");
        let repository = image
            .lines()
            .find_map(|l| l.trim().strip_prefix("repository: "))
            .expect("the image section names a repository");
        assert_eq!(repository, REPOSITORY);
    }

    #[test]
    fn the_layout_is_one_oci_image_tagged() {
        let image = build(b"\x7fELF binary", &spec()).unwrap();
        let tmp = tempfile::tempdir().unwrap();
        let dir = tmp.path();
        image.write_layout(dir, "0.1.0").unwrap();
        let index: serde_json::Value =
            serde_json::from_slice(&std::fs::read(dir.join("index.json")).unwrap()).unwrap();
        assert_eq!(index["manifests"][0]["digest"], image.manifest_digest());
        let blob = |d: &str| std::fs::read(dir.join("blobs/sha256").join(&d[7..])).unwrap();
        assert_eq!(blob(&image.manifest_digest()), image.manifest);
        assert_eq!(blob(&digest(&image.layer)), image.layer);
    }
}
