//! The reconcile queue's depth, as the host can see it: parents waiting for a reconcile because
//! something changed — the parent itself, one of its children, or the kind's pipeline (a hot
//! swap) — and whose reconcile has not started yet.
//!
//! # Why here
//! kube-runtime's scheduler does not expose its queue. The host sees every trigger it feeds the
//! controller (its own watch tasks drain the parent and child watches) and every reconcile
//! start, so it keeps the same set beside it. Requeues a reconcile asked for (`Action::requeue`)
//! are scheduled work, not a queue, and are not counted.
//!
//! # Guarantees
//! - A parent is counted once however many triggers arrive before its reconcile starts, as
//!   the scheduler merges them.
//! - A deleted parent leaves the set (its queued reconcile never runs), and a child's change
//!   counts only for a parent the parent watch has seen, so no entry is stranded — also when
//!   the deletion fell into a gap of the watch: a relist replaces the known parents whole.

use std::{collections::HashSet, sync::Mutex};

use prometheus_client::metrics::gauge::Gauge;

/// The pending set of one parent kind, mirrored into a gauge.
#[derive(Debug)]
pub struct Queue {
    inner: Mutex<Inner>,
    depth: Gauge,
}

#[derive(Debug, Default)]
struct Inner {
    /// Parents the parent watch has seen and not seen deleted.
    known: HashSet<String>,
    /// Parents waiting for their reconcile to start.
    pending: HashSet<String>,
    /// The parents listed so far while the parent watch relists (`Init` … `InitDone`).
    relisting: Option<HashSet<String>>,
}

impl Queue {
    /// An empty queue reporting into `depth`.
    pub fn new(depth: Gauge) -> Self {
        depth.set(0);
        Queue {
            inner: Mutex::default(),
            depth,
        }
    }

    fn update(&self, f: impl FnOnce(&mut Inner)) {
        let mut inner = self.inner.lock().unwrap_or_else(|e| e.into_inner());
        f(&mut inner);
        self.depth
            .set(i64::try_from(inner.pending.len()).unwrap_or(i64::MAX));
    }

    /// The parent was created or changed (or listed).
    pub fn parent_changed(&self, uid: &str) {
        self.update(|i| {
            i.known.insert(uid.to_string());
            i.pending.insert(uid.to_string());
        });
    }

    /// The parent watch starts listing again (after a gap in which deletions may be missed).
    pub fn relist_started(&self) {
        self.update(|i| i.relisting = Some(HashSet::new()));
    }

    /// The parent was listed by a relist: it exists and waits for a reconcile.
    pub fn parent_listed(&self, uid: &str) {
        self.update(|i| {
            i.relisting.get_or_insert_default().insert(uid.to_string());
            i.known.insert(uid.to_string());
            i.pending.insert(uid.to_string());
        });
    }

    /// The relist is complete: parents it did not list are gone.
    pub fn relist_done(&self) {
        self.update(|i| {
            if let Some(listed) = i.relisting.take() {
                i.known = listed;
                let known = &i.known;
                i.pending.retain(|uid| known.contains(uid));
            }
        });
    }

    /// The parent is gone.
    pub fn parent_deleted(&self, uid: &str) {
        self.update(|i| {
            i.known.remove(uid);
            i.pending.remove(uid);
        });
    }

    /// A child labelled with this parent uid changed.
    pub fn child_changed(&self, uid: &str) {
        self.update(|i| {
            if i.known.contains(uid) {
                i.pending.insert(uid.to_string());
            }
        });
    }

    /// Every parent is to be reconciled again (the pipeline changed).
    pub fn all_changed(&self) {
        self.update(|i| i.pending = i.known.clone());
    }

    /// The parent's reconcile started.
    pub fn started(&self, uid: &str) {
        self.update(|i| {
            i.pending.remove(uid);
        });
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn counts_each_waiting_parent_once_and_strands_none() {
        let gauge = Gauge::default();
        let q = Queue::new(gauge.clone());
        q.parent_changed("a");
        q.parent_changed("a");
        q.child_changed("a");
        q.parent_changed("b");
        assert_eq!(gauge.get(), 2);
        q.started("a");
        assert_eq!(gauge.get(), 1);
        // A child of a parent never seen does not count; one of a known parent does.
        q.child_changed("unknown");
        q.child_changed("a");
        assert_eq!(gauge.get(), 2);
        // A hot swap queues every known parent; a deleted one leaves for good.
        q.started("a");
        q.started("b");
        q.all_changed();
        assert_eq!(gauge.get(), 2);
        q.parent_deleted("b");
        q.child_changed("b");
        assert_eq!(gauge.get(), 1);
        q.started("a");
        assert_eq!(gauge.get(), 0);
    }

    #[test]
    fn a_relist_forgets_parents_deleted_while_the_watch_was_down() {
        let gauge = Gauge::default();
        let q = Queue::new(gauge.clone());
        q.parent_changed("kept");
        q.parent_changed("gone");
        q.started("kept");
        // "gone" was deleted during a watch gap: no Delete event, only a relist without it.
        q.relist_started();
        q.parent_listed("kept");
        q.relist_done();
        assert_eq!(gauge.get(), 1, "only kept waits");
        q.started("kept");
        q.all_changed();
        q.child_changed("gone");
        assert_eq!(gauge.get(), 1, "gone is not queued again");
    }
}
