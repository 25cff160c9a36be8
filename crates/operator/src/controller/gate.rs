//! The order reconciles of one parent kind run in when more are due than may run at once.
//!
//! # Why
//! kube-runtime's controller hands reconciles out in the order its delay queue yields them,
//! and that queue yields entries scheduled for "now" last in, first out. Under saturation a
//! parent that has never run could wait behind requeues that keep coming back (seen under
//! callgrind: 3 of 100 parents never reconciled while the others ran 46 times each). So the
//! controller runs with unbounded concurrency, and each reconcile first enters here for one of
//! the kind's `concurrency` permits.
//!
//! # Why a reconcile that must wait returns instead
//! kube-runtime's runner polls every reconcile it holds each time any of them wakes (its
//! `FutureHashMap`), each through a spawned task's handle and a tracing span. Reconciles that
//! waited here inside it made that quadratic: at 10,000 parents (a fresh start, a hot swap)
//! profiling showed the host spending half its CPU polling waiters, and tokio's cooperative
//! budget, spent after 128 handles, kept the runner's task rescheduling itself. So a reconcile
//! that finds no permit takes its place in a lane and returns; when a permit comes to it, the
//! gate holds it for that parent and sends the parent's uid on the channel [`Gate::new`]
//! returns, which the controller turns into a trigger of that parent. Its next reconcile
//! [`claim`](Gate::claim)s the held permit. The runner holds only the reconciles that run.
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
//!   its place in the order of arrival. A parent is in the gate at most once.
//! - A permit is never lost: one held for a parent that does not claim it within
//!   [`HOLD_LIMIT`] (its trigger lost, the parent gone) is handed on, as is a forgotten
//!   parent's ([`Gate::forget`]); a parent that comes after its hold ran out enters again.

use std::{
    collections::{BTreeMap, HashMap},
    sync::{Arc, Mutex},
    time::{Duration, Instant},
};

use tokio::sync::mpsc;

/// How long a waiter may be passed over by later lanes' arrivals before it is aged: aged
/// waiters get every other permit, so under a sustained flood of changes requeues still run.
pub const AGE_LIMIT: Duration = Duration::from_secs(2);

/// How long a permit is held for a parent it was handed to before it goes on to the next: the
/// trigger and the reconcile it starts take milliseconds; a hold this old was lost.
pub const HOLD_LIMIT: Duration = Duration::from_secs(30);

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
    hold_limit: Duration,
    /// Where the uid of a parent a permit is held for goes.
    woken: mpsc::UnboundedSender<String>,
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
    /// Parent uid → the permit held for it, not yet claimed.
    held: HashMap<String, Held>,
}

#[derive(Debug)]
struct Waiter {
    uid: String,
    since: Instant,
}

#[derive(Debug, Clone, Copy)]
struct Held {
    /// When the parent started waiting.
    since: Instant,
    /// The lane it was served from.
    lane: Lane,
    /// When the permit was handed to it.
    at: Instant,
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

/// What entering the gate gave.
#[derive(Debug)]
pub enum Entry {
    /// A permit: run now.
    Run(Permit),
    /// Waiting in a lane: the parent's uid comes out of the gate's channel when a permit is
    /// held for it.
    Queued,
}

/// A permit held for a parent, claimed.
#[derive(Debug)]
pub struct Claimed {
    pub permit: Permit,
    /// The lane it was served from.
    pub lane: Lane,
    /// How long it waited, from entering to the permit.
    pub waited: Duration,
}

impl Gate {
    /// A gate with `permits` permits (at least one); a waiter older than `age_limit` goes
    /// first. The receiver yields the uid of each parent a permit is held for.
    pub fn new(permits: usize, age_limit: Duration) -> (Self, mpsc::UnboundedReceiver<String>) {
        Self::with_hold_limit(permits, age_limit, HOLD_LIMIT)
    }

    fn with_hold_limit(
        permits: usize,
        age_limit: Duration,
        hold_limit: Duration,
    ) -> (Self, mpsc::UnboundedReceiver<String>) {
        let (woken, rx) = mpsc::unbounded_channel();
        let gate = Gate {
            state: Arc::new(Mutex::new(State {
                free: permits.max(1),
                next: 0,
                aged_turn: true,
                lanes: Default::default(),
                by_uid: HashMap::new(),
                held: HashMap::new(),
            })),
            age_limit,
            hold_limit,
            woken,
        };
        (gate, rx)
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Parent `uid`, due for the reason `lane`, enters: a free permit when nobody waits; else
    /// it waits in its lane (moving up to `lane` if it waited already).
    pub fn enter(&self, uid: &str, lane: Lane) -> Entry {
        let woken = {
            let mut s = self.lock();
            self.expire(&mut s);
            if s.free > 0 && s.lanes.iter().all(BTreeMap::is_empty) && !s.held.contains_key(uid) {
                s.free -= 1;
                return Entry::Run(Permit {
                    gate: Some(self.clone()),
                });
            }
            Self::wait(&mut s, uid, lane);
            self.serve(&mut s)
        };
        self.wake(woken);
        Entry::Queued
    }

    /// Parent `uid` waits in `lane` for a permit even if one is free (a hot swap queueing
    /// every parent), or moves up to `lane` if it waits already. A parent a permit is held for
    /// stays as it is.
    pub fn queue(&self, uid: &str, lane: Lane) {
        let woken = {
            let mut s = self.lock();
            Self::wait(&mut s, uid, lane);
            self.serve(&mut s)
        };
        self.wake(woken);
    }

    /// The permit held for `uid`, if one is.
    pub fn claim(&self, uid: &str) -> Option<Claimed> {
        let held = self.lock().held.remove(uid)?;
        Some(Claimed {
            permit: Permit {
                gate: Some(self.clone()),
            },
            lane: held.lane,
            waited: held.at.duration_since(held.since),
        })
    }

    /// Parent `uid` is gone: it leaves its lane, and a permit held for it goes on.
    pub fn forget(&self, uid: &str) {
        let woken = {
            let mut s = self.lock();
            if let Some((lane, seq)) = s.by_uid.remove(uid) {
                s.lanes[lane as usize].remove(&seq);
            }
            if s.held.remove(uid).is_some() {
                s.free += 1;
            }
            self.serve(&mut s)
        };
        self.wake(woken);
    }

    /// Whether parent `uid` waits here: in a lane, or with a permit held for it.
    pub fn is_waiting(&self, uid: &str) -> bool {
        let s = self.lock();
        s.by_uid.contains_key(uid) || s.held.contains_key(uid)
    }

    /// Moves a waiting parent up to `lane`, keeping its place in the order of arrival.
    pub fn promote(&self, uid: &str, lane: Lane) {
        Self::move_up(&mut self.lock(), uid, lane);
    }

    /// How many wait in each lane.
    #[cfg(test)]
    fn waiting(&self) -> [usize; 3] {
        let s = self.lock();
        Lane::ALL.map(|l| s.lanes[l as usize].len())
    }

    /// `uid` waits in `lane`: from now if it did not wait, else moved up if `lane` is better.
    fn wait(s: &mut State, uid: &str, lane: Lane) {
        if s.held.contains_key(uid) || Self::move_up(s, uid, lane) {
            return;
        }
        let seq = s.next;
        s.next += 1;
        s.lanes[lane as usize].insert(
            seq,
            Waiter {
                uid: uid.to_string(),
                since: Instant::now(),
            },
        );
        s.by_uid.insert(uid.to_string(), (lane, seq));
    }

    /// If `uid` waits, it moves up to `lane` when that is better, keeping its place in the
    /// order of arrival; whether it waits.
    fn move_up(s: &mut State, uid: &str, lane: Lane) -> bool {
        let Some((at, seq)) = s.by_uid.get(uid).copied() else {
            return false;
        };
        if lane < at
            && let Some(w) = s.lanes[at as usize].remove(&seq)
        {
            s.lanes[lane as usize].insert(seq, w);
            s.by_uid.insert(uid.to_string(), (lane, seq));
        }
        true
    }

    /// Holds each free permit for the next waiter; the uids to wake.
    fn serve(&self, s: &mut State) -> Vec<String> {
        let mut woken = Vec::new();
        while s.free > 0 {
            let Some((lane, seq)) = self.next_waiter(s) else {
                break;
            };
            let Some(w) = s.lanes[lane as usize].remove(&seq) else {
                break;
            };
            s.by_uid.remove(&w.uid);
            s.free -= 1;
            s.held.insert(
                w.uid.clone(),
                Held {
                    since: w.since,
                    lane,
                    at: Instant::now(),
                },
            );
            woken.push(w.uid);
        }
        woken
    }

    /// Permits held past the hold limit come back.
    fn expire(&self, s: &mut State) {
        let limit = self.hold_limit;
        let before = s.held.len();
        s.held.retain(|uid, h| {
            let keep = h.at.elapsed() <= limit;
            if !keep {
                tracing::warn!(
                    parent = uid,
                    "a permit held for this parent was not claimed: handed on"
                );
            }
            keep
        });
        s.free += before - s.held.len();
    }

    /// Tells the controller whom permits are held for. (A closed channel: the controller is
    /// gone, and its gate with it.)
    fn wake(&self, uids: Vec<String>) {
        for uid in uids {
            let _ = self.woken.send(uid);
        }
    }

    /// A returned permit goes to the next waiter, or is free.
    fn release(&self) {
        let woken = {
            let mut s = self.lock();
            s.free += 1;
            self.expire(&mut s);
            self.serve(&mut s)
        };
        self.wake(woken);
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

    /// A gate of one permit, held by "running".
    fn one_held(age_limit: Duration) -> (Gate, mpsc::UnboundedReceiver<String>, Permit) {
        let (gate, rx) = Gate::new(1, age_limit);
        let Entry::Run(held) = gate.enter("running", Lane::Resync) else {
            panic!("the free permit was not given");
        };
        (gate, rx, held)
    }

    /// Enters each, expecting to wait.
    fn queued(gate: &Gate, waiters: &[(&str, Lane)]) {
        for (uid, lane) in waiters {
            assert!(
                matches!(gate.enter(uid, *lane), Entry::Queued),
                "{uid} should wait"
            );
        }
    }

    /// The next `n` parents permits are held for, in order, each claiming its permit and
    /// giving it back at once.
    fn served(gate: &Gate, rx: &mut mpsc::UnboundedReceiver<String>, n: usize) -> Vec<String> {
        let mut order = Vec::new();
        for _ in 0..n {
            let uid = rx.try_recv().expect("a parent woken");
            let claimed = gate.claim(&uid).expect("its permit held");
            assert!(gate.claim(&uid).is_none(), "claimed once");
            order.push(uid);
            drop(claimed);
        }
        assert!(rx.try_recv().is_err(), "nobody else woken");
        order
    }

    #[test]
    fn changed_parents_go_before_swapped_and_those_before_requeues() {
        let (gate, mut rx, held) = one_held(Duration::from_secs(60));
        // Arrival order: requeues first, then a swap, then changes.
        queued(
            &gate,
            &[
                ("requeue-1", Lane::Resync),
                ("requeue-2", Lane::Resync),
                ("swapped", Lane::Swapped),
                ("new", Lane::Changed),
                ("requeue-3", Lane::Resync),
                ("edited", Lane::Changed),
            ],
        );
        assert_eq!(gate.waiting(), [2, 1, 3]);
        assert!(gate.is_waiting("requeue-3") && gate.is_waiting("new"));
        assert!(!gate.is_waiting("running"), "handed a permit: not waiting");
        assert!(rx.try_recv().is_err(), "no permit to hold for anyone");
        // `requeue-3` turns out to be changed: it moves up behind the two already there.
        gate.promote("requeue-3", Lane::Changed);
        gate.promote("new", Lane::Resync);
        // Entering again is a promotion too, never a second place.
        queued(&gate, &[("requeue-1", Lane::Resync)]);
        assert_eq!(gate.waiting(), [3, 1, 2]);
        drop(held);
        assert!(
            gate.is_waiting("new"),
            "its permit is held for it: still waiting"
        );
        let order = served(&gate, &mut rx, 6);
        assert!(!gate.is_waiting("new"), "claimed: not waiting any more");
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
        // Every permit came back: the next one entering runs.
        assert!(matches!(gate.enter("x", Lane::Resync), Entry::Run(_)));
    }

    #[test]
    fn a_claimed_permit_says_the_lane_and_the_wait() {
        let (gate, mut rx, held) = one_held(Duration::from_secs(60));
        queued(&gate, &[("p", Lane::Resync)]);
        gate.promote("p", Lane::Swapped);
        std::thread::sleep(Duration::from_millis(30));
        drop(held);
        assert_eq!(rx.try_recv().unwrap(), "p");
        let claimed = gate.claim("p").unwrap();
        assert_eq!(claimed.lane, Lane::Swapped);
        assert!(
            claimed.waited >= Duration::from_millis(30),
            "{:?}",
            claimed.waited
        );
    }

    #[test]
    fn a_waiter_past_the_age_limit_goes_before_every_lane() {
        let (gate, mut rx, held) = one_held(Duration::from_millis(100));
        queued(&gate, &[("old-requeue", Lane::Resync)]);
        std::thread::sleep(Duration::from_millis(150));
        queued(&gate, &[("new", Lane::Changed)]);
        drop(held);
        assert_eq!(
            served(&gate, &mut rx, 2),
            ["old-requeue", "new"],
            "the requeue had waited past the limit"
        );
    }

    #[test]
    fn aged_waiters_get_every_other_permit_and_changed_parents_the_rest() {
        let (gate, mut rx, held) = one_held(Duration::from_millis(100));
        queued(&gate, &[("old-1", Lane::Resync), ("old-2", Lane::Resync)]);
        std::thread::sleep(Duration::from_millis(150));
        queued(&gate, &[("new-1", Lane::Changed), ("new-2", Lane::Changed)]);
        drop(held);
        assert_eq!(
            served(&gate, &mut rx, 4),
            ["old-1", "new-1", "old-2", "new-2"]
        );
    }

    #[test]
    fn a_permit_not_claimed_within_the_hold_limit_goes_on() {
        let (gate, mut rx) =
            Gate::with_hold_limit(1, Duration::from_secs(60), Duration::from_millis(100));
        let Entry::Run(held) = gate.enter("running", Lane::Resync) else {
            panic!("the free permit was not given");
        };
        queued(&gate, &[("lost", Lane::Changed), ("next", Lane::Resync)]);
        drop(held);
        // Its trigger never turns into a reconcile.
        assert_eq!(rx.try_recv().unwrap(), "lost");
        std::thread::sleep(Duration::from_millis(150));
        // The next parent to enter finds the hold run out: the permit goes on, in lane order.
        queued(&gate, &[("late", Lane::Resync)]);
        assert_eq!(served(&gate, &mut rx, 2), ["next", "late"]);
        assert!(gate.claim("lost").is_none(), "its hold ran out");
        assert!(!gate.is_waiting("lost"));
        // Coming after all, it enters again; the one permit is free.
        assert!(matches!(gate.enter("lost", Lane::Changed), Entry::Run(_)));
    }

    #[test]
    fn a_forgotten_parent_leaves_and_a_permit_held_for_it_goes_on() {
        let (gate, mut rx, held) = one_held(Duration::from_secs(60));
        queued(&gate, &[("gone", Lane::Changed), ("next", Lane::Resync)]);
        gate.forget("gone");
        assert!(!gate.is_waiting("gone"));
        assert_eq!(gate.waiting(), [0, 0, 1]);
        drop(held);
        assert_eq!(rx.try_recv().unwrap(), "next");
        // Held for `next`, which is deleted before it claims: the permit is free again.
        gate.forget("next");
        assert!(gate.claim("next").is_none());
        let Entry::Run(_one) = gate.enter("a", Lane::Resync) else {
            panic!("the permit was lost");
        };
        assert!(
            matches!(gate.enter("b", Lane::Resync), Entry::Queued),
            "only one permit exists"
        );
    }

    #[test]
    fn queueing_puts_a_parent_in_its_lane_even_with_a_permit_free() {
        let (gate, mut rx) = Gate::new(1, Duration::from_secs(60));
        // A hot swap queues every parent: the first is served at once, through the channel.
        gate.queue("a", Lane::Swapped);
        assert_eq!(rx.try_recv().unwrap(), "a");
        let running = gate.claim("a").unwrap();
        gate.queue("b", Lane::Swapped);
        gate.queue("a", Lane::Swapped);
        // Queued again with a worse lane: it keeps the better one.
        gate.queue("b", Lane::Resync);
        queued(&gate, &[("c", Lane::Changed)]);
        assert_eq!(gate.waiting(), [1, 2, 0]);
        drop(running);
        assert_eq!(served(&gate, &mut rx, 3), ["c", "b", "a"]);
    }
}
