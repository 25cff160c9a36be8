//! The workload simulator (kwok-style): what the controllers and kubelets of a real cluster
//! would do, enough for an operator to see its children come up.
//!
//! - StatefulSet → Pods `<name>-0..n-1` and PVCs from volumeClaimTemplates (owned by the
//!   StatefulSet only with `persistentVolumeClaimRetentionPolicy.whenDeleted: Delete`; otherwise
//!   they survive it, like the real default retention), readiness after
//!   `ready_delay`, `readyReplicas`/`currentRevision`/`updateRevision`, rolling template changes
//!   one Pod at a time from the highest ordinal.
//! - Job → one Pod that succeeds after the delay (fails with [`crate::FAIL_ANNOTATION`]), Job
//!   conditions `Complete` / `Failed`. A Pod running the SampleDB image's dump tools writes or
//!   reads dumps on its backup claim ([`dumps`]): a restore of a backup never written fails.
//! - CronJob → Jobs on schedule, on a clock sped up by `cron_speedup`.
//! - Deployment → `readyReplicas`; PVC → `Bound`; Service → a `clusterIP`; VolumeSnapshot →
//!   `readyToUse` (or `status.error` with the fail annotation).
//!
//! The controllers record the events kube-controller-manager's record (core `v1`, no
//! `eventTime`): claims and Pods created and deleted, Jobs created, completed and failed.
//!
//! The simulator writes through the same API semantics as clients (field manager
//! `devcluster-simulator`), without injected faults.
//!
//! One implementation, two ways to reach a cluster ([`backend::Backend`]): inside the
//! devcluster it reads the store and writes through the API layer, and plays the controllers
//! too (the devcluster has none); against any other API server ([`remote::run`], like kwok)
//! it reads watch caches and writes over HTTP, and plays only what a cluster without nodes
//! lacks: the kubelet (Pods Running and Ready, Job Pods terminating), volume binding and the
//! snapshot controller. kube-controller-manager and kube-apiserver do the rest there.

mod backend;
mod cronjob;
mod dumps;
mod job;
mod kubectl;
pub mod processes;
pub mod remote;
mod statefulset;
mod workloads;

use crate::api::Cluster;
use crate::store::{Event, EventType};
use backend::Backend;
use serde_json::{Value, json};
use std::collections::{HashMap, HashSet};
use std::sync::atomic::{AtomicU32, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
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

/// The simulator's handle on the cluster.
pub(crate) struct Sim {
    backend: Arc<dyn Backend>,
    pub config: Config,
    /// Whether to play the controllers too (StatefulSet, Job, CronJob, Deployment) and the API
    /// server's Service IP allocation: inside the devcluster, yes; against a real control
    /// plane, no.
    controllers: bool,
    next_ip: AtomicU32,
    /// Objects (by uid) whose delayed change is already scheduled: a watch delivers every
    /// change of a pending object, and one timer each is enough.
    scheduled: Mutex<HashSet<String>>,
    /// Against a real control plane, when asked: the Pods it runs as processes.
    runner: std::sync::OnceLock<Arc<processes::Runner>>,
    /// The SampleDB dumps on the backup volumes (see [`dumps`]).
    dumps: dumps::Volumes,
    /// The stamp in the last event's name, so that two events in one nanosecond get two names.
    event_stamp: AtomicU64,
    /// Per StatefulSet (namespace, name): the Pod templates of its current and update
    /// revisions, as the real controller keeps them in ControllerRevisions: a Pod below a
    /// rolling update's partition is made again from the current revision, not the update one.
    templates: Mutex<HashMap<(String, String), Revisions>>,
}

/// A StatefulSet's Pod templates by revision name, oldest first.
type Revisions = Vec<(String, Value)>;

impl std::fmt::Debug for Sim {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Sim")
            .field("config", &self.config)
            .field("controllers", &self.controllers)
            .finish_non_exhaustive()
    }
}

impl Sim {
    fn new(backend: Arc<dyn Backend>, config: Config, controllers: bool) -> Arc<Self> {
        Arc::new(Sim {
            backend,
            config,
            controllers,
            next_ip: AtomicU32::new(10),
            scheduled: Mutex::new(HashSet::new()),
            runner: std::sync::OnceLock::new(),
            dumps: dumps::Volumes::default(),
            event_stamp: AtomicU64::new(0),
            templates: Mutex::default(),
        })
    }
}

/// Runs the simulator inside the devcluster until the task is dropped.
pub async fn run(cluster: Arc<Cluster>, config: Config) {
    let mut rx = cluster.store.subscribe();
    let sim = Sim::new(
        Arc::new(backend::InProcess {
            cluster: cluster.clone(),
        }),
        config,
        true,
    );
    sim.resync(&cluster);
    let mut tick = tokio::time::interval(Duration::from_millis(100));
    loop {
        tokio::select! {
            ev = rx.recv() => match ev {
                Ok(e) => sim.on_event(&e),
                Err(RecvError::Lagged(_)) => sim.resync(&cluster),
                Err(RecvError::Closed) => return,
            },
            _ = tick.tick() => sim.tick(),
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
    sim.backend
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
    /// One object.
    pub fn get(&self, key: &str, ns: &str, name: &str) -> Option<Arc<Value>> {
        self.backend.get(key, ns, name)
    }

    /// Every object of a resource.
    pub fn list_all(&self, key: &str) -> Vec<Arc<Value>> {
        self.backend.list_all(key)
    }

    /// Creates an object (already existing is fine); true when it was created.
    pub fn create(&self, key: &str, obj: Value) -> bool {
        self.backend.create(key, obj)
    }

    /// Records an event on `regarding` as kube-controller-manager's controllers do (client-go's
    /// `record` package, core `v1`): the reporting controller in `source.component`, first and
    /// last timestamps, a count, and `eventTime` null. A reader of `events.k8s.io/v1` meets
    /// such events on every real cluster, and here too. Only when the simulator plays the
    /// controllers: against a real control plane they record their own.
    pub(crate) fn record(
        &self,
        component: &str,
        regarding: &Value,
        warning: bool,
        reason: &str,
        message: &str,
    ) {
        if !self.controllers {
            return;
        }
        let (ns, name) = ns_name(regarding);
        let nanos = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_nanos() as u64);
        let previous = self
            .event_stamp
            .fetch_update(Ordering::Relaxed, Ordering::Relaxed, |last| {
                Some(nanos.max(last + 1))
            })
            .unwrap_or(nanos);
        let stamp = nanos.max(previous + 1);
        let m = &regarding["metadata"];
        let now = crate::api::now();
        self.backend.create(
            "/events",
            json!({"apiVersion": "v1", "kind": "Event",
                "metadata": {"name": format!("{name}.{stamp:x}"), "namespace": ns},
                "involvedObject": {"apiVersion": regarding["apiVersion"], "kind": regarding["kind"],
                    "name": name, "namespace": ns, "uid": m["uid"], "resourceVersion": m["resourceVersion"]},
                "reason": reason, "message": message, "source": {"component": component},
                "firstTimestamp": now, "lastTimestamp": now, "count": 1,
                "type": if warning { "Warning" } else { "Normal" },
                "eventTime": null, "reportingComponent": "", "reportingInstance": ""}),
        );
    }

    /// Merge-patches an object, or its status with `subresource = "status"`.
    pub fn patch(&self, key: &str, ns: &str, name: &str, subresource: &str, body: &Value) {
        self.backend.patch(key, ns, name, subresource, body);
    }

    /// Deletes an object (in the background).
    pub fn delete(&self, key: &str, ns: &str, name: &str) {
        self.backend.delete(key, ns, name);
    }

    /// Binds a Pod to the simulator's Node (against a real control plane; see
    /// [`remote::NODE`]).
    pub fn bind(&self, ns: &str, name: &str) {
        self.backend.bind(ns, name);
    }

    /// True the first time it is asked about `uid`: the caller schedules the object's change.
    pub fn first_schedule(&self, uid: &Value) -> bool {
        let Some(uid) = uid.as_str() else {
            return true;
        };
        let mut scheduled = self.scheduled.lock().unwrap_or_else(|e| e.into_inner());
        if scheduled.len() > 100_000 {
            scheduled.clear();
        }
        scheduled.insert(uid.to_string())
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

    /// Carries out a Pod's `kubectl delete pod` as its ServiceAccount, then writes its status
    /// (see [`backend::Backend::kubectl`]).
    pub(crate) fn kubectl(
        &self,
        pod: backend::PodRef,
        account: &str,
        cmd: kubectl::DeletePods,
        status: backend::PodStatus,
    ) {
        self.backend.kubectl(self, pod, account, cmd, status);
    }

    /// Removes a Pod that was bound to the simulated node, as its kubelet would once the
    /// containers stopped.
    pub(crate) fn terminate(&self, ns: &str, name: &str, uid: &str) {
        self.backend.terminate(ns, name, uid);
    }

    /// Runs `f` after the ready delay.
    pub fn later(self: &Arc<Self>, f: impl FnOnce(&Sim) + Send + 'static) {
        let sim = self.clone();
        tokio::spawn(async move {
            tokio::time::sleep(sim.config.ready_delay).await;
            f(&sim);
        });
    }

    fn resync(self: &Arc<Self>, cluster: &Cluster) {
        for (key, obj) in cluster.store.all_objects() {
            let (ns, name) = ns_name(&obj);
            self.dispatch(&key, EventType::Added, &obj, &ns, &name);
        }
    }

    fn on_event(self: &Arc<Self>, e: &Event) {
        let (ns, name) = ns_name(&e.object);
        self.dispatch(&e.key, e.kind, &e.object, &ns, &name);
    }

    pub(crate) fn dispatch(
        self: &Arc<Self>,
        key: &str,
        kind: EventType,
        obj: &Value,
        ns: &str,
        name: &str,
    ) {
        let live = kind != EventType::Deleted && obj["metadata"].get("deletionTimestamp").is_none();
        let controllers = self.controllers;
        match key {
            "apps/statefulsets" if live && controllers => statefulset::reconcile(self, ns, name),
            "batch/jobs" if live && controllers => job::reconcile(self, ns, name),
            "/pods" => {
                if let Some(runner) = self.runner.get()
                    && runner.runs(obj)
                {
                    runner.pod_event(self, kind, obj);
                    return;
                }
                // The kubelet's part: every live Pod still Pending starts (once).
                if live {
                    workloads::start_pod(self, obj);
                } else if kind != EventType::Deleted
                    && obj["spec"]["nodeName"].as_str() == Some(remote::NODE)
                {
                    // A bound Pod goes only once its kubelet says so.
                    self.backend.terminate(
                        ns,
                        name,
                        obj["metadata"]["uid"].as_str().unwrap_or_default(),
                    );
                }
                match controller_of(obj) {
                    Some((k, owner)) if k == "StatefulSet" && controllers => {
                        statefulset::reconcile(self, ns, &owner)
                    }
                    Some((k, owner)) if k == "Job" && controllers => {
                        job::reconcile(self, ns, &owner)
                    }
                    _ => {}
                }
            }
            "apps/deployments" if live && controllers => workloads::deployment(self, obj),
            "/persistentvolumeclaims" if live => workloads::bind_claim(self, obj),
            "/services" if kind == EventType::Added && controllers => {
                workloads::assign_cluster_ip(self, obj)
            }
            "snapshot.storage.k8s.io/volumesnapshots" if live => workloads::snapshot(self, obj),
            _ => {}
        }
    }

    /// The CronJob clock, when the simulator plays the controllers.
    fn tick(self: &Arc<Self>) {
        if self.controllers {
            cronjob::tick(self);
        }
    }
}
