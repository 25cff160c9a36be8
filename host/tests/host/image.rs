//! The host's container image (`cargo xtask image`, tools/image): pushed to the real CNCF
//! distribution registry with the project's client and read back with `skopeo`, as
//! `crate::oci`'s plugin tests do.

use std::process::Command;

use serde_json::Value;
use windlass::source::oci;

use crate::oci::{Registry, find_tool, skopeo_raw};

/// The host's container image as `cargo xtask image` makes it, from the static binary CI builds
/// (`WINDLASS_IMAGE_BINARY`): pushed with the project's client, seen by skopeo as an image of
/// one layer that runs as 65532, and the binary taken back out of the registry's layer runs.
/// Ignored in the plain passes (the static binary is a build of its own); `cargo xtask ci` runs
/// it after building that binary.
#[tokio::test]
#[ignore = "needs the static binary of `cargo xtask image` in WINDLASS_IMAGE_BINARY"]
async fn the_host_image_holds_a_static_binary_that_runs_from_the_registrys_layer() {
    let path = std::env::var_os("WINDLASS_IMAGE_BINARY")
        .expect("WINDLASS_IMAGE_BINARY names the static windlass binary (cargo xtask image)");
    let binary = std::fs::read(&path).unwrap();
    let ldd = Command::new("ldd").arg(&path).output().expect("ldd runs");
    let said =
        String::from_utf8_lossy(&ldd.stdout).to_string() + &String::from_utf8_lossy(&ldd.stderr);
    assert!(
        said.contains("not a dynamic executable") || said.contains("statically linked"),
        "the image's binary links nothing at run time: ldd says {said}"
    );
    let spec = windlass_image::Spec {
        version: env!("CARGO_PKG_VERSION").into(),
        revision: "test".into(),
        source: "https://example.com/windlass".into(),
        created: 1_796_256_000,
    };
    let image = windlass_image::build(&binary, &spec).unwrap();
    let again = windlass_image::build(&binary, &spec).unwrap();
    assert_eq!(image.manifest_digest(), again.manifest_digest());

    let registry = Registry::start(false);
    let reference = registry.reference(&format!("windlass:{}", spec.version));
    let blobs = image
        .blobs()
        .into_iter()
        .map(|(b, d)| (bytes::Bytes::copy_from_slice(b), d))
        .collect();
    let pushed = oci::Client::new(registry.options())
        .push_blobs_and_manifest(
            &reference,
            blobs,
            image.manifest.clone(),
            windlass_image::MANIFEST_MEDIA_TYPE,
        )
        .await
        .unwrap();
    assert_eq!(pushed, image.manifest_digest());

    let out = Command::new(find_tool("skopeo", "skopeo"))
        .args(["inspect", "--tls-verify=false"])
        .arg(format!("docker://{reference}"))
        .output()
        .expect("skopeo runs");
    assert!(
        out.status.success(),
        "skopeo: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let inspected: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(inspected["Digest"], pushed.as_str());
    assert_eq!(inspected["Architecture"], "amd64");
    assert_eq!(inspected["Os"], "linux");
    assert_eq!(
        inspected["Layers"].as_array().map(Vec::len),
        Some(1),
        "{inspected}"
    );
    assert_eq!(
        inspected["Labels"]["org.opencontainers.image.version"],
        spec.version.as_str()
    );
    let config = skopeo_raw(&["--config"], &reference);
    assert_eq!(config["config"]["User"], "65532:65532");
    assert_eq!(
        config["config"]["Entrypoint"],
        serde_json::json!(["/usr/local/bin/windlass", "run"])
    );

    // The layer as the registry serves it, unpacked as a container runtime would.
    let dir = tempfile::tempdir().unwrap();
    let copied = dir.path().join("copied");
    let out = Command::new(find_tool("skopeo", "skopeo"))
        .args(["copy", "--src-tls-verify=false"])
        .arg(format!("docker://{reference}"))
        .arg(format!("dir:{}", copied.display()))
        .output()
        .expect("skopeo runs");
    assert!(
        out.status.success(),
        "skopeo: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let manifest: Value =
        serde_json::from_slice(&std::fs::read(copied.join("manifest.json")).unwrap()).unwrap();
    let layer_digest = manifest["layers"][0]["digest"].as_str().unwrap();
    let layer = std::fs::read(copied.join(layer_digest.trim_start_matches("sha256:"))).unwrap();
    let rootfs = dir.path().join("rootfs");
    tar::Archive::new(flate2::read::GzDecoder::new(layer.as_slice()))
        .unpack(&rootfs)
        .unwrap();
    let unpacked = rootfs.join("usr/local/bin/windlass");
    assert_eq!(std::fs::read(&unpacked).unwrap(), binary);
    let run = |args: &[&str]| {
        let out = Command::new(&unpacked)
            .args(args)
            .env_clear()
            .env("WINDLASS_CACHE_DIR", rootfs.join("var/cache/windlass"))
            .output()
            .expect("the unpacked binary runs");
        assert!(out.status.success(), "windlass {args:?}: {out:?}");
        String::from_utf8(out.stdout).unwrap()
    };
    let version = run(&["--version"]);
    assert_eq!(version.trim(), format!("windlass {}", spec.version));
    // The production binary: the WasmPlugin CRD alone, nothing of SampleDB.
    let crds = run(&["crds"]);
    assert_eq!(
        crds.matches("kind: CustomResourceDefinition").count(),
        1,
        "{crds}"
    );
    assert!(crds.contains("name: wasmplugins.windlass.dev"), "{crds}");
}
