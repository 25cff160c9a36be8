//! `/healthz`, `/readyz` and `/metrics`.
//!
//! `/healthz` answers 200 while the process serves. `/readyz` answers 200 only while this
//! instance leads and its controllers run; a standby answers 503 `standby`, so a Service in front
//! of the replicas reaches the leader.

use std::{
    net::SocketAddr,
    sync::{
        Arc,
        atomic::{AtomicBool, Ordering},
    },
};

use axum::{Router, extract::State, http::StatusCode, response::IntoResponse, routing::get};

use crate::metrics::Metrics;

/// What the admin endpoints report.
#[derive(Debug, Default)]
pub struct Health {
    /// True while this instance leads and its controllers run.
    pub ready: AtomicBool,
    /// The metrics.
    pub metrics: Arc<Metrics>,
}

/// The admin router.
pub fn router(health: Arc<Health>) -> Router {
    Router::new()
        .route("/healthz", get(|| async { "ok" }))
        .route("/readyz", get(readyz))
        .route("/metrics", get(metrics))
        .with_state(health)
}

async fn readyz(State(health): State<Arc<Health>>) -> impl IntoResponse {
    if health.ready.load(Ordering::Relaxed) {
        (StatusCode::OK, "ok")
    } else {
        (StatusCode::SERVICE_UNAVAILABLE, "standby")
    }
}

async fn metrics(State(health): State<Arc<Health>>) -> impl IntoResponse {
    (
        [(
            "content-type",
            "application/openmetrics-text; version=1.0.0; charset=utf-8",
        )],
        health.metrics.encode(),
    )
}

/// Serves the admin endpoints on `addr` until `shutdown` resolves.
///
/// # Errors
/// When the address cannot be bound.
pub async fn serve(
    addr: SocketAddr,
    health: Arc<Health>,
    shutdown: impl std::future::Future<Output = ()> + Send + 'static,
) -> std::io::Result<SocketAddr> {
    let listener = tokio::net::TcpListener::bind(addr).await?;
    let bound = listener.local_addr()?;
    tokio::spawn(async move {
        if let Err(e) = axum::serve(listener, router(health))
            .with_graceful_shutdown(shutdown)
            .await
        {
            tracing::warn!(error = %e, "admin server stopped");
        }
    });
    Ok(bound)
}
