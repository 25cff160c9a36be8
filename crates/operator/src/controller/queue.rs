//! The reconcile queue's depth, as the host can see it: parents waiting for a reconcile because
//! something changed — the parent itself, one of its children, or the kind's pipeline (a hot
//! swap) — and whose reconcile has not started yet. And its order: the lane each due parent
//! waits in at the kind's [`Gate`], from the generation each parent last started with and
//! whether a hot swap came since.
//!
//! # Why here
//! kube-runtime's scheduler does not expose its queue. The host sees every trigger it feeds the
//! controller (its own watch tasks drain the parent and child watches), every reconcile the
//! controller hands out and every reconcile start, so it keeps the same set beside it. A
//! requeue a reconcile asked for (`Action::requeue`) is scheduled work until it comes due, as
//! in client-go's delaying queue: it counts from when the controller hands it out.
//!
//! It is reported as client-go's workqueue is (`workqueue_depth`, `workqueue_adds_total`,
//! `workqueue_queue_duration_seconds`): an add is a parent that starts waiting (not one more
//! trigger of a parent already waiting), its wait lasts until its reconcile starts.
//!
//! # Guarantees
//! - A parent is counted once however many triggers arrive before its reconcile starts, as
//!   the scheduler merges them.
//! - A deleted parent leaves the set (its queued reconcile never runs), and a child's change
//!   counts only for a parent the parent watch has seen, so no entry is stranded — also when
//!   the deletion fell into a gap of the watch: a relist replaces the known parents whole.
//!   What is kept per parent for its lane goes with it the same way.

use std::{
    collections::{HashMap, HashSet},
    sync::Mutex,
    time::Instant,
};

use super::gate::{Gate, Lane};
use crate::metrics::QueueMetrics;

/// The pending set of one parent kind, mirrored into metrics, and the gate its reconciles pass.
#[derive(Debug)]
pub struct Queue {
    inner: Mutex<Inner>,
    metrics: QueueMetrics,
    /// The permits reconciles of this kind wait for, in lanes.
    pub gate: Gate,
}

/// The time of an update, and how many parents it started waiting.
struct Adds(Instant, u64);

impl Adds {
    /// `uid` waits from now, unless it already waits.
    fn wait(&mut self, pending: &mut HashMap<String, Instant>, uid: &str) {
        if !pending.contains_key(uid) {
            pending.insert(uid.to_string(), self.0);
            self.1 += 1;
        }
    }
}

#[derive(Debug, Default)]
struct Inner {
    /// Parents the parent watch has seen and not seen deleted.
    known: HashSet<String>,
    /// Parents waiting for their reconcile to start → since when.
    pending: HashMap<String, Instant>,
    /// The parents listed so far while the parent watch relists (`Init` … `InitDone`).
    relisting: Option<HashSet<String>>,
    /// Known parents → the generation their last reconcile started with.
    ran: HashMap<String, i64>,
    /// Known parents whose pipeline changed since their last reconcile started.
    swapped: HashSet<String>,
}

impl Queue {
    /// An empty queue reporting into `metrics`, its reconciles passing `gate`.
    pub fn new(metrics: QueueMetrics, gate: Gate) -> Self {
        metrics.depth.set(0);
        Queue {
            inner: Mutex::default(),
            metrics,
            gate,
        }
    }

    fn update(&self, f: impl FnOnce(&mut Inner, &mut Adds)) {
        let mut inner = self.inner.lock().unwrap_or_else(|e| e.into_inner());
        let mut adds = Adds(Instant::now(), 0);
        f(&mut inner, &mut adds);
        self.metrics
            .depth
            .set(i64::try_from(inner.pending.len()).unwrap_or(i64::MAX));
        self.metrics.adds.inc_by(adds.1);
    }

    /// The parent was created or changed, and is now at `generation`. If it waits at the gate
    /// with an older generation than it last ran with, it moves up.
    pub fn parent_changed(&self, uid: &str, generation: Option<i64>) {
        let mut moved = false;
        self.update(|i, adds| {
            i.known.insert(uid.to_string());
            adds.wait(&mut i.pending, uid);
            moved = i.ran.get(uid) != Some(&generation.unwrap_or(0));
        });
        if moved {
            self.gate.promote(uid, Lane::Changed);
        }
    }

    /// The lane a due parent at `generation` waits in.
    pub fn lane(&self, uid: &str, generation: Option<i64>) -> Lane {
        let inner = self.inner.lock().unwrap_or_else(|e| e.into_inner());
        if inner.ran.get(uid) != Some(&generation.unwrap_or(0)) {
            Lane::Changed
        } else if inner.swapped.contains(uid) {
            Lane::Swapped
        } else {
            Lane::Resync
        }
    }

    /// The parent watch starts listing again (after a gap in which deletions may be missed).
    pub fn relist_started(&self) {
        self.update(|i, _| i.relisting = Some(HashSet::new()));
    }

    /// The parent was listed by a relist: it exists and waits for a reconcile.
    pub fn parent_listed(&self, uid: &str) {
        self.update(|i, adds| {
            i.relisting.get_or_insert_default().insert(uid.to_string());
            i.known.insert(uid.to_string());
            adds.wait(&mut i.pending, uid);
        });
    }

    /// The relist is complete: parents it did not list are gone, from the gate too.
    pub fn relist_done(&self) {
        let mut gone = Vec::new();
        self.update(|i, _| {
            if let Some(listed) = i.relisting.take() {
                gone.extend(i.known.difference(&listed).cloned());
                i.known = listed;
                let known = &i.known;
                i.pending.retain(|uid, _| known.contains(uid));
                i.ran.retain(|uid, _| known.contains(uid));
                i.swapped.retain(|uid| known.contains(uid));
            }
        });
        for uid in gone {
            self.gate.forget(&uid);
        }
    }

    /// The parent is gone: it leaves the gate too.
    pub fn parent_deleted(&self, uid: &str) {
        self.update(|i, _| {
            i.known.remove(uid);
            i.pending.remove(uid);
            i.ran.remove(uid);
            i.swapped.remove(uid);
        });
        self.gate.forget(uid);
    }

    /// A child labelled with this parent uid changed.
    pub fn child_changed(&self, uid: &str) {
        self.update(|i, adds| {
            if i.known.contains(uid) {
                adds.wait(&mut i.pending, uid);
            }
        });
    }

    /// The controller handed out a reconcile of this parent: if nothing above queued it, a
    /// requeue came due, and it waits from now.
    pub fn handed_out(&self, uid: &str) {
        self.update(|i, adds| {
            if i.known.contains(uid) {
                adds.wait(&mut i.pending, uid);
            }
        });
    }

    /// Every parent is to be reconciled again (the pipeline changed): each known parent
    /// waits at the gate in the swapped lane (those waiting for a requeue move up to it).
    pub fn all_changed(&self) {
        let mut known = Vec::new();
        self.update(|i, adds| {
            for uid in &i.known {
                adds.wait(&mut i.pending, uid);
            }
            i.swapped = i.known.clone();
            known.extend(i.known.iter().cloned());
        });
        for uid in known {
            self.gate.queue(&uid, Lane::Swapped);
        }
    }

    /// The parent's reconcile started, with the parent at `generation`.
    pub fn started(&self, uid: &str, generation: Option<i64>) {
        self.update(|i, _| {
            if let Some(since) = i.pending.remove(uid) {
                self.metrics.waited.observe(since.elapsed().as_secs_f64());
            }
            i.swapped.remove(uid);
            // Only for a parent still known: one deleted while it waited is not kept.
            if i.known.contains(uid) {
                i.ran.insert(uid.to_string(), generation.unwrap_or(0));
            }
        });
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)] // Tests: a panic is the failure report.
mod tests {
    use super::*;

    use crate::metrics::Metrics;
    use prometheus_client::metrics::{counter::Counter, gauge::Gauge};

    /// A queue, its depth gauge and its adds counter.
    fn queue() -> (Queue, Gauge, Counter) {
        let metrics = Metrics::default().queue_of("v1/Thing");
        let (depth, adds) = (metrics.depth.clone(), metrics.adds.clone());
        let (gate, _woken) = Gate::new(1, std::time::Duration::from_secs(60));
        let q = Queue::new(metrics, gate);
        (q, depth, adds)
    }

    #[test]
    fn counts_each_waiting_parent_once_and_strands_none() {
        let (q, gauge, _) = queue();
        q.parent_changed("a", Some(1));
        q.parent_changed("a", Some(1));
        q.child_changed("a");
        q.parent_changed("b", Some(1));
        assert_eq!(gauge.get(), 2);
        q.started("a", Some(1));
        assert_eq!(gauge.get(), 1);
        // A child of a parent never seen does not count; one of a known parent does.
        q.child_changed("unknown");
        q.child_changed("a");
        assert_eq!(gauge.get(), 2);
        // A hot swap queues every known parent; a deleted one leaves for good.
        q.started("a", Some(1));
        q.started("b", Some(1));
        q.all_changed();
        assert_eq!(gauge.get(), 2);
        q.parent_deleted("b");
        q.child_changed("b");
        assert_eq!(gauge.get(), 1);
        q.started("a", Some(1));
        assert_eq!(gauge.get(), 0);
    }

    #[test]
    fn a_relist_forgets_parents_deleted_while_the_watch_was_down() {
        let (q, gauge, _) = queue();
        q.parent_changed("kept", Some(1));
        q.parent_changed("gone", Some(1));
        q.started("kept", Some(1));
        // "gone" was deleted during a watch gap: no Delete event, only a relist without it.
        q.relist_started();
        q.parent_listed("kept");
        q.relist_done();
        assert_eq!(gauge.get(), 1, "only kept waits");
        q.started("kept", Some(1));
        q.all_changed();
        q.child_changed("gone");
        assert_eq!(gauge.get(), 1, "gone is not queued again");
    }

    #[test]
    fn a_parent_is_changed_until_it_ran_at_its_generation_and_swapped_until_it_ran_again() {
        let (q, _, _) = queue();
        q.parent_changed("p", Some(1));
        assert_eq!(q.lane("p", Some(1)), Lane::Changed, "never ran");
        q.started("p", Some(1));
        assert_eq!(q.lane("p", Some(1)), Lane::Resync, "a requeue");
        q.parent_changed("p", Some(2));
        assert_eq!(q.lane("p", Some(2)), Lane::Changed, "its spec changed");
        q.started("p", Some(2));
        q.all_changed();
        assert_eq!(q.lane("p", Some(2)), Lane::Swapped);
        q.started("p", Some(2));
        assert_eq!(q.lane("p", Some(2)), Lane::Resync);
        // Deleted while it waited: nothing is kept for it.
        q.parent_deleted("p");
        q.started("p", Some(2));
        assert_eq!(q.lane("p", Some(2)), Lane::Changed);
        assert!(q.inner.lock().unwrap().ran.is_empty());
    }

    #[test]
    fn an_add_is_a_parent_that_starts_waiting_and_a_requeue_waits_once_it_is_handed_out() {
        let (q, depth, adds) = queue();
        q.parent_changed("a", Some(1));
        q.child_changed("a");
        q.parent_changed("a", Some(1));
        assert_eq!(
            (depth.get(), adds.get()),
            (1, 1),
            "one parent waits, added once"
        );
        q.started("a", Some(1));
        assert_eq!((depth.get(), adds.get()), (0, 1));
        // A requeue of "a" comes due: the controller hands it out without a trigger.
        q.handed_out("a");
        assert_eq!((depth.get(), adds.get()), (1, 2));
        // Handed out again while it waits (the trigger came first): still one.
        q.child_changed("a");
        q.handed_out("a");
        assert_eq!((depth.get(), adds.get()), (1, 2));
        q.started("a", Some(1));
        // A parent never seen, or gone, is not queued by a stray reconcile.
        q.handed_out("unknown");
        q.parent_deleted("a");
        q.handed_out("a");
        assert_eq!((depth.get(), adds.get()), (0, 2));
        // A hot swap adds each known parent not already waiting.
        q.parent_changed("b", Some(1));
        q.parent_changed("c", Some(1));
        q.started("c", Some(1));
        q.all_changed();
        assert_eq!(
            (depth.get(), adds.get()),
            (2, 5),
            "c again; b waits already"
        );
    }

    #[test]
    fn a_wait_is_observed_from_its_first_trigger_to_its_start() {
        let metrics = Metrics::default();
        let (gate, _woken) = Gate::new(1, std::time::Duration::from_secs(60));
        let q = Queue::new(metrics.queue_of("v1/Thing"), gate);
        q.parent_changed("a", Some(1));
        std::thread::sleep(std::time::Duration::from_millis(30));
        q.child_changed("a");
        q.started("a", Some(1));
        // Started again without waiting: nothing more is observed.
        q.started("a", Some(1));
        let text = metrics.encode();
        let value = |series: &str| -> f64 {
            text.lines()
                .find_map(|l| l.strip_prefix(series))
                .unwrap_or_else(|| panic!("{series} missing from {text}"))
                .trim()
                .parse()
                .unwrap()
        };
        let labels = r#"{name="v1/Thing",controller="v1/Thing"} "#;
        assert_eq!(
            value(&format!("workqueue_queue_duration_seconds_count{labels}")),
            1.0
        );
        let waited = value(&format!("workqueue_queue_duration_seconds_sum{labels}"));
        assert!((0.03..5.0).contains(&waited), "waited {waited} s");
    }
}
