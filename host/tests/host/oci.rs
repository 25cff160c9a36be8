//! Plugins in an OCI registry, against the real CNCF distribution registry (Debian package
//! `docker-registry`) on loopback and, for interoperability, `skopeo` (Debian package `skopeo`).
//! `.ci/run` installs both; a missing one fails the tests, naming the package.

use crate::support::{self, free_port};

use std::{
    io::{Read as _, Write as _},
    net::TcpStream,
    path::PathBuf,
    process::{Child, Command, Stdio},
    time::{Duration, Instant},
};

use oci_client::{
    Reference,
    client::{ClientConfig, ClientProtocol, Config, ImageLayer},
    secrets::RegistryAuth as OciAuth,
};
use serde_json::Value;
use windlass::{
    runtime::{Runtime, RuntimeConfig},
    source::{
        self, Error,
        oci::{self, CONFIG_MEDIA_TYPE, LAYER_MEDIA_TYPE, Options, RegistryAuth},
    },
};
use windlass_test_guests as guests;

const USER: &str = "alice";
const PASSWORD: &str = "s3cret-pass";

/// A `docker-registry` on 127.0.0.1 with its storage in a temporary directory; killed on drop.
pub(crate) struct Registry {
    child: Child,
    host: String,
    dir: tempfile::TempDir,
}

impl Registry {
    pub(crate) fn start(with_auth: bool) -> Registry {
        source::install_crypto_provider();
        let bin = find_tool("docker-registry", "docker-registry");
        let dir = tempfile::tempdir().unwrap();
        let port = free_port();
        let mut config = format!(
            "version: 0.1\nlog:\n  level: warn\n  accesslog:\n    disabled: true\n\
             storage:\n  filesystem:\n    rootdirectory: {}\n  delete:\n    enabled: true\n\
             http:\n  addr: 127.0.0.1:{port}\n",
            dir.path().join("data").display()
        );
        if with_auth {
            let hash = bcrypt::hash_with_result(PASSWORD, 4)
                .unwrap()
                .format_for_version(bcrypt::Version::TwoY);
            std::fs::write(dir.path().join("htpasswd"), format!("{USER}:{hash}\n")).unwrap();
            config.push_str(&format!(
                "auth:\n  htpasswd:\n    realm: windlass-test\n    path: {}\n",
                dir.path().join("htpasswd").display()
            ));
        }
        std::fs::write(dir.path().join("config.yml"), config).unwrap();
        let log = std::fs::File::create(dir.path().join("registry.log")).unwrap();
        let child = Command::new(bin)
            .arg("serve")
            .arg(dir.path().join("config.yml"))
            .stdout(log.try_clone().unwrap())
            .stderr(log)
            .spawn()
            .expect("starting docker-registry");
        let mut registry = Registry {
            child,
            host: format!("127.0.0.1:{port}"),
            dir,
        };
        registry.wait_until_up();
        registry
    }

    fn wait_until_up(&mut self) {
        let deadline = Instant::now() + Duration::from_secs(20);
        loop {
            if let Ok(Some(status)) = self.child.try_wait() {
                panic!("docker-registry exited ({status}):\n{}", self.log());
            }
            if let Ok(mut stream) = TcpStream::connect(&self.host) {
                let request = format!("GET /v2/ HTTP/1.0\r\nHost: {}\r\n\r\n", self.host);
                let mut answer = String::new();
                if stream.write_all(request.as_bytes()).is_ok()
                    && stream.read_to_string(&mut answer).is_ok()
                    && answer.starts_with("HTTP/1.")
                {
                    return;
                }
            }
            assert!(
                Instant::now() < deadline,
                "docker-registry did not answer on {} within 20 s:\n{}",
                self.host,
                self.log()
            );
            std::thread::sleep(Duration::from_millis(50));
        }
    }

    fn log(&self) -> String {
        std::fs::read_to_string(self.dir.path().join("registry.log")).unwrap_or_default()
    }

    pub(crate) fn reference(&self, repository_and_tag: &str) -> String {
        format!("{}/{repository_and_tag}", self.host)
    }

    pub(crate) fn options(&self) -> Options {
        Options {
            insecure_registries: vec![self.host.clone()],
            ..Options::default()
        }
    }

    fn options_with(&self, username: &str, password: &str) -> Options {
        Options {
            auth: Some(RegistryAuth {
                username: username.into(),
                password: password.into(),
            }),
            ..self.options()
        }
    }
}

impl Drop for Registry {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// The path of a tool, or a failure naming the Debian package that provides it.
pub(crate) fn find_tool(name: &str, package: &str) -> PathBuf {
    std::env::var_os("PATH")
        .iter()
        .flat_map(std::env::split_paths)
        .chain([PathBuf::from("/usr/bin")])
        .map(|dir| dir.join(name))
        .find(|path| path.is_file())
        .unwrap_or_else(|| {
            panic!(
                "{name} is not installed: these tests need the Debian package `{package}` \
                 (apt-get install -y {package}; .ci/run installs it)"
            )
        })
}

/// Runs the real `windlass` binary; returns (success, stdout, stderr).
pub(crate) fn windlass(args: &[&str], env: &[(&str, &str)]) -> (bool, String, String) {
    let out = Command::new(env!("CARGO_BIN_EXE_windlass"))
        .arg("--no-cache")
        .args(args)
        .env_remove("WINDLASS_REGISTRY_USERNAME")
        .env_remove("WINDLASS_REGISTRY_PASSWORD")
        .envs(env.iter().copied())
        .stdin(Stdio::null())
        .output()
        .expect("windlass runs");
    (
        out.status.success(),
        String::from_utf8(out.stdout).unwrap(),
        String::from_utf8(out.stderr).unwrap(),
    )
}

/// `windlass plugin push` to a registry without auth; returns its YAML output.
fn push(registry: &Registry, path: &str, reference: &str) -> serde_yaml::Value {
    let (ok, stdout, stderr) = windlass(&["plugin", "push", path, reference, "--plain-http"], &[]);
    assert!(ok, "push failed: {stderr}\n{}", registry.log());
    serde_yaml::from_str(&stdout).unwrap()
}

pub(crate) fn digest_of(path: &str) -> String {
    windlass::runtime::digest(&guests::bytes(path))
}

/// Pushes a test guest with the library (as `windlass plugin push` does).
pub(crate) async fn push_guest(guest: &str, reference: &str, options: &Options) {
    let runtime = Runtime::new(RuntimeConfig {
        max_instances: 8,
        ..RuntimeConfig::default()
    })
    .unwrap();
    oci::push(reference, &guests::bytes(guest), &runtime, options)
        .await
        .unwrap();
}

pub(crate) fn skopeo_raw(args: &[&str], reference: &str) -> Value {
    let out = Command::new(find_tool("skopeo", "skopeo"))
        .args(["inspect", "--tls-verify=false", "--raw"])
        .args(args)
        .arg(format!("docker://{reference}"))
        .output()
        .expect("skopeo runs");
    assert!(
        out.status.success(),
        "skopeo: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    serde_json::from_slice(&out.stdout).unwrap()
}

#[tokio::test]
async fn push_prints_the_digest_to_pin_and_skopeo_sees_the_wasm_artifact_layout() {
    let registry = Registry::start(false);
    let reference = registry.reference("plugins/storage:v1");
    let pushed = push(&registry, guests::STORAGE, &reference);
    let digest = digest_of(guests::STORAGE);
    assert_eq!(pushed["digest"].as_str(), Some(digest.as_str()));
    let manifest_digest = pushed["manifestDigest"].as_str().unwrap();
    assert_eq!(
        pushed["pinnedReference"].as_str().unwrap(),
        format!("{}/plugins/storage@{manifest_digest}", registry.host)
    );

    let manifest = skopeo_raw(&[], &reference);
    assert_eq!(manifest["config"]["mediaType"], CONFIG_MEDIA_TYPE);
    let layers = manifest["layers"].as_array().unwrap();
    assert_eq!(layers.len(), 1, "{manifest}");
    assert_eq!(layers[0]["mediaType"], LAYER_MEDIA_TYPE);
    assert_eq!(layers[0]["digest"], digest.as_str());
    assert_eq!(
        manifest["annotations"]["org.opencontainers.image.title"],
        "sampledb-storage"
    );

    let config = skopeo_raw(&["--config"], &reference);
    assert_eq!(config["architecture"], "wasm");
    assert_eq!(config["os"], "wasip2");
    assert_eq!(config["layerDigests"][0], digest.as_str());
    assert_eq!(
        config["component"]["exports"][0],
        windlass::runtime::RECONCILER_EXPORT
    );
    let runtime = Runtime::new(RuntimeConfig::default()).unwrap();
    let plugin = runtime
        .load(
            "storage",
            &guests::bytes(guests::STORAGE),
            Default::default(),
        )
        .unwrap();
    assert_eq!(
        config["component"]["imports"],
        serde_json::json!(plugin.imports())
    );
}

#[tokio::test]
async fn pull_via_the_library_and_via_the_cli_gives_the_pushed_bytes_and_digests() {
    let registry = Registry::start(false);
    let reference = registry.reference("plugins/storage:v1");
    let pushed = push(&registry, guests::STORAGE, &reference);
    let expected = guests::bytes(guests::STORAGE);

    let pulled = oci::pull(&reference, &registry.options(), None)
        .await
        .unwrap();
    assert_eq!(pulled.bytes, expected);
    assert_eq!(pulled.layer_digest, digest_of(guests::STORAGE));
    assert_eq!(
        pulled.manifest_digest,
        pushed["manifestDigest"].as_str().unwrap()
    );

    let out = tempfile::tempdir().unwrap();
    let file = out.path().join("storage.wasm");
    let (ok, stdout, stderr) = windlass(
        &[
            "plugin",
            "pull",
            &reference,
            "-o",
            file.to_str().unwrap(),
            "--plain-http",
        ],
        &[],
    );
    assert!(ok, "{stderr}");
    assert_eq!(std::fs::read(&file).unwrap(), expected);
    let printed: serde_yaml::Value = serde_yaml::from_str(&stdout).unwrap();
    assert_eq!(
        printed["digest"].as_str(),
        Some(pulled.layer_digest.as_str())
    );

    // The pinned reference (by manifest digest) pulls the same bytes.
    let by_digest = pushed["pinnedReference"].as_str().unwrap();
    let again = oci::pull(by_digest, &registry.options(), Some(&pulled.layer_digest))
        .await
        .unwrap();
    assert_eq!(again.bytes, expected);
}

#[test]
fn inspect_accepts_a_reference_as_well_as_a_file() {
    let registry = Registry::start(false);
    let reference = registry.reference("plugins/storage:v1");
    push(&registry, guests::STORAGE, &reference);
    let (ok, stdout, stderr) = windlass(&["plugin", "inspect", &reference, "--plain-http"], &[]);
    assert!(ok, "{stderr}");
    let doc: serde_yaml::Value = serde_yaml::from_str(&stdout).unwrap();
    assert_eq!(doc["name"].as_str(), Some("sampledb-storage"));
    assert_eq!(
        doc["digest"].as_str(),
        Some(digest_of(guests::STORAGE).as_str())
    );
    assert_eq!(doc["reference"].as_str(), Some(reference.as_str()));

    let (ok, stdout, stderr) = windlass(&["plugin", "inspect", guests::STORAGE], &[]);
    assert!(ok, "{stderr}");
    assert!(stdout.contains("name: sampledb-storage"), "{stdout}");
}

#[tokio::test]
async fn a_wrong_sha256_pin_is_refused_naming_both_digests() {
    let registry = Registry::start(false);
    let reference = registry.reference("plugins/storage:v1");
    push(&registry, guests::STORAGE, &reference);
    let actual = digest_of(guests::STORAGE);
    let wrong = digest_of(guests::STATEFUL);

    let err = oci::pull(&reference, &registry.options(), Some(&wrong))
        .await
        .unwrap_err();
    assert!(matches!(err, Error::DigestMismatch { .. }), "{err}");
    let message = err.to_string();
    assert!(
        message.contains(&wrong) && message.contains(&actual),
        "{message}"
    );

    let (ok, _, stderr) = windlass(
        &[
            "plugin",
            "pull",
            &reference,
            "--sha256",
            &wrong,
            "--plain-http",
            "-o",
            "/dev/null",
        ],
        &[],
    );
    assert!(!ok);
    assert!(
        stderr.contains(&wrong) && stderr.contains(&actual),
        "{stderr}"
    );

    let right = oci::pull(&reference, &registry.options(), Some(&actual))
        .await
        .unwrap();
    assert_eq!(right.layer_digest, actual);
}

#[tokio::test]
async fn moving_a_tag_to_another_component_changes_the_resolved_digest() {
    let registry = Registry::start(false);
    let reference = registry.reference("plugins/storage:v1");
    let client = oci::Client::new(registry.options());
    let first = push(&registry, guests::STORAGE, &reference);
    let before = client.resolve(&reference).await.unwrap();
    assert_eq!(before, first["manifestDigest"].as_str().unwrap());
    assert_eq!(client.resolve(&reference).await.unwrap(), before, "stable");

    let second = push(&registry, guests::STATEFUL, &reference);
    let after = client.resolve(&reference).await.unwrap();
    assert_ne!(after, before);
    assert_eq!(after, second["manifestDigest"].as_str().unwrap());
    let pulled = client.pull(&reference, None).await.unwrap();
    assert_eq!(pulled.layer_digest, digest_of(guests::STATEFUL));
    assert_eq!(pulled.manifest_digest, after);
}

#[tokio::test]
async fn a_missing_tag_or_repository_is_not_found() {
    let registry = Registry::start(false);
    push(
        &registry,
        guests::STORAGE,
        &registry.reference("plugins/storage:v1"),
    );
    let client = oci::Client::new(registry.options());
    for missing in ["plugins/storage:v2", "plugins/nothing:v1"] {
        let reference = registry.reference(missing);
        let err = client.pull(&reference, None).await.unwrap_err();
        assert_eq!(err.reason(), "NotFound", "{err}");
        assert!(err.to_string().contains(&reference), "{err}");
        let err = client.resolve(&reference).await.unwrap_err();
        assert_eq!(err.reason(), "NotFound", "{err}");
    }
}

#[tokio::test]
async fn a_registry_with_basic_auth_refuses_missing_or_wrong_credentials_and_accepts_right_ones() {
    let registry = Registry::start(true);
    let reference = registry.reference("plugins/storage:v1");

    let (ok, _, stderr) = windlass(
        &[
            "plugin",
            "push",
            guests::STORAGE,
            &reference,
            "--plain-http",
        ],
        &[],
    );
    assert!(!ok);
    assert!(stderr.contains("refused access"), "{stderr}");
    let (ok, _, stderr) = windlass(
        &[
            "plugin",
            "push",
            guests::STORAGE,
            &reference,
            "--plain-http",
        ],
        &[
            ("WINDLASS_REGISTRY_USERNAME", USER),
            ("WINDLASS_REGISTRY_PASSWORD", PASSWORD),
        ],
    );
    assert!(ok, "{stderr}\n{}", registry.log());

    let err = oci::pull(&reference, &registry.options(), None)
        .await
        .unwrap_err();
    assert!(matches!(err, Error::Unauthorized { .. }), "{err}");
    let err = oci::pull(&reference, &registry.options_with(USER, "wrong"), None)
        .await
        .unwrap_err();
    assert!(matches!(err, Error::Unauthorized { .. }), "{err}");
    let err = oci::resolve(&reference, &registry.options())
        .await
        .unwrap_err();
    assert!(matches!(err, Error::Unauthorized { .. }), "{err}");

    let pulled = oci::pull(&reference, &registry.options_with(USER, PASSWORD), None)
        .await
        .unwrap();
    assert_eq!(pulled.layer_digest, digest_of(guests::STORAGE));

    // The same credentials from an imagePullSecret's .dockerconfigjson.
    let secret = serde_json::json!({"auths": {
        "elsewhere:5000": {"username": "x", "password": "y"},
        registry.host.clone(): {"username": USER, "password": PASSWORD},
    }});
    let auth = RegistryAuth::from_docker_config(
        secret.to_string().as_bytes(),
        &oci::registry_of(&reference).unwrap(),
    )
    .unwrap();
    let options = Options {
        auth,
        ..registry.options()
    };
    let pulled = oci::pull(&reference, &options, None).await.unwrap();
    assert_eq!(pulled.bytes, guests::bytes(guests::STORAGE));
}

/// Pushes an artifact with oci-client directly, bypassing the checks of `windlass plugin push`.
async fn push_raw(registry: &Registry, reference: &str, config_type: &str, layers: &[&str]) {
    let client = oci_client::Client::new(ClientConfig {
        protocol: ClientProtocol::Http,
        ..ClientConfig::default()
    });
    let wasm = guests::bytes(guests::STORAGE);
    let layers: Vec<ImageLayer> = layers
        .iter()
        .map(|media| ImageLayer::new(wasm.clone(), media.to_string(), None))
        .collect();
    let config = Config::new(b"{}".to_vec(), config_type.to_string(), None);
    let r: Reference = reference.parse().unwrap();
    client
        .push(&r, &layers, config, &OciAuth::Anonymous, None)
        .await
        .unwrap_or_else(|e| panic!("raw push: {e}\n{}", registry.log()));
}

#[tokio::test]
async fn an_artifact_without_the_wasm_layout_is_refused_naming_what_is_wrong() {
    let registry = Registry::start(false);
    let tar = "application/vnd.oci.image.layer.v1.tar";
    let cases: [(&str, &str, &[&str], &str); 3] = [
        (
            "plugins/tar:v1",
            CONFIG_MEDIA_TYPE,
            &[tar],
            "layer media type",
        ),
        (
            "plugins/image:v1",
            "application/vnd.oci.image.config.v1+json",
            &[LAYER_MEDIA_TYPE],
            "config media type",
        ),
        (
            "plugins/two:v1",
            CONFIG_MEDIA_TYPE,
            &[LAYER_MEDIA_TYPE, LAYER_MEDIA_TYPE],
            "2 layers",
        ),
    ];
    for (repo, config_type, layers, why) in cases {
        let reference = registry.reference(repo);
        push_raw(&registry, &reference, config_type, layers).await;
        let err = oci::pull(&reference, &registry.options(), None)
            .await
            .unwrap_err();
        assert!(
            matches!(
                err,
                Error::WrongMediaType { .. } | Error::WrongLayerCount { .. }
            ),
            "{err}"
        );
        assert!(err.to_string().contains(why), "{repo}: {err}");
    }
}

#[tokio::test]
async fn a_layer_above_the_size_limit_is_refused_before_download() {
    let registry = Registry::start(false);
    let reference = registry.reference("plugins/storage:v1");
    push(&registry, guests::STORAGE, &reference);
    let size = guests::bytes(guests::STORAGE).len() as u64;
    let options = Options {
        max_layer_bytes: size - 1,
        ..registry.options()
    };
    let err = oci::pull(&reference, &options, None).await.unwrap_err();
    match err {
        Error::TooLarge {
            size: reported,
            limit,
            ..
        } => assert_eq!((reported, limit), (size, size - 1)),
        other => panic!("expected TooLarge, got {other}"),
    }
}

#[tokio::test]
async fn an_unreachable_registry_is_reported_as_unreachable() {
    source::install_crypto_provider();
    let host = format!("127.0.0.1:{}", free_port());
    let options = Options {
        plain_http: true,
        ..Options::default()
    };
    let err = oci::pull(&format!("{host}/plugins/storage:v1"), &options, None)
        .await
        .unwrap_err();
    assert_eq!(err.reason(), "RegistryUnreachable", "{err}");
    assert!(err.to_string().contains(&host), "{err}");
}

#[test]
fn pushing_a_file_that_is_not_a_plugin_is_refused_before_contacting_the_registry() {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("not-a-plugin.wasm");
    std::fs::write(&file, b"\0asm\x01\0\0\0").unwrap();
    let (ok, _, stderr) = windlass(
        &[
            "plugin",
            "push",
            file.to_str().unwrap(),
            "127.0.0.1:9/plugins/bad:v1",
            "--plain-http",
        ],
        &[],
    );
    assert!(!ok);
    assert!(
        stderr.contains("refusing to push to 127.0.0.1:9/plugins/bad:v1"),
        "{stderr}"
    );
    assert!(
        stderr.contains("not a loadable WebAssembly component"),
        "{stderr}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_running_host_loads_a_plugin_from_the_registry_swaps_on_retag_and_refuses_a_wrong_pin() {
    use serde_json::json;
    use support::{Env, data, eventually, operator_config};
    let registry = Registry::start(false);
    let reference = registry.reference("plugins/children:stable");
    push_guest(guests::CHILDREN, &reference, &registry.options()).await;

    let mut env = Env::start().await;
    let mut config = operator_config("test", None);
    config.settings.oci.options = registry.options();
    config.settings.oci.namespace = "windlass-system".into();
    config.settings.oci_poll = Duration::from_secs(1);
    env.run_operator_with(config).await;
    let wp = |extra: Value| {
        let mut source = json!({"oci": {"reference": reference}});
        if let (Some(s), Some(e)) = (source.as_object_mut(), extra.as_object()) {
            s.extend(e.clone());
        }
        json!({"apiVersion": "windlass.dev/v1alpha1", "kind": "WasmPlugin", "metadata": {"name": "children"},
               "spec": {"parent": {"apiVersion": "example.com/v1", "kind": "Thing"}, "source": source}})
    };
    let wps: kube::Api<windlass::crd::WasmPlugin> = kube::Api::all(env.client.clone());
    let apply = kube::api::PatchParams::apply("test").force();
    wps.patch("children", &apply, &kube::api::Patch::Apply(&wp(json!({}))))
        .await
        .unwrap();
    env.create_thing("t1", json!({"names": ["a"], "value": "v"}))
        .await;
    env.wait_for_child_version("t1", "1.0.0").await;

    // Retag: the same tag now names v2; the host notices on its next poll and swaps.
    push_guest(guests::CHILDREN_V2, &reference, &registry.options()).await;
    env.wait_for_child_version("t1", "2.0.0").await;

    // A pin that does not match what the tag names: refused, v2 keeps serving.
    let v1 = digest_of(guests::CHILDREN);
    wps.patch(
        "children",
        &apply,
        &kube::api::Patch::Apply(&wp(json!({"sha256": v1}))),
    )
    .await
    .unwrap();
    let status = eventually("the refusal", || async {
        let status = env.wasm_plugin("children").await.status?;
        status.last_error.is_some().then_some(status)
    })
    .await;
    let ready = status
        .conditions
        .iter()
        .find(|c| c.type_ == "Ready")
        .unwrap();
    assert_eq!(ready.reason, "DigestMismatch", "{}", ready.message);
    assert_eq!(status.digest, Some(digest_of(guests::CHILDREN_V2)));
    assert_eq!(data(&env.children_of("t1").await[0], "version"), "2.0.0");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_load_from_a_registry_with_a_pull_secret_reads_the_secret_once() {
    use std::sync::{
        Arc,
        atomic::{AtomicUsize, Ordering},
    };

    use base64::Engine as _;
    use serde_json::json;
    use support::{Env, engine, eventually, operator_config};
    let registry = Registry::start(true);
    let reference = registry.reference("plugins/children:stable");
    push_guest(
        guests::CHILDREN,
        &reference,
        &registry.options_with(USER, PASSWORD),
    )
    .await;

    let env = Env::start().await;
    let auth = base64::engine::general_purpose::STANDARD.encode(format!("{USER}:{PASSWORD}"));
    let docker_config = json!({"auths": {registry.host.clone(): {"auth": auth}}}).to_string();
    let secret: k8s_openapi::api::core::v1::Secret = serde_json::from_value(json!({
        "metadata": {"name": "regcred", "namespace": "windlass-system"},
        "type": "kubernetes.io/dockerconfigjson",
        "stringData": {".dockerconfigjson": docker_config},
    }))
    .unwrap();
    kube::Api::<k8s_openapi::api::core::v1::Secret>::namespaced(
        env.client.clone(),
        "windlass-system",
    )
    .create(&Default::default(), &secret)
    .await
    .unwrap();

    // The host's client, counting its reads of the pull secret.
    let reads = Arc::new(AtomicUsize::new(0));
    let counted = {
        let reads = reads.clone();
        let inner = env.client.clone();
        tower::service_fn(move |request: http::Request<kube::client::Body>| {
            if request.method() == http::Method::GET
                && request.uri().path().ends_with("/secrets/regcred")
            {
                reads.fetch_add(1, Ordering::SeqCst);
            }
            let inner = inner.clone();
            async move { inner.send(request).await }
        })
    };
    let client = kube::Client::new(counted, "default");
    let mut config = operator_config("test", None);
    config.settings.oci.options = registry.options();
    config.settings.oci.namespace = "windlass-system".into();
    // No poll during the test: one load, one read.
    config.settings.oci_poll = Duration::from_secs(3600);
    let (stop, stopped) = tokio::sync::watch::channel(false);
    let (_handle, _task) = windlass::operator::start(client, config, engine(), stopped)
        .await
        .unwrap();
    let wp = json!({"apiVersion": "windlass.dev/v1alpha1", "kind": "WasmPlugin", "metadata": {"name": "children"},
        "spec": {"parent": {"apiVersion": "example.com/v1", "kind": "Thing"},
                 "source": {"oci": {"reference": reference, "pullSecret": "regcred"}}}});
    kube::Api::<windlass::crd::WasmPlugin>::all(env.client.clone())
        .patch(
            "children",
            &kube::api::PatchParams::apply("test").force(),
            &kube::api::Patch::Apply(&wp),
        )
        .await
        .unwrap();
    let status = eventually("the plugin loaded or refused", || async {
        let status = env.wasm_plugin("children").await.status?;
        (status.digest.is_some() || status.last_error.is_some()).then_some(status)
    })
    .await;
    assert_eq!(
        status.digest,
        Some(digest_of(guests::CHILDREN)),
        "{:?}",
        status.last_error
    );
    assert_eq!(
        reads.load(Ordering::SeqCst),
        1,
        "the pull secret is read once per load (resolve and pull share it)"
    );
    let _ = stop.send(true);
}
