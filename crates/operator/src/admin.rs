//! `/healthz`, `/readyz` and `/metrics`.
//!
//! `/healthz` answers 200 while the process serves. `/readyz` answers 200 once the instance has
//! started (its election runs and it either leads with its controllers running or stands by,
//! ready to take over), with the body `leader` or `standby`; leadership itself is the
//! `windlass_leader` gauge. A standby is ready by design: were it not, a rolling update of a
//! two-replica Deployment would wait forever for the new Pod while the old leader holds the
//! Lease.

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
    /// True once the instance has started (leading or standing by).
    pub started: AtomicBool,
    /// True while this instance leads and its controllers run.
    pub leading: AtomicBool,
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
    match (
        health.started.load(Ordering::Relaxed),
        health.leading.load(Ordering::Relaxed),
    ) {
        (true, true) => (StatusCode::OK, "leader"),
        (true, false) => (StatusCode::OK, "standby"),
        (false, _) => (StatusCode::SERVICE_UNAVAILABLE, "starting"),
    }
}

async fn metrics(
    State(health): State<Arc<Health>>,
    headers: axum::http::HeaderMap,
) -> impl IntoResponse {
    let accept = headers
        .get(axum::http::header::ACCEPT)
        .and_then(|v| v.to_str().ok());
    let (content_type, body) = health.metrics.encode_for(accept);
    ([("content-type", content_type)], body)
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

#[cfg(test)]
mod tests {
    use super::*;

    async fn get(health: &Arc<Health>, path: &str) -> (StatusCode, String) {
        use tower::ServiceExt as _;
        let req = axum::http::Request::get(path)
            .body(axum::body::Body::empty())
            .unwrap();
        let resp = router(health.clone()).oneshot(req).await.unwrap();
        let status = resp.status();
        let body = axum::body::to_bytes(resp.into_body(), 1 << 20)
            .await
            .unwrap();
        (status, String::from_utf8(body.to_vec()).unwrap())
    }

    #[tokio::test]
    async fn readyz_says_starting_then_standby_then_leader() {
        let health = Arc::new(Health::default());
        assert_eq!(
            get(&health, "/readyz").await,
            (StatusCode::SERVICE_UNAVAILABLE, "starting".into())
        );
        health.started.store(true, Ordering::Relaxed);
        assert_eq!(
            get(&health, "/readyz").await,
            (StatusCode::OK, "standby".into())
        );
        health.leading.store(true, Ordering::Relaxed);
        assert_eq!(
            get(&health, "/readyz").await,
            (StatusCode::OK, "leader".into())
        );
        assert_eq!(get(&health, "/healthz").await.0, StatusCode::OK);
        let (status, metrics) = get(&health, "/metrics").await;
        assert_eq!(status, StatusCode::OK);
        assert!(metrics.contains("windlass_leader"), "{metrics}");
    }
}
