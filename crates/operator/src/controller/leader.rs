//! Leader election on a Lease (kube-lease-manager): only the leader reconciles; a standby takes
//! over when the leader stops renewing.
//!
//! The lease manager says when this instance becomes the holder, and when it sees another
//! holder; it does not say when its renewals fail. With the API unreachable it goes on saying
//! "leading" while the Lease expires and a standby takes it: two leaders (found by the chaos
//! suite). So leading also needs the Lease seen renewed recently: while the manager says so,
//! the Lease is read four times a second, and each new `renewTime` is noted with the local time it was
//! first seen (the API's clock is not compared with ours, as client-go does it). Once the last
//! renewal seen is older than the lease's duration less a margin, this instance stops leading,
//! before a standby can take the Lease.

use std::time::{Duration, Instant};

use k8s_openapi::{api::coordination::v1::Lease, apimachinery::pkg::apis::meta::v1::MicroTime};
use kube::{Api, Client};
use kube_lease_manager::{LeaseManagerBuilder, LeaseParams};
use tokio::sync::watch;

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

/// Runs the election until the returned receiver is dropped; the receiver says whether this
/// instance leads right now.
///
/// # Errors
/// When the lease manager cannot be built (the Lease API is not served).
pub async fn elect(
    client: Client,
    election: &Election,
) -> Result<watch::Receiver<bool>, kube_lease_manager::LeaseManagerError> {
    let params = LeaseParams::new(
        election.identity.clone(),
        election.duration.as_secs().max(1),
        election.grace.as_secs().max(1),
    )
    .with_field_manager("windlass");
    let manager = LeaseManagerBuilder::new(client.clone(), election.name.clone())
        .with_namespace(election.namespace.clone())
        .with_parameters(params)
        .build()
        .await?;
    let (holder, task) = manager.watch().await;
    tokio::spawn(async move {
        match task.await {
            Ok(Ok(_)) => {}
            Ok(Err(e)) => tracing::warn!(error = %e, "leader election stopped"),
            Err(e) => tracing::warn!(error = %e, "leader election task failed"),
        }
    });
    let (leading, rx) = watch::channel(false);
    let guard = Guard {
        leases: Api::namespaced(client, &election.namespace),
        name: election.name.clone(),
        identity: election.identity.clone(),
        // The manager renews `grace` before expiry: a renewal is seen within the lease's
        // duration less the grace (plus a poll). Half the grace before expiry, this instance
        // stops leading, before a standby may take the Lease.
        valid: election.duration.saturating_sub(election.grace / 2),
    };
    tokio::spawn(guard.run(holder, leading));
    Ok(rx)
}

/// How often the Lease is read while this instance holds it.
const POLL: Duration = Duration::from_millis(250);

/// Leads only while the lease manager holds the Lease and its renewals are seen.
struct Guard {
    leases: Api<Lease>,
    name: String,
    identity: String,
    valid: Duration,
}

impl Guard {
    async fn run(self, mut holder: watch::Receiver<bool>, leading: watch::Sender<bool>) {
        // The last renewTime seen while holding, and when it was first seen.
        let mut seen: Option<(Option<MicroTime>, Instant)> = None;
        loop {
            if *holder.borrow() {
                // Bounded: the client retries an unavailable API, and the step-down must come
                // on time all the same.
                let read = tokio::time::timeout(POLL, self.leases.get_opt(&self.name)).await;
                match read.unwrap_or_else(|_| Err(kube::Error::Service("timed out".into()))) {
                    Ok(Some(lease)) => {
                        let spec = lease.spec.unwrap_or_default();
                        if spec.holder_identity.as_deref() == Some(self.identity.as_str()) {
                            let renewed = spec.renew_time;
                            if seen.as_ref().is_none_or(|(r, _)| *r != renewed) {
                                seen = Some((renewed, Instant::now()));
                            }
                        } else {
                            seen = None;
                        }
                    }
                    Ok(None) => seen = None,
                    // Unreachable: the last renewal seen ages.
                    Err(_) => {}
                }
            } else {
                seen = None;
            }
            let lead = *holder.borrow()
                && seen
                    .as_ref()
                    .is_some_and(|(_, at)| at.elapsed() < self.valid);
            let changed = leading.send_if_modified(|l| std::mem::replace(l, lead) != lead);
            if changed && !lead && *holder.borrow() {
                tracing::warn!(
                    "the Lease was not seen renewed for {:?}: not leading until it is",
                    self.valid
                );
            }
            if leading.is_closed() {
                return;
            }
            tokio::select! {
                r = holder.changed() => if r.is_err() {
                    // The lease manager is gone: nothing renews the Lease any more.
                    leading.send_replace(false);
                    return;
                },
                () = tokio::time::sleep(POLL) => {}
            }
        }
    }
}
