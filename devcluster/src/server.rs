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
    mut stop: watch::Receiver<bool>,
) {
    loop {
        let accepted = tokio::select! {
            a = listener.accept() => a,
            _ = stop.changed() => return,
        };
        let Ok((stream, _)) = accepted else { continue };
        let _ = stream.set_nodelay(true);
        let router = router.clone();
        let mut restarts = cluster.faults.restarts();
        restarts.borrow_and_update();
        let mut stop = stop.clone();
        tokio::spawn(async move {
            let service = hyper::service::service_fn(move |req: hyper::Request<Incoming>| {
                let router = router.clone();
                async move { router.oneshot(req.map(axum::body::Body::new)).await }
            });
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
