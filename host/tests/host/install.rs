//! The Helm chart installed for real: `helm install` with the SampleDB preset — all six
//! plugins, the Python, JavaScript and Go ones from an OCI registry (the real
//! `docker-registry`), signed, and the host verifying every OCI plugin with the release's
//! trusted key (`verifyPlugins`, passed as the chart's Deployment passes it) — into a
//! real kube-apiserver (`windlass_kubeplane`: RBAC, Pod Security,
//! OwnerReferencesPermissionEnforcement, the workload controllers), then `windlass run` out of
//! cluster with a token of the chart's own ServiceAccount (a TokenRequest), so every request
//! the host makes goes through the chart's RBAC. A SampleDB in a namespace that enforces the
//! `restricted` Pod Security level gets its children, the real StatefulSet controller gets its
//! Pods past admission, the database becomes Ready (the workload simulator plays the kubelet
//! over the API), chaos kills its primary's Pod (the chaos Pod's kubectl runs as the database's
//! own ServiceAccount, through the Role the plugin made) and all replicas are ready again, it is upgraded
//! (backup and upgrade Jobs, a rolling StatefulSet), `helm upgrade` to a new build of a plugin
//! swaps it, and it is deleted (a snapshot of each volume before the volumes go); the host's
//! log holds no `forbidden`. Then `kubectl auth can-i --as` the ServiceAccount: what the host
//! can and cannot do (the table in docs/INSTALL.md). Last, the uninstall docs/INSTALL.md
//! describes: the WasmPlugins while the host runs, then `helm uninstall`, which leaves the
//! databases' snapshots.
//!
//! What this test does not do: run the chart's Deployment itself (its Pods, probes and
//! two-replica election; the host runs out of cluster with the chart's token instead).

use std::{
    path::{Path, PathBuf},
    process::{Child, Command, Stdio},
    time::Duration,
};

use k8s_openapi::api::{
    apps::v1::StatefulSet,
    authentication::v1::TokenRequest,
    batch::v1::{CronJob, Job},
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

/// The preset's values with its OCI plugins' references pointing at `published`, and every OCI
/// plugin verified with `public_key`.
fn preset_with(dir: &Path, published: &[(String, String)], public_key: &str) -> PathBuf {
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

    // The preset's other three plugins (Python, JavaScript, Go) in a registry, signed; the
    // release verifies every OCI plugin with the key.
    let registry = crate::oci::Registry::start(false);
    let key = windlass::source::oci::SigningKey::generate().expect("a signing key");
    let published = publish_oci_plugins(&registry, &key).await;
    let registry_host = windlass::source::oci::registry_of(&published[0].1).unwrap();
    let public_key = key.public_key("release").to_pem();

    // helm install, for real (its CRDs too).
    let values = preset_with(dir.path(), &published, &public_key);
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

    // No kubelet here: the devcluster's workload simulator plays it over the API.
    let simulator = tokio::spawn(windlass_devcluster::simulator::remote::run(
        plane.config().await.expect("the admin's configuration"),
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
    // The chart's trust policy, as its Deployment would get it: the ConfigMap's keys where the
    // volume would put them, and the Deployment's own `--trusted-key` flags pointing there.
    let keys_dir = dir.path().join("trusted-keys");
    std::fs::create_dir_all(&keys_dir).unwrap();
    let trusted = Api::<ConfigMap>::namespaced(admin.clone(), NAMESPACE)
        .get("wl-windlass-trusted-keys")
        .await
        .expect("the chart's trusted keys ConfigMap");
    for (file, pem) in trusted.data.unwrap_or_default() {
        std::fs::write(keys_dir.join(file), pem).unwrap();
    }
    let deployment =
        Api::<k8s_openapi::api::apps::v1::Deployment>::namespaced(admin.clone(), NAMESPACE)
            .get("wl-windlass")
            .await
            .expect("the chart's Deployment");
    let trust_flags: Vec<String> = deployment
        .spec
        .and_then(|s| s.template.spec)
        .map(|p| p.containers[0].args.clone().unwrap_or_default())
        .unwrap_or_default()
        .into_iter()
        .filter_map(|a| {
            a.strip_prefix("--trusted-key=/etc/windlass/trusted-keys/")
                .map(|file| format!("--trusted-key={}", keys_dir.join(file).display()))
        })
        .collect();
    assert_eq!(trust_flags.len(), 1, "one key, one flag");
    let log_path = dir.path().join("windlass.log");
    let log = std::fs::File::create(&log_path).unwrap();
    let host = Host(
        Command::new(env!("CARGO_BIN_EXE_windlass"))
            .arg("--cache-dir")
            .arg(plugin_cache())
            .arg("run")
            .args([
                "--insecure-registry",
                &registry_host,
                "--oci-poll-seconds",
                "2",
            ])
            .args(&trust_flags)
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
    for (name, _) in guests::SAMPLEDB {
        let name = format!("wl-{name}");
        eventually(&format!("WasmPlugin {name} Ready"), || async {
            let wp = serde_json::to_value(plugins.get(&name).await.ok()?).ok()?;
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
        let log = std::fs::read_to_string(&log_path).unwrap_or_default();
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
    let chaos_pod = eventually("the chaos Pod terminated", || async {
        let list = pods
            .list(&ListParams::default().labels("job-name=example-database-chaos-now"))
            .await
            .ok()?;
        list.items.into_iter().find(|p| {
            p.status
                .as_ref()
                .and_then(|s| s.phase.as_deref())
                .is_some_and(|phase| phase == "Succeeded" || phase == "Failed")
        })
    })
    .await;
    let status = chaos_pod.status.clone().unwrap_or_default();
    assert_eq!(
        status.phase.as_deref(),
        Some("Succeeded"),
        "the chaos Pod's kubectl: {:?}",
        status.container_statuses
    );
    // The primary's Pod went (the StatefulSet makes it again, under a new uid); whether the
    // election then moves the primary depends on timing, and the SampleDB end-to-end test
    // covers it.
    eventually("the primary's Pod replaced after chaos", || async {
        let now = pods.get_opt(&primary).await.ok()?;
        now.is_none_or(|p| p.uid() != Some(primary_uid.clone()))
            .then_some(())
    })
    .await;
    eventually("all replicas ready after chaos", || async {
        let sdb = serde_json::to_value(sdbs.get("example-database").await.ok()?).ok()?;
        (sdb.pointer("/status/readyReplicas")? == 3).then_some(())
    })
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
    let values = preset_with(dir.path(), &upgraded, &public_key);
    let mut upgrade = Command::new(helm());
    upgrade
        .arg("upgrade")
        .arg(RELEASE)
        .arg(root().join("deploy/helm/windlass"))
        .args(["-n", NAMESPACE])
        .arg("-f")
        .arg(&values)
        .arg("--kubeconfig")
        .arg(plane.kubeconfig());
    let out = tokio::task::spawn_blocking(move || try_run(&mut upgrade, None))
        .await
        .unwrap()
        .unwrap_or_else(|e| panic!("helm upgrade: {e}"));
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
    let mut uninstall = Command::new(helm());
    uninstall
        .arg("uninstall")
        .arg(RELEASE)
        .args(["-n", NAMESPACE, "--wait"])
        .arg("--kubeconfig")
        .arg(plane.kubeconfig());
    let out = tokio::task::spawn_blocking(move || try_run(&mut uninstall, None))
        .await
        .unwrap()
        .unwrap_or_else(|e| panic!("helm uninstall: {e}"));
    assert!(out.contains("uninstalled"), "{out}");
    for i in 0..3 {
        let name = sampledb_api::names::final_snapshot(&format!("data-example-database-{i}"), &uid);
        let snapshot = snapshots
            .get(&name)
            .await
            .unwrap_or_else(|e| panic!("snapshot {name} after helm uninstall: {e}"));
        assert_eq!(snapshot.data["status"]["readyToUse"], true, "{name}");
    }
    simulator.abort();
    drop(host);
}
