//! Which cached children belong to which parent: an index from the `windlass.dev/parent-uid`
//! label to the (namespace, name) of every object carrying it, kept beside a kube-runtime watch
//! cache and fed the same watch events.
//!
//! # Why
//! kube-runtime's `Store` can only be scanned whole. Scanning every cache for every reconcile
//! costs O(children of all parents) per parent — with 1,000 parents and five child kinds, most
//! of a reconcile's CPU went to reading other parents' labels. With the index a reconcile
//! touches only its own children. It holds keys, not objects: the objects stay in the `Store`,
//! so the index adds no copy of them.
//!
//! # Guarantees
//! - After the events of a watch have been fed in order, `children(uid)` is exactly the set of
//!   keys of objects whose last event was an apply carrying label value `uid`.
//! - A relist (`Init` … `InitDone`) is built aside and swapped in whole at `InitDone`, like the
//!   `Store` does: objects deleted while the watch was down vanish then, and until then
//!   lookups see the previous listing.

use std::{
    collections::{BTreeSet, HashMap, HashSet},
    sync::{Arc, Mutex, Weak},
};

use kube::{
    ResourceExt,
    api::DynamicObject,
    discovery::ApiResource,
    runtime::{
        reflector::{ObjectRef, Store},
        watcher::Event,
    },
};
use serde_json::Value;

use super::plan::PARENT_UID_LABEL;

/// The watch cache of one observed kind.
#[derive(Debug)]
pub struct Cache {
    /// The kind's resource.
    pub resource: ApiResource,
    /// The objects.
    pub store: Store<DynamicObject>,
    /// Which of them belong to which parent.
    pub index: Arc<ChildIndex>,
}

/// What the caches keep of an object, and what the canary keeps of what it lists: all but
/// its `managedFields`. Nothing reading them uses them (plugins observe children without them;
/// `windlass trace` reads drift from the API), and they are often as large as the rest of the
/// object: for a StatefulSet the host applied, an entry naming every field of its spec.
pub fn without_managed_fields(object: &mut DynamicObject) {
    object.metadata.managed_fields = None;
}

/// The objects in `caches` labelled with parent uid `uid` (in the parent's `namespace`, if it
/// has one), as plugins observe them.
pub fn children_of(caches: &[Cache], uid: &str, namespace: Option<&str>) -> Vec<Value> {
    let mut out = Vec::new();
    // One object observed under two kinds (an Event under both its groups) is seen once.
    let mut seen = HashSet::new();
    for cache in caches {
        for (ns, name) in cache.index.children(uid) {
            if namespace.is_some_and(|parent_ns| parent_ns != ns) {
                continue;
            }
            let mut key = ObjectRef::new_with(&name, cache.resource.clone());
            if !ns.is_empty() {
                key = key.within(&ns);
            }
            // The index and the store are fed by the same events; an object the index knows
            // but the store no longer has was deleted in between.
            let Some(child) = cache.store.get(&key) else {
                continue;
            };
            if child.labels().get(PARENT_UID_LABEL).map(String::as_str) != Some(uid) {
                continue;
            }
            if let Some(child_uid) = child.uid()
                && !seen.insert(child_uid)
            {
                continue;
            }
            out.extend(crate::k8s::observed_json(&child, &cache.resource));
        }
    }
    out
}

/// The child caches of each running parent kind once they have listed, with the kinds they
/// hold, by parent kind (`group/version/Kind`).
///
/// # Why
/// A canary (and the diff gate) observes a parent's children before a new plugin version
/// serves. Listing each observed kind from the API server by label, per parent, costs the
/// server a pass over every object of the kind: at 10,000 parents that was 1.3 of the 1.5 s
/// a hot swap took to its first parent. The caches the reconciles read hold the same objects.
///
/// # Guarantees
/// Only caches that have listed once are handed out (the controller registers them after
/// `kinds::wait_for_caches`), and only while their kind's controller lives (weak references:
/// a stopped kind's caches go with it).
#[derive(Debug, Default)]
pub struct ListedCaches(Mutex<HashMap<String, (BTreeSet<String>, Weak<[Cache]>)>>);

impl ListedCaches {
    /// The caches of parent kind `parent`, holding the `observed` kinds, have listed once.
    pub fn listed(&self, parent: &str, observed: BTreeSet<String>, caches: &Arc<[Cache]>) {
        let mut map = self.0.lock().unwrap_or_else(|e| e.into_inner());
        map.retain(|_, (_, c)| c.strong_count() > 0);
        map.insert(parent.to_string(), (observed, Arc::downgrade(caches)));
    }

    /// The listed caches of parent kind `parent`, if its controller runs and they hold every
    /// one of `kinds`.
    pub fn covering(&self, parent: &str, kinds: &BTreeSet<String>) -> Option<Arc<[Cache]>> {
        let map = self.0.lock().unwrap_or_else(|e| e.into_inner());
        let (observed, caches) = map.get(parent)?;
        if !kinds.is_subset(observed) {
            return None;
        }
        caches.upgrade()
    }
}

/// (namespace, name); namespace is empty for cluster-scoped objects.
pub type Key = (String, String);

/// The index of one watch cache. Cheap to lock: every operation is a few hash lookups.
#[derive(Debug, Default)]
pub struct ChildIndex {
    inner: Mutex<Inner>,
}

#[derive(Debug, Default)]
struct Inner {
    live: Map,
    /// The listing being built between `Init` and `InitDone`.
    relist: Option<Map>,
    /// Listings swapped in so far.
    relists: u64,
}

#[derive(Debug, Default)]
struct Map {
    by_parent: HashMap<String, BTreeSet<Key>>,
    parent_of: HashMap<Key, String>,
}

impl Map {
    fn put(&mut self, object: &DynamicObject) {
        let key = key_of(object);
        self.remove(&key);
        if let Some(uid) = object.labels().get(PARENT_UID_LABEL) {
            self.by_parent
                .entry(uid.clone())
                .or_default()
                .insert(key.clone());
            self.parent_of.insert(key, uid.clone());
        }
    }

    fn remove(&mut self, key: &Key) {
        if let Some(uid) = self.parent_of.remove(key)
            && let Some(keys) = self.by_parent.get_mut(&uid)
        {
            keys.remove(key);
            if keys.is_empty() {
                self.by_parent.remove(&uid);
            }
        }
    }
}

fn key_of(object: &DynamicObject) -> Key {
    (object.namespace().unwrap_or_default(), object.name_any())
}

impl ChildIndex {
    /// Feeds one watch event, in the order the watch delivered it.
    pub fn apply(&self, event: &Event<DynamicObject>) {
        let mut inner = self.inner.lock().unwrap_or_else(|e| e.into_inner());
        match event {
            Event::Apply(object) => inner.live.put(object),
            Event::Delete(object) => inner.live.remove(&key_of(object)),
            Event::Init => inner.relist = Some(Map::default()),
            Event::InitApply(object) => inner.relist.get_or_insert_default().put(object),
            Event::InitDone => {
                if let Some(listed) = inner.relist.take() {
                    inner.live = listed;
                    inner.relists += 1;
                }
            }
        }
    }

    /// How many listings have been swapped in: a relist may bring an object whose content
    /// changed without a write (the API server defaulting it under a new schema), with the
    /// `resourceVersion` it had.
    pub fn relists(&self) -> u64 {
        self.inner.lock().unwrap_or_else(|e| e.into_inner()).relists
    }

    /// The keys of the objects labelled with `uid`, in (namespace, name) order.
    pub fn children(&self, uid: &str) -> Vec<Key> {
        let inner = self.inner.lock().unwrap_or_else(|e| e.into_inner());
        inner
            .live
            .by_parent
            .get(uid)
            .map(|keys| keys.iter().cloned().collect())
            .unwrap_or_default()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn obj(name: &str, uid: Option<&str>) -> DynamicObject {
        let mut meta = json!({"name": name, "namespace": "ns"});
        if let Some(uid) = uid {
            meta["labels"] = json!({ PARENT_UID_LABEL: uid });
        }
        serde_json::from_value(json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": meta}))
            .unwrap()
    }

    fn names(index: &ChildIndex, uid: &str) -> Vec<String> {
        index.children(uid).into_iter().map(|(_, n)| n).collect()
    }

    #[test]
    fn applies_moves_and_deletes_follow_the_label() {
        let index = ChildIndex::default();
        index.apply(&Event::Apply(obj("b", Some("p1"))));
        index.apply(&Event::Apply(obj("a", Some("p1"))));
        index.apply(&Event::Apply(obj("c", Some("p2"))));
        assert_eq!(names(&index, "p1"), ["a", "b"]);
        assert_eq!(names(&index, "p2"), ["c"]);
        // Relabelled to another parent, then unlabelled, then deleted.
        index.apply(&Event::Apply(obj("a", Some("p2"))));
        assert_eq!(names(&index, "p1"), ["b"]);
        assert_eq!(names(&index, "p2"), ["a", "c"]);
        index.apply(&Event::Apply(obj("c", None)));
        assert_eq!(names(&index, "p2"), ["a"]);
        index.apply(&Event::Delete(obj("a", Some("p2"))));
        assert!(names(&index, "p2").is_empty());
        assert_eq!(names(&index, "p1"), ["b"]);
    }

    #[test]
    fn a_relist_is_swapped_in_whole_at_init_done() {
        let index = ChildIndex::default();
        index.apply(&Event::Apply(obj("gone", Some("p1"))));
        index.apply(&Event::Init);
        index.apply(&Event::InitApply(obj("kept", Some("p1"))));
        // Until the listing is complete, lookups see the previous one.
        assert_eq!(names(&index, "p1"), ["gone"]);
        assert_eq!(index.relists(), 0);
        index.apply(&Event::InitDone);
        assert_eq!(names(&index, "p1"), ["kept"]);
        // Counted once swapped in: what apply's remembered inputs hold (`unchanged.rs`).
        assert_eq!(index.relists(), 1);
    }

    #[test]
    fn listed_caches_are_handed_out_only_holding_every_kind_and_only_while_their_kind_runs() {
        let ar = ApiResource::erase::<k8s_openapi::api::core::v1::ConfigMap>(&());
        let mut writer = kube::runtime::reflector::store::Writer::new(ar.clone());
        let index = Arc::new(ChildIndex::default());
        for event in [
            Event::Init,
            Event::InitApply(obj("mine", Some("p1"))),
            Event::InitApply(obj("theirs", Some("p2"))),
            Event::InitDone,
        ] {
            writer.apply_watcher_event(&event);
            index.apply(&event);
        }
        let caches: Arc<[Cache]> = vec![Cache {
            resource: ar,
            store: writer.as_reader(),
            index,
        }]
        .into();
        let listed = ListedCaches::default();
        let kinds = |k: &[&str]| k.iter().map(|k| k.to_string()).collect::<BTreeSet<_>>();
        listed.listed("example.com/v1/Thing", kinds(&["v1/ConfigMap"]), &caches);

        let held = listed
            .covering("example.com/v1/Thing", &kinds(&["v1/ConfigMap"]))
            .expect("the running kind's caches hold v1/ConfigMap");
        let names: Vec<_> = children_of(&held, "p1", Some("ns"))
            .iter()
            .map(|c| c["metadata"]["name"].clone())
            .collect();
        assert_eq!(names, [json!("mine")]);
        assert!(children_of(&held, "p1", Some("other")).is_empty());
        drop(held);
        // A kind the caches do not hold, or another parent kind: read from the API instead.
        assert!(
            listed
                .covering(
                    "example.com/v1/Thing",
                    &kinds(&["v1/ConfigMap", "v1/Secret"])
                )
                .is_none()
        );
        assert!(
            listed
                .covering("example.com/v1/Other", &kinds(&["v1/ConfigMap"]))
                .is_none()
        );
        // The kind's controller stopped: its caches go with it.
        drop(caches);
        assert!(
            listed
                .covering("example.com/v1/Thing", &kinds(&["v1/ConfigMap"]))
                .is_none()
        );
    }
}
