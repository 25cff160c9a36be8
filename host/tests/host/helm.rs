//! The Helm chart (`deploy/helm/windlass`): `helm lint`, `helm template` with the default values
//! and the SampleDB preset, and the rendered manifests applied to the devcluster with
//! `kubectl apply --server-side` (CRDs first), so every object is one an API server accepts.
//! The devcluster checks custom resources (WasmPlugins) against their CRD schema but keeps
//! built-in objects as sent, so those also round-trip through their k8s-openapi types, which
//! names any field a real API server would drop.
//!
//! helm comes from `$HELM` or the cache `deploy/helm/get-helm.sh` installs into; `cargo xtask ci`
//! runs that script. A missing helm fails these tests: a chart nobody rendered is not tested.

use std::{
    path::{Path, PathBuf},
    process::Command,
};

use k8s_openapi::api::{
    apps::v1::Deployment,
    core::v1::{Pod, Service, ServiceAccount},
    rbac::v1::{ClusterRole, ClusterRoleBinding, PolicyRule, Role, RoleBinding},
};
use kube::{
    Api, Client,
    api::DynamicObject,
    core::{ApiResource, GroupVersionKind},
};
use serde::{Deserialize as _, Serialize, de::DeserializeOwned};
use serde_json::{Value, json};
use windlass::crd::WasmPlugin;
use windlass_devcluster::{DevCluster, Options};

use crate::support;
use support::tools::{helm, kubectl, run, try_run};

pub const NAMESPACE: &str = "windlass-system";
pub const RELEASE: &str = "wl";

pub fn root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .expect("host/ lives in the workspace root")
        .to_path_buf()
}

fn chart() -> PathBuf {
    root().join("deploy/helm/windlass")
}

/// `helm template` of the chart with the given values files and `--set`s: what `helm install`
/// creates, so without the `helm test` hooks (`test_hooks`).
pub fn template(values: &[&Path], sets: &[&str]) -> Result<String, String> {
    render(values, sets, &["--skip-tests"])
}

/// The chart's `helm test` Pod alone, rendered with `sets`.
fn test_hook(sets: &[&str]) -> Result<String, String> {
    render(&[], sets, &["--show-only", "templates/tests/answers.yaml"])
}

fn render(values: &[&Path], sets: &[&str], flags: &[&str]) -> Result<String, String> {
    let mut cmd = Command::new(helm());
    cmd.args(["template", RELEASE])
        .args(flags)
        .arg(chart())
        .args(["--namespace", NAMESPACE]);
    for v in values {
        cmd.arg("-f").arg(v);
    }
    for s in sets {
        cmd.args(["--set", s]);
    }
    try_run(&mut cmd, None)
}

fn sampledb_values() -> PathBuf {
    chart().join("values-sampledb.yaml")
}

/// A devcluster with the chart's CRDs and the release namespace, and a kubeconfig for kubectl.
struct Cluster {
    cluster: DevCluster,
    dir: tempfile::TempDir,
}

impl Cluster {
    async fn start() -> Self {
        let cluster = DevCluster::start(Options::default())
            .await
            .expect("the devcluster starts");
        let dir = tempfile::tempdir().expect("a temporary directory");
        cluster
            .write_kubeconfig(&dir.path().join("kubeconfig"))
            .expect("the kubeconfig is written");
        let this = Self { cluster, dir };
        let crds =
            std::fs::read_to_string(chart().join("crds/crds.yaml")).expect("the chart's CRDs");
        this.apply(crds).await;
        // Applied rather than `kubectl create namespace`, which sends protobuf: the devcluster
        // speaks JSON (and apply-patch YAML) only.
        this.apply(format!(
            "apiVersion: v1\nkind: Namespace\nmetadata:\n  name: {NAMESPACE}\n"
        ))
        .await;
        this
    }

    fn client(&self) -> Client {
        self.cluster.client()
    }

    /// Runs kubectl against the devcluster (off the async workers: the server runs on them).
    async fn kubectl(&self, args: &[&str], stdin: Option<String>) -> String {
        let mut cmd = Command::new(kubectl());
        cmd.arg("--kubeconfig")
            .arg(self.dir.path().join("kubeconfig"))
            // Discovery is cached per server URL; keep it out of $HOME.
            .arg("--cache-dir")
            .arg(self.dir.path().join("kube-cache"))
            .args(args);
        tokio::task::spawn_blocking(move || try_run(&mut cmd, stdin.as_deref()))
            .await
            .expect("the kubectl task runs")
            .unwrap_or_else(|e| panic!("{e}"))
    }

    async fn apply(&self, manifests: String) -> String {
        self.kubectl(
            &[
                "apply",
                "--server-side",
                "--field-manager=helm-test",
                "-f",
                "-",
            ],
            Some(manifests),
        )
        .await
    }

    async fn shutdown(self) {
        self.cluster.shutdown().await;
    }
}

fn wasmplugins(client: Client) -> Api<DynamicObject> {
    let gvk = GroupVersionKind::gvk("windlass.dev", "v1alpha1", "WasmPlugin");
    Api::all_with(
        client,
        &ApiResource::from_gvk_with_plural(&gvk, "wasmplugins"),
    )
}

/// The rules of a role that cover `group`/`resource`, flattened to verbs.
fn verbs_on(rules: &[PolicyRule], group: &str, resource: &str) -> Vec<String> {
    rules
        .iter()
        .filter(|r| {
            r.api_groups.iter().flatten().any(|g| g == group)
                && r.resources.iter().flatten().any(|x| x == resource)
        })
        .flat_map(|r| r.verbs.clone())
        .collect()
}

#[test]
fn the_chart_lints_with_the_default_values_and_the_sampledb_preset() {
    let out = run(Command::new(helm()).args(["lint", "--strict"]).arg(chart()));
    assert!(out.contains("0 chart(s) failed"), "{out}");
    let out = run(Command::new(helm())
        .args(["lint", "--strict"])
        .arg(chart())
        .arg("-f")
        .arg(sampledb_values()));
    assert!(out.contains("0 chart(s) failed"), "{out}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_default_values_render_a_hardened_deployment_the_devcluster_accepts() {
    let manifests = template(&[], &[]).expect("helm template with the default values");
    let env = Cluster::start().await;
    let applied = env.apply(manifests).await;
    assert!(
        applied.contains("deployment.apps/wl-windlass serverside-applied"),
        "{applied}"
    );

    let deployments: Api<Deployment> = Api::namespaced(env.client(), NAMESPACE);
    let deployment = deployments
        .get("wl-windlass")
        .await
        .expect("the Deployment exists");
    let spec = deployment.spec.expect("a spec");
    assert_eq!(spec.replicas, Some(2));
    let pod = spec.template.spec.expect("a pod spec");
    let pod_security = pod.security_context.expect("a pod securityContext");
    assert_eq!(pod_security.run_as_non_root, Some(true));
    assert_eq!(pod_security.run_as_user, Some(65532));
    assert_eq!(
        pod_security
            .seccomp_profile
            .expect("a seccomp profile")
            .type_,
        "RuntimeDefault"
    );
    let container = &pod.containers[0];
    let security = container
        .security_context
        .clone()
        .expect("a container securityContext");
    assert_eq!(security.read_only_root_filesystem, Some(true));
    assert_eq!(security.allow_privilege_escalation, Some(false));
    assert_eq!(
        security.capabilities.expect("capabilities").drop,
        Some(vec!["ALL".into()])
    );
    let args = container.args.clone().unwrap_or_default();
    assert!(
        args.contains(&"--leader-elect=true".to_string()),
        "{args:?}"
    );
    assert!(
        args.contains(&"--admin-addr=0.0.0.0:8080".to_string()),
        "{args:?}"
    );
    let probe_path = |p: Option<&k8s_openapi::api::core::v1::Probe>| {
        p.and_then(|p| p.http_get.as_ref())
            .and_then(|h| h.path.clone())
    };
    assert_eq!(
        probe_path(container.liveness_probe.as_ref()).as_deref(),
        Some("/healthz")
    );
    assert_eq!(
        probe_path(container.readiness_probe.as_ref()).as_deref(),
        Some("/readyz")
    );
    // The cache dir the host is told about is the writable emptyDir.
    let cache_dir = container
        .env
        .iter()
        .flatten()
        .find(|e| e.name == "WINDLASS_CACHE_DIR")
        .and_then(|e| e.value.clone())
        .expect("WINDLASS_CACHE_DIR is set");
    let mount = container
        .volume_mounts
        .iter()
        .flatten()
        .find(|m| m.mount_path == cache_dir)
        .expect("a volume is mounted at the cache dir");
    let volume = pod
        .volumes
        .iter()
        .flatten()
        .find(|v| v.name == mount.name)
        .expect("the volume");
    assert!(
        volume.empty_dir.is_some(),
        "the cache volume is an emptyDir"
    );

    let services: Api<Service> = Api::namespaced(env.client(), NAMESPACE);
    let metrics = services
        .get("wl-windlass-metrics")
        .await
        .expect("the metrics Service exists");
    assert_eq!(
        metrics.spec.and_then(|s| s.ports).map(|p| p[0].port),
        Some(8080)
    );

    // Without a managed kind, the host may touch nothing but its own kinds.
    let cluster_roles: Api<ClusterRole> = Api::all(env.client());
    let rules = cluster_roles
        .get("wl-windlass")
        .await
        .expect("the ClusterRole")
        .rules
        .unwrap_or_default();
    let groups: Vec<&str> = rules
        .iter()
        .flat_map(|r| r.api_groups.iter().flatten())
        .map(String::as_str)
        .collect();
    assert!(
        groups
            .iter()
            .all(|g| ["windlass.dev", "events.k8s.io"].contains(g)),
        "default rules reach beyond WasmPlugins and events: {groups:?}"
    );
    // patch: the host's finalizer on WasmPlugins (`windlass.dev/in-use`); never create or
    // delete.
    assert_eq!(
        verbs_on(&rules, "windlass.dev", "wasmplugins"),
        ["get", "list", "watch", "patch"]
    );
    let roles: Api<Role> = Api::namespaced(env.client(), NAMESPACE);
    let role = roles
        .get("wl-windlass")
        .await
        .expect("the Role in the release namespace");
    let lease_rule = role
        .rules
        .iter()
        .flatten()
        .find(|r| r.resource_names.is_some())
        .expect("a rule limited by name");
    assert_eq!(
        lease_rule.resource_names,
        Some(vec!["windlass-leader".to_string()])
    );
    assert!(
        !role
            .rules
            .iter()
            .flatten()
            .any(|r| r.resources.iter().flatten().any(|x| x == "secrets")),
        "no Secret access without a pull secret"
    );
    let plugins = wasmplugins(env.client())
        .list(&Default::default())
        .await
        .expect("list WasmPlugins");
    assert!(
        plugins.items.is_empty(),
        "the default values declare no plugin"
    );
    env.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_sampledb_preset_renders_its_plugin_and_rules_for_its_kinds_only() {
    let manifests = template(&[&sampledb_values()], &[]).expect("helm template with the preset");
    let env = Cluster::start().await;
    env.apply(manifests).await;

    let plugin = wasmplugins(env.client())
        .get("wl-sampledb-storage")
        .await
        .expect("the WasmPlugin exists");
    assert_eq!(plugin.data["spec"]["parent"]["kind"], "SampleDB");
    assert_eq!(
        plugin.data["spec"]["source"]["configMap"],
        json!({"namespace": NAMESPACE, "name": "sampledb-storage", "key": "plugin.wasm"})
    );

    let roles: Api<Role> = Api::namespaced(env.client(), NAMESPACE);
    let role = roles
        .get("wl-windlass-plugin-configmaps")
        .await
        .expect("the ConfigMap Role");
    let rules = role.rules.unwrap_or_default();
    assert_eq!(rules.len(), 1);
    let mut names = rules[0].resource_names.clone().unwrap_or_default();
    names.sort();
    assert_eq!(
        names,
        ["sampledb-backup", "sampledb-storage", "sampledb-upgrade"],
        "the ConfigMaps of the Rust plugins, and nothing else"
    );
    let primary = wasmplugins(env.client())
        .get("wl-sampledb-primary")
        .await
        .expect("the Python plugin's WasmPlugin");
    assert_eq!(primary.data["spec"]["instanceMode"], "Reuse");
    assert!(primary.data["spec"]["source"]["oci"]["reference"].is_string());
    assert_eq!(rules[0].verbs, ["get", "list", "watch"]);

    let cluster_roles: Api<ClusterRole> = Api::all(env.client());
    let rules = cluster_roles
        .get("wl-windlass")
        .await
        .expect("the ClusterRole")
        .rules
        .unwrap_or_default();
    assert_eq!(
        verbs_on(&rules, "samples.windlass.dev", "sampledbs"),
        ["get", "list", "watch", "patch"]
    );
    assert_eq!(
        verbs_on(&rules, "samples.windlass.dev", "sampledbs/status"),
        ["get", "patch", "update"]
    );
    assert_eq!(
        verbs_on(&rules, "apps", "statefulsets"),
        ["get", "list", "watch", "create", "patch", "delete"]
    );
    // Narrowed verbs stay narrow: Pods are labelled, never created; deleted only so that the
    // host may create the chaos plugin's Role, which allows that.
    assert_eq!(
        verbs_on(&rules, "", "pods"),
        ["get", "list", "watch", "patch", "delete"]
    );
    assert!(verbs_on(&rules, "apps", "deployments").is_empty());
    // The traffic check's index watches every Service and NetworkPolicy, and writes none.
    for (group, resource) in [("", "services"), ("networking.k8s.io", "networkpolicies")] {
        let verbs = verbs_on(&rules, group, resource);
        for verb in ["list", "watch"] {
            assert!(verbs.iter().any(|v| v == verb), "{resource}: {verbs:?}");
        }
    }
    assert_eq!(
        verbs_on(&rules, "networking.k8s.io", "networkpolicies"),
        ["list", "watch"]
    );
    env.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_oci_plugin_with_a_pull_secret_may_read_that_secret_and_no_other() {
    let dir = tempfile::tempdir().expect("a temporary directory");
    let values = dir.path().join("values.yaml");
    std::fs::write(
        &values,
        r#"
plugins:
  - name: storage
    parent: {apiVersion: samples.windlass.dev/v1alpha1, kind: SampleDB}
    oci: {reference: registry.example.com/plugins/storage:v1, pullSecret: registry-creds}
    sha256: "sha256:0000000000000000000000000000000000000000000000000000000000000000"
    grants: [apps/v1/StatefulSet, v1/Service]
    failurePolicy: Ignore
    instanceMode: Reuse
    config: {replicasDefault: 3}
"#,
    )
    .expect("write values");
    let manifests = template(&[&values], &[]).expect("helm template with an OCI plugin");
    let env = Cluster::start().await;
    env.apply(manifests).await;

    let plugin = wasmplugins(env.client())
        .get("wl-storage")
        .await
        .expect("the WasmPlugin exists");
    let spec = &plugin.data["spec"];
    assert_eq!(
        spec["source"]["oci"],
        json!({"reference": "registry.example.com/plugins/storage:v1", "pullSecret": "registry-creds"})
    );
    assert_eq!(
        spec["source"]["sha256"],
        "sha256:0000000000000000000000000000000000000000000000000000000000000000"
    );
    assert_eq!(spec["grants"], json!(["apps/v1/StatefulSet", "v1/Service"]));
    assert_eq!(spec["failurePolicy"], "Ignore");
    assert_eq!(spec["instanceMode"], "Reuse");
    assert_eq!(spec["config"]["replicasDefault"], 3);

    let roles: Api<Role> = Api::namespaced(env.client(), NAMESPACE);
    let role = roles
        .get("wl-windlass")
        .await
        .expect("the Role in the release namespace");
    let secrets: Vec<&PolicyRule> = role
        .rules
        .iter()
        .flatten()
        .filter(|r| r.resources.iter().flatten().any(|x| x == "secrets"))
        .collect();
    assert_eq!(secrets.len(), 1);
    assert_eq!(
        secrets[0].resource_names,
        Some(vec!["registry-creds".to_string()])
    );
    assert_eq!(secrets[0].verbs, ["get"]);
    assert!(
        roles
            .get_opt("wl-windlass-plugin-configmaps")
            .await
            .expect("get")
            .is_none(),
        "no ConfigMap Role without a ConfigMap source"
    );
    env.shutdown().await;
}

#[test]
fn the_sampledb_preset_lists_the_sampledb_plugins_in_pipeline_order() {
    let text = std::fs::read_to_string(sampledb_values()).expect("the SampleDB preset");
    let values: Value = serde_yaml::from_str(&text).expect("the preset is YAML");
    let mut plugins: Vec<(i64, String)> = values["plugins"]
        .as_array()
        .expect("the preset lists plugins")
        .iter()
        .map(|p| {
            (
                p["order"].as_i64().unwrap_or_default(),
                p["name"].as_str().unwrap_or_default().to_string(),
            )
        })
        .collect();
    plugins.sort();
    let preset: Vec<&str> = plugins.iter().map(|(_, name)| name.as_str()).collect();
    let listed: Vec<&str> = windlass_test_guests::SAMPLEDB
        .iter()
        .map(|(name, _)| *name)
        .collect();
    assert_eq!(
        preset, listed,
        "values-sampledb.yaml and plugins/sampledb_plugins.rs list different plugins"
    );
}

/// Each plugin of the preset is its manifest under `plugins/` (what `windlass dev` applies):
/// the same parent, order, grants, pod security, limits, instance mode, failure policy and
/// config. Only the source is the preset's own (a ConfigMap or a registry reference).
#[test]
fn the_preset_is_the_plugins_manifests() {
    let text = std::fs::read_to_string(sampledb_values()).expect("the SampleDB preset");
    let values: Value = serde_yaml::from_str(&text).expect("the preset is YAML");
    let preset = values["plugins"]
        .as_array()
        .expect("the preset lists plugins");
    assert_eq!(preset.len(), windlass::dev::SAMPLEDB_MANIFESTS.len());
    const SOURCE: &[&str] = &["name", "configMap", "oci", "file", "sha256", "fullName"];
    for entry in preset {
        let name = entry["name"].as_str().expect("every entry has a name");
        let manifest = windlass::dev::sampledb_manifest(name).unwrap_or_else(|| {
            panic!("{name}: in the preset but has no plugins/{name}/wasmplugin.yaml")
        });
        assert_eq!(manifest["kind"], "WasmPlugin", "{name}");
        assert_eq!(manifest["metadata"]["name"], name, "{name}");
        let spec = manifest["spec"].as_object().expect("a spec");
        assert!(
            spec.get("source").is_none(),
            "{name}: the manifest names a source"
        );
        let entry: serde_json::Map<String, Value> = entry
            .as_object()
            .expect("an entry is a map")
            .iter()
            .filter(|(k, _)| !SOURCE.contains(&k.as_str()))
            .map(|(k, v)| (k.clone(), v.clone()))
            .collect();
        assert_eq!(
            Value::Object(entry),
            Value::Object(spec.clone()),
            "{name}: the preset and plugins/{name}/wasmplugin.yaml differ"
        );
    }
}

#[test]
fn the_chart_refuses_values_that_cannot_work() {
    let err = template(&[], &["leaderElection.enabled=false"])
        .expect_err("two replicas without election");
    assert!(
        err.contains("replicas > 1 needs leaderElection.enabled"),
        "{err}"
    );
    let err = template(
        &[],
        &[
            "plugins[0].name=x",
            "plugins[0].parent.kind=K",
            "plugins[0].parent.apiVersion=v1",
        ],
    )
    .expect_err("a plugin without a source");
    assert!(
        err.contains("plugins x: one of configMap or oci is required"),
        "{err}"
    );
    let err = template(
        &[],
        &[
            "metrics.serviceMonitor.enabled=true",
            "metrics.service.enabled=false",
        ],
    )
    .expect_err("a ServiceMonitor without its Service");
    assert!(
        err.contains("metrics.serviceMonitor.enabled needs metrics.service.enabled"),
        "{err}"
    );
}

#[test]
fn the_service_monitor_is_rendered_only_when_asked() {
    // Not applied: the devcluster (like a cluster without prometheus-operator) lacks its CRD.
    let off = template(&[], &[]).expect("default values");
    assert!(!off.contains("kind: ServiceMonitor"));
    let on =
        template(&[], &["metrics.serviceMonitor.enabled=true"]).expect("with a ServiceMonitor");
    let monitor: serde_yaml::Value = on
        .split("\n---\n")
        .filter_map(|doc| serde_yaml::from_str::<serde_yaml::Value>(doc).ok())
        .find(|doc| doc["kind"] == "ServiceMonitor")
        .expect("a ServiceMonitor document");
    assert_eq!(monitor["spec"]["endpoints"][0]["port"], "metrics");
    assert_eq!(monitor["spec"]["endpoints"][0]["path"], "/metrics");
}

#[test]
fn recording_gives_the_host_a_directory_of_its_own_only_when_asked() {
    let deployment = |sets: &[&str]| -> Value {
        documents(&template(&[], sets).expect("renders"))
            .into_iter()
            .find(|d| d["kind"] == "Deployment")
            .expect("a Deployment")
    };
    let off = deployment(&[]);
    let args = off["spec"]["template"]["spec"]["containers"][0]["args"].to_string();
    assert!(!args.contains("--record-dir"), "{args}");
    let on = deployment(&["host.record.enabled=true", "host.record.sizeLimit=64Mi"]);
    let pod = &on["spec"]["template"]["spec"];
    let container = &pod["containers"][0];
    assert!(
        container["args"]
            .as_array()
            .unwrap()
            .contains(&Value::from("--record-dir=/var/lib/windlass/records")),
        "{container:#}"
    );
    let mount = container["volumeMounts"]
        .as_array()
        .unwrap()
        .iter()
        .find(|m| m["name"] == "records")
        .expect("the records mount");
    assert_eq!(mount["mountPath"], "/var/lib/windlass/records");
    let volume = pod["volumes"]
        .as_array()
        .unwrap()
        .iter()
        .find(|v| v["name"] == "records")
        .expect("the records volume");
    assert_eq!(volume["emptyDir"]["sizeLimit"], "64Mi");
    // The schema names a misspelt field.
    let err = template(&[], &["host.record.enable=true"]).unwrap_err();
    assert!(err.contains("enable"), "{err}");
}

/// The rendered documents, as JSON values (comment-only documents dropped).
pub fn documents(manifests: &str) -> Vec<Value> {
    serde_yaml::Deserializer::from_str(manifests)
        .map(|doc| Value::deserialize(doc).expect("helm renders YAML"))
        .filter(|doc| !doc.is_null())
        .collect()
}

/// JSON pointers of the fields in `doc` that `T` does not know. The devcluster keeps built-in
/// objects as they were sent, so a misspelt field (`readOnlyRootFilesytem`) would pass
/// `kubectl apply` there and be silently dropped by a real API server; a round trip through
/// the typed struct drops it here, where we can see it.
fn unknown_fields<T: DeserializeOwned + Serialize>(doc: &Value) -> Result<Vec<String>, String> {
    fn walk(sent: &Value, kept: &Value, path: &str, out: &mut Vec<String>) {
        match (sent, kept) {
            (Value::Object(sent), Value::Object(kept)) => {
                for (key, value) in sent {
                    let here = format!("{path}/{key}");
                    match kept.get(key) {
                        None if !value.is_null() => out.push(here),
                        None => {}
                        Some(k) => walk(value, k, &here, out),
                    }
                }
            }
            (Value::Array(sent), Value::Array(kept)) => {
                for (i, (s, k)) in sent.iter().zip(kept).enumerate() {
                    walk(s, k, &format!("{path}/{i}"), out);
                }
            }
            // Scalars may change representation (a quantity, an int-or-string); that is fine.
            _ => {}
        }
    }
    let typed: T = serde_json::from_value(doc.clone()).map_err(|e| e.to_string())?;
    let kept = serde_json::to_value(typed).map_err(|e| e.to_string())?;
    let mut out = Vec::new();
    walk(doc, &kept, "", &mut out);
    Ok(out)
}

/// Checks every rendered object against its kind's type; panics naming the object and field.
fn assert_only_known_fields(manifests: &str) -> usize {
    let docs = documents(manifests);
    for doc in &docs {
        let kind = doc["kind"].as_str().unwrap_or_default();
        let unknown = match kind {
            "Deployment" => unknown_fields::<Deployment>(doc),
            "Pod" => unknown_fields::<Pod>(doc),
            "ConfigMap" => unknown_fields::<k8s_openapi::api::core::v1::ConfigMap>(doc),
            "Service" => unknown_fields::<Service>(doc),
            "ServiceAccount" => unknown_fields::<ServiceAccount>(doc),
            "ClusterRole" => unknown_fields::<ClusterRole>(doc),
            "ClusterRoleBinding" => unknown_fields::<ClusterRoleBinding>(doc),
            "Role" => unknown_fields::<Role>(doc),
            "RoleBinding" => unknown_fields::<RoleBinding>(doc),
            "WasmPlugin" => unknown_fields::<WasmPlugin>(doc),
            other => {
                panic!("the chart renders a {other:?}: add its type to assert_only_known_fields")
            }
        };
        let name = &doc["metadata"]["name"];
        match unknown {
            Ok(fields) => assert!(
                fields.is_empty(),
                "{kind} {name} has fields its kind does not define: {fields:?}"
            ),
            Err(e) => panic!("{kind} {name} is not a valid {kind}: {e}"),
        }
    }
    docs.len()
}

#[test]
fn the_field_check_catches_a_misspelt_field() {
    let doc = json!({
        "apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": "x"},
        "spec": {"selector": {}, "template": {"spec": {"containers": [
            {"name": "c", "securityContext": {"readOnlyRootFilesytem": true}}
        ]}}},
    });
    assert_eq!(
        unknown_fields::<Deployment>(&doc).expect("a Deployment"),
        ["/spec/template/spec/containers/0/securityContext/readOnlyRootFilesytem"]
    );
}

#[test]
fn every_rendered_object_has_only_fields_its_kind_defines() {
    let count = assert_only_known_fields(&template(&[], &[]).expect("default values"));
    // ServiceAccount, ClusterRole(Binding), Role(Binding), metrics Service, Deployment.
    assert_eq!(count, 7, "objects rendered by the default values");
    let count = assert_only_known_fields(
        &template(&[&sampledb_values()], &[]).expect("the SampleDB preset"),
    );
    // And the ConfigMap Role(Binding) and the six WasmPlugins.
    assert_eq!(count, 15, "objects rendered by the SampleDB preset");
    // Every optional value set at once, so the templates' optional branches are checked too.
    let everything = template(
        &[&sampledb_values()],
        &[
            "imagePullSecrets[0]=regcred",
            "host.fuel=true",
            "host.extraArgs[0]=--concurrency=4",
            "host.extraEnv[0].name=EXTRA",
            "host.extraEnv[0].value=enabled",
            "podAnnotations.a=b",
            "podLabels.c=d",
            "nodeSelector.disk=ssd",
            "tolerations[0].key=dedicated",
            "tolerations[0].operator=Exists",
            "affinity.nodeAffinity.requiredDuringSchedulingIgnoredDuringExecution.nodeSelectorTerms[0].matchExpressions[0].key=disk",
            "affinity.nodeAffinity.requiredDuringSchedulingIgnoredDuringExecution.nodeSelectorTerms[0].matchExpressions[0].operator=Exists",
            "topologySpreadConstraints[0].maxSkew=1",
            "topologySpreadConstraints[0].topologyKey=zone",
            "topologySpreadConstraints[0].whenUnsatisfiable=ScheduleAnyway",
            "priorityClassName=system-cluster-critical",
            "serviceAccount.annotations.x=y",
            "metrics.service.annotations.x=y",
            "rbac.configMaps[0].namespace=plugins",
            "rbac.configMaps[0].name=extra",
            "rbac.pullSecrets[0]=registry",
            "rbac.managed.reads[0].apiGroups[0]=",
            "rbac.managed.reads[0].resources[0]=endpoints",
            "rbac.extraRules[0].apiGroups[0]=",
            "rbac.extraRules[0].resources[0]=nodes",
            "rbac.extraRules[0].verbs[0]=get",
        ],
    )
    .expect("every optional value");
    // The preset's objects, and a ConfigMap Role(Binding) for the namespace `plugins`.
    assert_eq!(assert_only_known_fields(&everything), 17);
}

#[test]
fn the_values_schema_refuses_a_bad_value_naming_the_field() {
    for (set, named) in [
        ("replicas=two", "/replicas"),
        ("replica=2", "'replica'"),
        ("host.logFormat=xml", "/host/logFormat"),
        ("image.pullPolicy=Sometimes", "/image/pullPolicy"),
        ("metrics.service.port=70000", "/metrics/service/port"),
        (
            "leaderElection.leaseSeconds=0",
            "/leaderElection/leaseSeconds",
        ),
    ] {
        let err = template(&[], &[set]).expect_err(set);
        assert!(
            err.contains("don't meet the specifications of the schema") && err.contains(named),
            "{set}: {err}"
        );
    }
    let err = template(&[&sampledb_values()], &["plugins[0].limits.timeoutMs=0"])
        .expect_err("a zero timeout");
    assert!(err.contains("/plugins/0/limits/timeoutMs"), "{err}");
    let err = template(&[&sampledb_values()], &["plugins[1].failurePolicy=Retry"])
        .expect_err("an unknown failure policy");
    assert!(err.contains("/plugins/1/failurePolicy"), "{err}");
    let err = template(&[&sampledb_values()], &["plugins[0].sha256=abc"])
        .expect_err("a pin that is no digest");
    assert!(err.contains("/plugins/0/sha256"), "{err}");
}

#[test]
fn the_chart_and_app_versions_are_the_workspace_version() {
    let chart: serde_yaml::Value = serde_yaml::from_str(
        &std::fs::read_to_string(chart().join("Chart.yaml")).expect("Chart.yaml"),
    )
    .expect("Chart.yaml is YAML");
    assert_eq!(chart["version"], env!("CARGO_PKG_VERSION"));
    assert_eq!(chart["appVersion"], env!("CARGO_PKG_VERSION"));
}

#[test]
fn the_helm_test_pod_asks_the_metrics_service_with_the_hosts_own_image() {
    let hook = test_hook(&[]).expect("the test hook renders with the default values");
    assert_eq!(assert_only_known_fields(&hook), 1);
    let pod = &documents(&hook)[0];
    assert_eq!(pod["kind"], "Pod");
    assert_eq!(pod["metadata"]["annotations"]["helm.sh/hook"], "test");
    assert_eq!(
        pod["spec"]["containers"][0]["command"],
        json!([
            "/usr/local/bin/windlass",
            "probe",
            format!("http://{RELEASE}-windlass-metrics.{NAMESPACE}.svc:8080/readyz")
        ])
    );
    let installed = documents(&template(&[], &[]).expect("default values"));
    let deployment = installed
        .iter()
        .find(|d| d["kind"] == "Deployment")
        .expect("a Deployment");
    let host = &deployment["spec"]["template"]["spec"]["containers"][0];
    assert_eq!(pod["spec"]["containers"][0]["image"], host["image"]);
    // A Pod the Deployment's selector matched would be adopted by its ReplicaSet.
    let selector = deployment["spec"]["selector"]["matchLabels"]
        .as_object()
        .expect("matchLabels");
    let labels = &pod["metadata"]["labels"];
    assert!(
        selector.iter().any(|(k, v)| &labels[k] != v),
        "the test Pod's labels {labels} match the Deployment's selector {selector:?}"
    );
    let security = &pod["spec"]["containers"][0]["securityContext"];
    assert_eq!(security["readOnlyRootFilesystem"], true);
    assert_eq!(security["allowPrivilegeEscalation"], false);
    assert_eq!(pod["spec"]["securityContext"]["runAsNonRoot"], true);
    assert_eq!(pod["spec"]["automountServiceAccountToken"], false);
    // No Service, nothing to ask: no test.
    assert!(test_hook(&["metrics.service.enabled=false"]).is_err());
}

/// `windlass probe`, as the test Pod runs it, against an admin endpoint that is ready, one that
/// is not, and an address where nothing listens.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn windlass_probe_succeeds_only_on_200() {
    use axum::{Router, http::StatusCode, routing::get};
    let app = Router::new()
        .route("/readyz", get(|| async { "leader" }))
        .route(
            "/starting",
            get(|| async { (StatusCode::SERVICE_UNAVAILABLE, "starting") }),
        );
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .expect("a port");
    let addr = listener.local_addr().expect("its address");
    tokio::spawn(async move { axum::serve(listener, app).await });
    let probe = |url: String| async move {
        let out = tokio::task::spawn_blocking(move || {
            Command::new(env!("CARGO_BIN_EXE_windlass"))
                .args(["probe", &url, "--timeout-seconds", "5"])
                .output()
                .expect("windlass runs")
        })
        .await
        .expect("the probe's thread");
        (
            out.status.success(),
            String::from_utf8_lossy(&out.stdout).to_string()
                + &String::from_utf8_lossy(&out.stderr),
        )
    };
    let (ok, said) = probe(format!("http://{addr}/readyz")).await;
    assert!(ok && said.contains("200 OK leader"), "{said}");
    let url = format!("http://{addr}/starting");
    let (ok, said) = probe(url.clone()).await;
    assert!(!ok, "{said}");
    assert!(
        said.contains(&url) && said.contains("503") && said.contains("starting"),
        "{said}"
    );
    let free = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .expect("a port")
        .local_addr()
        .expect("its address");
    let url = format!("http://{free}/readyz");
    let (ok, said) = probe(url.clone()).await;
    assert!(!ok && said.contains(&url), "{said}");
}

#[test]
fn the_trust_policy_keys_reach_the_host_and_a_plugins_own_keys_its_wasm_plugin() {
    let dir = tempfile::tempdir().expect("a temporary directory");
    let values = dir.path().join("values.yaml");
    let pem = windlass::source::oci::SigningKey::generate()
        .expect("a key")
        .public_key("release")
        .to_pem();
    std::fs::write(
        &values,
        serde_json::to_string(&json!({
            "verifyPlugins": {"keys": [{"name": "release", "publicKey": pem}]},
            "plugins": [
                {"name": "a", "parent": {"apiVersion": "x.example/v1", "kind": "X"},
                 "oci": {"reference": "registry.example.com/a:1"}},
                {"name": "b", "parent": {"apiVersion": "x.example/v1", "kind": "X"},
                 "oci": {"reference": "registry.example.com/b:1",
                         "verify": {"keys": [{"name": "own", "publicKey": "PEM"}]}}},
                {"name": "c", "parent": {"apiVersion": "x.example/v1", "kind": "X"},
                 "configMap": {"name": "c"}},
            ],
        }))
        .expect("values as JSON"),
    )
    .expect("write values");
    let manifests = template(&[&values], &[]).expect("helm template with verification keys");
    let docs = documents(&manifests);
    let find = |kind: &str, name: &str| {
        docs.iter()
            .find(|d| d["kind"] == kind && d["metadata"]["name"] == name)
            .cloned()
            .unwrap_or_else(|| panic!("no {kind} {name}"))
    };
    // The host-wide policy: the keys in a ConfigMap, mounted read-only, one flag per key.
    let keys = find("ConfigMap", "wl-windlass-trusted-keys");
    assert_eq!(
        keys["data"]["release.pub"].as_str().map(str::trim),
        Some(pem.trim())
    );
    let deployment = find("Deployment", "wl-windlass");
    // The host reads the keys once, at start: a changed key must change the Pod template.
    let checksum =
        deployment["spec"]["template"]["metadata"]["annotations"]["checksum/trusted-keys"]
            .as_str()
            .expect("the trusted keys' checksum on the Pod template");
    assert!(
        checksum.len() == 64 && checksum.bytes().all(|b| b.is_ascii_hexdigit()),
        "{checksum}"
    );
    let pod = &deployment["spec"]["template"]["spec"];
    let container = &pod["containers"][0];
    let args: Vec<&str> = container["args"]
        .as_array()
        .expect("args")
        .iter()
        .filter_map(Value::as_str)
        .collect();
    assert!(
        args.contains(&"--trusted-key=/etc/windlass/trusted-keys/release.pub"),
        "{args:?}"
    );
    assert!(
        container["volumeMounts"].as_array().expect("mounts").contains(&json!(
            {"name": "trusted-keys", "mountPath": "/etc/windlass/trusted-keys", "readOnly": true}
        )),
        "{container}"
    );
    assert!(
        pod["volumes"].as_array().expect("volumes").contains(&json!(
            {"name": "trusted-keys", "configMap": {"name": "wl-windlass-trusted-keys"}}
        )),
        "{pod}"
    );
    // A plugin's own keys go to its WasmPlugin; the others carry none (the host checks them).
    assert_eq!(
        find("WasmPlugin", "wl-a")["spec"]["source"]["oci"].get("verify"),
        None
    );
    assert_eq!(
        find("WasmPlugin", "wl-b")["spec"]["source"]["oci"]["verify"],
        json!({"keys": [{"name": "own", "publicKey": "PEM"}]})
    );
    assert_only_known_fields(&manifests);
    // Without keys, no ConfigMap, flag or volume.
    let plain =
        template(&[&values], &["verifyPlugins.keys=null"]).expect("helm template without keys");
    assert!(!plain.contains("trusted-key"), "{plain}");
    // A key without its PEM, or a name that is no file name, is refused naming the field.
    let err = template(
        &[&values],
        &["plugins[1].oci.verify.keys[0].publicKey=null"],
    )
    .expect_err("a key without its PEM");
    assert!(err.contains("/plugins/1/oci/verify/keys/0"), "{err}");
    let err = template(&[&values], &["verifyPlugins.keys[0].name=../x"])
        .expect_err("a key name that is no file name");
    assert!(err.contains("/verifyPlugins/keys/0/name"), "{err}");
}
