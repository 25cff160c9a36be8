//! `/healthz`, `/readyz`, `/metrics`, `/debug/runs/{uid}` (a parent's last run, see
//! [`crate::runs`]) and `/debug/recordings/{namespace}/{name}[/{file}]` (a parent's recorded
//! calls, see [`crate::record`]; in a cluster, the way to fetch them: `kubectl
//! port-forward`).
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

use crate::{metrics::Metrics, runs::Runs};

/// What the admin endpoints report.
#[derive(Debug, Default)]
pub struct Health {
    /// True once the instance has started (leading or standing by).
    pub started: AtomicBool,
    /// True while this instance leads and its controllers run.
    pub leading: AtomicBool,
    /// The metrics.
    pub metrics: Arc<Metrics>,
    /// The parents' last runs (this instance's, while it leads).
    pub runs: Arc<Runs>,
    /// Where calls are recorded for replay (`crate::record`), served read-only.
    pub record_dir: Option<std::path::PathBuf>,
}

/// The admin router.
pub fn router(health: Arc<Health>) -> Router {
    Router::new()
        .route("/healthz", get(|| async { "ok" }))
        .route("/readyz", get(readyz))
        .route("/metrics", get(metrics))
        .route("/debug/runs/{uid}", get(last_run))
        .route("/debug/recordings/{namespace}/{name}", get(recordings))
        .route(
            "/debug/recordings/{namespace}/{name}/{file}",
            get(recording),
        )
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

/// `/debug/*` answers only a caller on the host's own address: `kubectl port-forward` (which
/// connects from inside the Pod) or `windlass dev` on the same machine, never another Pod
/// through the metrics Service. What it serves holds plugins' inputs, Secrets they read included.
fn local_only(peer: SocketAddr) -> Result<(), axum::response::Response> {
    if peer.ip().is_loopback() {
        return Ok(());
    }
    Err((
        StatusCode::FORBIDDEN,
        "/debug answers the host's own address only: use kubectl port-forward\n",
    )
        .into_response())
}

type Peer = axum::extract::ConnectInfo<SocketAddr>;

/// A parent's last run as JSON (`windlass trace` reads it): 404 when none is recorded, 503 on
/// a standby, which reconciles nothing.
async fn last_run(
    State(health): State<Arc<Health>>,
    axum::extract::ConnectInfo(peer): Peer,
    axum::extract::Path(uid): axum::extract::Path<String>,
) -> axum::response::Response {
    if let Err(refused) = local_only(peer) {
        return refused;
    }
    if !health.leading.load(Ordering::Relaxed) {
        return (
            StatusCode::SERVICE_UNAVAILABLE,
            "standby: the leader holds the runs\n",
        )
            .into_response();
    }
    match health.runs.get(&uid) {
        Some(run) => axum::Json(run).into_response(),
        None => (
            StatusCode::NOT_FOUND,
            format!("no run of a parent with uid {uid} since this instance started leading\n"),
        )
            .into_response(),
    }
}

/// Whether `segment` may name a directory or file under the record directory: a Kubernetes
/// name (or `_cluster`), or a recording's file name; never `..` or a path.
fn plain(segment: &str) -> bool {
    !segment.is_empty()
        && !segment.starts_with('.')
        && segment
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, '-' | '.' | '_'))
}

/// The recordings of a parent (`_cluster` as the namespace of a cluster-scoped one), newest
/// last, as a JSON list of file names.
async fn recordings(
    State(health): State<Arc<Health>>,
    axum::extract::ConnectInfo(peer): Peer,
    axum::extract::Path((namespace, name)): axum::extract::Path<(String, String)>,
) -> axum::response::Response {
    if let Err(refused) = local_only(peer) {
        return refused;
    }
    let Some(root) = health.record_dir.as_ref() else {
        return (
            StatusCode::NOT_FOUND,
            "this host records nothing (--record-dir)\n",
        )
            .into_response();
    };
    if !plain(&namespace) || !plain(&name) {
        return (StatusCode::BAD_REQUEST, "not a namespace and name\n").into_response();
    }
    let dir = root.join(&namespace).join(&name);
    let Ok(entries) = std::fs::read_dir(&dir) else {
        return (
            StatusCode::NOT_FOUND,
            format!("no recordings of {namespace}/{name}\n"),
        )
            .into_response();
    };
    let mut files: Vec<String> = entries
        .filter_map(|e| e.ok()?.file_name().into_string().ok())
        .filter(|f| f.ends_with(".json"))
        .collect();
    files.sort();
    axum::Json(files).into_response()
}

/// One recording, as written.
async fn recording(
    State(health): State<Arc<Health>>,
    axum::extract::ConnectInfo(peer): Peer,
    axum::extract::Path((namespace, name, file)): axum::extract::Path<(String, String, String)>,
) -> axum::response::Response {
    if let Err(refused) = local_only(peer) {
        return refused;
    }
    let Some(root) = health.record_dir.as_ref() else {
        return (
            StatusCode::NOT_FOUND,
            "this host records nothing (--record-dir)\n",
        )
            .into_response();
    };
    if !plain(&namespace) || !plain(&name) || !plain(&file) || !file.ends_with(".json") {
        return (StatusCode::BAD_REQUEST, "not a recording's name\n").into_response();
    }
    match std::fs::read(root.join(&namespace).join(&name).join(&file)) {
        Ok(bytes) => ([("content-type", "application/json")], bytes).into_response(),
        Err(_) => (StatusCode::NOT_FOUND, format!("no recording {file}\n")).into_response(),
    }
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
        let service = router(health).into_make_service_with_connect_info::<SocketAddr>();
        if let Err(e) = axum::serve(listener, service)
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
        get_from(health, path, SocketAddr::from(([127, 0, 0, 1], 40_000))).await
    }

    async fn get_from(health: &Arc<Health>, path: &str, peer: SocketAddr) -> (StatusCode, String) {
        use tower::ServiceExt as _;
        let req = axum::http::Request::get(path)
            .body(axum::body::Body::empty())
            .unwrap();
        let resp = router(health.clone())
            .layer(axum::extract::connect_info::MockConnectInfo(peer))
            .oneshot(req)
            .await
            .unwrap();
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

    #[tokio::test]
    async fn a_parents_last_run_is_served_by_the_leader_only() {
        let health = Arc::new(Health::default());
        health.runs.end(
            "u1",
            crate::runs::LastRun {
                kind: "samples/v1/DB".into(),
                namespace: "shop".into(),
                name: "orders".into(),
                started: "2026-12-05T10:00:00Z".into(),
                duration_ms: 4.0,
                result: "Refused".into(),
                message: Some("plugin storage: refused".into()),
                plugins: Vec::new(),
            },
        );
        let (status, body) = get(&health, "/debug/runs/u1").await;
        assert_eq!(status, StatusCode::SERVICE_UNAVAILABLE, "{body}");
        health.leading.store(true, Ordering::Relaxed);
        let (status, body) = get(&health, "/debug/runs/u1").await;
        assert_eq!(status, StatusCode::OK, "{body}");
        let run: serde_json::Value = serde_json::from_str(&body).unwrap();
        assert_eq!(run["name"], "orders");
        assert_eq!(run["result"], "Refused");
        let (status, body) = get(&health, "/debug/runs/u2").await;
        assert_eq!(status, StatusCode::NOT_FOUND);
        assert!(body.contains("u2"), "{body}");
    }

    #[tokio::test]
    async fn recordings_are_listed_and_served_and_nothing_outside_their_directory() {
        let root = tempfile::tempdir().unwrap();
        let dir = root.path().join("shop/orders");
        std::fs::create_dir_all(&dir).unwrap();
        std::fs::write(dir.join("0002-00-a.json"), "{\"b\":1}").unwrap();
        std::fs::write(dir.join("0001-00-a.json"), "{}").unwrap();
        std::fs::write(root.path().join("secret.json"), "no").unwrap();
        let health = Arc::new(Health {
            record_dir: Some(root.path().to_path_buf()),
            ..Health::default()
        });
        let (status, body) = get(&health, "/debug/recordings/shop/orders").await;
        assert_eq!(status, StatusCode::OK);
        assert_eq!(body, r#"["0001-00-a.json","0002-00-a.json"]"#);
        assert_eq!(
            get(&health, "/debug/recordings/shop/orders/0002-00-a.json").await,
            (StatusCode::OK, "{\"b\":1}".into())
        );
        for path in [
            "/debug/recordings/shop/../secret.json",
            "/debug/recordings/shop/orders/..",
            "/debug/recordings/shop/%2E%2E/secret.json",
            "/debug/recordings/shop/orders/%2E%2E%2Fsecret.json",
        ] {
            let (status, body) = get(&health, path).await;
            assert_ne!(status, StatusCode::OK, "{path}: {body}");
            assert_ne!(body, "no", "{path}");
        }
        assert_eq!(
            get(&health, "/debug/recordings/shop/other").await.0,
            StatusCode::NOT_FOUND
        );
        // Another Pod, through the metrics Service: nothing.
        let elsewhere = SocketAddr::from(([10, 1, 2, 3], 40_000));
        for path in [
            "/debug/recordings/shop/orders",
            "/debug/recordings/shop/orders/0002-00-a.json",
            "/debug/runs/u1",
        ] {
            let (status, body) = get_from(&health, path, elsewhere).await;
            assert_eq!(status, StatusCode::FORBIDDEN, "{path}: {body}");
        }
        assert_eq!(
            get_from(&health, "/metrics", elsewhere).await.0,
            StatusCode::OK
        );
    }
}
