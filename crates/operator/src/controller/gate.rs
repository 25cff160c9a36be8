//! The order reconciles of one parent kind run in when more are due than may run at once.
//!
//! # Why
//! kube-runtime's controller hands reconciles out in the order its delay queue yields them,
//! and that queue yields entries scheduled for "now" last in, first out. Under saturation a
//! parent that has never run could wait behind requeues that keep coming back (seen under
//! callgrind: 3 of 100 parents never reconciled while the others ran 46 times each). So the
//! controller runs with unbounded concurrency, and each reconcile first waits here for one of
//! the kind's `concurrency` permits. The controller still merges triggers per parent (a parent
//! waiting here is running as far as it knows), so each parent waits here at most once.
//!
//! # Guarantees
//! - Lanes, first first: [`Lane::Changed`] (a parent never reconciled, or whose generation
//!   moved since its last reconcile), [`Lane::Swapped`] (its kind's pipeline changed since its
//!   last reconcile), [`Lane::Resync`] (everything else: requeues, children's changes).
//!   First come, first served within a lane.
//! - No waiter starves: waiters that have waited longer than the gate's age limit get every
//!   other permit (the oldest first), the lanes' order the rest — so changed parents keep at
//!   least half the permits however long the backlog grows.
//! - A waiting parent moves up when it turns out to be changed ([`Gate::promote`]) and keeps
//!   its place in the order of arrival.
//! - A permit is never lost: one handed to a waiter that gave up is handed on.

use std::{
    collections::{BTreeMap, HashMap},
    sync::{Arc, Mutex},
    time::{Duration, Instant},
};

use tokio::sync::oneshot;

/// How long a waiter may be passed over by later lanes' arrivals before it is aged: aged
/// waiters get every other permit, so under a sustained flood of changes requeues still run.
pub const AGE_LIMIT: Duration = Duration::from_secs(2);

/// Why a parent is due, in the order lanes are served.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Lane {
    /// Never reconciled, or its spec (generation) changed since.
    Changed = 0,
    /// Its kind's pipeline changed (a hot swap) since its last reconcile.
    Swapped = 1,
    /// A requeue or a child's change.
    Resync = 2,
}

impl Lane {
    const ALL: [Lane; 3] = [Lane::Changed, Lane::Swapped, Lane::Resync];

    /// The lane's name, for metrics.
    pub fn name(self) -> &'static str {
        match self {
            Lane::Changed => "changed",
            Lane::Swapped => "swapped",
            Lane::Resync => "resync",
        }
    }
}

/// The permits of one parent kind.
#[derive(Debug, Clone)]
pub struct Gate {
    state: Arc<Mutex<State>>,
    age_limit: Duration,
}

#[derive(Debug)]
struct State {
    free: usize,
    /// Arrival order, across lanes.
    next: u64,
    /// Whether the next permit goes to an aged waiter (when there is one and the lanes' first
    /// would be another): aged waiters get every other permit.
    aged_turn: bool,
    /// Per lane: arrival → waiter.
    lanes: [BTreeMap<u64, Waiter>; 3],
    /// Parent uid → where it waits.
    by_uid: HashMap<String, (Lane, u64)>,
}

#[derive(Debug)]
struct Waiter {
    uid: String,
    since: Instant,
    tx: oneshot::Sender<Permit>,
}

/// Takes a waiter that gave up out of the gate (see [`Gate::acquire`]). A permit already sent
/// to it is handed on by the permit's own drop.
struct Leave<'a> {
    gate: &'a Gate,
    uid: &'a str,
    seq: u64,
}

impl Drop for Leave<'_> {
    fn drop(&mut self) {
        let mut s = self.gate.lock();
        if let Some(&(lane, seq)) = s.by_uid.get(self.uid)
            && seq == self.seq
        {
            s.lanes[lane as usize].remove(&seq);
            s.by_uid.remove(self.uid);
        }
    }
}

/// Leave to run one reconcile; handed to the next waiter when dropped.
#[derive(Debug)]
pub struct Permit {
    gate: Option<Gate>,
}

impl Drop for Permit {
    fn drop(&mut self) {
        if let Some(gate) = self.gate.take() {
            gate.release();
        }
    }
}

impl Gate {
    /// A gate with `permits` permits (at least one); a waiter older than `age_limit` goes first.
    pub fn new(permits: usize, age_limit: Duration) -> Self {
        Gate {
            state: Arc::new(Mutex::new(State {
                free: permits.max(1),
                next: 0,
                aged_turn: true,
                lanes: Default::default(),
                by_uid: HashMap::new(),
            })),
            age_limit,
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Waits for a permit for parent `uid`, due for the reason `lane`.
    pub async fn acquire(&self, uid: &str, lane: Lane) -> Permit {
        let (rx, seq) = {
            let mut s = self.lock();
            if s.free > 0 && s.lanes.iter().all(BTreeMap::is_empty) {
                s.free -= 1;
                return Permit {
                    gate: Some(self.clone()),
                };
            }
            let (tx, rx) = oneshot::channel();
            let seq = s.next;
            s.next += 1;
            s.lanes[lane as usize].insert(
                seq,
                Waiter {
                    uid: uid.to_string(),
                    since: Instant::now(),
                    tx,
                },
            );
            s.by_uid.insert(uid.to_string(), (lane, seq));
            (rx, seq)
        };
        // A waiter dropped before its permit came leaves the gate, so that it is not reported
        // waiting (the feeders skip the triggers of waiting parents) nor served.
        let left = Leave {
            gate: self,
            uid,
            seq,
        };
        // The sender stays in the state until it is sent a permit (the controller never runs
        // one parent twice at once, so no waiter replaces another), and the state outlives
        // every waiter: the channel cannot close unanswered.
        let permit = rx.await.unwrap_or(Permit { gate: None });
        std::mem::forget(left);
        permit
    }

    /// Whether a reconcile of parent `uid` waits here (not yet handed a permit).
    pub fn is_waiting(&self, uid: &str) -> bool {
        self.lock().by_uid.contains_key(uid)
    }

    /// Moves a waiting parent up to `lane`, keeping its place in the order of arrival.
    pub fn promote(&self, uid: &str, lane: Lane) {
        let mut s = self.lock();
        let Some(&(at, seq)) = s.by_uid.get(uid) else {
            return;
        };
        if lane >= at {
            return;
        }
        if let Some(w) = s.lanes[at as usize].remove(&seq) {
            s.lanes[lane as usize].insert(seq, w);
            s.by_uid.insert(uid.to_string(), (lane, seq));
        }
    }

    /// How many wait in each lane.
    #[cfg(test)]
    fn waiting(&self) -> [usize; 3] {
        let s = self.lock();
        Lane::ALL.map(|l| s.lanes[l as usize].len())
    }

    /// Hands a returned permit to the next waiter, or frees it.
    fn release(&self) {
        loop {
            let waiter = {
                let mut s = self.lock();
                let Some((lane, seq)) = self.next_waiter(&mut s) else {
                    s.free += 1;
                    return;
                };
                let w = s.lanes[lane as usize]
                    .remove(&seq)
                    .expect("the waiter just found");
                if s.by_uid.get(&w.uid) == Some(&(lane, seq)) {
                    s.by_uid.remove(&w.uid);
                }
                w
            };
            match waiter.tx.send(Permit {
                gate: Some(self.clone()),
            }) {
                Ok(()) => return,
                // The waiter gave up: the permit is still ours to hand on.
                Err(mut unused) => {
                    unused.gate = None;
                }
            }
        }
    }

    /// The first of the first non-empty lane; every other time an aged waiter is passed over
    /// that way, the oldest waiter past the age limit instead. So changed parents keep at
    /// least half the permits however long the backlog, and no waiter starves.
    fn next_waiter(&self, s: &mut State) -> Option<(Lane, u64)> {
        let heads = Lane::ALL.into_iter().filter_map(|l| {
            s.lanes[l as usize]
                .first_key_value()
                .map(|(seq, w)| (l, *seq, w))
        });
        let first = heads.clone().min_by_key(|(l, _, _)| *l)?;
        let aged = heads
            .filter(|(_, _, w)| w.since.elapsed() > self.age_limit)
            .min_by_key(|(_, seq, _)| *seq);
        let pick = match aged {
            Some(aged) if (aged.0, aged.1) != (first.0, first.1) => {
                let take_aged = s.aged_turn;
                s.aged_turn = !s.aged_turn;
                if take_aged { aged } else { first }
            }
            _ => first,
        };
        Some((pick.0, pick.1))
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)] // Tests: a panic is the failure report.
mod tests {
    use super::*;

    /// Acquires in a task of its own and reports the uid when the permit comes.
    fn waiter(
        gate: &Gate,
        uid: &'static str,
        lane: Lane,
        order: &tokio::sync::mpsc::UnboundedSender<(&'static str, Permit)>,
    ) -> tokio::task::JoinHandle<()> {
        let gate = gate.clone();
        let order = order.clone();
        tokio::spawn(async move {
            let permit = gate.acquire(uid, lane).await;
            order.send((uid, permit)).unwrap();
        })
    }

    /// The next `n` waiters served, in order, each giving its permit back at once.
    async fn served(
        rx: &mut tokio::sync::mpsc::UnboundedReceiver<(&'static str, Permit)>,
        n: usize,
    ) -> Vec<&'static str> {
        let mut order = Vec::new();
        for _ in 0..n {
            let (uid, permit) = rx.recv().await.unwrap();
            order.push(uid);
            drop(permit);
        }
        order
    }

    async fn settle() {
        tokio::time::sleep(Duration::from_millis(20)).await;
    }

    #[tokio::test]
    async fn a_waiter_that_gives_up_leaves_the_gate_and_the_permit_goes_on() {
        let gate = Gate::new(1, Duration::from_secs(60));
        let held = gate.acquire("running", Lane::Resync).await;
        let (tx, mut rx) = tokio::sync::mpsc::unbounded_channel();
        let quitter = waiter(&gate, "quitter", Lane::Changed, &tx);
        settle().await;
        waiter(&gate, "next", Lane::Resync, &tx);
        settle().await;
        assert!(gate.is_waiting("quitter"));
        quitter.abort();
        settle().await;
        assert!(!gate.is_waiting("quitter"), "gone with its task");
        assert_eq!(gate.waiting(), [0, 0, 1]);
        drop(held);
        assert_eq!(served(&mut rx, 1).await, ["next"]);
        // Every permit came back: one free again.
        let _again =
            tokio::time::timeout(Duration::from_secs(1), gate.acquire("again", Lane::Resync))
                .await
                .expect("the permit was not lost");
    }

    #[tokio::test]
    async fn changed_parents_go_before_swapped_and_those_before_requeues() {
        let gate = Gate::new(1, Duration::from_secs(60));
        let held = gate.acquire("running", Lane::Resync).await;
        let (tx, mut rx) = tokio::sync::mpsc::unbounded_channel();
        // Arrival order: requeues first, then a swap, then changes.
        for (uid, lane) in [
            ("requeue-1", Lane::Resync),
            ("requeue-2", Lane::Resync),
            ("swapped", Lane::Swapped),
            ("new", Lane::Changed),
            ("requeue-3", Lane::Resync),
            ("edited", Lane::Changed),
        ] {
            waiter(&gate, uid, lane, &tx);
            settle().await;
        }
        assert_eq!(gate.waiting(), [2, 1, 3]);
        assert!(gate.is_waiting("requeue-3") && gate.is_waiting("new"));
        assert!(!gate.is_waiting("running"), "handed a permit: not waiting");
        // `requeue-3` turns out to be changed: it moves up behind the two already there.
        gate.promote("requeue-3", Lane::Changed);
        gate.promote("new", Lane::Resync);
        assert_eq!(gate.waiting(), [3, 1, 2]);
        drop(held);
        let order = served(&mut rx, 6).await;
        assert!(!gate.is_waiting("new"), "served: not waiting any more");
        assert_eq!(
            order,
            [
                "new",
                "requeue-3",
                "edited",
                "swapped",
                "requeue-1",
                "requeue-2"
            ]
        );
        // Every permit came back: the next acquire does not wait.
        tokio::time::timeout(Duration::from_secs(1), gate.acquire("x", Lane::Resync))
            .await
            .expect("a free permit");
    }

    #[tokio::test]
    async fn a_waiter_past_the_age_limit_goes_before_every_lane() {
        let gate = Gate::new(1, Duration::from_millis(100));
        let held = gate.acquire("running", Lane::Resync).await;
        let (tx, mut rx) = tokio::sync::mpsc::unbounded_channel();
        waiter(&gate, "old-requeue", Lane::Resync, &tx);
        tokio::time::sleep(Duration::from_millis(150)).await;
        waiter(&gate, "new", Lane::Changed, &tx);
        settle().await;
        drop(held);
        assert_eq!(
            served(&mut rx, 2).await,
            ["old-requeue", "new"],
            "the requeue had waited past the limit"
        );
    }

    #[tokio::test]
    async fn aged_waiters_get_every_other_permit_and_changed_parents_the_rest() {
        let gate = Gate::new(1, Duration::from_millis(100));
        let held = gate.acquire("running", Lane::Resync).await;
        let (tx, mut rx) = tokio::sync::mpsc::unbounded_channel();
        waiter(&gate, "old-1", Lane::Resync, &tx);
        settle().await;
        waiter(&gate, "old-2", Lane::Resync, &tx);
        tokio::time::sleep(Duration::from_millis(150)).await;
        waiter(&gate, "new-1", Lane::Changed, &tx);
        settle().await;
        waiter(&gate, "new-2", Lane::Changed, &tx);
        settle().await;
        drop(held);
        let order = served(&mut rx, 4).await;
        assert_eq!(order, ["old-1", "new-1", "old-2", "new-2"]);
    }

    #[tokio::test]
    async fn a_permit_handed_to_a_waiter_that_gave_up_is_handed_on() {
        let gate = Gate::new(1, Duration::from_secs(60));
        let held = gate.acquire("running", Lane::Resync).await;
        let (tx, mut rx) = tokio::sync::mpsc::unbounded_channel();
        let gone = waiter(&gate, "gone", Lane::Changed, &tx);
        waiter(&gate, "next", Lane::Resync, &tx);
        settle().await;
        gone.abort();
        let _ = gone.await;
        drop(held);
        let (uid, permit) = tokio::time::timeout(Duration::from_secs(1), rx.recv())
            .await
            .expect("the permit went on")
            .unwrap();
        assert_eq!(uid, "next");
        drop(permit);
        assert_eq!(gate.waiting(), [0, 0, 0]);
        // One permit, free again.
        let _one = gate.acquire("a", Lane::Resync).await;
        assert!(
            tokio::time::timeout(Duration::from_millis(100), gate.acquire("b", Lane::Resync))
                .await
                .is_err(),
            "only one permit exists"
        );
    }
}
