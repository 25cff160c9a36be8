//! What a parent kind's controller remembers per parent between reconciles: the reference a
//! child's uid label leads to, and the consecutive failures that set its backoff. Both are
//! forgotten when the parent goes, so a long-running host's memory does not grow with every
//! parent it ever saw.
//!
//! # Why the store is checked after each insert
//! A reconcile may still be running when its parent's delete arrives. The watch task removes the
//! parent from the reflector store first and from these maps second; a reconcile inserts first
//! and then checks the store. Whichever order the two interleave in, the entry does not outlive
//! the parent: either the watch task's removal comes after the insert, or the check does and
//! finds the parent gone.

use std::{collections::HashMap, sync::Mutex};

use kube::{
    ResourceExt,
    api::DynamicObject,
    core::ApiResource,
    runtime::reflector::{ObjectRef, Store},
};
use prometheus_client::metrics::gauge::Gauge;

/// Per-parent memory of one parent kind, bounded by the parents that exist.
pub struct Remembered {
    /// The parents' reflector store: what exists.
    store: Store<DynamicObject>,
    /// The parent resource.
    resource: ApiResource,
    /// Parent uid → reference, so that a child's uid label finds its parent.
    parents: Mutex<HashMap<String, ObjectRef<DynamicObject>>>,
    /// Consecutive failures per parent uid, for backoff.
    failures: Mutex<HashMap<String, u32>>,
    parents_gauge: Gauge,
    failures_gauge: Gauge,
}

impl std::fmt::Debug for Remembered {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Remembered")
            .field("parents", &lock(&self.parents).len())
            .field("failures", &lock(&self.failures).len())
            .finish_non_exhaustive()
    }
}

impl Remembered {
    /// Remembers nothing yet; `parents` and `failures` are the gauges that show the sizes.
    pub fn new(
        store: Store<DynamicObject>,
        resource: ApiResource,
        parents: Gauge,
        failures: Gauge,
    ) -> Self {
        Remembered {
            store,
            resource,
            parents: Mutex::new(HashMap::new()),
            failures: Mutex::new(HashMap::new()),
            parents_gauge: parents,
            failures_gauge: failures,
        }
    }

    /// The parent a child's uid label names, if it is known.
    pub fn parent(&self, uid: &str) -> Option<ObjectRef<DynamicObject>> {
        lock(&self.parents).get(uid).cloned()
    }

    /// Remembers a parent being reconciled.
    pub fn reconciling(&self, obj: &DynamicObject) {
        let uid = obj.uid().unwrap_or_default();
        let reference = ObjectRef::from_obj_with(obj, self.resource.clone());
        insert(&self.parents, &self.parents_gauge, uid.clone(), reference);
        if !self.exists(obj) {
            self.forget(&uid);
        }
    }

    /// Counts one more consecutive failure of a parent and returns the count.
    pub fn failed(&self, obj: &DynamicObject) -> u32 {
        let uid = obj.uid().unwrap_or_default();
        let n = {
            let mut failures = lock(&self.failures);
            let n = failures.entry(uid.clone()).or_insert_with(|| {
                self.failures_gauge.inc();
                0
            });
            *n = n.saturating_add(1);
            *n
        };
        if !self.exists(obj) {
            self.forget(&uid);
        }
        n
    }

    /// Ends a parent's run of failures.
    pub fn succeeded(&self, uid: &str) {
        remove(&self.failures, &self.failures_gauge, uid);
    }

    /// Forgets a parent that was deleted.
    pub fn forget(&self, uid: &str) {
        remove(&self.parents, &self.parents_gauge, uid);
        remove(&self.failures, &self.failures_gauge, uid);
    }

    /// After a relist: forgets every parent the store no longer holds (deleted while no watch
    /// was open, so no delete event came).
    pub fn keep_listed(&self) {
        let listed: std::collections::HashSet<String> =
            self.store.state().iter().filter_map(|o| o.uid()).collect();
        retain(&self.parents, &self.parents_gauge, &listed);
        retain(&self.failures, &self.failures_gauge, &listed);
    }

    /// Whether the store still holds this parent (the same uid, not a namesake made since).
    fn exists(&self, obj: &DynamicObject) -> bool {
        let reference = ObjectRef::from_obj_with(obj, self.resource.clone());
        self.store
            .get(&reference)
            .is_some_and(|stored| stored.uid() == obj.uid())
    }
}

impl Drop for Remembered {
    fn drop(&mut self) {
        // A stopped controller keeps nothing. The gauges count up and down rather than being
        // set, so a controller restarted before this one is dropped is counted right.
        self.parents_gauge.dec_by(len(&lock(&self.parents)));
        self.failures_gauge.dec_by(len(&lock(&self.failures)));
    }
}

fn insert<V>(map: &Mutex<HashMap<String, V>>, gauge: &Gauge, key: String, value: V) {
    if lock(map).insert(key, value).is_none() {
        gauge.inc();
    }
}

fn remove<V>(map: &Mutex<HashMap<String, V>>, gauge: &Gauge, key: &str) {
    if lock(map).remove(key).is_some() {
        gauge.dec();
    }
}

fn retain<V>(
    map: &Mutex<HashMap<String, V>>,
    gauge: &Gauge,
    keep: &std::collections::HashSet<String>,
) {
    let mut map = lock(map);
    let before = map.len();
    map.retain(|uid, _| keep.contains(uid));
    gauge.dec_by(i64::try_from(before - map.len()).unwrap_or(i64::MAX));
}

fn len<V>(map: &HashMap<String, V>) -> i64 {
    i64::try_from(map.len()).unwrap_or(i64::MAX)
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}
