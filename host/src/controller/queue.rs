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
//!   counts only for a parent the parent watch has seen, so no entry is stranded.

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
}
