//! The Helm chart installed for real, as a user installs it: the host's image (made as `cargo
//! xtask image` makes it) pushed to a registry (the real `docker-registry`), and `helm install`
//! with the SampleDB preset — all six plugins, the Python, JavaScript and Go ones from the same
//! registry, signed, and the host verifying every OCI plugin with the release's trusted key
//! (`verifyPlugins`) — into a real kube-apiserver (`windlass_kubeplane`: RBAC, Pod Security,
//! OwnerReferencesPermissionEnforcement, the workload controllers). The chart's own Deployment
//! runs: the real ReplicaSet controller makes its two Pods, and the workload simulator runs
//! them as processes from the image's layer (`simulator::processes`): the Deployment's args
//! and env, its ServiceAccount's token where the projected volume puts it, in-cluster
//! configuration, its volumes, a read-only root, user 65532, a network namespace each (both
//! listen on the same admin port), the probes setting Ready. The two elect a leader. A
//! SampleDB in a namespace that enforces the `restricted` Pod Security level gets its children,
//! the real StatefulSet controller gets its Pods past admission, the database becomes Ready,
//! chaos kills its primary's Pod (the chaos Pod's kubectl runs as the database's own
//! ServiceAccount, through the Role the plugin made) and all replicas are ready again; the
//! leader's Pod is deleted and the standby takes the Lease; under the new leader the database
//! is upgraded (backup and upgrade Jobs, a rolling StatefulSet), `helm upgrade` to a new build
//! of a plugin swaps it, and it is deleted (a snapshot of each volume before the volumes go);
//! the hosts' logs hold no `forbidden`. Then `kubectl auth can-i --as` the ServiceAccount: what
//! the host can and cannot do (the table in docs/INSTALL.md). Last, the uninstall
//! docs/INSTALL.md describes: the WasmPlugins while the host runs, then `helm uninstall
//! --wait`, which stops the chart's Pods and leaves the databases' snapshots.

use std::{
    os::unix::fs::PermissionsExt as _,
    path::{Path, PathBuf},
    process::Command,
    time::Duration,
};

use k8s_openapi::api::{
    apps::v1::{Deployment, StatefulSet},
    batch::v1::{CronJob, Job},
    coordination::v1::Lease,
    core::v1::{ConfigMap, PersistentVolumeClaim, Pod, Secret, Service},
};
use kube::{
    Api, ResourceExt,
    api::{DeleteParams, DynamicObject, ListParams, Patch, PatchParams, PostParams},
    core::{ApiResource, GroupVersionKind},
};
use serde_json::json;
use windlass_kubeplane::ControlPlane;
use windlass_test_guests as guests;

use crate::support;
use support::{
    condition, eventually, terminated_pod_of_job,
    tools::{helm, kubectl, try_run},
};

const NAMESPACE: &str = "windlass-system";
const RELEASE: &str = "wl";
/// The chart's ServiceAccount: `<release>-<chart>`.
const ACCOUNT: &str = "wl-windlass";
/// Where the SampleDB lives: Pod Security `restricted` enforced.
const APP: &str = "shop";

fn root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .expect("host/ lives in the workspace root")
        .to_path_buf()
}

/// kubectl as the admin (or `--as` someone), off the async workers.
async fn kubectl_as(
    plane: &ControlPlane,
    cache: &Path,
    args: &[&str],
    stdin: Option<String>,
) -> Result<String, String> {
    let mut cmd = Command::new(kubectl());
    cmd.arg("--kubeconfig")
        .arg(plane.kubeconfig())
        .arg("--cache-dir")
        .arg(cache)
        .args(args);
    tokio::task::spawn_blocking(move || try_run(&mut cmd, stdin.as_deref()))
        .await
        .expect("the kubectl task runs")
}

/// `helm VERB` of the release on the plane (the chart with `values`, when given, and `extra`), off
/// the async workers; fails the test with helm's output when helm fails.
async fn helm_release(
    plane: &ControlPlane,
    verb: &'static str,
    values: Option<&Path>,
    extra: &[&str],
) -> String {
    let mut cmd = Command::new(helm());
    cmd.args([verb, RELEASE]);
    if let Some(values) = values {
        cmd.arg(root().join("deploy/helm/windlass"))
            .arg("-f")
            .arg(values);
    }
    cmd.args(["-n", NAMESPACE])
        .args(extra)
        .arg("--kubeconfig")
        .arg(plane.kubeconfig());
    tokio::task::spawn_blocking(move || try_run(&mut cmd, None))
        .await
        .expect("the helm task runs")
        .unwrap_or_else(|e| panic!("helm {verb}: {e}"))
}

/// The preset's three OCI plugins, pushed to `registry` and signed with `key`: (WasmPlugin
/// entry name, reference).
async fn publish_oci_plugins(
    registry: &crate::oci::Registry,
    key: &windlass::source::oci::SigningKey,
) -> Vec<(String, String)> {
    let client = windlass::source::oci::Client::new(registry.options());
    let runtime = plugin_runtime();
    let mut published = Vec::new();
    for (name, path) in guests::SAMPLEDB {
        if !matches!(
            *name,
            "sampledb-primary" | "sampledb-conventions" | "sampledb-chaos"
        ) {
            continue;
        }
        let reference = registry.reference(&format!("windlass/{name}:0.1.0"));
        let bytes = std::fs::read(path).unwrap_or_else(|e| panic!("{path}: {e}"));
        client
            .push(&reference, &bytes, &runtime)
            .await
            .unwrap_or_else(|e| panic!("push {reference}: {e}"));
        client
            .sign(&reference, key)
            .await
            .unwrap_or_else(|e| panic!("sign {reference}: {e}"));
        published.push((name.to_string(), reference));
    }
    assert_eq!(published.len(), 3, "the preset's three OCI plugins");
    published
}

/// A runtime sharing the end-to-end tests' precompiled cache (the Python plugin takes seconds
/// to compile).
fn plugin_runtime() -> windlass::runtime::Runtime {
    windlass::runtime::Runtime::new(windlass::runtime::RuntimeConfig {
        cache_dir: Some(plugin_cache()),
        ..windlass::runtime::RuntimeConfig::default()
    })
    .expect("a runtime")
}

fn plugin_cache() -> PathBuf {
    root().join("target").join("e2e-plugin-cache")
}

/// The preset's values with its OCI plugins' references pointing at `published`, every OCI
/// plugin verified with `public_key`, the host's image `image` and its registry `registry`
/// (plain HTTP).
fn preset_with(
    dir: &Path,
    published: &[(String, String)],
    public_key: &str,
    image: &(String, String),
    registry: &str,
) -> PathBuf {
    let preset = root().join("deploy/helm/windlass/values-sampledb.yaml");
    let mut values: serde_yaml::Value =
        serde_yaml::from_str(&std::fs::read_to_string(preset).unwrap()).unwrap();
    let plugins = values["plugins"].as_sequence_mut().expect("plugins");
    assert_eq!(plugins.len(), 6, "the preset's six plugins");
    for plugin in plugins.iter_mut() {
        let name = plugin["name"].as_str().unwrap_or_default().to_string();
        if let Some((_, reference)) = published.iter().find(|(n, _)| *n == name) {
            plugin["oci"]["reference"] = reference.clone().into();
        }
    }
    values["verifyPlugins"] = serde_yaml::to_value(json!({
        "keys": [{"name": "release", "publicKey": public_key}]
    }))
    .unwrap();
    values["image"] = serde_yaml::to_value(json!({"repository": image.0, "tag": image.1})).unwrap();
    values["host"]["extraArgs"] = serde_yaml::to_value(json!([
        format!("--insecure-registry={registry}"),
        "--oci-poll-seconds=2"
    ]))
    .unwrap();
    values["host"]["logLevel"] = "info,windlass=debug".into();
    let path = dir.join("values.yaml");
    std::fs::write(&path, serde_yaml::to_string(&values).unwrap()).unwrap();
    path
}

/// `bytes` with a custom section appended: the same plugin, another digest (a new build).
fn rebuilt(bytes: &[u8], note: &str) -> Vec<u8> {
    fn leb(mut n: usize, out: &mut Vec<u8>) {
        loop {
            let byte = (n & 0x7f) as u8;
            n >>= 7;
            if n == 0 {
                out.push(byte);
                return;
            }
            out.push(byte | 0x80);
        }
    }
    let name = b"windlass-test-build";
    let mut body = Vec::new();
    leb(name.len(), &mut body);
    body.extend_from_slice(name);
    body.extend_from_slice(note.as_bytes());
    let mut out = bytes.to_vec();
    out.push(0);
    leb(body.len(), &mut out);
    out.extend_from_slice(&body);
    out
}

/// How long the chart's Pods may take to start, or the standby to take over: each host
/// compiles its plugins into its own `emptyDir` cache, the Python one for seconds.
const START: Duration = Duration::from_secs(240);

/// Polls `check` until it returns Some; after `limit`, fails naming `what`, with the last
/// warnings and errors of the chart's Pods (their logs are in `logs`).
async fn within<T, F: Future<Output = Option<T>>>(
    what: &str,
    limit: Duration,
    logs: &Path,
    mut check: impl FnMut() -> F,
) -> T {
    let deadline = std::time::Instant::now() + limit;
    loop {
        if let Some(value) = check().await {
            return value;
        }
        if std::time::Instant::now() > deadline {
            let log = host_logs(logs);
            let tail: Vec<&str> = log
                .lines()
                .filter(|l| l.contains("WARN") || l.contains("ERROR") || l.starts_with("==>"))
                .rev()
                .take(60)
                .collect();
            panic!(
                "timed out after {limit:?} waiting for {what}; the chart's Pods' warnings:\n{}",
                tail.into_iter().rev().collect::<Vec<_>>().join("\n")
            );
        }
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
}

/// Everything the chart's Pods wrote (the simulator's `<namespace>_<pod>.log` files).
fn host_logs(dir: &Path) -> String {
    let mut out = String::new();
    for entry in std::fs::read_dir(dir).into_iter().flatten().flatten() {
        let path = entry.path();
        if path.extension().is_some_and(|e| e == "log") {
            out += &format!("==> {} <==\n", path.display());
            out += &std::fs::read_to_string(&path).unwrap_or_default();
        }
    }
    out
}

/// The processes running the chart's Pods (their binary is under `dir`, from the image), each
/// as (pid, its /proc/PID/status, its /proc/PID/mountinfo).
fn host_processes(dir: &Path) -> Vec<(u32, String, String)> {
    let images = dir.join("images");
    let mut found = Vec::new();
    for entry in std::fs::read_dir("/proc").into_iter().flatten().flatten() {
        let Some(pid) = entry
            .file_name()
            .to_str()
            .and_then(|s| s.parse::<u32>().ok())
        else {
            continue;
        };
        let cmdline = std::fs::read(entry.path().join("cmdline")).unwrap_or_default();
        let program = cmdline.split(|b| *b == 0).next().unwrap_or_default();
        if !Path::new(std::str::from_utf8(program).unwrap_or_default()).starts_with(&images) {
            continue;
        }
        let read =
            |file: &str| std::fs::read_to_string(entry.path().join(file)).unwrap_or_default();
        found.push((pid, read("status"), read("mountinfo")));
    }
    found
}

/// The host's image as `cargo xtask image` makes it — from the static binary CI builds
/// (`WINDLASS_IMAGE_BINARY`), else from this build's `windlass` — pushed to `registry` with
/// the project's client: the reference.
async fn push_host_image(registry: &crate::oci::Registry) -> (String, String) {
    let binary = std::env::var_os("WINDLASS_IMAGE_BINARY")
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from(env!("CARGO_BIN_EXE_windlass")));
    let bytes = std::fs::read(&binary).unwrap_or_else(|e| panic!("{}: {e}", binary.display()));
    let spec = windlass_image::Spec {
        version: env!("CARGO_PKG_VERSION").into(),
        revision: "install-test".into(),
        source: "https://example.com/windlass".into(),
        created: 1_796_256_000,
    };
    let image = tokio::task::spawn_blocking(move || windlass_image::build(&bytes, &spec))
        .await
        .unwrap()
        .expect("the image");
    let (repository, tag) = (registry.reference("windlass"), "install-test".to_string());
    let blobs = image
        .blobs()
        .into_iter()
        .map(|(b, d)| (bytes::Bytes::copy_from_slice(b), d))
        .collect();
    windlass::source::oci::Client::new(registry.options())
        .push_blobs_and_manifest(
            &format!("{repository}:{tag}"),
            blobs,
            image.manifest.clone(),
            windlass_image::MANIFEST_MEDIA_TYPE,
        )
        .await
        .expect("the image pushed");
    (repository, tag)
}

fn sampledbs(client: kube::Client) -> Api<DynamicObject> {
    let gvk = GroupVersionKind::gvk("samples.windlass.dev", "v1alpha1", "SampleDB");
    Api::namespaced_with(
        client,
        APP,
        &ApiResource::from_gvk_with_plural(&gvk, "sampledbs"),
    )
}

/// What the chart's ServiceAccount may do: (verb, resource, namespace, allowed). The table in
/// docs/INSTALL.md is this list.
const CAN_I: &[(&str, &str, &str, bool)] = &[
    // What the SampleDB operator needs.
    ("create", "statefulsets.apps", APP, true),
    ("patch", "services", APP, true),
    ("get", "secrets", APP, true),
    ("delete", "configmaps", APP, true),
    ("create", "cronjobs.batch", APP, true),
    (
        "create",
        "volumesnapshots.snapshot.storage.k8s.io",
        APP,
        true,
    ),
    ("delete", "persistentvolumeclaims", APP, true),
    ("patch", "pods", APP, true),
    ("patch", "sampledbs.samples.windlass.dev", APP, true),
    (
        "update",
        "sampledbs.samples.windlass.dev/finalizers",
        APP,
        true,
    ),
    ("patch", "sampledbs.samples.windlass.dev/status", APP, true),
    ("create", "events.events.k8s.io", APP, true),
    ("list", "wasmplugins.windlass.dev", "", true),
    ("patch", "wasmplugins.windlass.dev/status", "", true),
    // The host's finalizer on WasmPlugins.
    ("patch", "wasmplugins.windlass.dev", "", true),
    ("create", "leases.coordination.k8s.io", NAMESPACE, true),
    // What the chaos plugin's CronJob needs: its account, a Role that may delete Pods (which
    // the host may create only if it holds that itself) and the binding.
    ("delete", "pods", APP, true),
    ("create", "serviceaccounts", APP, true),
    ("create", "roles.rbac.authorization.k8s.io", APP, true),
    (
        "create",
        "rolebindings.rbac.authorization.k8s.io",
        APP,
        true,
    ),
    // What it must not.
    ("create", "pods", APP, false),
    ("create", "persistentvolumeclaims", APP, false),
    ("update", "persistentvolumeclaims", APP, false),
    ("create", "serviceaccounts/token", APP, false),
    (
        "create",
        "clusterrolebindings.rbac.authorization.k8s.io",
        "",
        false,
    ),
    (
        "escalate",
        "clusterroles.rbac.authorization.k8s.io",
        "",
        false,
    ),
    ("create", "deployments.apps", APP, false),
    ("create", "wasmplugins.windlass.dev", "", false),
    ("delete", "wasmplugins.windlass.dev", "", false),
    ("delete", "namespaces", "", false),
    ("get", "nodes", "", false),
    (
        "create",
        "validatingwebhookconfigurations.admissionregistration.k8s.io",
        "",
        false,
    ),
    (
        "delete",
        "customresourcedefinitions.apiextensions.k8s.io",
        "",
        false,
    ),
    // Parents may live in any namespace, so the chart grants its managed kinds cluster-wide:
    // the host can read every Secret of the cluster. The policy, not RBAC, keeps them from
    // plugins that are not granted Secrets (docs/SECURITY.md).
    ("get", "secrets", "kube-system", true),
];

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_chart_installed_on_a_real_api_server_runs_the_sampledb_operator_on_its_own_rbac() {
    let plane = ControlPlane::start()
        .await
        .expect("the control plane starts");
    let dir = tempfile::tempdir().unwrap();
    let cache = dir.path().join("kube-cache");
    let k = |args: Vec<String>, stdin: Option<String>| {
        let plane = &plane;
        let cache = cache.clone();
        async move {
            let args: Vec<&str> = args.iter().map(String::as_str).collect();
            kubectl_as(plane, &cache, &args, stdin)
                .await
                .unwrap_or_else(|e| panic!("{e}"))
        }
    };
    let args = |a: &[&str]| a.iter().map(|s| s.to_string()).collect::<Vec<_>>();

    // The namespaces; the SampleDB's enforces Pod Security `restricted`.
    k(args(&["create", "namespace", NAMESPACE]), None).await;
    k(
        args(&["apply", "-f", "-"]),
        Some(format!(
            "apiVersion: v1\nkind: Namespace\nmetadata:\n  name: {APP}\n  labels:\n    \
             pod-security.kubernetes.io/enforce: restricted\n    \
             pod-security.kubernetes.io/warn: restricted\n"
        )),
    )
    .await;
    // The CSI snapshot API (a cluster has it with its snapshot controller).
    let admin = plane.client().await.unwrap();
    windlass_devcluster::simulator::remote::install_snapshot_api(&admin)
        .await
        .expect("the snapshot API installed");
    // The Rust plugins, gzip-compressed as docs/INSTALL.md says, in ConfigMaps the preset names.
    for (name, path) in [
        ("sampledb-storage", guests::STORAGE),
        ("sampledb-backup", guests::BACKUP),
        ("sampledb-upgrade", guests::UPGRADE),
    ] {
        let packed = dir.path().join(format!("{name}.wasm.gz"));
        let gzip = std::process::Command::new("gzip")
            .args(["-9nc", path])
            .output()
            .expect("gzip runs");
        assert!(gzip.status.success(), "gzip {path}: {}", gzip.status);
        std::fs::write(&packed, &gzip.stdout).unwrap();
        k(
            vec![
                "-n".into(),
                NAMESPACE.into(),
                "create".into(),
                "configmap".into(),
                name.into(),
                format!("--from-file=plugin.wasm={}", packed.display()),
            ],
            None,
        )
        .await;
    }

    // The preset's other three plugins (Python, JavaScript, Go) in a registry, signed; the
    // release verifies every OCI plugin with the key.
    let registry = crate::oci::Registry::start(false);
    let key = windlass::source::oci::SigningKey::generate().expect("a signing key");
    let published = publish_oci_plugins(&registry, &key).await;
    let registry_host = windlass::source::oci::registry_of(&published[0].1).unwrap();
    let public_key = key.public_key("release").to_pem();

    // The host's image, in the same registry.
    let image = push_host_image(&registry).await;
    let registry_port: u16 = registry_host
        .rsplit_once(':')
        .and_then(|(_, port)| port.parse().ok())
        .expect("the registry's port");

    // No kubelet here: the devcluster's workload simulator plays it over the API, and runs the
    // chart's own Pods as processes from the image (each in network and mount namespaces of
    // its own, with its ServiceAccount's token where the projected volume puts it).
    std::fs::set_permissions(dir.path(), std::fs::Permissions::from_mode(0o755)).unwrap();
    let pods_dir = dir.path().join("pods");
    let simulator = tokio::spawn(windlass_devcluster::simulator::remote::run_with_pods(
        plane.config().await.expect("the admin's configuration"),
        windlass_devcluster::simulator::Config::from(&windlass_devcluster::Options::default()),
        Some(windlass_devcluster::simulator::processes::RunPods {
            selector: [
                ("app.kubernetes.io/name", "windlass"),
                ("app.kubernetes.io/instance", RELEASE),
            ]
            .into_iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect(),
            dir: pods_dir.clone(),
            forward_ports: vec![registry_port],
            plain_http: true,
        }),
    ));

    // helm install, for real (its CRDs too).
    let values = preset_with(dir.path(), &published, &public_key, &image, &registry_host);
    let installed = helm_release(&plane, "install", Some(&values), &[]).await;
    assert!(installed.contains("STATUS: deployed"), "{installed}");
    // The chart's notes say what to run next: the test, and the ConfigMaps its plugins need.
    assert!(
        installed.contains(&format!("helm test {RELEASE} -n {NAMESPACE}")),
        "{installed}"
    );
    for name in ["sampledb-storage", "sampledb-backup", "sampledb-upgrade"] {
        assert!(
            installed.contains(&format!("-n {NAMESPACE} create configmap {name} ")),
            "{installed}"
        );
    }

    let user = format!("system:serviceaccount:{NAMESPACE}:{ACCOUNT}");
    // The chart's Deployment, running: two replicas, one the leader.
    let deployments: Api<Deployment> = Api::namespaced(admin.clone(), NAMESPACE);
    within(
        "the chart's Deployment 2/2 ready",
        START,
        &pods_dir,
        || async {
            let d = deployments.get("wl-windlass").await.ok()?;
            let status = d.status?;
            (status.ready_replicas == Some(2) && status.updated_replicas == Some(2)).then_some(())
        },
    )
    .await;
    // Each runs as the chart says: user and group 65532, a read-only root, the cache (an
    // emptyDir) writable, the ServiceAccount token where the projected volume puts it.
    let processes = host_processes(&pods_dir);
    assert_eq!(processes.len(), 2, "two host processes: {processes:?}");
    for (pid, status, mountinfo) in &processes {
        let ids = |field: &str| {
            status
                .lines()
                .find_map(|l| l.strip_prefix(field))
                .map(|v| v.split_whitespace().map(str::to_string).collect::<Vec<_>>())
                .unwrap_or_default()
        };
        assert_eq!(ids("Uid:"), vec!["65532"; 4], "process {pid}: {status}");
        assert_eq!(ids("Gid:"), vec!["65532"; 4], "process {pid}: {status}");
        // mountinfo: id parent major:minor root mountpoint options ...
        let options = |mountpoint: &str| {
            mountinfo
                .lines()
                .filter(|l| l.split(' ').nth(4) == Some(mountpoint))
                .last()
                .and_then(|l| l.split(' ').nth(5))
                .unwrap_or_default()
                .to_string()
        };
        assert!(
            options("/").starts_with("ro"),
            "process {pid}: / is {}",
            options("/")
        );
        assert!(
            options("/var/cache/windlass").starts_with("rw"),
            "process {pid}: the cache is {}",
            options("/var/cache/windlass")
        );
        // (/var/run is a link to /run here: the mount point is the resolved path.)
        let token_dir = std::fs::canonicalize("/var/run/secrets/kubernetes.io/serviceaccount")
            .expect("the token's mount point");
        assert!(
            options(&token_dir.display().to_string()).starts_with("ro"),
            "process {pid}: no ServiceAccount volume:\n{mountinfo}"
        );
    }
    let host_pods: Api<Pod> = Api::namespaced(admin.clone(), NAMESPACE);
    let leases: Api<Lease> = Api::namespaced(admin.clone(), NAMESPACE);
    let leader = within(
        "a leader among the chart's Pods",
        START,
        &pods_dir,
        || async {
            let holder = leases
                .get("windlass-leader")
                .await
                .ok()?
                .spec?
                .holder_identity?;
            host_pods.get_opt(&holder).await.ok()?.map(|_| holder)
        },
    )
    .await;
    // Every WasmPlugin Ready.
    let gvk = GroupVersionKind::gvk("windlass.dev", "v1alpha1", "WasmPlugin");
    let plugins: Api<DynamicObject> = Api::all_with(
        admin.clone(),
        &ApiResource::from_gvk_with_plural(&gvk, "wasmplugins"),
    );
    for (name, _) in guests::SAMPLEDB {
        let name = format!("wl-{name}");
        within(
            &format!("WasmPlugin {name} Ready"),
            START,
            &pods_dir,
            || async {
                let wp = serde_json::to_value(plugins.get(&name).await.ok()?).ok()?;
                (condition(&wp, "Ready")?["status"] == "True").then_some(())
            },
        )
        .await;
    }

    // The backup volume and the SampleDB of the README.
    let example = |file: &str| {
        std::fs::read_to_string(root().join("examples").join(file))
            .unwrap()
            .replace("namespace: default", &format!("namespace: {APP}"))
    };
    k(
        args(&["apply", "-f", "-"]),
        Some(example("backup-volume.yaml")),
    )
    .await;
    k(args(&["apply", "-f", "-"]), Some(example("sampledb.yaml"))).await;
    let sdbs = sampledbs(admin.clone());
    let reconciled = eventually("the SampleDB Reconciled=True", || async {
        let sdb = serde_json::to_value(sdbs.get("example-database").await.ok()?).ok()?;
        let c = condition(&sdb, "Reconciled")?.clone();
        (c["status"] == "True").then_some(sdb)
    })
    .await;
    let uid = reconciled["metadata"]["uid"].as_str().unwrap().to_string();

    // Its children, each controlled by it; the StatefulSet, which holds the data while the
    // backup plugin has a finalize phase to run, held by the host instead (no owner).
    let owned = |o: &kube::api::ObjectMeta| {
        o.owner_references
            .iter()
            .flatten()
            .any(|r| r.uid == uid && r.controller == Some(true))
    };
    let ns = |c: &kube::Client| c.clone();
    let sts = Api::<StatefulSet>::namespaced(ns(&admin), APP)
        .get("example-database")
        .await
        .expect("the StatefulSet");
    assert!(sts.metadata.owner_references.is_none(), "held, not owned");
    assert_eq!(sts.labels().get("windlass.dev/parent-uid"), Some(&uid));
    for svc in ["example-database", "example-database-headless"] {
        let s = Api::<Service>::namespaced(ns(&admin), APP).get(svc).await;
        assert!(owned(&s.expect("a Service").metadata), "{svc}");
    }
    let cm = Api::<ConfigMap>::namespaced(ns(&admin), APP)
        .get("example-database-config")
        .await
        .expect("the ConfigMap");
    assert!(owned(&cm.metadata));
    let secret = Api::<Secret>::namespaced(ns(&admin), APP)
        .get("example-database-credentials")
        .await
        .expect("the Secret");
    assert!(owned(&secret.metadata));
    let cron = Api::<CronJob>::namespaced(ns(&admin), APP)
        .get("example-database-backup")
        .await
        .expect("the backup CronJob");
    assert!(owned(&cron.metadata));

    // The real StatefulSet controller made the first Pod, and Pod Security `restricted` let it
    // in (a refused Pod would never appear; the controller would record FailedCreate).
    let pods: Api<Pod> = Api::namespaced(admin.clone(), APP);
    let pod = eventually("the StatefulSet's first Pod", || async {
        pods.get_opt("example-database-0").await.ok().flatten()
    })
    .await;
    assert_eq!(
        pod.labels().get("windlass.dev/parent-uid"),
        Some(&uid),
        "the Pod carries the parent's label from the template"
    );
    // The StatefulSet controller brings up the replicas one by one as the simulated kubelet
    // makes each ready; the storage plugin reports the database Ready.
    let ready = eventually("the SampleDB in phase Ready", || async {
        let sdb = serde_json::to_value(sdbs.get("example-database").await.ok()?).ok()?;
        (sdb.pointer("/status/phase")? == "Ready").then_some(sdb)
    })
    .await;
    assert_eq!(ready["status"]["readyReplicas"], 3, "{ready}");

    // Chaos (the Go plugin, from the registry): its CronJob's Pod deletes the primary's Pod as
    // the database's own ServiceAccount, through the Role the plugin made (the simulator runs
    // kubectl with a token of that account), and the primary election (Python) picks another.
    let primary = ready["status"]["primary"]
        .as_str()
        .expect("a primary")
        .to_string();
    let primary_uid = pods
        .get(&primary)
        .await
        .expect("the primary's Pod")
        .uid()
        .expect("a uid");
    sdbs.patch(
        "example-database",
        &PatchParams::default(),
        &Patch::Merge(json!({"spec": {"chaos": {"killPrimaryEvery": "10m"}}})),
    )
    .await
    .expect("chaos on");
    let chaos_on = tokio::time::timeout(support::WAIT, async {
        loop {
            if let Ok(sdb) = sdbs.get("example-database").await
                && let Ok(sdb) = serde_json::to_value(sdb)
                && condition(&sdb, "Chaos").is_some_and(|c| c["status"] == "True")
            {
                return;
            }
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
    })
    .await;
    if chaos_on.is_err() {
        let sdb = serde_json::to_value(sdbs.get("example-database").await.ok()).unwrap_or_default();
        let log = host_logs(&pods_dir);
        let tail: Vec<&str> = log
            .lines()
            .filter(|l| l.contains("WARN") || l.contains("ERROR"))
            .rev()
            .take(30)
            .collect();
        panic!(
            "the Chaos condition never became True: {:#}\nthe host's warnings:\n{}",
            sdb["status"],
            tail.into_iter().rev().collect::<Vec<_>>().join("\n")
        );
    }
    let cron = Api::<CronJob>::namespaced(admin.clone(), APP)
        .get("example-database-chaos")
        .await
        .expect("the chaos CronJob");
    let template = cron.spec.expect("spec").job_template;
    let job: Job = serde_json::from_value(json!({
        "metadata": {"name": "example-database-chaos-now", "labels": template.metadata.and_then(|m| m.labels)},
        "spec": template.spec,
    }))
    .expect("a Job");
    Api::<Job>::namespaced(admin.clone(), APP)
        .create(&PostParams::default(), &job)
        .await
        .expect("the chaos Job (Pod Security restricted admits its Pod)");
    // The chaos Pod's kubectl succeeded: the Role the plugin made was enough.
    let chaos_pod = terminated_pod_of_job(&pods, "example-database-chaos-now").await;
    let status = chaos_pod.status.clone().unwrap_or_default();
    assert_eq!(
        status.phase.as_deref(),
        Some("Succeeded"),
        "the chaos Pod's kubectl: {:?}",
        status.container_statuses
    );
    // The primary's Pod went (the StatefulSet makes it again, under a new uid), and a ready
    // replica took over: the election knows the primary's Pod by uid, so the one made again
    // under its name is not the primary however fast it is back.
    eventually("the primary's Pod replaced after chaos", || async {
        let now = pods.get_opt(&primary).await.ok()?;
        now.is_none_or(|p| p.uid() != Some(primary_uid.clone()))
            .then_some(())
    })
    .await;
    eventually("another primary after chaos", || async {
        let sdb = serde_json::to_value(sdbs.get("example-database").await.ok()?).ok()?;
        let now = sdb.pointer("/status/primary")?.as_str()?;
        (now != primary).then_some(())
    })
    .await;
    eventually("all replicas ready after chaos", || async {
        let sdb = serde_json::to_value(sdbs.get("example-database").await.ok()?).ok()?;
        (sdb.pointer("/status/readyReplicas")? == 3).then_some(())
    })
    .await;

    // The leader's Pod deleted: its host frees the Lease on SIGTERM and another host takes it
    // — the standby, or the ReplicaSet's replacement Pod when it asks first (both are live
    // candidates; a standby polls every 250 ms) — well within the lease's 15 s. Everything
    // below is the new leader's work.
    let standby = within(
        "the standby among the chart's Pods",
        START,
        &pods_dir,
        || async {
            let list = host_pods
                .list(&ListParams::default().labels("app.kubernetes.io/name=windlass"))
                .await
                .ok()?;
            list.items
                .into_iter()
                .map(|p| p.name_any())
                .find(|name| *name != leader)
        },
    )
    .await;
    let deleted = std::time::Instant::now();
    host_pods
        .delete(&leader, &DeleteParams::default())
        .await
        .expect("the leader's Pod deleted");
    let new_leader = within(
        "another host holding the Lease",
        START,
        &pods_dir,
        || async {
            let holder = leases
                .get("windlass-leader")
                .await
                .ok()?
                .spec?
                .holder_identity?;
            if holder == leader {
                return None;
            }
            let pod = host_pods.get_opt(&holder).await.ok()??;
            pod.metadata.deletion_timestamp.is_none().then_some(holder)
        },
    )
    .await;
    let took = deleted.elapsed();
    println!(
        "the Lease moved from {leader} to {new_leader} ({}) in {took:?}",
        if new_leader == standby {
            "the standby"
        } else {
            "the replacement Pod"
        }
    );
    assert!(
        took < Duration::from_secs(15),
        "the Lease took {took:?} to move: the deleted leader did not free it"
    );
    within(
        "the leader's Pod gone, its process stopped",
        START,
        &pods_dir,
        || async {
            host_pods
                .get_opt(&leader)
                .await
                .ok()?
                .is_none()
                .then_some(())
        },
    )
    .await;
    within(
        "the chart's Deployment 2/2 ready again",
        START,
        &pods_dir,
        || async {
            let status = deployments.get("wl-windlass").await.ok()?.status?;
            (status.ready_replicas == Some(2)).then_some(())
        },
    )
    .await;

    // An upgrade: the pre-upgrade backup and the upgrade Job, then the StatefulSet rolls.
    sdbs.patch(
        "example-database",
        &PatchParams::default(),
        &Patch::Merge(json!({"spec": {"version": "17.0"}})),
    )
    .await
    .expect("SampleDB patched");
    eventually("the SampleDB running 17.0", || async {
        let sdb = serde_json::to_value(sdbs.get("example-database").await.ok()?).ok()?;
        (sdb.pointer("/status/currentVersion")? == "17.0").then_some(())
    })
    .await;

    // `helm upgrade` to a new build of the conventions plugin (signed like the others): the
    // WasmPlugin's reference changes and the host swaps the plugin in.
    let conventions = guests::SAMPLEDB
        .iter()
        .find(|(name, _)| *name == "sampledb-conventions")
        .expect("the conventions plugin")
        .1;
    let new_build = rebuilt(&std::fs::read(conventions).unwrap(), "0.1.1");
    let new_reference = registry.reference("windlass/sampledb-conventions:0.1.1");
    let oci_client = windlass::source::oci::Client::new(registry.options());
    let pushed = oci_client
        .push(&new_reference, &new_build, &plugin_runtime())
        .await
        .expect("the new build pushed");
    oci_client
        .sign(&new_reference, &key)
        .await
        .expect("the new build signed");
    let upgraded: Vec<(String, String)> = published
        .iter()
        .map(|(name, reference)| {
            if name == "sampledb-conventions" {
                (name.clone(), new_reference.clone())
            } else {
                (name.clone(), reference.clone())
            }
        })
        .collect();
    let values = preset_with(dir.path(), &upgraded, &public_key, &image, &registry_host);
    let out = helm_release(&plane, "upgrade", Some(&values), &[]).await;
    assert!(out.contains("STATUS: deployed"), "{out}");
    eventually("the new conventions build serving", || async {
        let wp = serde_json::to_value(plugins.get("wl-sampledb-conventions").await.ok()?).ok()?;
        (wp.pointer("/status/digest")? == pushed.layer_digest.as_str()).then_some(())
    })
    .await;

    // Deleted with `deletionPolicy: Snapshot`: a ready snapshot of each volume, then the
    // volumes go.
    sdbs.delete("example-database", &DeleteParams::default())
        .await
        .expect("SampleDB deleted");
    eventually("the SampleDB gone after its finalize phase", || async {
        sdbs.get_opt("example-database")
            .await
            .ok()?
            .is_none()
            .then_some(())
    })
    .await;
    let snapshots: Api<DynamicObject> = Api::namespaced_with(
        admin.clone(),
        APP,
        &ApiResource::from_gvk_with_plural(
            &GroupVersionKind::gvk("snapshot.storage.k8s.io", "v1", "VolumeSnapshot"),
            "volumesnapshots",
        ),
    );
    for i in 0..3 {
        let name = sampledb_api::names::final_snapshot(&format!("data-example-database-{i}"), &uid);
        let snapshot = snapshots
            .get(&name)
            .await
            .unwrap_or_else(|e| panic!("snapshot {name}: {e}"));
        assert_eq!(snapshot.data["status"]["readyToUse"], true, "{name}");
    }
    let claims: Api<PersistentVolumeClaim> = Api::namespaced(admin.clone(), APP);
    eventually("the data volumes gone", || async {
        let left = claims.list(&ListParams::default()).await.ok()?;
        (!left
            .items
            .iter()
            .any(|c| c.name_any().starts_with("data-example-database-")))
        .then_some(())
    })
    .await;

    // Nothing the host asked for was forbidden (it keeps running: `helm uninstall` below needs
    // it to release the WasmPlugins' finalizers).
    tokio::time::sleep(Duration::from_secs(2)).await;
    let log = host_logs(&pods_dir);
    let forbidden: Vec<&str> = log
        .lines()
        .filter(|l| l.to_lowercase().contains("forbidden"))
        .collect();
    assert!(
        forbidden.is_empty(),
        "the host was refused by the chart's RBAC:\n{}",
        forbidden.join("\n")
    );

    // Least privilege, as the API server decides it.
    let mut wrong = Vec::new();
    for (verb, resource, namespace, allowed) in CAN_I {
        let mut a = match resource.split_once('/') {
            Some((resource, sub)) => args(&[
                "auth",
                "can-i",
                verb,
                resource,
                &format!("--subresource={sub}"),
                "--as",
                &user,
            ]),
            None => args(&["auth", "can-i", verb, resource, "--as", &user]),
        };
        if namespace.is_empty() {
            a.push("--all-namespaces".into());
        } else {
            a.extend(["-n".into(), namespace.to_string()]);
        }
        let argv: Vec<&str> = a.iter().map(String::as_str).collect();
        // can-i exits 1 for "no": the answer is on stdout either way.
        let answer = match kubectl_as(&plane, &cache, &argv, None).await {
            Ok(out) => out,
            Err(e) => e,
        };
        // Only a `yes` or a `no` is an answer: an error (a typo in the resource, an API server
        // that refused the review) fails the row whatever was expected.
        let said = answer
            .lines()
            .map(str::trim)
            .find(|l| *l == "yes" || *l == "no");
        if said != Some(if *allowed { "yes" } else { "no" }) {
            wrong.push(format!(
                "{verb} {resource} in {namespace:?}: expected {allowed}, got {}",
                answer.trim()
            ));
        }
    }
    assert!(wrong.is_empty(), "{}", wrong.join("\n"));

    // Uninstalling as docs/INSTALL.md says: the parents are gone; the WasmPlugins next, while
    // the host runs (it lets each go, no parent being left to finalize); then `helm uninstall`,
    // which leaves the databases' snapshots.
    for (name, _) in guests::SAMPLEDB {
        plugins
            .delete(&format!("wl-{name}"), &DeleteParams::default())
            .await
            .unwrap_or_else(|e| panic!("deleting WasmPlugin wl-{name}: {e}"));
    }
    eventually("the WasmPlugins gone", || async {
        let left = plugins.list(&ListParams::default()).await.ok()?;
        left.items.is_empty().then_some(())
    })
    .await;
    let out = helm_release(&plane, "uninstall", None, &["--wait"]).await;
    assert!(out.contains("uninstalled"), "{out}");
    for i in 0..3 {
        let name = sampledb_api::names::final_snapshot(&format!("data-example-database-{i}"), &uid);
        let snapshot = snapshots
            .get(&name)
            .await
            .unwrap_or_else(|e| panic!("snapshot {name} after helm uninstall: {e}"));
        assert_eq!(snapshot.data["status"]["readyToUse"], true, "{name}");
    }
    // The chart's Pods went with the release: their processes stopped, the Pods removed.
    within("the chart's Pods gone", START, &pods_dir, || async {
        let left = host_pods
            .list(&ListParams::default().labels("app.kubernetes.io/name=windlass"))
            .await
            .ok()?;
        left.items.is_empty().then_some(())
    })
    .await;
    simulator.abort();
}
