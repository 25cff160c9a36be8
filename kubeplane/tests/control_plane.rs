//! The control plane is the real thing: admission (Pod Security), the token controller, the
//! garbage collector and the workload controllers answer as in a cluster, and a stopped
//! control plane leaves no process behind.

#![allow(clippy::unwrap_used, clippy::expect_used)] // Tests: a panic is the failure report.

use std::time::{Duration, Instant};

use k8s_openapi::api::{
    apps::v1::StatefulSet,
    authentication::v1::TokenRequest,
    core::v1::{ConfigMap, Namespace, Pod, ServiceAccount},
};
use kube::{
    Api,
    api::{DeleteParams, ObjectMeta, PostParams},
};
use serde_json::json;
use windlass_kubeplane::ControlPlane;

async fn namespace(client: &kube::Client, name: &str, enforce: Option<&str>) {
    let mut labels = std::collections::BTreeMap::new();
    if let Some(level) = enforce {
        labels.insert(
            "pod-security.kubernetes.io/enforce".to_string(),
            level.to_string(),
        );
    }
    let ns = Namespace {
        metadata: ObjectMeta {
            name: Some(name.into()),
            labels: Some(labels),
            ..ObjectMeta::default()
        },
        ..Namespace::default()
    };
    Api::<Namespace>::all(client.clone())
        .create(&PostParams::default(), &ns)
        .await
        .unwrap();
}

async fn eventually<T, F, Fut>(what: &str, f: F) -> T
where
    F: Fn() -> Fut,
    Fut: std::future::Future<Output = Option<T>>,
{
    let start = Instant::now();
    loop {
        if let Some(v) = f().await {
            return v;
        }
        assert!(
            start.elapsed() < Duration::from_secs(60),
            "timed out waiting for {what}"
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

#[tokio::test]
async fn pod_security_admission_refuses_a_privileged_pod_in_a_restricted_namespace() {
    let client = ControlPlane::shared().client().await.unwrap();
    namespace(&client, "psa-restricted", Some("restricted")).await;
    let pod: Pod = serde_json::from_value(json!({
        "metadata": {"name": "root"},
        "spec": {"containers": [{"name": "c", "image": "busybox",
            "securityContext": {"privileged": true}}]},
    }))
    .unwrap();
    let err = Api::<Pod>::namespaced(client.clone(), "psa-restricted")
        .create(&PostParams::default(), &pod)
        .await
        .unwrap_err();
    let kube::Error::Api(status) = err else {
        panic!("expected an API error, got {err}")
    };
    assert_eq!(status.code, 403, "{status:?}");
    assert!(
        status
            .message
            .contains("violates PodSecurity \"restricted:latest\""),
        "{}",
        status.message
    );
}

#[tokio::test]
async fn service_accounts_get_tokens_and_the_garbage_collector_and_statefulset_controller_run() {
    let client = ControlPlane::shared().client().await.unwrap();
    namespace(&client, "controllers", None).await;
    // The token controller: a TokenRequest for a new ServiceAccount.
    let accounts: Api<ServiceAccount> = Api::namespaced(client.clone(), "controllers");
    let sa: ServiceAccount =
        serde_json::from_value(json!({"metadata": {"name": "robot"}})).unwrap();
    accounts.create(&PostParams::default(), &sa).await.unwrap();
    let token = accounts
        .create_token_request("robot", &PostParams::default(), &TokenRequest::default())
        .await
        .unwrap();
    let token = token.status.unwrap().token;
    assert_eq!(token.split('.').count(), 3, "a JWT");

    // The garbage collector: a ConfigMap owned by another goes with it.
    let maps: Api<ConfigMap> = Api::namespaced(client.clone(), "controllers");
    let owner: ConfigMap = serde_json::from_value(json!({"metadata": {"name": "owner"}})).unwrap();
    let owner = maps.create(&PostParams::default(), &owner).await.unwrap();
    let dependent: ConfigMap = serde_json::from_value(json!({"metadata": {"name": "dependent",
        "ownerReferences": [{"apiVersion": "v1", "kind": "ConfigMap", "name": "owner",
            "uid": owner.metadata.uid.unwrap()}]}}))
    .unwrap();
    maps.create(&PostParams::default(), &dependent)
        .await
        .unwrap();
    maps.delete("owner", &DeleteParams::default())
        .await
        .unwrap();
    eventually("the dependent ConfigMap to be collected", || async {
        maps.get_opt("dependent")
            .await
            .unwrap()
            .is_none()
            .then_some(())
    })
    .await;

    // The StatefulSet controller makes its Pod (which stays Pending: there is no kubelet).
    let sts: StatefulSet = serde_json::from_value(json!({
        "metadata": {"name": "db"},
        "spec": {"serviceName": "db", "selector": {"matchLabels": {"app": "db"}},
            "template": {"metadata": {"labels": {"app": "db"}},
                "spec": {"containers": [{"name": "c", "image": "busybox"}]}}},
    }))
    .unwrap();
    Api::<StatefulSet>::namespaced(client.clone(), "controllers")
        .create(&PostParams::default(), &sts)
        .await
        .unwrap();
    let pods: Api<Pod> = Api::namespaced(client.clone(), "controllers");
    let pod = eventually("the StatefulSet's Pod", || async {
        pods.get_opt("db-0").await.unwrap()
    })
    .await;
    assert_eq!(pod.owner_references_controller_kind(), Some("StatefulSet"));
}

trait ControllerKind {
    fn owner_references_controller_kind(&self) -> Option<&str>;
}

impl ControllerKind for Pod {
    fn owner_references_controller_kind(&self) -> Option<&str> {
        self.metadata
            .owner_references
            .as_ref()?
            .iter()
            .find(|r| r.controller == Some(true))
            .map(|r| r.kind.as_str())
    }
}

/// Whether a process with this pid still exists (and is not a zombie).
fn alive(pid: u32) -> bool {
    std::fs::read_to_string(format!("/proc/{pid}/stat")).is_ok_and(|stat| !stat.contains(") Z "))
}

fn children_of_this_process() -> Vec<(u32, String)> {
    let me = std::process::id().to_string();
    let mut found = Vec::new();
    for entry in std::fs::read_dir("/proc").unwrap().flatten() {
        let Ok(pid) = entry.file_name().to_string_lossy().parse::<u32>() else {
            continue;
        };
        let Ok(stat) = std::fs::read_to_string(format!("/proc/{pid}/stat")) else {
            continue;
        };
        // pid (comm) state ppid ...
        let Some((comm, rest)) = stat.split_once(") ") else {
            continue;
        };
        let ppid = rest.split_whitespace().nth(1).unwrap_or_default();
        let comm = comm.split_once('(').map(|(_, c)| c).unwrap_or_default();
        if ppid == me
            && ["etcd", "kube-apiserver", "kube-controller"]
                .iter()
                .any(|n| comm.starts_with(n))
        {
            found.push((pid, comm.to_string()));
        }
    }
    found
}

#[tokio::test]
async fn a_stopped_control_plane_leaves_no_process_behind() {
    let plane = ControlPlane::start().await.unwrap();
    let client = plane.client().await.unwrap();
    // The version pinned in tools/kube/k8s/go.mod, as /version reports it.
    let go_mod = std::fs::read_to_string(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../tools/kube/k8s/go.mod"
    ))
    .unwrap();
    let pinned = go_mod
        .lines()
        .find_map(|l| l.trim().strip_prefix("k8s.io/kubernetes v"))
        .and_then(|rest| rest.split_whitespace().next())
        .expect("k8s.io/kubernetes in go.mod");
    let version = client.apiserver_version().await.unwrap();
    assert_eq!(version.git_version, format!("v{pinned}"));
    // Its three processes, children of this one (other tests' control planes may run
    // beside it in this process, so they are found by the plane's own record).
    let children: Vec<u32> = children_of_this_process().iter().map(|(p, _)| *p).collect();
    let mine: Vec<(u32, &str)> = ["etcd", "kube-apiserver", "kube-controller-manager"]
        .into_iter()
        .map(|name| (plane.pid(name).expect("running"), name))
        .collect();
    for (pid, name) in &mine {
        assert!(
            children.contains(pid),
            "{name} ({pid}) is not a child of this process"
        );
        assert!(alive(*pid), "{name} ({pid})");
    }
    drop(plane);
    for (pid, name) in mine {
        assert!(!alive(pid), "{name} ({pid}) is still running");
    }
}

/// What the host's `apply::precondition` relies on: a server-side apply whose body carries a
/// uid other than the live object's is refused, and the object is left as it was. (The
/// devcluster answered 409 here until this test showed kube-apiserver answers 422: a patch
/// that changes the uid is invalid; only a PUT's uid is a precondition.)
#[tokio::test]
async fn an_apply_carrying_another_objects_uid_is_refused() {
    let client = ControlPlane::shared().client().await.unwrap();
    namespace(&client, "preconditions", None).await;
    let maps: Api<ConfigMap> = Api::namespaced(client.clone(), "preconditions");
    let first: ConfigMap =
        serde_json::from_value(json!({"metadata": {"name": "c"}, "data": {"who": "first"}}))
            .unwrap();
    let old_uid = maps
        .create(&PostParams::default(), &first)
        .await
        .unwrap()
        .metadata
        .uid
        .unwrap();
    maps.delete("c", &DeleteParams::default()).await.unwrap();
    let second: ConfigMap =
        serde_json::from_value(json!({"metadata": {"name": "c"}, "data": {"who": "second"}}))
            .unwrap();
    let second = maps.create(&PostParams::default(), &second).await.unwrap();
    let apply = kube::api::PatchParams::apply("windlass/test").force();
    let body = json!({"apiVersion": "v1", "kind": "ConfigMap",
        "metadata": {"name": "c", "uid": old_uid}, "data": {"who": "taken"}});
    let err = maps
        .patch("c", &apply, &kube::api::Patch::Apply(&body))
        .await
        .unwrap_err();
    let kube::Error::Api(status) = err else {
        panic!("expected an API error, got {err}")
    };
    assert_eq!(status.code, 422, "{status:?}");
    assert!(
        status.message.contains("metadata.uid") && status.message.contains("field is immutable"),
        "{}",
        status.message
    );
    let now = maps.get("c").await.unwrap();
    assert_eq!(now.data.unwrap()["who"], "second");
    assert_eq!(
        now.metadata.resource_version,
        second.metadata.resource_version
    );
}

/// What the chaos suite's restarts rely on: etcd and kube-apiserver killed with SIGKILL and
/// started again keep every object (same uid, same resourceVersion), the revisions go on
/// from where they were, and the killed processes are gone.
#[tokio::test]
async fn etcd_and_kube_apiserver_restart_without_losing_an_object() {
    let plane = ControlPlane::start().await.unwrap();
    let client = plane.client().await.unwrap();
    let maps: Api<ConfigMap> = Api::namespaced(client.clone(), "default");
    let made = maps
        .create(
            &PostParams::default(),
            &serde_json::from_value(json!({"metadata": {"name": "kept"}, "data": {"k": "v"}}))
                .unwrap(),
        )
        .await
        .unwrap();
    for process in ["etcd", "kube-apiserver"] {
        let old = plane.pid(process).expect("running");
        plane
            .restart(process, Duration::from_secs(1))
            .await
            .unwrap_or_else(|e| panic!("{process} restarts: {e:#}"));
        // The client reconnects; the object is the one made before.
        let kept = eventually(&format!("the API after {process} restarted"), || async {
            Api::<ConfigMap>::namespaced(plane.client().await.ok()?, "default")
                .get("kept")
                .await
                .ok()
        })
        .await;
        assert_eq!(kept.metadata.uid, made.metadata.uid, "after {process}");
        assert_eq!(
            kept.metadata.resource_version, made.metadata.resource_version,
            "after {process}"
        );
        let new = plane.pid(process).expect("running again");
        assert_ne!(old, new);
        assert!(!alive(old), "the killed {process} ({old}) is gone");
        assert!(alive(new));
    }
    // The store's revisions go on from where they were (a write after both restarts gets a
    // later resourceVersion). A watch from before the restarts is not promised to resume:
    // a restarted kube-apiserver's watch cache starts at the current revision and answers an
    // older one 410 Gone, as clients expect (they list again).
    let changed = maps
        .patch(
            "kept",
            &kube::api::PatchParams::default(),
            &kube::api::Patch::Merge(json!({"data": {"k": "w"}})),
        )
        .await
        .unwrap();
    let revision = |cm: &ConfigMap| -> u64 {
        cm.metadata
            .resource_version
            .as_deref()
            .and_then(|rv| rv.parse().ok())
            .expect("a numeric resourceVersion")
    };
    assert!(
        revision(&changed) > revision(&made),
        "{} after {}",
        revision(&changed),
        revision(&made)
    );
}

/// The Service IP range holds the 10,000 ClusterIP Services of a fleet-scale benchmark: with
/// a /24, the 254th Service of the 1,000-parent benchmark was refused ("range is full") and
/// the run never converged.
#[tokio::test]
async fn the_service_ip_range_holds_ten_thousand_cluster_ips() {
    let client = ControlPlane::shared().client().await.unwrap();
    let resource = kube::api::ApiResource::from_gvk_with_plural(
        &kube::api::GroupVersionKind::gvk("networking.k8s.io", "v1", "ServiceCIDR"),
        "servicecidrs",
    );
    let cidrs: Api<kube::api::DynamicObject> = Api::all_with(client, &resource);
    let default = eventually("the default ServiceCIDR", || {
        let cidrs = cidrs.clone();
        async move { cidrs.get("kubernetes").await.ok() }
    })
    .await;
    let ranges = default.data["spec"]["cidrs"].as_array().unwrap().clone();
    let addresses: u64 = ranges
        .iter()
        .map(|r| {
            let prefix: u32 = r
                .as_str()
                .unwrap()
                .rsplit('/')
                .next()
                .unwrap()
                .parse()
                .unwrap();
            1u64 << (32 - prefix)
        })
        .sum();
    assert!(
        addresses >= 10_000,
        "the Service IP range {ranges:?} has {addresses} addresses"
    );
}
