//! What the traffic check reads: every Service and NetworkPolicy of the cluster, by namespace,
//! from watches of the host's own, cut down to the fields the check uses.
//!
//! # Why
//! The check (`apply.rs` `check_traffic`) listed the namespace's Services and NetworkPolicies
//! from the API for every reconcile that writes pods. With the SampleDBs of one namespace each
//! owning two Services, converging N of them read N × 2N Services: at N = 1,000 on the
//! devcluster, converge took 57.6 s against 5.5 s with the check off, and the host's peak RSS
//! went to 900 MiB. Read from this index the check costs what its matching costs.
//!
//! # Guarantees
//! - Nothing is read before both watches have listed once ([`Traffic::start`] waits for each,
//!   and fails with the watch's error if they have not listed in time): an empty index never
//!   passes a check for want of having looked.
//! - Fails closed: while a watch reports errors (from its first error until its next event),
//!   [`Traffic::others`] answers nothing and the check lists from the API instead, as it did
//!   before the index; a list that fails fails the reconcile.
//! - A relist replaces a namespace's entries whole, so an object deleted while the watch was
//!   down does not linger.
//! - What is kept per object: its name, namespace, the parent-uid label, and the selector
//!   (Services) or the spec (NetworkPolicies) — what `plan::joins` and `plan::joins_policy`
//!   read, and nothing else.
//! - As fresh as a watch: an object created a moment before a check may not be in it yet, as
//!   an object created a moment after a list was not in that. The check has always been as of
//!   one moment.

use std::{
    collections::HashMap,
    sync::{Arc, Mutex},
    time::Duration,
};

use futures::StreamExt;
use kube::{
    Api, Client, ResourceExt,
    api::DynamicObject,
    discovery::ApiResource,
    runtime::{WatchStreamExt, watcher},
};
use serde_json::{Value, json};
use tokio_util::task::AbortOnDropHandle;

use super::plan::PARENT_UID_LABEL;

/// How long [`Traffic::start`] waits for both watches to list.
const READY_WITHIN: Duration = Duration::from_secs(10);

/// The cluster's Services and NetworkPolicies, by namespace.
pub struct Traffic {
    services: Arc<Index>,
    policies: Arc<Index>,
    _tasks: [AbortOnDropHandle<()>; 2],
}

impl std::fmt::Debug for Traffic {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Traffic").finish_non_exhaustive()
    }
}

/// Namespace → name → the object, cut down.
#[derive(Default)]
struct Index {
    state: Mutex<State>,
}

#[derive(Default)]
struct State {
    /// The watch has listed once.
    listed: bool,
    /// The watch's last answer was an error: what is held may be stale.
    failing: Option<String>,
    by_namespace: HashMap<String, HashMap<String, Arc<Value>>>,
    /// Filled while the watch relists, then put in place whole.
    relisting: Option<HashMap<String, HashMap<String, Arc<Value>>>>,
}

impl Index {
    fn lock(&self) -> std::sync::MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Records a watch error: until the watch delivers again, the index is not read.
    fn failed(&self, why: String) {
        self.lock().failing = Some(why);
    }

    /// Whether the watch has listed once, and the error it reports now, if any.
    fn health(&self) -> (bool, Option<String>) {
        let s = self.lock();
        (s.listed, s.failing.clone())
    }

    /// Applies one watch event; true when a listing completed.
    fn apply(
        &self,
        event: watcher::Event<DynamicObject>,
        cut: fn(&DynamicObject) -> Value,
    ) -> bool {
        let mut s = self.lock();
        // Read again once the watch delivers again: a change, or a relist complete (not its
        // start: until it is done, what is held may be stale).
        if matches!(
            event,
            watcher::Event::Apply(_) | watcher::Event::Delete(_) | watcher::Event::InitDone
        ) {
            s.failing = None;
        }
        let put = |map: &mut HashMap<String, HashMap<String, Arc<Value>>>, o: &DynamicObject| {
            map.entry(o.namespace().unwrap_or_default())
                .or_default()
                .insert(o.name_any(), Arc::new(cut(o)));
        };
        match event {
            watcher::Event::Init => s.relisting = Some(HashMap::new()),
            watcher::Event::InitApply(o) => put(s.relisting.get_or_insert_default(), &o),
            watcher::Event::InitDone => {
                s.by_namespace = s.relisting.take().unwrap_or_default();
                s.listed = true;
                return true;
            }
            watcher::Event::Apply(o) => put(&mut s.by_namespace, &o),
            watcher::Event::Delete(o) => {
                let namespace = o.namespace().unwrap_or_default();
                if let Some(objects) = s.by_namespace.get_mut(&namespace) {
                    objects.remove(&o.name_any());
                    if objects.is_empty() {
                        s.by_namespace.remove(&namespace);
                    }
                }
            }
        }
        false
    }

    /// The objects of `namespace` not labelled with `uid`; none while the watch has not listed
    /// or reports errors.
    fn others(&self, namespace: &str, uid: &str) -> Option<Vec<Arc<Value>>> {
        let s = self.lock();
        if !s.listed || s.failing.is_some() {
            return None;
        }
        let others = s
            .by_namespace
            .get(namespace)
            .into_iter()
            .flat_map(HashMap::values)
            .filter(|o| !labelled_with(o, uid))
            .cloned()
            .collect();
        Some(others)
    }
}

/// The objects of a list not labelled with `uid`, cut down as the index keeps them.
pub fn others_of(
    objects: &[DynamicObject],
    cut: fn(&DynamicObject) -> Value,
    uid: &str,
) -> Vec<Arc<Value>> {
    objects
        .iter()
        .map(|o| Arc::new(cut(o)))
        .filter(|o| !labelled_with(o, uid))
        .collect()
}

/// Whether a cut-down object carries the parent-uid label `uid` (the cut keeps that label).
fn labelled_with(cut: &Value, uid: &str) -> bool {
    cut.pointer("/metadata/labels")
        .and_then(|l| l.get(PARENT_UID_LABEL))
        .and_then(Value::as_str)
        == Some(uid)
}

/// Name, namespace and the parent-uid label.
fn metadata(o: &DynamicObject) -> Value {
    let mut meta = json!({"name": o.name_any(), "namespace": o.namespace()});
    if let Some(uid) = o.labels().get(PARENT_UID_LABEL) {
        meta["labels"] = json!({PARENT_UID_LABEL: uid});
    }
    meta
}

/// A Service as the index keeps it.
pub fn cut_service(o: &DynamicObject) -> Value {
    json!({"metadata": metadata(o), "spec": {"selector": o.data.pointer("/spec/selector")}})
}

/// A NetworkPolicy as the index keeps it.
pub fn cut_policy(o: &DynamicObject) -> Value {
    json!({"metadata": metadata(o), "spec": o.data.get("spec")})
}

impl Traffic {
    /// Starts both watches and waits until each has listed once.
    pub async fn start(client: &Client) -> Result<Traffic, String> {
        let services = Arc::new(Index::default());
        let policies = Arc::new(Index::default());
        let spawn = |index: &Arc<Index>, ar: ApiResource, cut: fn(&DynamicObject) -> Value| {
            let api: Api<DynamicObject> = Api::all_with(client.clone(), &ar);
            let index = index.clone();
            AbortOnDropHandle::new(tokio::spawn(async move {
                let stream = watcher(api, watcher::Config::default()).default_backoff();
                let mut stream = std::pin::pin!(stream);
                while let Some(event) = stream.next().await {
                    match event {
                        Ok(event) => {
                            index.apply(event, cut);
                        }
                        Err(e) => index.failed(format!("watching {}: {e}", ar.plural)),
                    }
                }
            }))
        };
        let tasks = [
            spawn(
                &services,
                ApiResource::erase::<k8s_openapi::api::core::v1::Service>(&()),
                cut_service,
            ),
            spawn(
                &policies,
                ApiResource::erase::<k8s_openapi::api::networking::v1::NetworkPolicy>(&()),
                cut_policy,
            ),
        ];
        let deadline = tokio::time::Instant::now() + READY_WITHIN;
        loop {
            let (services_listed, services_error) = services.health();
            let (policies_listed, policies_error) = policies.health();
            if services_listed && policies_listed {
                break;
            }
            if tokio::time::Instant::now() >= deadline {
                return Err(services_error.or(policies_error).unwrap_or_else(|| {
                    format!(
                        "the Services and NetworkPolicies were not listed within {READY_WITHIN:?}"
                    )
                }));
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        Ok(Traffic {
            services,
            policies,
            _tasks: tasks,
        })
    }

    /// The Services and the NetworkPolicies of `namespace` not labelled as the parent `uid`'s;
    /// none while either watch has not listed or reports errors (the caller lists instead).
    pub fn others(&self, namespace: &str, uid: &str) -> Option<(Vec<Arc<Value>>, Vec<Arc<Value>>)> {
        Some((
            self.services.others(namespace, uid)?,
            self.policies.others(namespace, uid)?,
        ))
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)] // Tests: a panic is the failure report.
mod tests {
    use super::*;

    fn service(namespace: &str, name: &str, uid: Option<&str>) -> DynamicObject {
        let mut labels = json!({"app": "x"});
        if let Some(uid) = uid {
            labels[PARENT_UID_LABEL] = json!(uid);
        }
        serde_json::from_value(json!({
            "apiVersion": "v1", "kind": "Service",
            "metadata": {"name": name, "namespace": namespace, "labels": labels,
                "managedFields": [{"manager": "m"}]},
            "spec": {"selector": {"app": "x"}, "ports": [{"port": 80}]},
        }))
        .unwrap()
    }

    #[test]
    fn keeps_what_the_check_reads_and_a_relist_replaces_a_namespace_whole() {
        let index = Index::default();
        assert!(index.others("a", "u1").is_none(), "not listed yet");
        assert!(!index.apply(watcher::Event::Init, cut_service));
        for (ns, name, uid) in [
            ("a", "mine", Some("u1")),
            ("a", "theirs", None),
            ("b", "gone", None),
        ] {
            index.apply(
                watcher::Event::InitApply(service(ns, name, uid)),
                cut_service,
            );
        }
        assert!(index.apply(watcher::Event::InitDone, cut_service));
        let others = index.others("a", "u1").unwrap();
        assert_eq!(others.len(), 1);
        assert_eq!(
            *others[0],
            json!({"metadata": {"name": "theirs", "namespace": "a"}, "spec": {"selector": {"app": "x"}}})
        );
        // Labelled as another parent's: it counts.
        assert_eq!(index.others("a", "u2").unwrap().len(), 2);
        index.apply(
            watcher::Event::Delete(service("a", "theirs", None)),
            cut_service,
        );
        assert!(index.others("a", "u1").unwrap().is_empty());
        // "gone" was deleted while the watch was down: the relist does not list it.
        index.apply(watcher::Event::Init, cut_service);
        index.apply(
            watcher::Event::InitApply(service("a", "new", None)),
            cut_service,
        );
        // Until the relist is done, the old state serves.
        assert_eq!(index.others("b", "u1").unwrap().len(), 1);
        index.apply(watcher::Event::InitDone, cut_service);
        assert!(index.others("b", "u1").unwrap().is_empty());
        assert_eq!(index.others("a", "u1").unwrap().len(), 1);
    }

    #[test]
    fn a_failing_watch_is_not_read_until_its_next_event() {
        let index = Index::default();
        index.apply(watcher::Event::Init, cut_service);
        index.apply(
            watcher::Event::InitApply(service("a", "theirs", None)),
            cut_service,
        );
        index.apply(watcher::Event::InitDone, cut_service);
        assert!(index.others("a", "u1").is_some());
        index.failed("watching services: forbidden".into());
        assert!(
            index.others("a", "u1").is_none(),
            "stale: the check must list"
        );
        index.apply(
            watcher::Event::Apply(service("a", "other", None)),
            cut_service,
        );
        assert_eq!(index.others("a", "u1").unwrap().len(), 2);
    }

    #[test]
    fn a_list_is_cut_down_and_filtered_as_the_index_is() {
        let list = [
            service("a", "mine", Some("u1")),
            service("a", "theirs", None),
        ];
        let others = others_of(&list, cut_service, "u1");
        assert_eq!(others.len(), 1);
        assert_eq!(others[0]["metadata"]["name"], "theirs");
    }
}
