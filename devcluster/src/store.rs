//! The in-memory store: objects as JSON, one global monotonically increasing resourceVersion,
//! a bounded history of events for watches, and a broadcast of new events.
//!
//! # Guarantees
//! - Every write takes the next resourceVersion; events are broadcast in resourceVersion order
//!   (the broadcast happens under the store lock).
//! - A watch from resourceVersion `rv` sees every event after `rv` exactly once, or learns that
//!   `rv` is older than the kept history (410 Gone).

use crate::error::{ApiError, Result};
use crate::owners::{Graph, Loc, Work};
use serde_json::Value;
use std::collections::{BTreeMap, HashMap, VecDeque};
use std::sync::{Arc, Mutex, MutexGuard, OnceLock};
use tokio::sync::{Notify, broadcast};

/// What happened to an object.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum EventType {
    /// Created.
    Added,
    /// Changed.
    Modified,
    /// Removed from the store.
    Deleted,
}

impl EventType {
    /// The watch event `type` word.
    pub fn as_str(self) -> &'static str {
        match self {
            EventType::Added => "ADDED",
            EventType::Modified => "MODIFIED",
            EventType::Deleted => "DELETED",
        }
    }
}

/// A change, as watches see it.
#[derive(Debug)]
pub struct Event {
    /// The resourceVersion of the change.
    pub rv: u64,
    /// The resource's storage key (`group/plural`).
    pub key: Arc<str>,
    /// What happened.
    pub kind: EventType,
    /// The object after the change (the last state, for a deletion).
    pub object: Arc<Value>,
    /// The object before a modification (so that a filtered watch can tell that an object
    /// started or stopped matching).
    pub prev: Option<Arc<Value>>,
    /// The serialized watch line, built once for all watchers.
    pub line: OnceLock<bytes::Bytes>,
}

/// The kept events after a resourceVersion and a receiver for the ones to come.
pub type WatchStart = (Vec<Arc<Event>>, broadcast::Receiver<Arc<Event>>);

/// What a [`Store::mutate`] closure decided.
#[derive(Debug)]
pub enum Change {
    /// Store this object (created or replaced).
    Put(Value),
    /// Remove the object.
    Delete,
    /// Leave things as they are.
    Keep,
}

type ObjKey = (String, String);

#[derive(Debug, Default)]
struct Inner {
    rv: u64,
    objects: HashMap<String, BTreeMap<ObjKey, Arc<Value>>>,
    history: VecDeque<Arc<Event>>,
    compacted: u64,
    /// Who owns whom, for the garbage collector.
    graph: Graph,
}

/// The store.
#[derive(Debug)]
pub struct Store {
    inner: Mutex<Inner>,
    events: broadcast::Sender<Arc<Event>>,
    history_cap: usize,
    /// Woken on every deletion, every write of an object being deleted and every write naming
    /// an owner that does not exist (for GC).
    pub gc_wake: Notify,
}

impl Store {
    /// A store keeping up to `history_cap` events for watches from an older resourceVersion.
    pub fn new(history_cap: usize) -> Self {
        let (events, _) = broadcast::channel(1 << 16);
        Self {
            inner: Mutex::new(Inner {
                rv: 1,
                ..Inner::default()
            }),
            events,
            history_cap,
            gc_wake: Notify::new(),
        }
    }

    fn lock(&self) -> MutexGuard<'_, Inner> {
        self.inner.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// The current resourceVersion.
    pub fn current_rv(&self) -> u64 {
        self.lock().rv
    }

    /// One object.
    pub fn get(&self, key: &str, ns: &str, name: &str) -> Option<Arc<Value>> {
        self.lock()
            .objects
            .get(key)?
            .get(&(ns.to_string(), name.to_string()))
            .cloned()
    }

    /// Every object of a resource (in one namespace when `ns` is given), sorted by namespace
    /// and name, and the resourceVersion of this snapshot.
    pub fn list(&self, key: &str, ns: Option<&str>) -> (Vec<Arc<Value>>, u64) {
        let inner = self.lock();
        let items = match inner.objects.get(key) {
            None => Vec::new(),
            Some(map) => match ns {
                None => map.values().cloned().collect(),
                Some(ns) => map
                    .range((ns.to_string(), String::new())..)
                    .take_while(|((n, _), _)| n == ns)
                    .map(|(_, v)| v.clone())
                    .collect(),
            },
        };
        (items, inner.rv)
    }

    /// The objects of a resource in namespace `ns` whose names start with `prefix`, sorted by
    /// name: a range of the sorted map, so it costs what it returns, not the namespace's size.
    pub fn list_prefixed(&self, key: &str, ns: &str, prefix: &str) -> Vec<Arc<Value>> {
        let inner = self.lock();
        inner.objects.get(key).map_or_else(Vec::new, |map| {
            map.range((ns.to_string(), prefix.to_string())..)
                .take_while(|((n, name), _)| n == ns && name.starts_with(prefix))
                .map(|(_, v)| v.clone())
                .collect()
        })
    }

    /// What the garbage collector has to look at since it last asked (see [`Graph`]).
    pub fn take_gc_work(&self) -> Work {
        self.lock().graph.take_work()
    }

    /// Whether an object with this uid is stored.
    pub fn is_live(&self, uid: &str) -> bool {
        self.lock().graph.is_live(uid)
    }

    /// The stored objects whose ownerReferences name `owner` (which may be gone), with their
    /// resource keys.
    pub fn dependents(&self, owner: &str) -> Vec<(String, Arc<Value>)> {
        let inner = self.lock();
        let locs = inner.graph.dependents(owner);
        Self::at(&inner, locs)
    }

    /// The stored objects being deleted (with a `deletionTimestamp`), with their resource keys.
    pub fn terminating(&self) -> Vec<(String, Arc<Value>)> {
        let inner = self.lock();
        let locs = inner.graph.terminating();
        Self::at(&inner, locs)
    }

    /// The objects stored at `locs`, with their resource keys.
    pub fn objects_at(&self, locs: Vec<Loc>) -> Vec<(String, Arc<Value>)> {
        Self::at(&self.lock(), locs)
    }

    fn at(inner: &Inner, locs: Vec<Loc>) -> Vec<(String, Arc<Value>)> {
        locs.into_iter()
            .filter_map(|(key, ns, name)| {
                let obj = inner.objects.get(&key)?.get(&(ns, name))?.clone();
                Some((key, obj))
            })
            .collect()
    }

    /// Every object in namespace `ns`, of every namespaced resource, with its key.
    pub fn in_namespace(&self, ns: &str) -> Vec<(String, Arc<Value>)> {
        let inner = self.lock();
        inner
            .objects
            .iter()
            .flat_map(|(k, m)| {
                m.range((ns.to_string(), String::new())..)
                    .take_while(|((n, _), _)| n == ns)
                    .map(move |(_, v)| (k.clone(), v.clone()))
            })
            .collect()
    }

    /// Every object of every resource, with its key.
    pub fn all_objects(&self) -> Vec<(String, Arc<Value>)> {
        let inner = self.lock();
        inner
            .objects
            .iter()
            .flat_map(|(k, m)| m.values().map(move |v| (k.clone(), v.clone())))
            .collect()
    }

    /// Number of stored objects.
    pub fn len(&self) -> usize {
        self.lock().objects.values().map(BTreeMap::len).sum()
    }

    /// Whether the store holds no object.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Reads the current object and decides a change under the store lock, so that a
    /// read-modify-write (update, patch, apply) is atomic. Returns the stored object (the
    /// deleted one for a deletion) and the closure's extra result. With `dry_run`, nothing is
    /// stored and no resourceVersion is taken.
    ///
    /// # Errors
    /// Whatever the closure returns.
    pub fn mutate<R>(
        &self,
        key: &str,
        ns: &str,
        name: &str,
        dry_run: bool,
        f: impl FnOnce(Option<&Arc<Value>>) -> Result<(Change, R)>,
    ) -> Result<(Option<Arc<Value>>, R)> {
        let mut inner = self.lock();
        let okey = (ns.to_string(), name.to_string());
        let current = inner.objects.get(key).and_then(|m| m.get(&okey)).cloned();
        let (change, extra) = f(current.as_ref())?;
        match change {
            Change::Keep => Ok((current, extra)),
            Change::Put(mut obj) => {
                let rv = inner.rv + 1;
                if dry_run {
                    return Ok((Some(Arc::new(obj)), extra));
                }
                inner.rv = rv;
                obj["metadata"]["resourceVersion"] = Value::String(rv.to_string());
                let terminating = obj["metadata"].get("deletionTimestamp").is_some();
                let loc = (key.to_string(), okey.0.clone(), okey.1.clone());
                let dangling = inner.graph.put(&loc, current.as_deref(), &obj);
                let obj = Arc::new(obj);
                inner
                    .objects
                    .entry(key.to_string())
                    .or_default()
                    .insert(okey, obj.clone());
                let kind = if current.is_some() {
                    EventType::Modified
                } else {
                    EventType::Added
                };
                self.record(&mut inner, key, kind, obj.clone(), current.clone());
                if terminating || dangling {
                    self.gc_wake.notify_one();
                }
                Ok((Some(obj), extra))
            }
            Change::Delete => {
                let Some(old) = current else {
                    return Err(ApiError::not_found("", key, name));
                };
                if dry_run {
                    return Ok((Some(old), extra));
                }
                inner.rv += 1;
                let rv = inner.rv;
                if let Some(m) = inner.objects.get_mut(key) {
                    m.remove(&okey);
                }
                let loc = (key.to_string(), okey.0.clone(), okey.1.clone());
                inner.graph.delete(&loc, &old);
                let mut last = (*old).clone();
                last["metadata"]["resourceVersion"] = Value::String(rv.to_string());
                let last = Arc::new(last);
                self.record(&mut inner, key, EventType::Deleted, last.clone(), None);
                self.gc_wake.notify_one();
                Ok((Some(last), extra))
            }
        }
    }

    fn record(
        &self,
        inner: &mut Inner,
        key: &str,
        kind: EventType,
        object: Arc<Value>,
        prev: Option<Arc<Value>>,
    ) {
        let event = Arc::new(Event {
            rv: inner.rv,
            key: key.into(),
            kind,
            object,
            prev,
            line: OnceLock::new(),
        });
        inner.history.push_back(event.clone());
        while inner.history.len() > self.history_cap {
            if let Some(dropped) = inner.history.pop_front() {
                inner.compacted = dropped.rv;
            }
        }
        // No receiver is not an error: nobody watches.
        let _ = self.events.send(event);
    }

    /// Starts a watch: the kept events after `since` and a receiver for the ones to come,
    /// taken atomically.
    ///
    /// # Errors
    /// 410 Gone when `since` is older than the kept history.
    pub fn watch_from(&self, since: u64) -> Result<WatchStart> {
        let inner = self.lock();
        if since < inner.compacted {
            return Err(ApiError::gone(since));
        }
        let past = inner
            .history
            .iter()
            .filter(|e| e.rv > since)
            .cloned()
            .collect();
        Ok((past, self.events.subscribe()))
    }

    /// Starts a watch from now: a snapshot of a resource's objects and a receiver for what
    /// follows (the `resourceVersion` unset or "0" case).
    pub fn snapshot_and_watch(
        &self,
        key: &str,
    ) -> (Vec<Arc<Value>>, u64, broadcast::Receiver<Arc<Event>>) {
        let inner = self.lock();
        let items = inner
            .objects
            .get(key)
            .map(|m| m.values().cloned().collect())
            .unwrap_or_default();
        (items, inner.rv, self.events.subscribe())
    }

    /// Forgets the event history, so that a watch from any earlier resourceVersion gets 410
    /// Gone (what etcd compaction does to the real server).
    pub fn compact(&self) {
        let mut inner = self.lock();
        inner.history.clear();
        inner.compacted = inner.rv;
    }

    /// A receiver of every new event (simulator, GC).
    pub fn subscribe(&self) -> broadcast::Receiver<Arc<Event>> {
        self.events.subscribe()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn put(store: &Store, name: &str) -> Arc<Value> {
        let (obj, ()) = store
            .mutate("/configmaps", "default", name, false, |_| {
                Ok((Change::Put(json!({"metadata": {"name": name}})), ()))
            })
            .expect("put");
        obj.expect("stored")
    }

    #[test]
    fn every_write_takes_the_next_resource_version() {
        let store = Store::new(100);
        let a = put(&store, "a");
        let b = put(&store, "b");
        assert_eq!(a["metadata"]["resourceVersion"], "2");
        assert_eq!(b["metadata"]["resourceVersion"], "3");
        assert_eq!(store.list("/configmaps", Some("default")).0.len(), 2);
    }

    #[test]
    fn a_prefixed_list_returns_exactly_the_names_with_that_prefix() {
        let store = Store::new(100);
        for name in [
            "orders",
            "orders-0",
            "orders-1",
            "orders-init-x",
            "ordersx",
            "other-0",
        ] {
            put(&store, name);
        }
        let names: Vec<String> = store
            .list_prefixed("/configmaps", "default", "orders-")
            .iter()
            .map(|o| o["metadata"]["name"].as_str().unwrap().to_string())
            .collect();
        assert_eq!(names, ["orders-0", "orders-1", "orders-init-x"]);
        assert!(
            store
                .list_prefixed("/configmaps", "elsewhere", "orders-")
                .is_empty()
        );
        assert!(
            store
                .list_prefixed("/secrets", "default", "orders-")
                .is_empty()
        );
    }

    #[test]
    fn a_watch_from_before_the_kept_history_is_gone() {
        let store = Store::new(2);
        for n in ["a", "b", "c", "d"] {
            put(&store, n);
        }
        assert_eq!(store.watch_from(1).map(|_| ()).expect_err("gone").code, 410);
        let (past, _) = store.watch_from(3).expect("recent enough");
        assert_eq!(past.iter().map(|e| e.rv).collect::<Vec<_>>(), vec![4, 5]);
    }

    #[test]
    fn dry_run_neither_stores_nor_takes_a_version() {
        let store = Store::new(10);
        store
            .mutate("/configmaps", "default", "x", true, |_| {
                Ok((Change::Put(json!({"metadata": {}})), ()))
            })
            .expect("dry run");
        assert_eq!(store.current_rv(), 1);
        assert!(store.is_empty());
    }
}
