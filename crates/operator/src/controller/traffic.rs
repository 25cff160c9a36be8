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
//! - Found by selector, not scanned: a Service is kept under its selector, so the Services a
//!   pod's labels would join are found by looking up the subsets of those labels that some
//!   selector of the namespace uses (the pairs no selector has are left out first), not by
//!   matching every Service of the namespace. Scanning made each check cost the namespace's
//!   size: 10,000 SampleDBs in one namespace (20,000 Services) ran 25 reconciles a second
//!   and had not converged after six minutes. When a pod has more than
//!   [`MAX_SUBSET_PAIRS`] such pairs the lookup would cost more than the scan, and the
//!   namespace's Services are all returned, as before; `plan::joins` decides either way.
//! - As fresh as a watch: an object created a moment before a check may not be in it yet, as
//!   an object created a moment after a list was not in that. The check has always been as of
//!   one moment.

use std::{
    collections::{BTreeSet, HashMap, HashSet},
    sync::{Arc, Mutex},
    time::Duration,
};
use windlass_policy::At as _;

use futures::StreamExt;
use kube::{
    Api, Client, ResourceExt,
    api::DynamicObject,
    discovery::ApiResource,
    runtime::{WatchStreamExt, watcher},
};
use serde_json::{Value, json};
use tokio_util::task::AbortOnDropHandle;

use super::plan::{PARENT_UID_LABEL, PodIdentity};

/// Above this many label pairs that selectors of the namespace use, a lookup by subsets
/// (2^n − 1 of them) costs more than matching every Service: all are returned instead.
pub const MAX_SUBSET_PAIRS: usize = 12;

/// How long [`Traffic::start`] waits for both watches to list.
const READY_WITHIN: Duration = Duration::from_secs(10);

/// The cluster's Services and NetworkPolicies, by namespace.
pub struct Traffic {
    services: Arc<Index>,
    policies: Arc<Index>,
    tasks: [AbortOnDropHandle<()>; 2],
}

impl Traffic {
    /// Stops both watches (the host stops): `Shared` may outlive the controllers a moment.
    pub fn stop(&self) {
        for task in &self.tasks {
            task.abort();
        }
    }
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
    by_namespace: HashMap<String, Namespace>,
    /// Filled while the watch relists, then put in place whole.
    relisting: Option<HashMap<String, Namespace>>,
}

/// One namespace's objects, and where a Service's selector finds it.
#[derive(Default)]
struct Namespace {
    /// Name → the object, cut down.
    objects: HashMap<String, Arc<Value>>,
    /// A selector as [`selector_key`] writes it → the names of the objects with it.
    by_selector: HashMap<String, HashSet<String>>,
    /// A selector pair as [`pair_key`] writes it → how many objects' selectors have it.
    pairs: HashMap<String, usize>,
}

/// The non-empty `spec.selector` of a cut-down object (a Service's; a NetworkPolicy's cut
/// has none).
fn selector_of(cut: &Value) -> Option<&serde_json::Map<String, Value>> {
    cut.at("/spec/selector")
        .and_then(Value::as_object)
        .filter(|s| !s.is_empty())
}

/// One label pair as a key: its JSON, which has no newline.
fn pair_key(key: &str, value: &Value) -> String {
    json!([key, value]).to_string()
}

/// A selector as a key: its pairs' keys sorted, joined by newlines.
fn selector_key<'a>(pairs: impl IntoIterator<Item = &'a String>) -> String {
    let mut sorted: Vec<&String> = pairs.into_iter().collect();
    sorted.sort();
    sorted
        .into_iter()
        .map(String::as_str)
        .collect::<Vec<_>>()
        .join("\n")
}

impl Namespace {
    fn insert(&mut self, name: String, object: Arc<Value>) {
        self.remove(&name);
        if let Some(selector) = selector_of(&object) {
            let pairs: Vec<String> = selector.iter().map(|(k, v)| pair_key(k, v)).collect();
            for pair in &pairs {
                *self.pairs.entry(pair.clone()).or_default() += 1;
            }
            self.by_selector
                .entry(selector_key(&pairs))
                .or_default()
                .insert(name.clone());
        }
        self.objects.insert(name, object);
    }

    fn remove(&mut self, name: &str) {
        let Some(old) = self.objects.remove(name) else {
            return;
        };
        let Some(selector) = selector_of(&old) else {
            return;
        };
        let pairs: Vec<String> = selector.iter().map(|(k, v)| pair_key(k, v)).collect();
        for pair in &pairs {
            if let Some(n) = self.pairs.get_mut(pair) {
                *n -= 1;
                if *n == 0 {
                    self.pairs.remove(pair);
                }
            }
        }
        let key = selector_key(&pairs);
        if let Some(names) = self.by_selector.get_mut(&key) {
            names.remove(name);
            if names.is_empty() {
                self.by_selector.remove(&key);
            }
        }
    }

    /// The names of the objects whose selector the pods of `identity` would match, or whose
    /// name they take for DNS — and more (all with a selector) past [`MAX_SUBSET_PAIRS`].
    fn joined_by(&self, identity: &PodIdentity<'_>, names: &mut BTreeSet<String>) {
        if let Some((subdomain, _)) = identity.subdomain
            && self.objects.contains_key(subdomain)
        {
            names.insert(subdomain.to_string());
        }
        let mut used: Vec<String> = identity
            .labels
            .0
            .iter()
            .map(|(k, v)| pair_key(k, v))
            .filter(|p| self.pairs.contains_key(p))
            .collect();
        if used.len() > MAX_SUBSET_PAIRS {
            names.extend(self.by_selector.values().flatten().cloned());
            return;
        }
        used.sort();
        for subset in 1..(1_usize << used.len()) {
            let key = selector_key(
                used.iter()
                    .enumerate()
                    .filter(|(i, _)| subset & (1 << i) != 0)
                    .map(|(_, p)| p),
            );
            if let Some(found) = self.by_selector.get(&key) {
                names.extend(found.iter().cloned());
            }
        }
    }
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
        let put = |map: &mut HashMap<String, Namespace>, o: &DynamicObject| {
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
                    if objects.objects.is_empty() {
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
            .flat_map(|n| n.objects.values())
            .filter(|o| !labelled_with(o, uid))
            .cloned()
            .collect();
        Some(others)
    }

    /// The objects of `namespace` not labelled with `uid` that pods of any of `pods` could
    /// join, by selector or by name (a superset: `plan::joins` decides); none while the watch
    /// has not listed or reports errors.
    fn joined_by(
        &self,
        namespace: &str,
        uid: &str,
        pods: &[PodIdentity<'_>],
    ) -> Option<Vec<Arc<Value>>> {
        let s = self.lock();
        if !s.listed || s.failing.is_some() {
            return None;
        }
        let Some(ns) = s.by_namespace.get(namespace) else {
            return Some(Vec::new());
        };
        let mut names = BTreeSet::new();
        for identity in pods {
            ns.joined_by(identity, &mut names);
        }
        Some(
            names
                .iter()
                .filter_map(|n| ns.objects.get(n))
                .filter(|o| !labelled_with(o, uid))
                .cloned()
                .collect(),
        )
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
    cut.at("/metadata/labels")
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
    json!({"metadata": metadata(o), "spec": {"selector": o.data.at("/spec/selector")}})
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
            tasks,
        })
    }

    /// The Services of `namespace` not labelled as the parent `uid`'s that pods of `pods`
    /// could join (their selector is among the pods' labels' subsets, or the pods take their
    /// name for DNS: a superset of those `plan::joins` finds), and all its NetworkPolicies not
    /// so labelled; none while either watch has not listed or reports errors (the caller
    /// lists instead).
    pub fn others(
        &self,
        namespace: &str,
        uid: &str,
        pods: &[PodIdentity<'_>],
    ) -> Option<(Vec<Arc<Value>>, Vec<Arc<Value>>)> {
        Some((
            self.services.joined_by(namespace, uid, pods)?,
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

    /// A Service with `selector` (pairs), optionally labelled as `uid`'s.
    fn selecting(name: &str, selector: &[(&str, &str)], uid: Option<&str>) -> DynamicObject {
        let mut o = service("a", name, uid);
        o.data["spec"]["selector"] = selector
            .iter()
            .map(|(k, v)| ((*k).to_string(), json!(v)))
            .collect::<serde_json::Map<_, _>>()
            .into();
        o
    }

    fn names(found: &[Arc<Value>]) -> BTreeSet<String> {
        found
            .iter()
            .map(|o| o["metadata"]["name"].as_str().unwrap().to_string())
            .collect()
    }

    fn listed(objects: &[DynamicObject]) -> Index {
        let index = Index::default();
        index.apply(watcher::Event::Init, cut_service);
        for o in objects {
            index.apply(watcher::Event::InitApply(o.clone()), cut_service);
        }
        index.apply(watcher::Event::InitDone, cut_service);
        index
    }

    #[test]
    fn a_pod_finds_the_services_whose_selector_its_labels_hold_and_the_one_it_names() {
        let index = listed(&[
            selecting("exact", &[("app", "db"), ("instance", "x")], None),
            selecting("wider", &[("app", "db")], None),
            selecting("other", &[("app", "db"), ("instance", "y")], None),
            selecting(
                "more",
                &[("app", "db"), ("instance", "x"), ("tier", "t")],
                None,
            ),
            selecting("mine", &[("app", "db")], Some("u1")),
            selecting("named", &[("unrelated", "z")], None),
        ]);
        let labels = json!({"app": "db", "instance": "x", "role": "primary"});
        let pod = PodIdentity {
            labels: (labels.as_object().unwrap(), "spec.template.metadata.labels"),
            subdomain: Some(("named", "spec.serviceName")),
        };
        let found = index
            .joined_by("a", "u1", std::slice::from_ref(&pod))
            .unwrap();
        assert_eq!(
            names(&found),
            ["exact", "named", "wider"].map(String::from).into()
        );
        assert!(
            index
                .joined_by("b", "u1", &[pod.clone()])
                .unwrap()
                .is_empty()
        );
        // A changed selector moves the Service; a deleted one is gone.
        index.apply(
            watcher::Event::Apply(selecting("other", &[("instance", "x")], None)),
            cut_service,
        );
        index.apply(
            watcher::Event::Delete(selecting("wider", &[("app", "db")], None)),
            cut_service,
        );
        let found = index.joined_by("a", "u1", &[pod.clone()]).unwrap();
        assert_eq!(
            names(&found),
            ["exact", "named", "other"].map(String::from).into()
        );
        index.failed("watching services: gone".into());
        assert!(
            index.joined_by("a", "u1", &[pod]).is_none(),
            "stale: the check must list"
        );
    }

    /// What the index finds, checked with `plan::joins`, is what matching every Service finds:
    /// 400 Services with selectors drawn from a few labels against 100 pods' label sets.
    #[test]
    fn the_lookup_finds_what_matching_every_service_finds() {
        let mut state: u64 = 0x2545_F491_4F6C_DD1D;
        let mut next = |n: u64| {
            state ^= state << 13;
            state ^= state >> 7;
            state ^= state << 17;
            state % n
        };
        let keys = ["app", "instance", "role", "tier", "zone"];
        let values = ["a", "b", "c"];
        let mut draw = |max: u64| -> Vec<(&str, &str)> {
            let n = next(max);
            (0..n)
                .map(|_| (keys[next(5) as usize], values[next(3) as usize]))
                .collect::<std::collections::BTreeMap<_, _>>()
                .into_iter()
                .collect()
        };
        let services: Vec<DynamicObject> = (0..400)
            .map(|i| selecting(&format!("s{i}"), &draw(4), None))
            .collect();
        let index = listed(&services);
        let everything = index.others("a", "u1").unwrap();
        let mut compared = 0;
        for p in 0..100 {
            let labels: serde_json::Map<String, Value> = draw(6)
                .into_iter()
                .map(|(k, v)| (k.to_string(), json!(v)))
                .collect();
            let subdomain = format!("s{}", p * 4);
            let pod = PodIdentity {
                labels: (&labels, "metadata.labels"),
                subdomain: (p % 2 == 0).then_some((subdomain.as_str(), "spec.subdomain")),
            };
            let joining = |found: &[Arc<Value>]| -> BTreeSet<String> {
                found
                    .iter()
                    .filter(|s| super::super::plan::joins(&pod, s).is_some())
                    .map(|s| s["metadata"]["name"].as_str().unwrap().to_string())
                    .collect()
            };
            let looked_up = index.joined_by("a", "u1", &[pod.clone()]).unwrap();
            assert_eq!(
                joining(&looked_up),
                joining(&everything),
                "pod {p}: {labels:?}"
            );
            compared += joining(&everything).len();
        }
        assert!(
            compared > 100,
            "the draw joins too rarely to test anything: {compared}"
        );
    }

    #[test]
    fn past_the_subset_bound_every_service_with_a_selector_is_a_candidate() {
        let many: Vec<(String, String)> = (0..=MAX_SUBSET_PAIRS)
            .map(|i| (format!("k{i}"), "v".to_string()))
            .collect();
        let services: Vec<DynamicObject> = many
            .iter()
            .enumerate()
            .map(|(i, (k, v))| selecting(&format!("s{i}"), &[(k.as_str(), v.as_str())], None))
            .chain([selecting("unrelated", &[("other", "w")], None)])
            .collect();
        let index = listed(&services);
        let labels: serde_json::Map<String, Value> =
            many.iter().map(|(k, v)| (k.clone(), json!(v))).collect();
        let pod = PodIdentity {
            labels: (&labels, "metadata.labels"),
            subdomain: None,
        };
        assert_eq!(
            index.joined_by("a", "u1", &[pod]).unwrap().len(),
            MAX_SUBSET_PAIRS + 2
        );
    }
}
