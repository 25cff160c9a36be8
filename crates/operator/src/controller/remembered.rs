//! What a parent kind's controller remembers per parent between reconciles: the reference a
//! child's uid label leads to, the consecutive failures that set its backoff, which plugins
//! hold a stuck finalize phase (the `finalize_stuck` gauge), the inputs of its last apply that
//! wrote nothing (`unchanged.rs`), and its last run (`crate::runs`, kept for every kind in one
//! place). All are forgotten when the parent goes, so a
//! long-running host's memory does not grow with every parent it ever saw.
//!
//! # Why the store is checked after each insert
//! A reconcile may still be running when its parent's delete arrives. The watch task removes the
//! parent from the reflector store first and from these maps second; a reconcile inserts first
//! and then checks the store. Whichever order the two interleave in, the entry does not outlive
//! the parent: either the watch task's removal comes after the insert, or the check does and
//! finds the parent gone.

use std::{
    collections::HashMap,
    sync::{Arc, Mutex},
};

use kube::{
    ResourceExt,
    api::DynamicObject,
    core::ApiResource,
    runtime::reflector::{ObjectRef, Store},
};
use prometheus_client::metrics::{family::Family, gauge::Gauge};

use super::unchanged::Fingerprint;
use crate::{metrics::KindPlugin, runs::Runs};

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
    /// Deleting parents whose finalize phase is stuck → the plugins that hold it.
    stuck: Mutex<HashMap<String, Vec<String>>>,
    /// Parent uid → the inputs of its last apply that wrote and read nothing.
    unchanged: Mutex<HashMap<String, Fingerprint>>,
    parents_gauge: Gauge,
    failures_gauge: Gauge,
    /// The parent kind, for the stuck gauge's label.
    kind: String,
    stuck_gauges: Family<KindPlugin, Gauge>,
    /// The parents' last runs (of every kind; this one forgets its own).
    runs: Arc<Runs>,
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
    /// Remembers nothing yet; `parents` and `failures` are the gauges that show the sizes,
    /// `stuck` the family of the stuck-finalize gauge (labelled with `kind`).
    pub fn new(
        store: Store<DynamicObject>,
        resource: ApiResource,
        parents: Gauge,
        failures: Gauge,
        kind: &str,
        stuck: Family<KindPlugin, Gauge>,
        runs: Arc<Runs>,
    ) -> Self {
        Remembered {
            store,
            resource,
            parents: Mutex::new(HashMap::new()),
            failures: Mutex::new(HashMap::new()),
            stuck: Mutex::new(HashMap::new()),
            unchanged: Mutex::new(HashMap::new()),
            parents_gauge: parents,
            failures_gauge: failures,
            kind: kind.to_string(),
            stuck_gauges: stuck,
            runs,
        }
    }

    /// Records that `plugins` hold a deleting parent's finalize phase past the threshold (none:
    /// it is not stuck any more).
    pub fn stuck(&self, obj: &DynamicObject, plugins: &[String]) {
        let uid = obj.uid().unwrap_or_default();
        let old = if plugins.is_empty() {
            lock(&self.stuck).remove(&uid)
        } else {
            lock(&self.stuck).insert(uid.clone(), plugins.to_vec())
        };
        self.count(old.as_deref().unwrap_or_default(), -1);
        self.count(plugins, 1);
        if !plugins.is_empty() && !self.exists(obj) {
            self.forget(&uid);
        }
    }

    fn count(&self, plugins: &[String], by: i64) {
        for plugin in plugins {
            self.stuck_gauges
                .get_or_create(&KindPlugin {
                    kind: self.kind.clone(),
                    plugin: plugin.clone(),
                })
                .inc_by(by);
        }
    }

    /// The parent as the store holds it now, if it still exists.
    pub fn latest(&self, obj: &DynamicObject) -> Option<std::sync::Arc<DynamicObject>> {
        self.store
            .get(&ObjectRef::from_obj_with(obj, self.resource.clone()))
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

    /// Whether `inputs` are those of the parent's last apply that wrote and read nothing.
    pub fn wrote_nothing_for(&self, uid: &str, inputs: &Fingerprint) -> bool {
        lock(&self.unchanged).get(uid) == Some(inputs)
    }

    /// Remembers that an apply with these inputs wrote and read nothing.
    pub fn wrote_nothing(&self, uid: &str, inputs: Fingerprint) {
        lock(&self.unchanged).insert(uid.to_string(), inputs);
        if !self.exists_uid(uid) {
            lock(&self.unchanged).remove(uid);
        }
    }

    /// Forgets a parent that was deleted.
    pub fn forget(&self, uid: &str) {
        remove(&self.parents, &self.parents_gauge, uid);
        lock(&self.unchanged).remove(uid);
        remove(&self.failures, &self.failures_gauge, uid);
        self.runs.forget(uid);
        let old = lock(&self.stuck).remove(uid);
        self.count(old.as_deref().unwrap_or_default(), -1);
    }

    /// After a relist: forgets every parent the store no longer holds (deleted while no watch
    /// was open, so no delete event came).
    pub fn keep_listed(&self) {
        let listed: std::collections::HashSet<String> =
            self.store.state().iter().filter_map(|o| o.uid()).collect();
        retain(&self.parents, &self.parents_gauge, &listed);
        retain(&self.failures, &self.failures_gauge, &listed);
        lock(&self.unchanged).retain(|uid, _| listed.contains(uid));
        self.runs.forget_kind(&self.kind, Some(&listed));
        let gone: Vec<Vec<String>> = {
            let mut stuck = lock(&self.stuck);
            let gone = stuck
                .iter()
                .filter(|(uid, _)| !listed.contains(*uid))
                .map(|(_, p)| p.clone())
                .collect();
            stuck.retain(|uid, _| listed.contains(uid));
            gone
        };
        for plugins in gone {
            self.count(&plugins, -1);
        }
    }

    /// Whether the parent of this uid is remembered and the store still holds it.
    fn exists_uid(&self, uid: &str) -> bool {
        self.parent(uid).is_some_and(|reference| {
            self.store
                .get(&reference)
                .is_some_and(|stored| stored.uid().as_deref() == Some(uid))
        })
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
        self.runs.forget_kind(&self.kind, None);
        let stuck: Vec<Vec<String>> = lock(&self.stuck).drain().map(|(_, p)| p).collect();
        for plugins in stuck {
            self.count(&plugins, -1);
        }
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

#[cfg(test)]
mod tests {
    use super::*;
    use kube::{
        api::GroupVersionKind,
        runtime::{reflector::store::Writer, watcher},
    };

    fn parent(uid: &str) -> DynamicObject {
        serde_json::from_value(serde_json::json!({
            "apiVersion": "example.com/v1", "kind": "Thing",
            "metadata": {"name": uid, "namespace": "shop", "uid": uid},
        }))
        .unwrap()
    }

    /// A store holding parents `a` and `b`, its writer, and what is remembered of them, with
    /// `family` as the stuck gauge.
    fn with_parents(
        family: Family<KindPlugin, Gauge>,
    ) -> (
        Writer<DynamicObject>,
        Remembered,
        DynamicObject,
        DynamicObject,
    ) {
        let resource = ApiResource::from_gvk(&GroupVersionKind::gvk("example.com", "v1", "Thing"));
        let mut writer = Writer::new(resource.clone());
        let (a, b) = (parent("a"), parent("b"));
        for p in [&a, &b] {
            writer.apply_watcher_event(&watcher::Event::Apply(p.clone()));
        }
        let remembered = Remembered::new(
            writer.as_reader(),
            resource,
            Gauge::default(),
            Gauge::default(),
            "example.com/v1/Thing",
            family,
            Arc::default(),
        );
        (writer, remembered, a, b)
    }

    #[test]
    fn the_stuck_gauge_counts_parents_per_plugin_and_forgets_them_with_the_parent() {
        let family: Family<KindPlugin, Gauge> = Family::default();
        let (_writer, remembered, a, b) = with_parents(family.clone());
        let value = |plugin: &str| {
            family
                .get_or_create(&KindPlugin {
                    kind: "example.com/v1/Thing".into(),
                    plugin: plugin.into(),
                })
                .get()
        };
        remembered.stuck(&a, &["backup".into()]);
        remembered.stuck(&a, &["backup".into()]);
        remembered.stuck(&b, &["backup".into(), "storage".into()]);
        assert_eq!((value("backup"), value("storage")), (2, 1));
        // A parent whose holders change is counted under the new ones only.
        remembered.stuck(&b, &["storage".into()]);
        assert_eq!((value("backup"), value("storage")), (1, 1));
        remembered.stuck(&a, &[]);
        assert_eq!(value("backup"), 0);
        remembered.forget("b");
        assert_eq!(value("storage"), 0);
        // One not in the store (deleted meanwhile) is not kept.
        remembered.stuck(&parent("gone"), &["backup".into()]);
        assert_eq!(value("backup"), 0);
    }

    #[test]
    fn the_inputs_of_an_apply_that_wrote_nothing_are_kept_while_the_parent_exists() {
        let (mut writer, remembered, a, b) = with_parents(Family::default());
        for p in [&a, &b] {
            remembered.reconciling(p);
        }
        remembered.wrote_nothing("a", [1; 16]);
        remembered.wrote_nothing("b", [2; 16]);
        assert!(remembered.wrote_nothing_for("a", &[1; 16]));
        assert!(!remembered.wrote_nothing_for("a", &[2; 16]));
        // The last apply's inputs replace the one before.
        remembered.wrote_nothing("a", [3; 16]);
        assert!(!remembered.wrote_nothing_for("a", &[1; 16]));
        assert!(remembered.wrote_nothing_for("a", &[3; 16]));
        // Forgotten with the parent.
        remembered.forget("a");
        assert!(!remembered.wrote_nothing_for("a", &[3; 16]));
        // A parent not being reconciled, or deleted meanwhile, is not kept.
        remembered.wrote_nothing("unknown", [4; 16]);
        assert!(!remembered.wrote_nothing_for("unknown", &[4; 16]));
        writer.apply_watcher_event(&watcher::Event::Delete(b.clone()));
        remembered.wrote_nothing("b", [5; 16]);
        assert!(!remembered.wrote_nothing_for("b", &[5; 16]));
        // And dropped after a relist that no longer holds the parent.
        let c = parent("c");
        writer.apply_watcher_event(&watcher::Event::Apply(c.clone()));
        remembered.reconciling(&c);
        remembered.wrote_nothing("c", [6; 16]);
        assert!(remembered.wrote_nothing_for("c", &[6; 16]));
        writer.apply_watcher_event(&watcher::Event::Delete(c));
        remembered.keep_listed();
        assert!(!remembered.wrote_nothing_for("c", &[6; 16]));
    }
}
