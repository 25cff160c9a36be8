//! The Helm chart installed for real: `helm install` with the SampleDB preset into a real
//! kube-apiserver (`windlass_kubeplane`: RBAC, Pod Security, OwnerReferencesPermissionEnforcement,
//! the workload controllers), then `windlass run` out of cluster with a token of the chart's own
//! ServiceAccount (a TokenRequest), so every request the host makes goes through the chart's
//! RBAC. A SampleDB in a namespace that enforces the `restricted` Pod Security level gets its
//! children, the real StatefulSet controller gets its Pods past admission, the database
//! becomes Ready (the workload simulator plays the kubelet over the API), is upgraded (backup
//! and upgrade Jobs, a rolling StatefulSet) and deleted (a snapshot of each volume before the
//! volumes go), and the host's log holds no `forbidden`. Then `kubectl auth can-i --as` the ServiceAccount: what the host can and
//! cannot do (the table in docs/INSTALL.md).
//!
//! The preset's Python and JavaScript plugins come from an OCI registry, which this test does
//! not run: it installs the preset's three Rust plugins (from ConfigMaps), unchanged.

use std::{
    path::{Path, PathBuf},
    process::{Child, Command, Stdio},
    time::Duration,
};

use k8s_openapi::api::{
    apps::v1::StatefulSet,
    authentication::v1::TokenRequest,
    batch::v1::CronJob,
    core::v1::{ConfigMap, PersistentVolumeClaim, Pod, Secret, Service, ServiceAccount},
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
    condition, eventually,
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

/// The preset's values with only the plugins loaded from ConfigMaps.
fn preset_without_oci_plugins(dir: &Path) -> PathBuf {
    let preset = root().join("deploy/helm/windlass/values-sampledb.yaml");
    let mut values: serde_yaml::Value =
        serde_yaml::from_str(&std::fs::read_to_string(preset).unwrap()).unwrap();
    let plugins = values["plugins"].as_sequence_mut().expect("plugins");
    plugins.retain(|p| p.get("oci").is_none());
    assert_eq!(plugins.len(), 3, "the preset's three Rust plugins");
    let path = dir.join("values.yaml");
    std::fs::write(&path, serde_yaml::to_string(&values).unwrap()).unwrap();
    path
}

/// `windlass run`, killed when dropped.
struct Host(Child);

impl Drop for Host {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
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
    // The Rust plugins, in ConfigMaps the preset names.
    for (name, path) in [
        ("sampledb-storage", guests::STORAGE),
        ("sampledb-backup", guests::BACKUP),
        ("sampledb-upgrade", guests::UPGRADE),
    ] {
        k(
            vec![
                "-n".into(),
                NAMESPACE.into(),
                "create".into(),
                "configmap".into(),
                name.into(),
                format!("--from-file=plugin.wasm={path}"),
            ],
            None,
        )
        .await;
    }

    // helm install, for real (its CRDs too).
    let values = preset_without_oci_plugins(dir.path());
    let mut install = Command::new(helm());
    install
        .arg("install")
        .arg(RELEASE)
        .arg(root().join("deploy/helm/windlass"))
        .args(["-n", NAMESPACE])
        .arg("-f")
        .arg(&values)
        .arg("--kubeconfig")
        .arg(plane.kubeconfig());
    let installed = tokio::task::spawn_blocking(move || try_run(&mut install, None))
        .await
        .unwrap()
        .unwrap_or_else(|e| panic!("helm install: {e}"));
    assert!(installed.contains("STATUS: deployed"), "{installed}");

    // No kubelet here: the devcluster's workload simulator plays it over the API.
    let simulator = tokio::spawn(windlass_devcluster::simulator::remote::run(
        admin.clone(),
        windlass_devcluster::simulator::Config::from(&windlass_devcluster::Options::default()),
    ));

    // A token of the chart's ServiceAccount, and `windlass run` with it.
    let token = Api::<ServiceAccount>::namespaced(admin.clone(), NAMESPACE)
        .create_token_request(ACCOUNT, &PostParams::default(), &TokenRequest::default())
        .await
        .expect("a token for the chart's ServiceAccount")
        .status
        .expect("a token")
        .token;
    let sa_kubeconfig = dir.path().join("sa.kubeconfig");
    let user = format!("system:serviceaccount:{NAMESPACE}:{ACCOUNT}");
    plane
        .write_kubeconfig(&sa_kubeconfig, &user, &token)
        .unwrap();
    let log_path = dir.path().join("windlass.log");
    let log = std::fs::File::create(&log_path).unwrap();
    let host = Host(
        Command::new(env!("CARGO_BIN_EXE_windlass"))
            .arg("run")
            .arg("--kubeconfig")
            .arg(&sa_kubeconfig)
            .args(["--namespace", NAMESPACE, "--service-account", ACCOUNT])
            .args(["--identity", "install-test", "--admin-addr", "127.0.0.1:0"])
            .env("RUST_LOG", "info,windlass=debug")
            .stdout(log.try_clone().unwrap())
            .stderr(log)
            .stdin(Stdio::null())
            .spawn()
            .expect("windlass run starts"),
    );

    // Every WasmPlugin Ready.
    let gvk = GroupVersionKind::gvk("windlass.dev", "v1alpha1", "WasmPlugin");
    let plugins: Api<DynamicObject> = Api::all_with(
        admin.clone(),
        &ApiResource::from_gvk_with_plural(&gvk, "wasmplugins"),
    );
    for name in [
        "wl-sampledb-storage",
        "wl-sampledb-backup",
        "wl-sampledb-upgrade",
    ] {
        eventually(&format!("WasmPlugin {name} Ready"), || async {
            let wp = serde_json::to_value(plugins.get(name).await.ok()?).ok()?;
            (condition(&wp, "Ready")?["status"] == "True").then_some(())
        })
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
    simulator.abort();

    // Nothing the host asked for was forbidden.
    tokio::time::sleep(Duration::from_secs(2)).await;
    drop(host);
    let log = std::fs::read_to_string(&log_path).unwrap();
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
        let yes = answer.lines().any(|l| l.trim() == "yes");
        if yes != *allowed {
            wrong.push(format!(
                "{verb} {resource} in {namespace:?}: expected {allowed}, got {}",
                answer.trim()
            ));
        }
    }
    assert!(wrong.is_empty(), "{}", wrong.join("\n"));
}
