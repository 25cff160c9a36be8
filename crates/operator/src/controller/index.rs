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
    collections::{BTreeSet, HashMap},
    sync::Mutex,
};

use kube::{ResourceExt, api::DynamicObject, runtime::watcher::Event};

use super::plan::PARENT_UID_LABEL;

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
                }
            }
        }
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
        index.apply(&Event::InitDone);
        assert_eq!(names(&index, "p1"), ["kept"]);
    }
}
