//! The simulator against any API server, over HTTP, like kwok: for a control plane without
//! nodes (kube-apiserver and kube-controller-manager built from source, in the tests), it plays
//! the scheduler and the kubelet (Pods bound to the one [`NODE`] it registers, then Running and
//! Ready after the delay, and gone at once when deleted; a Job's Pods Succeeded, or Failed with [`crate::FAIL_ANNOTATION`] on
//! the Pod or its Job), volume binding (claims Bound) and the
//! snapshot controller (VolumeSnapshots ready, or failed when annotated). The StatefulSet, Job
//! and CronJob controllers are the real ones there, and the API server allocates Service IPs,
//! so the simulator leaves those alone.
//!
//! It reads from watch caches it keeps itself (one watch per resource, restarted with backoff;
//! a resource that is not served yet, such as VolumeSnapshots before their CRD, is retried) and
//! writes with merge patches under the field manager `devcluster-simulator`.

use std::{
    collections::HashMap,
    sync::{Arc, RwLock},
};

use futures::StreamExt;
use kube::{
    Api, Client,
    api::{DeleteParams, DynamicObject, Patch, PatchParams, PostParams},
    core::{ApiResource, GroupVersionKind},
    runtime::{WatchStreamExt, watcher},
};
use serde_json::{Value, json};

use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;

use super::{
    Config, Sim,
    backend::{Backend, PodRef, PodStatus},
    kubectl::DeletePods,
    ns_name,
};
use crate::store::EventType;

/// What the simulator watches on a real control plane: (key, group, version, kind, plural).
/// Jobs are read for their fail annotation only.
const WATCHED: &[(&str, &str, &str, &str, &str)] = &[
    ("/pods", "", "v1", "Pod", "pods"),
    (
        "/persistentvolumeclaims",
        "",
        "v1",
        "PersistentVolumeClaim",
        "persistentvolumeclaims",
    ),
    ("batch/jobs", "batch", "v1", "Job", "jobs"),
    (
        "snapshot.storage.k8s.io/volumesnapshots",
        "snapshot.storage.k8s.io",
        "v1",
        "VolumeSnapshot",
        "volumesnapshots",
    ),
];

const FIELD_MANAGER: &str = "devcluster-simulator";

type Objects = HashMap<(String, String), Arc<Value>>;

/// Watch caches and an API client.
struct Remote {
    client: Client,
    /// The admin client's configuration: a simulated Pod's commands run with its server and CA
    /// and a token of the Pod's ServiceAccount instead of the admin's credentials.
    base: kube::Config,
    resources: HashMap<&'static str, ApiResource>,
    caches: RwLock<HashMap<&'static str, Objects>>,
}

impl Remote {
    fn api(&self, key: &str, ns: &str) -> Option<Api<DynamicObject>> {
        let ar = self.resources.get(key)?;
        Some(if ns.is_empty() {
            Api::all_with(self.client.clone(), ar)
        } else {
            Api::namespaced_with(self.client.clone(), ns, ar)
        })
    }

    fn objects(&self, key: &str) -> Vec<Arc<Value>> {
        let caches = self.caches.read().unwrap_or_else(|e| e.into_inner());
        caches
            .get(key)
            .map(|objects| objects.values().cloned().collect())
            .unwrap_or_default()
    }
}

impl Backend for Remote {
    fn get(&self, key: &str, ns: &str, name: &str) -> Option<Arc<Value>> {
        let caches = self.caches.read().unwrap_or_else(|e| e.into_inner());
        caches
            .get(key)?
            .get(&(ns.to_string(), name.to_string()))
            .cloned()
    }

    fn list_all(&self, key: &str) -> Vec<Arc<Value>> {
        self.objects(key)
    }

    fn list_prefixed(&self, key: &str, ns: &str, prefix: &str) -> Vec<Arc<Value>> {
        let caches = self.caches.read().unwrap_or_else(|e| e.into_inner());
        caches
            .get(key)
            .into_iter()
            .flat_map(|objects| objects.iter())
            .filter(|((n, name), _)| n == ns && name.starts_with(prefix))
            .map(|(_, o)| o.clone())
            .collect()
    }

    fn create(&self, key: &str, obj: Value) -> bool {
        let (ns, _) = ns_name(&obj);
        let Some(api) = self.api(key, &ns) else {
            return false;
        };
        let key = key.to_string();
        tokio::spawn(async move {
            let Ok(obj) = serde_json::from_value::<DynamicObject>(obj) else {
                return;
            };
            let params = PostParams {
                field_manager: Some(FIELD_MANAGER.into()),
                ..PostParams::default()
            };
            // Already there is fine.
            retrying("create", &key, "", 409, || api.create(&params, &obj)).await;
        });
        true
    }

    fn patch(&self, key: &str, ns: &str, name: &str, subresource: &str, body: &Value) {
        let Some(api) = self.api(key, ns) else {
            return;
        };
        let (key, name, status, body) = (
            key.to_string(),
            name.to_string(),
            subresource == "status",
            body.clone(),
        );
        tokio::spawn(async move {
            let params = PatchParams {
                field_manager: Some(FIELD_MANAGER.into()),
                ..PatchParams::default()
            };
            let patch = Patch::Merge(&body);
            // Gone is fine.
            retrying("patch", &key, &name, 404, || async {
                if status {
                    api.patch_status(&name, &params, &patch).await
                } else {
                    api.patch(&name, &params, &patch).await
                }
            })
            .await;
        });
    }

    fn delete(&self, key: &str, ns: &str, name: &str) {
        let Some(api) = self.api(key, ns) else {
            return;
        };
        let (key, name) = (key.to_string(), name.to_string());
        tokio::spawn(async move {
            let params = DeleteParams::background();
            retrying("delete", &key, &name, 404, || api.delete(&name, &params)).await;
        });
    }

    fn terminate(&self, ns: &str, name: &str, uid: &str) {
        let Some(api) = self.api("/pods", ns) else {
            return;
        };
        let (name, uid) = (name.to_string(), uid.to_string());
        tokio::spawn(async move {
            let params = DeleteParams {
                grace_period_seconds: Some(0),
                preconditions: Some(kube::api::Preconditions {
                    uid: Some(uid),
                    resource_version: None,
                }),
                ..DeleteParams::default()
            };
            // Gone already is fine; a namesake (409, another uid) is not this Pod.
            retrying("delete", "/pods", &name, 404, || api.delete(&name, &params)).await;
        });
    }

    fn kubectl(&self, _: &Sim, pod: PodRef, account: &str, cmd: DeletePods, status: PodStatus) {
        let Some(api) = self.api("/pods", &pod.namespace) else {
            return;
        };
        let (admin, base, account) = (self.client.clone(), self.base.clone(), account.to_string());
        tokio::spawn(async move {
            let outcome = kubectl_as(admin, base, &pod.namespace, &account, &cmd).await;
            match &outcome {
                Ok(()) => {
                    tracing::info!(namespace = %pod.namespace, pod = %pod.name, account, ?cmd, "simulated kubectl ran as the Pod's ServiceAccount")
                }
                Err(e) => {
                    tracing::info!(namespace = %pod.namespace, pod = %pod.name, account, error = %e, "simulated kubectl failed; the Pod fails")
                }
            }
            let body = status(outcome);
            let params = PatchParams {
                field_manager: Some(FIELD_MANAGER.into()),
                ..PatchParams::default()
            };
            let patch = Patch::Merge(&body);
            retrying("patch", "/pods", &pod.name, 404, || {
                api.patch_status(&pod.name, &params, &patch)
            })
            .await;
        });
    }

    fn bind(&self, ns: &str, name: &str) {
        let Some(api) = self.api("/pods", ns) else {
            return;
        };
        let name = name.to_string();
        tokio::spawn(async move {
            let binding = json!({"apiVersion": "v1", "kind": "Binding",
                "metadata": {"name": name}, "target": {"apiVersion": "v1", "kind": "Node", "name": NODE}});
            let params = PostParams {
                field_manager: Some(FIELD_MANAGER.into()),
                ..PostParams::default()
            };
            // Bound already (409) is fine; a Pod that is gone is refused with 404, and left.
            retrying("bind", "/pods", &name, 409, || async {
                api.create_subresource::<Value, Value>("binding", &name, &params, &binding)
                    .await
            })
            .await;
        });
    }
}

/// The Node the simulator binds Pods to on a real control plane (it registers it, Ready, at
/// start): the EndpointSlice controller lists a Pod's address only once it is bound to a Node
/// that exists.
pub const NODE: &str = "windlass-sim";

/// Registers [`NODE`], Ready, with the address the simulated Pods report as their `hostIP`.
async fn register_node(client: &Client) {
    let nodes: Api<k8s_openapi::api::core::v1::Node> = Api::all(client.clone());
    let node = json!({"apiVersion": "v1", "kind": "Node",
        "metadata": {"name": NODE, "labels": {"kubernetes.io/hostname": NODE}}});
    let params = PostParams {
        field_manager: Some(FIELD_MANAGER.into()),
        ..PostParams::default()
    };
    if let Ok(node) = serde_json::from_value(node) {
        retrying("create", "/nodes", NODE, 409, || {
            nodes.create(&params, &node)
        })
        .await;
    }
    let now = crate::api::now();
    let status = json!({"status": {
        "conditions": [{"type": "Ready", "status": "True", "reason": "KubeletReady",
            "message": "the workload simulator plays this node's kubelet",
            "lastHeartbeatTime": now, "lastTransitionTime": now}],
        "addresses": [{"type": "InternalIP", "address": "10.0.0.1"},
            {"type": "Hostname", "address": NODE}],
    }});
    let patch_params = PatchParams {
        field_manager: Some(FIELD_MANAGER.into()),
        ..PatchParams::default()
    };
    let patch = Patch::Merge(&status);
    retrying("patch", "/nodes", NODE, 0, || {
        nodes.patch_status(NODE, &patch_params, &patch)
    })
    .await;
}

/// How long a write is tried again while the API fails (a restarting kube-apiserver).
const RETRY_FOR: std::time::Duration = std::time::Duration::from_secs(120);

/// Sends a write until it succeeds, fails with `fine` (already there, already gone) or with
/// another client error, or [`RETRY_FOR`] has passed: with nothing else to trigger it again,
/// a write lost while the API is down (a Pod's Running status, say) would leave its object
/// where it was for good.
async fn retrying<T, F, Fut>(verb: &str, key: &str, name: &str, fine: u16, write: F)
where
    F: Fn() -> Fut,
    Fut: std::future::Future<Output = kube::Result<T>>,
{
    let deadline = tokio::time::Instant::now() + RETRY_FOR;
    let mut wait = std::time::Duration::from_millis(100);
    loop {
        let error = match write().await {
            Ok(_) => return,
            Err(kube::Error::Api(s)) if s.code == fine => return,
            Err(kube::Error::Api(s)) if s.code < 500 && s.code != 429 => {
                tracing::warn!(error = %s, key, name, "simulator {verb} refused");
                return;
            }
            Err(e) => e,
        };
        if tokio::time::Instant::now() + wait > deadline {
            tracing::warn!(error = %error, key, name, "simulator {verb} failed");
            return;
        }
        tracing::debug!(error = %error, key, name, "simulator {verb}: trying again");
        tokio::time::sleep(wait).await;
        wait = (wait * 2).min(std::time::Duration::from_secs(5));
    }
}

/// `kubectl delete pod` as `system:serviceaccount:<pod_ns>:<account>`: a token from a
/// TokenRequest (what the kubelet projects into the Pod), then kubectl's requests — a list by
/// the selector, a delete per Pod — with it. `Err` is what kubectl would print.
async fn kubectl_as(
    admin: Client,
    base: kube::Config,
    pod_ns: &str,
    account: &str,
    cmd: &DeletePods,
) -> Result<(), String> {
    use k8s_openapi::api::authentication::v1::{TokenRequest, TokenRequestSpec};
    use k8s_openapi::api::core::v1::{Pod, ServiceAccount};
    let request = TokenRequest {
        spec: TokenRequestSpec {
            expiration_seconds: Some(600),
            ..TokenRequestSpec::default()
        },
        ..TokenRequest::default()
    };
    let token = Api::<ServiceAccount>::namespaced(admin, pod_ns)
        .create_token_request(account, &PostParams::default(), &request)
        .await
        .map_err(|e| format!("error: no token for ServiceAccount {pod_ns}/{account}: {e}"))?
        .status
        .ok_or_else(|| format!("error: no token for ServiceAccount {pod_ns}/{account}"))?
        .token;
    let mut config = base;
    config.auth_info = kube::config::AuthInfo {
        token: Some(token.into()),
        ..kube::config::AuthInfo::default()
    };
    let client = Client::try_from(config).map_err(|e| format!("error: {e}"))?;
    let ns = cmd.namespace.as_deref().unwrap_or(pod_ns);
    let pods: Api<Pod> = Api::namespaced(client, ns);
    let kubectl_error = |e: kube::Error| match e {
        kube::Error::Api(s) => format!("Error from server ({}): {}", s.reason, s.message),
        other => format!("error: {other}"),
    };
    let mut targets: Vec<(String, bool)> = cmd.names.iter().map(|n| (n.clone(), false)).collect();
    if let Some(selector) = &cmd.selector {
        let list = pods
            .list(&kube::api::ListParams::default().labels(selector))
            .await
            .map_err(kubectl_error)?;
        targets.extend(
            list.items
                .into_iter()
                .filter(|p| p.metadata.deletion_timestamp.is_none())
                .filter_map(|p| p.metadata.name)
                .map(|n| (n, true)),
        );
    }
    for (name, selected) in targets {
        match pods.delete(&name, &DeleteParams::default()).await {
            Ok(_) => {}
            // Listed, then gone before the delete: kubectl says nothing of it.
            Err(kube::Error::Api(s)) if s.code == 404 && selected => {}
            Err(e) => return Err(kubectl_error(e)),
        }
    }
    Ok(())
}

/// Runs the simulator against the API server `kube` configures (its admin credentials), until
/// the task is dropped. Only the kubelet's, volume binding's and snapshot controller's parts
/// (see the module docs); what a Pod does through the API it does as the Pod's ServiceAccount.
///
/// # Panics
/// When `kube` cannot make a client (a kubeconfig that loaded always can).
pub async fn run(kube: kube::Config, config: Config) {
    run_with_pods(kube, config, None).await;
}

/// [`run`], and the Pods `pods` selects run as local processes from their images
/// ([`super::processes`]).
///
/// # Panics
/// When `kube` cannot make a client, or `pods` is given and its directory cannot be made.
pub async fn run_with_pods(
    kube: kube::Config,
    config: Config,
    pods: Option<super::processes::RunPods>,
) {
    let runner = pods.map(|pods| {
        Arc::new(
            super::processes::Runner::new(pods, &kube)
                .unwrap_or_else(|e| panic!("the simulator cannot run Pods: {e}")),
        )
    });
    let client = Client::try_from(kube.clone()).expect("a client from the simulator's config");
    let resources: HashMap<&'static str, ApiResource> = WATCHED
        .iter()
        .map(|(key, group, version, kind, plural)| {
            let gvk = GroupVersionKind::gvk(group, version, kind);
            (*key, ApiResource::from_gvk_with_plural(&gvk, plural))
        })
        .collect();
    let remote = Arc::new(Remote {
        client,
        base: kube,
        resources,
        caches: RwLock::new(HashMap::new()),
    });
    register_node(&remote.client).await;
    let sim = Sim::new(remote.clone(), config, false);
    if let Some(runner) = runner {
        let _ = sim.runner.set(runner);
    }
    let watches = WATCHED.iter().map(|(key, ..)| {
        let remote = remote.clone();
        let sim = sim.clone();
        async move { watch(key, &remote, &sim).await }
    });
    futures::future::join_all(watches).await;
}

/// Keeps the cache of one resource and hands every change to the simulator. A re-list (after a
/// lost watch) replaces the cache when it is complete.
async fn watch(key: &'static str, remote: &Remote, sim: &Arc<Sim>) {
    let Some(api) = remote.api(key, "") else {
        return;
    };
    let mut events = watcher(api, watcher::Config::default())
        .default_backoff()
        .boxed();
    let mut relist: Option<Objects> = None;
    while let Some(event) = events.next().await {
        let event = match event {
            Ok(event) => event,
            Err(e) => {
                tracing::debug!(error = %e, key, "simulator watch");
                continue;
            }
        };
        let (object, kind) = match event {
            watcher::Event::Init => {
                relist = Some(Objects::new());
                continue;
            }
            watcher::Event::InitDone => {
                if let Some(objects) = relist.take() {
                    let listed: Vec<Arc<Value>> = objects.values().cloned().collect();
                    remote
                        .caches
                        .write()
                        .unwrap_or_else(|e| e.into_inner())
                        .insert(key, objects);
                    for object in listed {
                        let (ns, name) = ns_name(&object);
                        sim.dispatch(key, EventType::Modified, &object, &ns, &name);
                    }
                }
                continue;
            }
            watcher::Event::InitApply(o) | watcher::Event::Apply(o) => (o, EventType::Modified),
            watcher::Event::Delete(o) => (o, EventType::Deleted),
        };
        let Ok(value) = serde_json::to_value(&object) else {
            continue;
        };
        let (ns, name) = ns_name(&value);
        let value = Arc::new(value);
        {
            let id = (ns.clone(), name.clone());
            match &mut relist {
                Some(objects) if kind != EventType::Deleted => {
                    objects.insert(id, value.clone());
                }
                _ => {
                    let mut caches = remote.caches.write().unwrap_or_else(|e| e.into_inner());
                    let objects = caches.entry(key).or_default();
                    if kind == EventType::Deleted {
                        objects.remove(&id);
                    } else {
                        objects.insert(id, value.clone());
                    }
                }
            }
        }
        // Objects seen during a re-list are handed on once the cache holds them all (above): the
        // simulator reads related objects (a Pod's Job) back from the cache.
        if relist.is_none() {
            sim.dispatch(key, kind, &value, &ns, &name);
        }
    }
}

/// CustomResourceDefinitions for the CSI snapshot API (`snapshot.storage.k8s.io/v1`:
/// VolumeSnapshot, VolumeSnapshotContent, VolumeSnapshotClass), which a cluster gets with its
/// snapshot controller and which kube-apiserver does not serve by itself; the simulator plays
/// that controller. Their schemas keep unknown fields: enough to store and serve the objects,
/// not the upstream validation.
pub fn snapshot_crds() -> Vec<Value> {
    [
        ("VolumeSnapshot", "volumesnapshots", "Namespaced"),
        ("VolumeSnapshotContent", "volumesnapshotcontents", "Cluster"),
        ("VolumeSnapshotClass", "volumesnapshotclasses", "Cluster"),
    ]
    .into_iter()
    .map(|(kind, plural, scope)| {
        let status = if kind == "VolumeSnapshotClass" {
            json!({})
        } else {
            json!({"status": {}})
        };
        json!({
            "apiVersion": "apiextensions.k8s.io/v1", "kind": "CustomResourceDefinition",
            // `*.k8s.io` groups need an approval annotation; "unapproved, …" is the accepted
            // way to say this stand-in is not the reviewed upstream definition.
            "metadata": {"name": format!("{plural}.snapshot.storage.k8s.io"),
                "annotations": {"api-approved.kubernetes.io":
                    "unapproved, a stand-in for the CSI snapshot CRDs"}},
            "spec": {
                "group": "snapshot.storage.k8s.io", "scope": scope,
                "names": {"kind": kind, "plural": plural, "singular": kind.to_lowercase(),
                    "listKind": format!("{kind}List")},
                "versions": [{"name": "v1", "served": true, "storage": true, "subresources": status,
                    "schema": {"openAPIV3Schema": {"type": "object",
                        "x-kubernetes-preserve-unknown-fields": true}}}],
            },
        })
    })
    .collect()
}

/// Creates [`snapshot_crds`] where the cluster has no CRD of that name yet (an existing one,
/// such as the real snapshotter's, is left alone) and waits until each is Established.
///
/// # Errors
/// A refused create, naming the CRD, or one not Established within 30 seconds.
pub async fn install_snapshot_api(client: &Client) -> Result<(), String> {
    let crds: Api<CustomResourceDefinition> = Api::all(client.clone());
    for crd in snapshot_crds() {
        let crd: CustomResourceDefinition =
            serde_json::from_value(crd).map_err(|e| format!("snapshot CRD: {e}"))?;
        let name = crd.metadata.name.clone().unwrap_or_default();
        match crds.create(&PostParams::default(), &crd).await {
            Ok(_) => {}
            Err(kube::Error::Api(s)) if s.code == 409 => {}
            Err(e) => return Err(format!("creating CRD {name}: {e}")),
        }
        crate::crd::wait_established(&crds, &name, std::time::Duration::from_secs(30)).await?;
    }
    Ok(())
}
