//! Signed plugins: signatures in cosign's format, made and checked by `windlass plugin
//! sign|verify`, by the registry client, and by a running host before it loads an OCI plugin
//! whose WasmPlugin asks for verification. Against the real registry (`docker-registry`).
//!
//! The interoperability test needs the real `cosign`, built from its Go module by
//! tools/cosign/build.sh: it is ignored in the plain test run and `cargo xtask ci` runs it with
//! `WINDLASS_COSIGN` set to the binary.

use std::{
    path::{Path, PathBuf},
    process::Command,
    time::Duration,
};

use serde_json::{Value, json};
use windlass::source::oci::{self, Client, PublicKey, SigningKey};
use windlass_test_guests as guests;

use crate::oci::{Registry, digest_of, push_guest, skopeo_raw, windlass};

/// A new key pair: (private, public named `name`).
fn key(name: &str) -> (SigningKey, PublicKey) {
    let key = SigningKey::generate().unwrap();
    let public = key.public_key(name);
    (key, public)
}

/// Pushes `guest` to `repository_and_tag`; returns (reference, manifest digest).
async fn pushed(registry: &Registry, guest: &str, repository_and_tag: &str) -> (String, String) {
    let reference = registry.reference(repository_and_tag);
    push_guest(guest, &reference, &registry.options()).await;
    let digest = Client::new(registry.options())
        .resolve(&reference)
        .await
        .unwrap();
    (reference, digest)
}

/// The layers of the signature image of `digest` in `reference`'s repository.
fn signature_layers(reference: &str, digest: &str) -> Vec<Value> {
    let repository = reference.rsplit_once(':').unwrap().0;
    let tag = oci::signature_tag(digest).unwrap();
    let manifest = skopeo_raw(&[], &format!("{repository}:{tag}"));
    manifest["layers"].as_array().unwrap().clone()
}

#[tokio::test]
async fn an_unsigned_or_wrongly_signed_plugin_is_refused_naming_the_keys_and_the_digest() {
    let registry = Registry::start(false);
    let client = Client::new(registry.options());
    let (reference, digest) = pushed(&registry, guests::CHILDREN, "plugins/children:v1").await;
    let (_, release) = key("release");

    // Unsigned: no signature image at all.
    let err = client
        .verify(&reference, &digest, std::slice::from_ref(&release))
        .await
        .unwrap_err();
    assert_eq!(err.reason(), "Unsigned", "{err}");
    let message = err.to_string();
    assert!(message.contains(&digest), "{message}");
    assert!(message.contains(&release.describe()), "{message}");
    assert!(
        message.contains(&oci::signature_tag(&digest).unwrap()),
        "{message}"
    );

    // Signed, but by another key.
    let (stranger, _) = key("stranger");
    client.sign(&reference, &stranger).await.unwrap();
    let err = client
        .verify(&reference, &digest, std::slice::from_ref(&release))
        .await
        .unwrap_err();
    assert_eq!(err.reason(), "SignatureInvalid", "{err}");
    let message = err.to_string();
    assert!(message.contains(&digest), "{message}");
    assert!(message.contains(&release.describe()), "{message}");
    assert!(
        message.contains("signature 1: made by none of these keys"),
        "{message}"
    );

    // The library's pull refuses before it downloads; so does the CLI, which writes nothing.
    let err = client
        .pull_verified(&reference, &digest, None, std::slice::from_ref(&release))
        .await
        .unwrap_err();
    assert_eq!(err.reason(), "SignatureInvalid", "{err}");
    let dir = tempfile::tempdir().unwrap();
    let public = dir.path().join("release.pub");
    std::fs::write(&public, release.to_pem()).unwrap();
    let out = dir.path().join("children.wasm");
    let (ok, _, stderr) = windlass(
        &[
            "plugin",
            "pull",
            &reference,
            "-o",
            out.to_str().unwrap(),
            "--key",
            public.to_str().unwrap(),
            "--plain-http",
        ],
        &[],
    );
    assert!(!ok, "a wrongly signed pull succeeded");
    assert!(
        stderr.contains(&digest) && stderr.contains("release.pub (sha256:"),
        "{stderr}"
    );
    assert!(!out.exists(), "a refused pull wrote the component");
}

#[tokio::test]
async fn a_signature_copied_from_another_artifact_is_refused() {
    // The attack: a signed artifact's signature image, copied to the signature tag of another
    // artifact (say, one pushed to the same tag by someone who can push but not sign).
    let registry = Registry::start(false);
    let client = Client::new(registry.options());
    let (signed_ref, signed) = pushed(&registry, guests::CHILDREN, "plugins/children:v1").await;
    let (other_ref, other) = pushed(&registry, guests::CHILDREN_V2, "plugins/children:v2").await;
    let (release_key, release) = key("release");
    client.sign(&signed_ref, &release_key).await.unwrap();
    client
        .verify(&signed_ref, &signed, std::slice::from_ref(&release))
        .await
        .unwrap();

    let repository = signed_ref.rsplit_once(':').unwrap().0;
    let from = format!(
        "docker://{repository}:{}",
        oci::signature_tag(&signed).unwrap()
    );
    let to = format!(
        "docker://{repository}:{}",
        oci::signature_tag(&other).unwrap()
    );
    let copy = Command::new(crate::oci::find_tool("skopeo", "skopeo"))
        .args(["copy", "--src-tls-verify=false", "--dest-tls-verify=false"])
        .args([&from, &to])
        .output()
        .unwrap();
    assert!(
        copy.status.success(),
        "skopeo copy: {}",
        String::from_utf8_lossy(&copy.stderr)
    );

    let err = client
        .verify(&other_ref, &other, std::slice::from_ref(&release))
        .await
        .unwrap_err();
    assert_eq!(err.reason(), "SignatureInvalid", "{err}");
    let message = err.to_string();
    assert!(
        message.contains(&format!(
            "by {}, but it signs \"{signed}\", not this manifest",
            release.describe()
        )),
        "{message}"
    );
    // The artifact that was signed still verifies.
    let verified = client
        .verify(&signed_ref, &signed, std::slice::from_ref(&release))
        .await
        .unwrap();
    assert_eq!(verified.key, "release");
}

#[tokio::test]
async fn two_keys_are_accepted_at_once_while_keys_rotate() {
    let registry = Registry::start(false);
    let client = Client::new(registry.options());
    let (reference, digest) = pushed(&registry, guests::CHILDREN, "plugins/children:v1").await;
    let (old_key, old) = key("old");
    let (new_key, new) = key("new");
    let both = [old.clone(), new.clone()];

    let signed = client.sign(&reference, &old_key).await.unwrap();
    assert_eq!(
        (signed.manifest_digest.as_str(), signed.signatures),
        (digest.as_str(), 1)
    );
    assert_eq!(
        client.verify(&reference, &digest, &both).await.unwrap().key,
        "old"
    );

    // The new key's signature is added beside the old one; signing again with it adds nothing.
    assert_eq!(
        client.sign(&reference, &new_key).await.unwrap().signatures,
        2
    );
    assert_eq!(
        client.sign(&reference, &new_key).await.unwrap().signatures,
        2
    );
    let layers = signature_layers(&reference, &digest);
    assert_eq!(layers.len(), 2, "{layers:?}");
    for layer in &layers {
        assert_eq!(layer["mediaType"], oci::SIGNATURE_MEDIA_TYPE);
        assert!(
            layer["annotations"][oci::SIGNATURE_ANNOTATION].is_string(),
            "{layer}"
        );
    }
    assert_eq!(
        client
            .verify(&reference, &digest, std::slice::from_ref(&new))
            .await
            .unwrap()
            .key,
        "new"
    );
    assert_eq!(
        client
            .verify(&reference, &digest, std::slice::from_ref(&old))
            .await
            .unwrap()
            .key,
        "old"
    );
    // A third key verifies neither, and the refusal says so for each signature.
    let (_, third) = key("third");
    let err = client
        .verify(&reference, &digest, std::slice::from_ref(&third))
        .await
        .unwrap_err();
    let message = err.to_string();
    assert!(
        message.contains("signature 1: made by none of these keys; signature 2: made by none"),
        "{message}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_running_host_loads_only_signed_versions_and_keeps_the_serving_one_otherwise() {
    use crate::support::{Env, data, eventually, operator_config};
    let registry = Registry::start(false);
    let client = Client::new(registry.options());
    let (reference, v1) = pushed(&registry, guests::CHILDREN, "plugins/children:stable").await;
    let (old_key, old) = key("release-2026");
    let (new_key, new) = key("release-2027");

    let mut env = Env::start().await;
    let mut config = operator_config("test", None);
    config.settings.oci.options = registry.options();
    config.settings.oci.namespace = "windlass-system".into();
    config.settings.oci_poll = Duration::from_secs(1);
    env.run_operator_with(config).await;
    let wp = |keys: &[&PublicKey]| {
        let keys: Vec<Value> = keys
            .iter()
            .map(|k| json!({"name": k.name(), "publicKey": k.to_pem()}))
            .collect();
        json!({"apiVersion": "windlass.dev/v1alpha1", "kind": "WasmPlugin", "metadata": {"name": "children"},
               "spec": {"parent": {"apiVersion": "example.com/v1", "kind": "Thing"},
                        "source": {"oci": {"reference": reference, "verify": {"keys": keys}}}}})
    };
    let wps: kube::Api<windlass::crd::WasmPlugin> = kube::Api::all(env.client.clone());
    let apply = kube::api::PatchParams::apply("test").force();
    let refusal = |reason: &'static str, digest: String| {
        let env = &env;
        async move {
            eventually(&format!("{reason} naming {digest}"), || async {
                let status = env.wasm_plugin("children").await.status?;
                let ready = status.conditions.iter().find(|c| c.type_ == "Ready")?;
                (ready.reason == reason && ready.message.contains(&digest))
                    .then(|| (status.clone(), ready.message.clone()))
            })
            .await
        }
    };

    // Unsigned: refused, naming the key and the manifest digest; nothing serves.
    wps.patch("children", &apply, &kube::api::Patch::Apply(&wp(&[&old])))
        .await
        .unwrap();
    let (status, message) = refusal("Unsigned", v1.clone()).await;
    assert!(message.contains(&old.describe()), "{message}");
    assert_eq!(status.digest, None);

    // Signed with the WasmPlugin's key: the next poll loads it, with no change to the spec.
    client.sign(&reference, &old_key).await.unwrap();
    env.create_thing("t1", json!({"names": ["a"], "value": "v"}))
        .await;
    env.wait_for_child_version("t1", "1.0.0").await;

    // A new version on the tag, unsigned: refused; v1 keeps serving.
    push_guest(guests::CHILDREN_V2, &reference, &registry.options()).await;
    let v2 = client.resolve(&reference).await.unwrap();
    let (status, _) = refusal("Unsigned", v2.clone()).await;
    assert_eq!(status.digest, Some(digest_of(guests::CHILDREN)));
    assert_eq!(data(&env.children_of("t1").await[0], "version"), "1.0.0");

    // Signed with the next key, which the WasmPlugin does not list yet: still refused.
    client.sign(&reference, &new_key).await.unwrap();
    let (status, message) = refusal("SignatureInvalid", v2.clone()).await;
    assert!(message.contains("made by none of these keys"), "{message}");
    assert_eq!(status.digest, Some(digest_of(guests::CHILDREN)));

    // Both keys listed (rotation): v2 loads.
    wps.patch(
        "children",
        &apply,
        &kube::api::Patch::Apply(&wp(&[&old, &new])),
    )
    .await
    .unwrap();
    env.wait_for_child_version("t1", "2.0.0").await;
    let status = env.wasm_plugin("children").await.status.unwrap();
    assert_eq!(status.digest, Some(digest_of(guests::CHILDREN_V2)));
    assert_eq!(status.last_error, None);

    // A key that is not a key: refused naming it; v2 keeps serving.
    let mut bad = wp(&[&new]);
    bad["spec"]["source"]["oci"]["verify"]["keys"][0]["publicKey"] = json!("not a key");
    wps.patch("children", &apply, &kube::api::Patch::Apply(&bad))
        .await
        .unwrap();
    let status = eventually("the refused key", || async {
        let status = env.wasm_plugin("children").await.status?;
        let ready = status.conditions.iter().find(|c| c.type_ == "Ready")?;
        (ready.reason == "InvalidKey").then(|| (status.clone(), ready.message.clone()))
    })
    .await;
    assert!(status.1.contains("key release-2027: "), "{}", status.1);
    assert_eq!(status.0.digest, Some(digest_of(guests::CHILDREN_V2)));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_hosts_trusted_keys_bind_every_oci_plugin_and_a_wasm_plugin_cannot_drop_them() {
    use crate::support::{Env, eventually, operator_config};
    let registry = Registry::start(false);
    let client = Client::new(registry.options());
    let (reference, v1) = pushed(&registry, guests::CHILDREN, "plugins/children:stable").await;
    let (host_key, host) = key("cluster-admin");
    let (own_key, own) = key("plugin-team");

    let mut env = Env::start().await;
    let mut config = operator_config("test", None);
    config.settings.oci.options = registry.options();
    config.settings.oci.namespace = "windlass-system".into();
    config.settings.oci.trusted_keys = vec![host.clone()];
    config.settings.oci_poll = Duration::from_secs(1);
    env.run_operator_with(config).await;
    let wps: kube::Api<windlass::crd::WasmPlugin> = kube::Api::all(env.client.clone());
    let apply = kube::api::PatchParams::apply("test").force();
    let wp = |verify: Option<&PublicKey>| {
        let mut oci = json!({"reference": reference});
        if let Some(k) = verify {
            oci["verify"] = json!({"keys": [{"name": k.name(), "publicKey": k.to_pem()}]});
        }
        json!({"apiVersion": "windlass.dev/v1alpha1", "kind": "WasmPlugin", "metadata": {"name": "children"},
               "spec": {"parent": {"apiVersion": "example.com/v1", "kind": "Thing"}, "source": {"oci": oci}}})
    };
    let ready = |reason: &'static str| {
        let env = &env;
        async move {
            eventually(&format!("Ready reason {reason}"), || async {
                let status = env.wasm_plugin("children").await.status?;
                let c = status.conditions.iter().find(|c| c.type_ == "Ready")?;
                (c.reason == reason).then(|| (status.clone(), c.message.clone()))
            })
            .await
        }
    };

    // A WasmPlugin that asks for nothing still needs the host's key.
    wps.patch("children", &apply, &kube::api::Patch::Apply(&wp(None)))
        .await
        .unwrap();
    let (status, message) = ready("Unsigned").await;
    assert!(
        message.contains(&v1) && message.contains(&host.describe()),
        "{message}"
    );
    assert_eq!(status.digest, None);

    // Its own key is checked as well, never instead: signed by the plugin team alone, refused
    // naming the host's key.
    wps.patch(
        "children",
        &apply,
        &kube::api::Patch::Apply(&wp(Some(&own))),
    )
    .await
    .unwrap();
    client.sign(&reference, &own_key).await.unwrap();
    let (status, message) = ready("SignatureInvalid").await;
    assert!(
        message.contains(&v1) && message.contains(&host.describe()),
        "{message}"
    );
    assert_eq!(status.digest, None);

    // Signed by both: it loads.
    client.sign(&reference, &host_key).await.unwrap();
    env.create_thing("t1", json!({"names": ["a"], "value": "v"}))
        .await;
    env.wait_for_child_version("t1", "1.0.0").await;
    assert_eq!(
        env.wasm_plugin("children").await.status.unwrap().digest,
        Some(digest_of(guests::CHILDREN))
    );
}

/// The real cosign: `WINDLASS_COSIGN`, else `cosign` on the PATH.
fn cosign() -> PathBuf {
    std::env::var_os("WINDLASS_COSIGN")
        .map(PathBuf::from)
        .or_else(|| {
            std::env::var_os("PATH")
                .iter()
                .flat_map(std::env::split_paths)
                .map(|dir| dir.join("cosign"))
                .find(|path| path.is_file())
        })
        .expect(
            "cosign is needed: build it with tools/cosign/build.sh (it prints the binary's path) \
             and set WINDLASS_COSIGN to it; `cargo xtask ci` does",
        )
}

/// Runs cosign offline (no transparency log, no Fulcio, plain-HTTP registry) in `dir`.
fn run_cosign(dir: &Path, args: &[&str]) -> (bool, String) {
    let out = Command::new(cosign())
        .current_dir(dir)
        .args(args)
        .env("COSIGN_PASSWORD", "windlass-test")
        // Nothing may reach the network: the TUF root is not fetched for key-based verification.
        .env("TUF_ROOT", dir.join("tuf"))
        .output()
        .expect("cosign runs");
    (
        out.status.success(),
        format!(
            "{}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        ),
    )
}

const COSIGN_REGISTRY: &[&str] = &["--allow-http-registry", "--allow-insecure-registry"];

#[tokio::test]
#[ignore = "needs the real cosign (tools/cosign/build.sh); `cargo xtask ci` runs it with WINDLASS_COSIGN"]
async fn cosign_and_windlass_each_verify_what_the_other_signed() {
    let registry = Registry::start(false);
    let dir = tempfile::tempdir().unwrap();
    let client = Client::new(registry.options());

    // Signed by cosign, verified by Windlass (library and CLI).
    let (by_cosign, by_cosign_digest) =
        pushed(&registry, guests::CHILDREN, "plugins/children:v1").await;
    let (ok, out) = run_cosign(dir.path(), &["generate-key-pair"]);
    assert!(ok, "cosign generate-key-pair: {out}");
    let target = format!(
        "{}@{by_cosign_digest}",
        by_cosign.rsplit_once(':').unwrap().0
    );
    let (ok, out) = run_cosign(
        dir.path(),
        &[
            &["sign", "--key", "cosign.key", "--tlog-upload=false", "-y"][..],
            COSIGN_REGISTRY,
            &[&target],
        ]
        .concat(),
    );
    assert!(ok, "cosign sign: {out}");
    let cosign_pub = std::fs::read_to_string(dir.path().join("cosign.pub")).unwrap();
    let cosign_key = PublicKey::from_pem("cosign.pub", &cosign_pub).unwrap();
    let verified = client
        .verify(
            &by_cosign,
            &by_cosign_digest,
            std::slice::from_ref(&cosign_key),
        )
        .await
        .unwrap();
    assert_eq!(verified.key, "cosign.pub");
    let cosign_pub_path = dir.path().join("cosign.pub");
    let (ok, stdout, stderr) = windlass(
        &[
            "plugin",
            "verify",
            &by_cosign,
            "--key",
            cosign_pub_path.to_str().unwrap(),
            "--plain-http",
        ],
        &[],
    );
    assert!(ok, "windlass plugin verify: {stderr}");
    assert!(
        stdout.contains(&format!("manifestDigest: {by_cosign_digest}")),
        "{stdout}"
    );

    // Signed by Windlass (a key from `windlass plugin keygen`), verified by cosign.
    let (by_windlass, by_windlass_digest) =
        pushed(&registry, guests::CHILDREN_V2, "plugins/children:v2").await;
    let prefix = dir.path().join("windlass");
    let (ok, _, stderr) = windlass(&["plugin", "keygen", prefix.to_str().unwrap()], &[]);
    assert!(ok, "windlass plugin keygen: {stderr}");
    let (ok, stdout, stderr) = windlass(
        &[
            "plugin",
            "sign",
            &by_windlass,
            "--key",
            dir.path().join("windlass.key").to_str().unwrap(),
            "--plain-http",
        ],
        &[],
    );
    assert!(ok, "windlass plugin sign: {stderr}");
    assert!(stdout.contains("signatures: 1"), "{stdout}");
    let verify = |key: &str, reference: &str| {
        run_cosign(
            dir.path(),
            &[
                &[
                    "verify",
                    "--key",
                    key,
                    "--insecure-ignore-tlog",
                    "--output",
                    "json",
                ][..],
                COSIGN_REGISTRY,
                &[reference],
            ]
            .concat(),
        )
    };
    let (ok, out) = verify("windlass.pub", &by_windlass);
    assert!(ok, "cosign verify of Windlass's signature: {out}");
    assert!(out.contains(&by_windlass_digest), "{out}");
    // cosign is not accepting anything: the other key does not verify it.
    let (ok, out) = verify("cosign.pub", &by_windlass);
    assert!(!ok, "cosign verified with the wrong key: {out}");

    // Rotation across the two tools: Windlass adds its signature beside cosign's; cosign
    // verifies each key's, and so does Windlass.
    let (ok, stdout, stderr) = windlass(
        &[
            "plugin",
            "sign",
            &by_cosign,
            "--key",
            dir.path().join("windlass.key").to_str().unwrap(),
            "--plain-http",
        ],
        &[],
    );
    assert!(ok, "windlass plugin sign: {stderr}");
    assert!(stdout.contains("signatures: 2"), "{stdout}");
    for key in ["cosign.pub", "windlass.pub"] {
        let (ok, out) = verify(key, &by_cosign);
        assert!(ok, "cosign verify with {key} after rotation: {out}");
    }
    let windlass_pub = std::fs::read_to_string(dir.path().join("windlass.pub")).unwrap();
    let windlass_key = PublicKey::from_pem("windlass.pub", &windlass_pub).unwrap();
    assert_eq!(
        client
            .verify(
                &by_cosign,
                &by_cosign_digest,
                std::slice::from_ref(&windlass_key)
            )
            .await
            .unwrap()
            .key,
        "windlass.pub"
    );
    assert_eq!(signature_layers(&by_cosign, &by_cosign_digest).len(), 2);
}
