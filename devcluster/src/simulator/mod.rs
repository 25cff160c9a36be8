//! The workload simulator (kwok-style): what the controllers and kubelets of a real cluster
//! would do, enough for an operator to see its children come up.
//!
//! - StatefulSet → Pods `<name>-0..n-1` and PVCs from volumeClaimTemplates (owned by the
//!   StatefulSet only with `persistentVolumeClaimRetentionPolicy.whenDeleted: Delete`; otherwise
//!   they survive it, like the real default retention), readiness after
//!   `ready_delay`, `readyReplicas`/`currentRevision`/`updateRevision`, rolling template changes
//!   one Pod at a time from the highest ordinal.
//! - Job → one Pod that succeeds after the delay (fails with [`crate::FAIL_ANNOTATION`]), Job
//!   conditions `Complete` / `Failed`.
//! - CronJob → Jobs on schedule, on a clock sped up by `cron_speedup`.
//! - Deployment → `readyReplicas`; PVC → `Bound`; Service → a `clusterIP`; VolumeSnapshot →
//!   `readyToUse` (or `status.error` with the fail annotation).
//!
//! The simulator writes through the same API semantics as clients (field manager
//! `devcluster-simulator`), without injected faults.

mod cronjob;
mod job;
mod statefulset;
mod workloads;

use crate::api::{Cluster, WriteOpts};
use crate::cluster::Options;
use crate::patch::PatchType;
use crate::store::{Event, EventType};
use serde_json::{Value, json};
use std::sync::Arc;
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::Duration;
use tokio::sync::broadcast::error::RecvError;

/// Simulator settings.
#[derive(Debug, Clone)]
pub struct Config {
    /// Delay before a Pod is ready, a Job completes, a snapshot is ready.
    pub ready_delay: Duration,
    /// CronJob clock speed-up.
    pub cron_speedup: f64,
}

impl From<&Options> for Config {
    fn from(o: &Options) -> Self {
        Self {
            ready_delay: o.ready_delay,
            cron_speedup: o.cron_speedup,
        }
    }
}

/// The simulator's handle on the cluster.
#[derive(Debug)]
pub(crate) struct Sim {
    pub cluster: Arc<Cluster>,
    pub config: Config,
    next_ip: AtomicU32,
}

/// Runs the simulator until the task is dropped.
pub async fn run(cluster: Arc<Cluster>, config: Config) {
    let mut rx = cluster.store.subscribe();
    let sim = Arc::new(Sim {
        cluster,
        config,
        next_ip: AtomicU32::new(10),
    });
    sim.resync();
    let mut tick = tokio::time::interval(Duration::from_millis(100));
    loop {
        tokio::select! {
            ev = rx.recv() => match ev {
                Ok(e) => sim.on_event(&e),
                Err(RecvError::Lagged(_)) => sim.resync(),
                Err(RecvError::Closed) => return,
            },
            _ = tick.tick() => cronjob::tick(&sim),
        }
    }
}

/// The controller owner reference's kind and name, if any.
pub(crate) fn controller_of(obj: &Value) -> Option<(String, String)> {
    obj["metadata"]["ownerReferences"]
        .as_array()?
        .iter()
        .find(|r| r["controller"] == true)
        .map(|r| {
            (
                r["kind"].as_str().unwrap_or_default().to_string(),
                r["name"].as_str().unwrap_or_default().to_string(),
            )
        })
}

/// The Pods in `ns` named `<owner>-…` with an owner reference to `uid`: those the simulator
/// makes for a StatefulSet or Job called `owner`. Looked up by name prefix, not by listing the
/// namespace, which made every StatefulSet and Job event cost O(Pods in the namespace).
pub(crate) fn owned_pods(sim: &Sim, ns: &str, owner: &str, uid: &Value) -> Vec<Arc<Value>> {
    sim.cluster
        .store
        .list_prefixed("/pods", ns, &format!("{owner}-"))
        .into_iter()
        .filter(|p| {
            p["metadata"]["ownerReferences"]
                .as_array()
                .into_iter()
                .flatten()
                .any(|r| r["uid"] == *uid)
        })
        .collect()
}

/// An ownerReference to `owner` as its controller.
pub(crate) fn owner_ref(owner: &Value) -> Value {
    json!({"apiVersion": owner["apiVersion"], "kind": owner["kind"], "name": owner["metadata"]["name"],
        "uid": owner["metadata"]["uid"], "controller": true, "blockOwnerDeletion": true})
}

/// Whether the object or the given template metadata carries the fail annotation.
pub(crate) fn marked_to_fail(meta: &Value) -> bool {
    meta["annotations"][crate::FAIL_ANNOTATION].as_str() == Some("true")
}

pub(crate) fn ns_name(obj: &Value) -> (String, String) {
    let m = &obj["metadata"];
    (
        m["namespace"].as_str().unwrap_or_default().to_string(),
        m["name"].as_str().unwrap_or_default().to_string(),
    )
}

impl Sim {
    fn opts(subresource: &str) -> WriteOpts {
        WriteOpts {
            field_manager: "devcluster-simulator".into(),
            subresource: subresource.into(),
            ..WriteOpts::default()
        }
    }

    /// One object.
    pub fn get(&self, key: &str, ns: &str, name: &str) -> Option<Arc<Value>> {
        self.cluster.store.get(key, ns, name)
    }

    /// Objects of a resource in a namespace.
    pub fn list(&self, key: &str, ns: &str) -> Vec<Arc<Value>> {
        self.cluster.store.list(key, Some(ns)).0
    }

    /// Creates an object (already existing is fine).
    pub fn create(&self, key: &str, obj: Value) {
        if let Some(rt) = self.cluster.resource(key) {
            let version = rt.preferred_version().to_string();
            if let Err(e) = self
                .cluster
                .create(&rt, &version, None, obj, &Self::opts(""))
                && e.code != 409
            {
                tracing::warn!(error = %e, key, "simulator create failed");
            }
        }
    }

    /// Merge-patches an object, or its status with `subresource = "status"`.
    pub fn patch(&self, key: &str, ns: &str, name: &str, subresource: &str, body: &Value) {
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
                &Self::opts(subresource),
            ) && e.code != 404
            {
                tracing::warn!(error = %e, key, name, "simulator patch failed");
            }
        }
    }

    /// Deletes an object (in the background).
    pub fn delete(&self, key: &str, ns: &str, name: &str) {
        crate::gc::delete(&self.cluster, key, ns, name);
    }

    /// A fresh pod IP.
    pub fn ip(&self) -> String {
        let n = self.next_ip.fetch_add(1, Ordering::Relaxed);
        format!("10.244.{}.{}", (n / 250) % 250, n % 250 + 2)
    }

    /// A fresh service cluster IP.
    pub fn cluster_ip(&self) -> String {
        let n = self.next_ip.fetch_add(1, Ordering::Relaxed);
        format!("10.96.{}.{}", (n / 250) % 250, n % 250 + 2)
    }

    /// Runs `f` after the ready delay.
    pub fn later(self: &Arc<Self>, f: impl FnOnce(&Sim) + Send + 'static) {
        let sim = self.clone();
        tokio::spawn(async move {
            tokio::time::sleep(sim.config.ready_delay).await;
            f(&sim);
        });
    }

    fn resync(self: &Arc<Self>) {
        for (key, obj) in self.cluster.store.all_objects() {
            let (ns, name) = ns_name(&obj);
            self.dispatch(&key, EventType::Added, &obj, &ns, &name);
        }
    }

    fn on_event(self: &Arc<Self>, e: &Event) {
        let (ns, name) = ns_name(&e.object);
        self.dispatch(&e.key, e.kind, &e.object, &ns, &name);
    }

    fn dispatch(self: &Arc<Self>, key: &str, kind: EventType, obj: &Value, ns: &str, name: &str) {
        let live = kind != EventType::Deleted && obj["metadata"].get("deletionTimestamp").is_none();
        match key {
            "apps/statefulsets" if live => statefulset::reconcile(self, ns, name),
            "batch/jobs" if live => job::reconcile(self, ns, name),
            "/pods" => {
                if kind == EventType::Added {
                    workloads::start_pod(self, obj);
                }
                match controller_of(obj) {
                    Some((k, owner)) if k == "StatefulSet" => {
                        statefulset::reconcile(self, ns, &owner)
                    }
                    Some((k, owner)) if k == "Job" => job::reconcile(self, ns, &owner),
                    _ => {}
                }
            }
            "apps/deployments" if live => workloads::deployment(self, obj),
            "/persistentvolumeclaims" if kind == EventType::Added => {
                workloads::bind_claim(self, obj)
            }
            "/services" if kind == EventType::Added => workloads::assign_cluster_ip(self, obj),
            "snapshot.storage.k8s.io/volumesnapshots" if kind == EventType::Added => {
                workloads::snapshot(self, obj)
            }
            _ => {}
        }
    }
}
