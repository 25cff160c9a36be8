//! How the simulator reaches a cluster: reads (from the store, or from watch caches) and writes
//! (through the API layer, or over HTTP). Writes are fire-and-forget, as a kubelet's status
//! updates are: a failed one is logged, and the next event retries.

use std::sync::Arc;

use serde_json::Value;

use super::{Sim, kubectl::DeletePods};
use crate::api::{Cluster, WriteOpts};
use crate::patch::PatchType;

/// Reads and writes by resource key (`/pods`, `apps/statefulsets`,
/// `snapshot.storage.k8s.io/volumesnapshots`, …).
pub(crate) trait Backend: Send + Sync + 'static {
    /// One object.
    fn get(&self, key: &str, ns: &str, name: &str) -> Option<Arc<Value>>;
    /// Every object of a resource.
    fn list_all(&self, key: &str) -> Vec<Arc<Value>>;
    /// The objects of a resource in `ns` whose names start with `prefix`.
    fn list_prefixed(&self, key: &str, ns: &str, prefix: &str) -> Vec<Arc<Value>>;
    /// Creates an object (one that exists already is fine); true when it was created (over
    /// HTTP: when the create was sent).
    fn create(&self, key: &str, obj: Value) -> bool;
    /// Merge-patches an object, or its status with `subresource = "status"`.
    fn patch(&self, key: &str, ns: &str, name: &str, subresource: &str, body: &Value);
    /// Deletes an object (in the background).
    fn delete(&self, key: &str, ns: &str, name: &str);
    /// Binds a Pod to the simulator's Node, as a scheduler would (`pods/binding`). Inside the
    /// devcluster nothing reads a Pod's node, and Pods stay unbound.
    fn bind(&self, _ns: &str, _name: &str) {}
    /// Finishes the graceful deletion of a Pod bound to the simulator's Node, as its kubelet
    /// would once the containers stopped (a delete with grace period 0, on the Pod's uid).
    /// Inside the devcluster Pods are never bound, and a deletion needs no kubelet.
    fn terminate(&self, _ns: &str, _name: &str, _uid: &str) {}
    /// Carries out a Pod's `kubectl delete pod` as the Pod's ServiceAccount `account` would,
    /// then writes the Pod's status `status(outcome)`: `Ok`, or the error kubectl would print
    /// (and exit 1 with). Inside the devcluster there is no RBAC: the simulator's own writes
    /// carry it out.
    fn kubectl(&self, sim: &Sim, pod: PodRef, account: &str, cmd: DeletePods, status: PodStatus) {
        let _ = account;
        cmd.run(sim, &pod.namespace);
        self.patch(
            "/pods",
            &pod.namespace,
            &pod.name,
            "status",
            &status(Ok(())),
        );
    }
}

/// A Pod by namespace and name.
#[derive(Debug, Clone)]
pub(crate) struct PodRef {
    pub namespace: String,
    pub name: String,
}

/// The status to write once a Pod's command finished: from `Ok` or kubectl's error.
pub(crate) type PodStatus = Box<dyn FnOnce(Result<(), String>) -> Value + Send>;

/// Inside the devcluster: the store, and the API layer every client's write goes through
/// (field manager `devcluster-simulator`, no injected faults).
pub(crate) struct InProcess {
    pub cluster: Arc<Cluster>,
}

fn opts(subresource: &str) -> WriteOpts {
    WriteOpts {
        field_manager: "devcluster-simulator".into(),
        subresource: subresource.into(),
        ..WriteOpts::default()
    }
}

impl Backend for InProcess {
    fn get(&self, key: &str, ns: &str, name: &str) -> Option<Arc<Value>> {
        self.cluster.store.get(key, ns, name)
    }

    fn list_all(&self, key: &str) -> Vec<Arc<Value>> {
        self.cluster.store.list(key, None).0
    }

    fn list_prefixed(&self, key: &str, ns: &str, prefix: &str) -> Vec<Arc<Value>> {
        self.cluster.store.list_prefixed(key, ns, prefix)
    }

    fn create(&self, key: &str, obj: Value) -> bool {
        let Some(rt) = self.cluster.resource(key) else {
            return false;
        };
        let version = rt.preferred_version().to_string();
        match self.cluster.create(&rt, &version, None, obj, &opts("")) {
            Ok(_) => true,
            Err(e) => {
                if e.code != 409 {
                    tracing::warn!(error = %e, key, "simulator create failed");
                }
                false
            }
        }
    }

    fn patch(&self, key: &str, ns: &str, name: &str, subresource: &str, body: &Value) {
        if let Some(rt) = self.cluster.resource(key) {
            let version = rt.preferred_version().to_string();
            let bytes = body.to_string();
            if let Err(e) = self.cluster.patch(
                &rt,
                &version,
                ns,
                name,
                PatchType::Merge,
                bytes.as_bytes(),
                &opts(subresource),
            ) && e.code != 404
            {
                tracing::warn!(error = %e, key, name, "simulator patch failed");
            }
        }
    }

    fn delete(&self, key: &str, ns: &str, name: &str) {
        crate::gc::delete(&self.cluster, key, ns, name);
    }
}
