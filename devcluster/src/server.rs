//! The accept loop: HTTP/1.1 connections served by the router; a fault-injected restart
//! closes every open connection (and so every watch) while the listener stays, so clients
//! reconnect to the same address and find the same store.

use crate::api::Cluster;
use axum::Router;
use hyper::body::Incoming;
use hyper_util::rt::TokioIo;
use std::sync::Arc;
use tokio::net::TcpListener;
use tokio::sync::watch;
use tower::ServiceExt;

/// Serves until `stop` turns true.
pub async fn serve(
    listener: TcpListener,
    router: Router,
    cluster: Arc<Cluster>,
    stop: watch::Receiver<bool>,
) {
    accept(
        listener,
        move || cluster.faults.restarts(),
        stop,
        move |req: hyper::Request<Incoming>| {
            let router = router.clone();
            async move { router.oneshot(req.map(axum::body::Body::new)).await }
        },
    )
    .await;
}

/// The accept loop of HTTP/1.1 connections, each request answered by `handle`, until `stop`
/// turns true; a change of `restarts()` (a fault-injected restart) closes every connection
/// open then. The devcluster's server and the fault proxy (`proxy.rs`) both run on it.
pub(crate) async fn accept<H, F>(
    listener: TcpListener,
    restarts: impl Fn() -> watch::Receiver<u64>,
    mut stop: watch::Receiver<bool>,
    handle: H,
) where
    H: Fn(hyper::Request<Incoming>) -> F + Clone + Send + Sync + 'static,
    F: std::future::Future<Output = Result<axum::response::Response, std::convert::Infallible>>
        + Send
        + 'static,
{
    loop {
        let accepted = tokio::select! {
            a = listener.accept() => a,
            _ = stop.changed() => return,
        };
        let Ok((stream, _)) = accepted else { continue };
        let _ = stream.set_nodelay(true);
        let handle = handle.clone();
        let mut restarts = restarts();
        restarts.borrow_and_update();
        let mut stop = stop.clone();
        tokio::spawn(async move {
            let service = hyper::service::service_fn(handle);
            let conn = hyper::server::conn::http1::Builder::new()
                .keep_alive(true)
                .serve_connection(TokioIo::new(stream), service);
            tokio::select! {
                _ = conn => {}
                _ = restarts.changed() => {}
                _ = stop.changed() => {}
            }
        });
    }
}
