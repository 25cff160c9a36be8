//! Leader election on a Lease: only the leader reconciles; a standby takes over when the leader
//! stops renewing.
//!
//! No clock is compared with another. A standby notes each change of the Lease's holder or
//! `renewTime` with the local monotonic time it first saw it, and takes the Lease only once it
//! has seen no change for the lease's duration (or the Lease is free); the take-over is a
//! replace on the version it saw, so a renewal in between makes it a conflict. The leader
//! renews `grace` before the Lease would lapse and leads only while its last successful renewal
//! (timed from when the request was sent) is younger than the duration less half the grace:
//! with the API unreachable it stops leading before any standby can have seen the Lease
//! unrenewed for the whole duration.
//!
//! kube-lease-manager did this until the chaos suite ran one host with its clock 30 s ahead:
//! the crate decides that another holder's Lease expired by comparing its `renewTime` with the
//! local clock, so that host took the Lease from a live leader as soon as it saw it (two
//! leaders), and a host with its clock behind would wait that much longer after a leader
//! died. client-go's election compares observed times only, as this one does.

use std::time::{Duration, Instant};

use k8s_openapi::{
    api::coordination::v1::{Lease, LeaseSpec},
    apimachinery::pkg::apis::meta::v1::MicroTime,
};
use kube::{
    Api, Client,
    api::{ObjectMeta, PostParams},
};
use tokio::{sync::watch, task::JoinHandle};

/// Settings of the election.
#[derive(Debug, Clone)]
pub struct Election {
    /// The Lease's namespace.
    pub namespace: String,
    /// The Lease's name.
    pub name: String,
    /// This instance's identity (the Pod name).
    pub identity: String,
    /// How long a lease is valid after its last renewal. Default 15 s.
    pub duration: Duration,
    /// How long before expiry the holder renews. Default 5 s.
    pub grace: Duration,
}

impl Election {
    /// The grace for a lease of `duration`: a third of it, at least 2 s (a leader stops
    /// leading half the grace before the Lease expires unless it has seen a renewal since), and
    /// always shorter than the lease itself (at least 1 s). Whole seconds, as the Lease counts.
    pub fn grace_for(duration: Duration) -> Duration {
        let seconds = duration.as_secs();
        Duration::from_secs((seconds / 3).max(2).min(seconds.saturating_sub(1).max(1)))
    }
}

/// How often a standby reads the Lease, and how long one request may take.
const POLL: Duration = Duration::from_millis(250);

/// Runs the election until the returned receiver is dropped; the receiver says whether this
/// instance leads right now. The task ends once the receiver is dropped, after freeing the
/// Lease if it holds it: await it on the way out, so that a standby takes over at once.
///
/// # Errors
/// When the Lease cannot be read (the Lease API is not served, or not allowed).
pub async fn elect(
    client: Client,
    election: &Election,
) -> Result<(watch::Receiver<bool>, JoinHandle<()>), kube::Error> {
    let leases: Api<Lease> = Api::namespaced(client, &election.namespace);
    // A first read, so that a host that may not read its Lease at all says so at once; any other
    // error (a conflict, a 5xx, a timeout while the API server restarts) is tried again for a
    // while, as every later Lease request is, rather than ending the process at start.
    let mut attempt = 0;
    loop {
        match leases.get_opt(&election.name).await {
            Ok(_) => break,
            Err(kube::Error::Api(e)) if matches!(e.code, 401 | 403) => {
                return Err(kube::Error::Api(e));
            }
            Err(e) if attempt >= 30 => return Err(e),
            Err(e) => {
                attempt += 1;
                tracing::warn!(error = %e, attempt, "reading the Lease failed; trying again");
                tokio::time::sleep(std::time::Duration::from_millis(500)).await;
            }
        }
    }
    let (leading, rx) = watch::channel(false);
    let campaign = Campaign {
        leases,
        election: election.clone(),
        leading,
    };
    Ok((rx, tokio::spawn(campaign.run())))
}

struct Campaign {
    leases: Api<Lease>,
    election: Election,
    leading: watch::Sender<bool>,
}

/// How a request for the Lease ended.
enum Outcome {
    /// This instance holds it, renewed when the request was sent.
    Held(Instant),
    /// Another instance holds it, or changed it since it was read.
    Lost,
    /// The API did not answer (in time).
    Unknown,
}

impl Campaign {
    async fn run(self) {
        loop {
            let Some(renewed) = self.stand_by().await else {
                return;
            };
            tracing::info!(identity = %self.election.identity, "holding the Lease");
            if !self.hold(renewed).await {
                self.release().await;
                return;
            }
        }
    }

    /// Waits until this instance holds the Lease: it takes it when it is missing, free or
    /// already its own (a restart), or once its holder has not renewed it for the lease's
    /// duration as this instance's monotonic clock measures it. Returns when the write that
    /// took it was sent, or None once nobody listens any more.
    async fn stand_by(&self) -> Option<Instant> {
        // The holder and renewTime last seen, and when they were first seen.
        let mut seen: Option<((String, Option<MicroTime>), Instant)> = None;
        loop {
            if self.leading.is_closed() {
                return None;
            }
            match bounded(POLL * 4, self.leases.get_opt(&self.election.name)).await {
                Some(Ok(None)) => {
                    if let Outcome::Held(sent) = self.create().await {
                        return Some(sent);
                    }
                }
                Some(Ok(Some(lease))) => {
                    let spec = lease.spec.clone().unwrap_or_default();
                    let holder = spec.holder_identity.clone().unwrap_or_default();
                    let observed = (holder.clone(), spec.renew_time.clone());
                    let lapsed = match &seen {
                        Some((last, at)) if *last == observed => {
                            let duration = spec
                                .lease_duration_seconds
                                .map_or(self.election.duration, |s| {
                                    Duration::from_secs(s.max(1).unsigned_abs().into())
                                });
                            at.elapsed() >= duration
                        }
                        _ => {
                            seen = Some((observed, Instant::now()));
                            false
                        }
                    };
                    if holder.is_empty() || holder == self.election.identity || lapsed {
                        if lapsed {
                            tracing::info!(
                                holder = %holder,
                                "the Lease was not renewed for its duration: taking it over"
                            );
                        }
                        match self.write(lease, true, POLL * 4).await {
                            Outcome::Held(sent) => return Some(sent),
                            // Renewed or taken in between: watch it again from here.
                            Outcome::Lost => seen = None,
                            // Perhaps written after all: the next read tells (the write
                            // carried the version read, so it cannot have undone a renewal).
                            Outcome::Unknown => {}
                        }
                    }
                }
                Some(Err(_)) | None => {}
            }
            if !self.pause(Instant::now() + POLL).await {
                return None;
            }
        }
    }

    /// Sleeps until `until`; false when nobody listens any more.
    async fn pause(&self, until: Instant) -> bool {
        tokio::select! {
            () = tokio::time::sleep_until(until.into()) => true,
            () = self.leading.closed() => false,
        }
    }

    /// Leads while the renewals go through; returns true when another instance holds the
    /// Lease (stand by again), false once nobody listens any more.
    async fn hold(&self, mut renewed: Instant) -> bool {
        let election = &self.election;
        // Leading ends this long after the last successful renewal was sent: half the grace
        // before a standby that saw that renewal at once could take the Lease. It ends then
        // even while a renewal is still in flight (a slow API), and starts again when one
        // succeeds: a renewal that lands late still counts from when it was sent.
        let valid = election.duration.saturating_sub(election.grace / 2);
        let every = election.duration.saturating_sub(election.grace).max(POLL);
        let mut next = renewed + every;
        loop {
            if self.leading.is_closed() {
                return false;
            }
            if Instant::now() >= next {
                let renewal = self.renew();
                tokio::pin!(renewal);
                let outcome = loop {
                    let leading = *self.leading.borrow();
                    tokio::select! {
                        outcome = &mut renewal => break outcome,
                        () = tokio::time::sleep_until((renewed + valid).into()), if leading => {
                            self.step_down(valid);
                        }
                    }
                };
                match outcome {
                    Outcome::Held(at) => {
                        renewed = at;
                        next = at + every;
                    }
                    Outcome::Lost => {
                        tracing::warn!("another instance holds the Lease: standing by");
                        self.leading.send_replace(false);
                        return true;
                    }
                    Outcome::Unknown => next = Instant::now() + POLL,
                }
            }
            if renewed.elapsed() < valid {
                if !self.leading.send_replace(true) {
                    tracing::info!("holding the Lease: leading");
                }
            } else {
                self.step_down(valid);
            }
            // Awake for the next renewal, and at the moment leading must end.
            let wake = if *self.leading.borrow() {
                next.min(renewed + valid)
            } else {
                next
            };
            if !self.pause(wake).await {
                return false;
            }
        }
    }

    fn step_down(&self, valid: Duration) {
        if self.leading.send_replace(false) {
            tracing::warn!("the Lease could not be renewed for {valid:?}: not leading until it is");
        }
    }

    /// Reads the Lease and renews it if this instance still holds it.
    /// Its requests may take up to the lease's duration: leading ends on time without them.
    async fn renew(&self) -> Outcome {
        let limit = self.election.duration;
        match bounded(limit, self.leases.get_opt(&self.election.name)).await {
            Some(Ok(Some(lease))) => {
                let holder = lease
                    .spec
                    .as_ref()
                    .and_then(|s| s.holder_identity.as_deref());
                if holder == Some(self.election.identity.as_str()) {
                    self.write(lease, false, limit).await
                } else {
                    Outcome::Lost
                }
            }
            Some(Ok(None)) => Outcome::Lost,
            Some(Err(_)) | None => Outcome::Unknown,
        }
    }

    /// Replaces `lease` (on the version read) with this instance as its holder, renewed now;
    /// `acquire` marks a new holder (acquireTime, one more transition unless it was ours).
    async fn write(&self, mut lease: Lease, acquire: bool, limit: Duration) -> Outcome {
        let sent = Instant::now();
        let now = MicroTime(k8s_openapi::jiff::Timestamp::now());
        let spec = lease.spec.get_or_insert_with(LeaseSpec::default);
        let ours = spec.holder_identity.as_deref() == Some(self.election.identity.as_str());
        if acquire && !ours {
            spec.acquire_time = Some(now.clone());
            spec.lease_transitions = Some(spec.lease_transitions.unwrap_or(0) + 1);
        }
        spec.holder_identity = Some(self.election.identity.clone());
        spec.renew_time = Some(now);
        spec.lease_duration_seconds = Some(seconds(self.election.duration));
        let params = PostParams::default();
        match bounded(
            limit,
            self.leases.replace(&self.election.name, &params, &lease),
        )
        .await
        {
            Some(Ok(_)) => Outcome::Held(sent),
            Some(Err(kube::Error::Api(e))) if e.code == 409 => Outcome::Lost,
            Some(Err(_)) | None => Outcome::Unknown,
        }
    }

    /// Creates the Lease with this instance as its holder.
    async fn create(&self) -> Outcome {
        let sent = Instant::now();
        let now = MicroTime(k8s_openapi::jiff::Timestamp::now());
        let lease = Lease {
            metadata: ObjectMeta {
                name: Some(self.election.name.clone()),
                ..ObjectMeta::default()
            },
            spec: Some(LeaseSpec {
                holder_identity: Some(self.election.identity.clone()),
                acquire_time: Some(now.clone()),
                renew_time: Some(now),
                lease_duration_seconds: Some(seconds(self.election.duration)),
                lease_transitions: Some(0),
                ..LeaseSpec::default()
            }),
        };
        match bounded(POLL * 4, self.leases.create(&PostParams::default(), &lease)).await {
            Some(Ok(_)) => Outcome::Held(sent),
            Some(Err(kube::Error::Api(e))) if e.code == 409 => Outcome::Lost,
            Some(Err(_)) | None => Outcome::Unknown,
        }
    }

    /// On the way out: frees the Lease if this instance still holds it, so that a standby
    /// takes over at once (best effort, bounded).
    async fn release(&self) {
        self.leading.send_replace(false);
        let Some(Ok(Some(mut lease))) =
            bounded(POLL * 4, self.leases.get_opt(&self.election.name)).await
        else {
            return;
        };
        let spec = lease.spec.get_or_insert_with(LeaseSpec::default);
        if spec.holder_identity.as_deref() != Some(self.election.identity.as_str()) {
            return;
        }
        spec.holder_identity = None;
        let _ = bounded(
            POLL * 4,
            self.leases
                .replace(&self.election.name, &PostParams::default(), &lease),
        )
        .await;
    }
}

/// A request bounded by `limit` (a few polls, or a lease for a renewal): the client retries
/// an unavailable API, and the election must keep its times all the same.
async fn bounded<T>(limit: Duration, request: impl Future<Output = T>) -> Option<T> {
    tokio::time::timeout(limit, request).await.ok()
}

fn seconds(d: Duration) -> i32 {
    i32::try_from(d.as_secs().max(1)).unwrap_or(i32::MAX)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_grace_is_a_third_of_the_lease_at_least_two_seconds_and_shorter_than_the_lease() {
        let grace = |s| Election::grace_for(Duration::from_secs(s)).as_secs();
        assert_eq!(grace(15), 5);
        assert_eq!(grace(60), 20);
        assert_eq!(grace(4), 2);
        // Too short a lease for 2 s: still shorter than the lease.
        assert_eq!(grace(2), 1);
        assert_eq!(grace(1), 1);
    }
}
