//! A cluster with the host's CRDs, a test CRD (`Thing`) and an operator: shared by the
//! end-to-end tests.
//!
//! The cluster is the devcluster, or, with `WINDLASS_TEST_CLUSTER=real`, a real control plane
//! (etcd, kube-apiserver, kube-controller-manager built from source: `windlass_kubeplane`) of
//! the test's own, so the same tests run against both. A test that needs what only the
//! devcluster has (injected API faults) says so and skips on the real one. On the real one the
//! devcluster's workload simulator runs over the API (`simulator::remote`): Pods become
//! Running and Ready, Job Pods finish, claims bind and snapshots become ready; the real
//! controllers do the rest.
#![allow(dead_code)]

pub mod dev;
pub mod etcd;
pub mod tools;

use std::{
    future::Future,
    path::{Path, PathBuf},
    time::Duration,
};

use k8s_openapi::{
    ByteString,
    api::{
        core::v1::{ConfigMap, Namespace, Pod},
        events::v1::Event,
    },
    apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition,
};
use kube::{
    Api, Client, ResourceExt,
    api::{DynamicObject, ListParams, Patch, PatchParams, PostParams},
    core::{ApiResource, GroupVersionKind},
};
use serde_json::{Value, json};
use tokio::sync::watch;
use windlass::{
    controller::Settings, crd::WasmPlugin, leader::Election, operator, runtime::RuntimeConfig,
};
use windlass_devcluster::{DevCluster, Options};
use windlass_kubeplane::ControlPlane;
use windlass_test_guests as guests;

pub const WAIT: Duration = Duration::from_secs(60);

/// Polls `check` until it returns Some, or fails the test after `WAIT` naming `what`.
pub async fn eventually<T, F: Future<Output = Option<T>>>(
    what: &str,
    mut check: impl FnMut() -> F,
) -> T {
    let deadline = tokio::time::Instant::now() + WAIT;
    loop {
        if let Some(v) = check().await {
            return v;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "timed out waiting for {what}"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// A resourceVersion as the number both planes make it (etcd's revision on the real one, the
/// store's on the devcluster): one order across every resource, so it places writes to different
/// objects before or after each other.
pub fn rv_number(rv: Option<&String>) -> u64 {
    rv.and_then(|rv| rv.parse().ok())
        .unwrap_or_else(|| panic!("resourceVersion {rv:?} is not a number"))
}

/// What happened to `api`'s objects after resourceVersion `from`, in order, up to the
/// resourceVersion the server is at when this is called (returned too): the server's watch
/// history, replayed by a watch from `from` that the server ends after a while. It is how a
/// test says "and nothing else happened up to RV X" without sleeping for a while and hoping.
/// The read is checked: every object there now that changed after `from` (and by X) must be in
/// it, or the watch is read again, waiting longer (1, 3, then 10 s), and the test fails if it
/// never is.
pub async fn history_since<K>(api: &Api<K>, from: &str) -> (Vec<kube::api::WatchEvent<K>>, u64)
where
    K: kube::Resource + Clone + serde::de::DeserializeOwned + std::fmt::Debug,
{
    use futures::StreamExt;
    use kube::api::{WatchEvent, WatchParams};
    let after = rv_number(Some(&from.to_string()));
    let now = api
        .list_metadata(&ListParams::default())
        .await
        .expect("list");
    let through = rv_number(now.metadata.resource_version.as_ref());
    let changed: Vec<u64> = now
        .items
        .iter()
        .map(|o| rv_number(o.metadata.resource_version.as_ref()))
        .filter(|rv| (after + 1..=through).contains(rv))
        .collect();
    for secs in [1, 3, 10] {
        let mut stream = api
            .watch(&WatchParams::default().timeout(secs), from)
            .await
            .unwrap_or_else(|e| panic!("watch from {from}: {e}"))
            .boxed();
        let mut events = Vec::new();
        while let Some(event) = stream.next().await {
            let event = event.unwrap_or_else(|e| panic!("watch from {from}: {e}"));
            let rv = match &event {
                WatchEvent::Added(o) | WatchEvent::Modified(o) | WatchEvent::Deleted(o) => {
                    rv_number(o.meta().resource_version.as_ref())
                }
                WatchEvent::Bookmark(_) => continue,
                WatchEvent::Error(e) => panic!("watch from {from}: {e:?}"),
            };
            if rv <= through {
                events.push(event);
            }
        }
        let read: std::collections::HashSet<u64> = events
            .iter()
            .filter_map(|e| match e {
                WatchEvent::Added(o) | WatchEvent::Modified(o) | WatchEvent::Deleted(o) => {
                    Some(rv_number(o.meta().resource_version.as_ref()))
                }
                _ => None,
            })
            .collect();
        if changed.iter().all(|rv| read.contains(rv)) {
            return (events, through);
        }
    }
    panic!(
        "the watch history from RV {from} never reached the changes {changed:?} (up to RV {through})"
    )
}

/// The events of `history` (of [`history_since`]) about objects whose name `names` picks.
pub fn written<'a, K: kube::Resource>(
    history: &'a [kube::api::WatchEvent<K>],
    names: impl Fn(&str) -> bool,
) -> Vec<&'a kube::api::WatchEvent<K>> {
    use kube::api::WatchEvent;
    history
        .iter()
        .filter(|e| match e {
            WatchEvent::Added(o) | WatchEvent::Modified(o) | WatchEvent::Deleted(o) => {
                names(o.meta().name.as_deref().unwrap_or_default())
            }
            _ => false,
        })
        .collect()
}

/// The resourceVersion `api`'s server is at now.
pub async fn current_rv<K>(api: &Api<K>) -> String
where
    K: kube::Resource + Clone + serde::de::DeserializeOwned + std::fmt::Debug,
{
    api.list_metadata(&ListParams::default().limit(1))
        .await
        .expect("list")
        .metadata
        .resource_version
        .expect("resourceVersion")
}

/// Whether `history` (of [`history_since`]) shows `name` deleted or marked for deletion.
pub fn went<K: kube::Resource>(history: &[kube::api::WatchEvent<K>], name: &str) -> bool {
    use kube::api::WatchEvent;
    history.iter().any(|e| match e {
        WatchEvent::Deleted(o) => o.meta().name.as_deref() == Some(name),
        WatchEvent::Added(o) | WatchEvent::Modified(o) => {
            o.meta().name.as_deref() == Some(name) && o.meta().deletion_timestamp.is_some()
        }
        _ => false,
    })
}

/// Which cluster a test runs on.
pub enum Cluster {
    /// The embedded devcluster.
    Dev(DevCluster),
    /// A real control plane of the test's own, with the workload simulator playing the
    /// kubelet over its API (dropped with it).
    Real(ControlPlane, tokio::task::JoinHandle<()>),
}

impl Drop for Cluster {
    fn drop(&mut self) {
        if let Cluster::Real(_, simulator) = self {
            simulator.abort();
        }
    }
}

/// Whether the end-to-end tests run against a real control plane (`WINDLASS_TEST_CLUSTER=real`).
pub fn real_cluster() -> bool {
    std::env::var("WINDLASS_TEST_CLUSTER").is_ok_and(|v| v == "real")
}

pub struct Env {
    pub cluster: Cluster,
    pub client: Client,
    pub stop: watch::Sender<bool>,
    pub operator: Option<operator::Handle>,
}

pub fn thing_crd() -> CustomResourceDefinition {
    serde_json::from_value(json!({
        "apiVersion": "apiextensions.k8s.io/v1", "kind": "CustomResourceDefinition",
        "metadata": {"name": "things.example.com"},
        "spec": {
            "group": "example.com", "scope": "Namespaced",
            "names": {"kind": "Thing", "plural": "things", "singular": "thing"},
            "versions": [{"name": "v1", "served": true, "storage": true, "subresources": {"status": {}},
                "schema": {"openAPIV3Schema": {"type": "object", "x-kubernetes-preserve-unknown-fields": true}}}],
        },
    }))
    .unwrap()
}

/// A TCP port free on 127.0.0.1 right now.
pub fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .map(|a| a.port())
        .expect("a free port")
}

/// The six SampleDB plugins as `windlass dev` takes them (name, apiVersion, kind, path), each
/// checked to be built.
pub fn sampledb_plugins() -> Vec<(String, String, String, PathBuf)> {
    windlass_test_guests::SAMPLEDB
        .iter()
        .map(|(name, path)| {
            assert!(
                Path::new(path).exists(),
                "{name}: {path} is missing; build the plugins with `cargo xtask plugins`"
            );
            (
                name.to_string(),
                "samples.windlass.dev/v1alpha1".to_string(),
                "SampleDB".to_string(),
                PathBuf::from(path),
            )
        })
        .collect()
}

/// The volume the SampleDB backups go to, in `ns`.
pub async fn create_backup_volume(client: &Client, ns: &str) {
    let pvcs: Api<k8s_openapi::api::core::v1::PersistentVolumeClaim> =
        Api::namespaced(client.clone(), ns);
    pvcs.create(
        &PostParams::default(),
        &serde_json::from_value(json!({
            "metadata": {"name": windlass::dev::sampledb_spec("sampledb-backup", "/config/backupClaim")},
            "spec": {"accessModes": ["ReadWriteMany"], "resources": {"requests": {"storage": "5Gi"}}},
        }))
        .expect("a backup PVC"),
    )
    .await
    .expect("the backup volume created");
}

/// The SampleDB kind, for dynamic APIs.
pub fn sampledb_resource() -> ApiResource {
    ApiResource::from_gvk_with_plural(
        &GroupVersionKind::gvk("samples.windlass.dev", "v1alpha1", "SampleDB"),
        "sampledbs",
    )
}

pub fn thing_resource() -> ApiResource {
    ApiResource::from_gvk_with_plural(
        &GroupVersionKind::gvk("example.com", "v1", "Thing"),
        "things",
    )
}

pub fn operator_config(identity: &str, election: Option<Election>) -> operator::Config {
    operator::Config {
        admin_addr: "127.0.0.1:0".parse().unwrap(),
        election,
        settings: Settings {
            backoff_base: Duration::from_millis(100),
            backoff_max: Duration::from_secs(2),
            ..Settings::default()
        },
        identity: identity.to_string(),
    }
}

/// The plugin runtime an operator under test loads plugins with.
pub fn engine() -> std::sync::Arc<dyn windlass::contract::Engine> {
    std::sync::Arc::new(
        windlass::runtime::Runtime::new(RuntimeConfig {
            max_instances: 64,
            ..RuntimeConfig::default()
        })
        .expect("runtime"),
    )
}

impl Env {
    pub async fn start() -> Env {
        let (cluster, client) = if real_cluster() {
            let plane = ControlPlane::start()
                .await
                .expect("the real control plane starts");
            let client = plane.client().await.expect("a client");
            let simulator = tokio::spawn(windlass_devcluster::simulator::remote::run(
                plane.config().await.expect("the admin's configuration"),
                windlass_devcluster::simulator::Config::from(&Options::default()),
            ));
            (Cluster::Real(plane, simulator), client)
        } else {
            let dev = DevCluster::start(Options::default())
                .await
                .expect("devcluster starts");
            let client = dev.client();
            (Cluster::Dev(dev), client)
        };
        let crds: Api<CustomResourceDefinition> = Api::all(client.clone());
        let all = windlass::crds().into_iter().chain([thing_crd()]);
        for crd in all {
            let name = crd.metadata.name.clone().unwrap_or_default();
            crds.create(&PostParams::default(), &crd)
                .await
                .expect("CRD created");
            // A real API server serves a new CRD only once it is Established.
            eventually(&format!("CRD {name} established"), || async {
                let crd = crds.get(&name).await.ok()?;
                crd.status?
                    .conditions?
                    .iter()
                    .any(|c| c.type_ == "Established" && c.status == "True")
                    .then_some(())
            })
            .await;
        }
        let namespaces: Api<Namespace> = Api::all(client.clone());
        for ns in ["windlass-system", "shop"] {
            let ns: Namespace = serde_json::from_value(json!({"metadata": {"name": ns}})).unwrap();
            namespaces
                .create(&PostParams::default(), &ns)
                .await
                .expect("namespace created");
        }
        let (stop, _) = watch::channel(false);
        Env {
            cluster,
            client,
            stop,
            operator: None,
        }
    }

    /// The devcluster, or None on a real control plane.
    pub fn dev(&self) -> Option<&DevCluster> {
        match &self.cluster {
            Cluster::Dev(dev) => Some(dev),
            Cluster::Real(..) => None,
        }
    }

    /// The devcluster, for a test that needs what only it has (`why`). On a real control plane
    /// the test fails rather than passing having checked nothing: `cargo xtask ci` leaves such
    /// tests out of its real pass by name (`DEVCLUSTER_ONLY_TESTS` in xtask).
    pub fn dev_only(&self, why: &str) -> &DevCluster {
        self.dev().unwrap_or_else(|| {
            panic!("devcluster only ({why}): run it without WINDLASS_TEST_CLUSTER=real")
        })
    }

    /// Starts one more host on this cluster, as `identity`, with `election`: its stop switch
    /// (send `true`), its handle and its task.
    pub async fn start_host(
        &self,
        identity: &str,
        election: Option<Election>,
    ) -> (
        watch::Sender<bool>,
        operator::Handle,
        tokio::task::JoinHandle<()>,
    ) {
        let (stop, stopped) = watch::channel(false);
        let (handle, task) = operator::start(
            self.client.clone(),
            operator_config(identity, election),
            engine(),
            stopped,
        )
        .await
        .expect("the host starts");
        (stop, handle, task)
    }

    pub async fn run_operator(&mut self) {
        self.run_operator_with(operator_config("test", None)).await;
    }

    pub async fn run_operator_with(&mut self, config: operator::Config) {
        let (handle, _task) =
            operator::start(self.client.clone(), config, engine(), self.stop.subscribe())
                .await
                .expect("operator starts");
        self.operator = Some(handle);
    }

    /// The operator's metrics, as /metrics serves them.
    pub async fn metrics(&self) -> String {
        self.operator
            .as_ref()
            .expect("the operator runs")
            .health
            .metrics
            .encode()
    }

    pub async fn put_plugin_bytes(&self, name: &str, bytes: Vec<u8>) {
        let api: Api<ConfigMap> = Api::namespaced(self.client.clone(), "windlass-system");
        let cm: ConfigMap = serde_json::from_value(json!({"metadata": {"name": name}})).unwrap();
        let mut cm = cm;
        cm.binary_data = Some([("plugin.wasm".to_string(), ByteString(bytes))].into());
        api.patch(
            name,
            &PatchParams::apply("test").force(),
            &Patch::Apply(&cm),
        )
        .await
        .expect("ConfigMap applied");
    }

    pub async fn put_wasm_plugin(
        &self,
        name: &str,
        parent_kind: (&str, &str),
        config_map: &str,
        extra: Value,
    ) {
        let mut spec = json!({
            "parent": {"apiVersion": parent_kind.0, "kind": parent_kind.1},
            "source": {"configMap": {"namespace": "windlass-system", "name": config_map}},
        });
        if let (Some(spec), Some(extra)) = (spec.as_object_mut(), extra.as_object()) {
            spec.extend(extra.clone());
        }
        let wp = json!({"apiVersion": "windlass.dev/v1alpha1", "kind": "WasmPlugin", "metadata": {"name": name}, "spec": spec});
        let api: Api<WasmPlugin> = Api::all(self.client.clone());
        api.patch(
            name,
            &PatchParams::apply("test").force(),
            &Patch::Apply(&wp),
        )
        .await
        .expect("WasmPlugin applied");
    }

    pub async fn wasm_plugin(&self, name: &str) -> WasmPlugin {
        Api::<WasmPlugin>::all(self.client.clone())
            .get(name)
            .await
            .expect("WasmPlugin exists")
    }

    pub fn things(&self) -> Api<DynamicObject> {
        Api::namespaced_with(self.client.clone(), "shop", &thing_resource())
    }

    /// Creates a Thing and waits until it has `children` children.
    pub async fn create_thing_with_children(&self, name: &str, spec: Value, children: usize) {
        self.create_thing(name, spec).await;
        eventually(&format!("{children} children of {name}"), || async {
            (self.children_of(name).await.len() == children).then_some(())
        })
        .await;
    }

    pub async fn create_thing(&self, name: &str, spec: Value) {
        let thing: DynamicObject = serde_json::from_value(json!({
            "apiVersion": "example.com/v1", "kind": "Thing", "metadata": {"name": name}, "spec": spec,
        }))
        .unwrap();
        self.things()
            .create(&PostParams::default(), &thing)
            .await
            .expect("Thing created");
    }

    /// Waits until the Thing `name` has the condition `kind` with `reason`, and returns it.
    pub async fn thing_condition(&self, name: &str, kind: &str, reason: &str) -> Value {
        eventually(&format!("{name}'s {kind} condition {reason}"), || async {
            let thing = serde_json::to_value(self.things().get(name).await.ok()?).ok()?;
            let c = condition(&thing, kind)?.clone();
            (c["reason"] == reason).then_some(c)
        })
        .await
    }

    pub fn config_maps(&self) -> Api<ConfigMap> {
        Api::namespaced(self.client.clone(), "shop")
    }

    pub async fn children_of(&self, parent: &str) -> Vec<ConfigMap> {
        let mut out: Vec<ConfigMap> = self
            .config_maps()
            .list(&ListParams::default())
            .await
            .expect("list ConfigMaps")
            .items
            .into_iter()
            .filter(|cm| cm.name_any().starts_with(&format!("{parent}-")))
            .collect();
        out.sort_by_key(|cm| cm.name_any());
        out
    }

    /// Waits until the first child of `parent` was written by this version of the plugin.
    pub async fn wait_for_child_version(&self, parent: &str, version: &str) {
        eventually(
            &format!("{parent}'s child from version {version}"),
            || async {
                self.children_of(parent)
                    .await
                    .first()
                    .filter(|c| data(c, "version") == version)
                    .map(|_| ())
            },
        )
        .await
    }

    /// Stores the children plugin in a ConfigMap and points a WasmPlugin at it.
    pub async fn install_children_plugin(&self) {
        self.put_plugin_bytes("children", guests::bytes(guests::CHILDREN))
            .await;
        self.put_wasm_plugin(
            "children",
            ("example.com/v1", "Thing"),
            "children",
            json!({}),
        )
        .await;
    }

    pub async fn with_children_plugin(&mut self) {
        self.install_children_plugin().await;
        self.run_operator().await;
    }
}

impl Drop for Env {
    fn drop(&mut self) {
        let _ = self.stop.send(true);
    }
}

pub fn data(cm: &ConfigMap, key: &str) -> String {
    cm.data
        .as_ref()
        .and_then(|d| d.get(key))
        .cloned()
        .unwrap_or_default()
}

pub fn condition<'a>(obj: &'a Value, kind: &str) -> Option<&'a Value> {
    obj.pointer("/status/conditions")?
        .as_array()?
        .iter()
        .find(|c| c["type"] == kind)
}

/// The Pod of Job `job` in `pods`' namespace once it has terminated (`Succeeded` or `Failed`).
pub async fn terminated_pod_of_job(pods: &Api<Pod>, job: &str) -> Pod {
    eventually(&format!("the Pod of Job {job} terminated"), || async {
        let list = pods
            .list(&ListParams::default().labels(&format!("job-name={job}")))
            .await
            .ok()?;
        list.items.into_iter().find(|p| {
            p.status
                .as_ref()
                .and_then(|s| s.phase.as_deref())
                .is_some_and(|phase| phase == "Succeeded" || phase == "Failed")
        })
    })
    .await
}

/// The events.k8s.io events in `events` about the object named `name`, of `reason`.
pub async fn events_about(events: &Api<Event>, name: &str, reason: &str) -> Vec<Event> {
    events
        .list(&ListParams::default())
        .await
        .expect("events")
        .items
        .into_iter()
        .filter(|e| {
            e.regarding.as_ref().and_then(|r| r.name.as_deref()) == Some(name)
                && e.reason.as_deref() == Some(reason)
        })
        .collect()
}
