//! Leader election on a Lease (kube-lease-manager): only the leader reconciles; a standby takes
//! over when the leader stops renewing.

use std::time::Duration;

use kube::Client;
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
    let manager = LeaseManagerBuilder::new(client, election.name.clone())
        .with_namespace(election.namespace.clone())
        .with_parameters(params)
        .build()
        .await?;
    let (leading, task) = manager.watch().await;
    tokio::spawn(async move {
        match task.await {
            Ok(Ok(_)) => {}
            Ok(Err(e)) => tracing::warn!(error = %e, "leader election stopped"),
            Err(e) => tracing::warn!(error = %e, "leader election task failed"),
        }
    });
    Ok(leading)
}
