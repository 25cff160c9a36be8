//! The fault switchboard ([`Faults`]) in front of another API server: an HTTP proxy on loopback
//! that forwards each request to the upstream (a real kube-apiserver) and injects on the way
//! what the devcluster injects into its own requests — errors by verb and a mix of codes (429
//! with `Retry-After`), requests that time out (504 after a delay), added latency, requests held
//! in flight for a test to act at that moment ([`Faults::hold`]), watch streams cut every N
//! seconds, restarts that drop every connection — and, in place of the devcluster's dropped
//! watch history, [`FaultProxy::expire_watch_history`]: a watch resumed from before that moment
//! gets 410 Gone, as from a compacted store.
//!
//! Each request is forwarded through one kube client built from the upstream's configuration,
//! so it reaches the upstream as that configuration's user: the caller's own credentials are
//! not forwarded (a kubeconfig for the proxy needs none). Requests that are not for a resource
//! (discovery, `/version`, `/openapi`) get no faults, as on the devcluster.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use axum::body::Body;
use axum::response::{IntoResponse, Response};
use futures::StreamExt;
use http_body_util::BodyExt;
use hyper::body::Incoming;
use tokio::net::TcpListener;
use tokio::sync::watch;

use crate::error::ApiError;
use crate::faults::{Faults, RequestInfo};

/// A running proxy; dropping it stops it (and every connection through it).
pub struct FaultProxy {
    url: String,
    state: Arc<State>,
    stop: watch::Sender<bool>,
}

impl std::fmt::Debug for FaultProxy {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("FaultProxy")
            .field("url", &self.url)
            .finish_non_exhaustive()
    }
}

struct State {
    upstream: kube::Client,
    faults: Faults,
    /// Watches from a resourceVersion below this get 410 Gone (0: none).
    expired_below: AtomicU64,
}

impl FaultProxy {
    /// Listens on an ephemeral port of 127.0.0.1 and forwards to the server of `upstream`, as
    /// its user.
    ///
    /// # Errors
    /// When the port cannot be bound or no client can be built from `upstream`.
    pub async fn start(upstream: kube::Config) -> anyhow::Result<FaultProxy> {
        let upstream = kube::Client::try_from(upstream)?;
        let listener = TcpListener::bind("127.0.0.1:0").await?;
        let url = format!("http://{}", listener.local_addr()?);
        let state = Arc::new(State {
            upstream,
            faults: Faults::default(),
            expired_below: AtomicU64::new(0),
        });
        let (stop, stopped) = watch::channel(false);
        tokio::spawn(serve(listener, state.clone(), stopped));
        Ok(FaultProxy { url, state, stop })
    }

    /// `http://127.0.0.1:<port>`.
    pub fn url(&self) -> &str {
        &self.url
    }

    /// The faults it injects.
    pub fn faults(&self) -> &Faults {
        &self.state.faults
    }

    /// From now on, a watch from a resourceVersion older than the upstream's current one gets
    /// 410 Gone (a watch ERROR event with an `Expired` Status), as after a compaction; the
    /// client must list again.
    ///
    /// # Errors
    /// When the upstream's current resourceVersion cannot be read.
    pub async fn expire_watch_history(&self) -> anyhow::Result<()> {
        let namespaces: kube::Api<k8s_openapi::api::core::v1::Namespace> =
            kube::Api::all(self.state.upstream.clone());
        let list = namespaces
            .list_metadata(&kube::api::ListParams::default().limit(1))
            .await?;
        let rv: u64 = list
            .metadata
            .resource_version
            .as_deref()
            .and_then(|rv| rv.parse().ok())
            .ok_or_else(|| anyhow::anyhow!("the upstream's list has no numeric resourceVersion"))?;
        self.state.expired_below.fetch_max(rv, Ordering::SeqCst);
        Ok(())
    }
}

impl Drop for FaultProxy {
    fn drop(&mut self) {
        let _ = self.stop.send(true);
    }
}

/// The devcluster's accept loop: a restart drops every connection.
async fn serve(listener: TcpListener, state: Arc<State>, stop: watch::Receiver<bool>) {
    let faults = state.clone();
    crate::server::accept(
        listener,
        move || faults.faults.restarts(),
        stop,
        move |req: hyper::Request<Incoming>| {
            let state = state.clone();
            async move { Ok::<_, std::convert::Infallible>(handle(&state, req).await) }
        },
    )
    .await;
}

async fn handle(state: &State, req: hyper::Request<Incoming>) -> Response {
    let query = req.uri().query().unwrap_or_default().to_string();
    let info = request_info(req.method().as_str(), req.uri().path(), &query);
    let watch_from = info
        .as_ref()
        .filter(|i| i.verb == "watch")
        .map(|_| query_value(&query, "resourceVersion").and_then(|rv| rv.parse::<u64>().ok()));
    if let Some(info) = &info {
        let (latency, injected) = state.faults.decide(&info.verb);
        if !latency.is_zero() {
            tokio::time::sleep(latency).await;
        }
        if let Some(e) = injected {
            return e.into_response();
        }
        state.faults.held(|| info.clone()).await;
        if let Some(Some(rv)) = watch_from
            && rv > 0
            && rv < state.expired_below.load(Ordering::SeqCst)
        {
            state.faults.count(410);
            let status = ApiError::gone(rv).status();
            let line = format!(
                "{}\n",
                serde_json::json!({"type": "ERROR", "object": status})
            );
            return Response::builder()
                .status(200)
                .header("content-type", "application/json")
                .body(Body::from(line))
                .unwrap_or_default();
        }
    }
    let (parts, body) = req.into_parts();
    let body = match body.collect().await {
        Ok(b) => b.to_bytes(),
        Err(e) => return ApiError::bad_request(format!("reading the body: {e}")).into_response(),
    };
    let mut upstream = axum::http::Request::builder()
        .method(parts.method.clone())
        .uri(
            parts
                .uri
                .path_and_query()
                .map_or("/", |p| p.as_str())
                .to_string(),
        );
    for (name, value) in &parts.headers {
        if !matches!(
            name.as_str(),
            "host" | "authorization" | "content-length" | "connection" | "transfer-encoding"
        ) {
            upstream = upstream.header(name, value);
        }
    }
    let Ok(upstream) = upstream.body(kube::client::Body::from(body.to_vec())) else {
        return ApiError::bad_request("an unforwardable request").into_response();
    };
    let response = match state.upstream.send(upstream).await {
        Ok(r) => r,
        Err(e) => {
            let mut e = ApiError::internal(format!("the upstream API server: {e}"));
            e.code = 503;
            return e.into_response();
        }
    };
    let (parts, body) = response.into_parts();
    let mut out = Response::builder().status(parts.status);
    for (name, value) in &parts.headers {
        if !matches!(
            name.as_str(),
            "content-length" | "connection" | "transfer-encoding"
        ) {
            out = out.header(name, value);
        }
    }
    if watch_from.is_none() {
        return out.body(Body::new(body)).unwrap_or_default();
    }
    // A watch: cut after the configured time, or at a restart.
    let cut = state
        .faults
        .config()
        .watch_cut_secs
        .map_or(Duration::from_secs(3600 * 24 * 365), Duration::from_secs);
    let mut restarts = state.faults.restarts();
    restarts.borrow_and_update();
    let end = async move {
        tokio::select! {
            _ = tokio::time::sleep(cut) => {}
            _ = restarts.changed() => {}
        }
    };
    let frames = http_body_util::BodyStream::new(body).take_until(Box::pin(end));
    out.body(Body::new(http_body_util::StreamBody::new(frames)))
        .unwrap_or_default()
}

/// The value of `key` in a query string (not percent-decoded: resourceVersions need none).
fn query_value<'a>(query: &'a str, key: &str) -> Option<&'a str> {
    query
        .split('&')
        .filter_map(|kv| kv.split_once('='))
        .find(|(k, _)| *k == key)
        .map(|(_, v)| v)
}

/// The request as [`Faults`] sees it, or None for one that is not for a resource.
pub fn request_info(method: &str, path: &str, query: &str) -> Option<RequestInfo> {
    let parts: Vec<&str> = path.trim_matches('/').split('/').collect();
    let (group, rest) = match parts.as_slice() {
        ["api", _version, rest @ ..] => ("", rest),
        ["apis", group, _version, rest @ ..] => (*group, rest),
        _ => return None,
    };
    let (namespace, rest) = match rest {
        ["namespaces", ns, rest @ ..] if !rest.is_empty() => (*ns, rest),
        _ => ("", rest),
    };
    let (resource, name, subresource) = match rest {
        [resource] => (*resource, "", None),
        [resource, name] => (*resource, *name, None),
        [resource, name, sub] => (*resource, *name, Some((*sub).to_string())),
        _ => return None,
    };
    let watching = matches!(query_value(query, "watch"), Some("true" | "1"));
    let verb = match (method, name.is_empty()) {
        ("GET", false) => "get",
        ("GET", true) if watching => "watch",
        ("GET", true) => "list",
        ("POST", _) => "create",
        ("PUT", _) => "update",
        ("PATCH", _) => "patch",
        ("DELETE", false) => "delete",
        ("DELETE", true) => "deletecollection",
        _ => return None,
    };
    Some(RequestInfo {
        verb: verb.to_string(),
        group: group.to_string(),
        resource: resource.to_string(),
        subresource,
        namespace: namespace.to_string(),
        name: name.to_string(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn info(
        verb: &str,
        group: &str,
        resource: &str,
        sub: Option<&str>,
        ns: &str,
        name: &str,
    ) -> RequestInfo {
        RequestInfo {
            verb: verb.into(),
            group: group.into(),
            resource: resource.into(),
            subresource: sub.map(String::from),
            namespace: ns.into(),
            name: name.into(),
        }
    }

    #[test]
    fn requests_are_read_as_the_devcluster_reads_them() {
        for (method, path, query, want) in [
            (
                "GET",
                "/api/v1/namespaces/shop/configmaps/a",
                "",
                Some(info("get", "", "configmaps", None, "shop", "a")),
            ),
            (
                "GET",
                "/api/v1/namespaces/shop/configmaps",
                "limit=5",
                Some(info("list", "", "configmaps", None, "shop", "")),
            ),
            (
                "GET",
                "/apis/apps/v1/statefulsets",
                "watch=true&resourceVersion=7",
                Some(info("watch", "apps", "statefulsets", None, "", "")),
            ),
            (
                "PATCH",
                "/apis/samples.windlass.dev/v1alpha1/namespaces/default/sampledbs/db/status",
                "",
                Some(info(
                    "patch",
                    "samples.windlass.dev",
                    "sampledbs",
                    Some("status"),
                    "default",
                    "db",
                )),
            ),
            (
                "POST",
                "/apis/batch/v1/namespaces/default/jobs",
                "",
                Some(info("create", "batch", "jobs", None, "default", "")),
            ),
            (
                "DELETE",
                "/api/v1/namespaces/default/persistentvolumeclaims/data-0",
                "",
                Some(info(
                    "delete",
                    "",
                    "persistentvolumeclaims",
                    None,
                    "default",
                    "data-0",
                )),
            ),
            (
                "DELETE",
                "/api/v1/namespaces/default/pods",
                "",
                Some(info("deletecollection", "", "pods", None, "default", "")),
            ),
            (
                "GET",
                "/api/v1/namespaces/default",
                "",
                Some(info("get", "", "namespaces", None, "", "default")),
            ),
            (
                "PUT",
                "/apis/coordination.k8s.io/v1/namespaces/windlass-system/leases/windlass-leader",
                "",
                Some(info(
                    "update",
                    "coordination.k8s.io",
                    "leases",
                    None,
                    "windlass-system",
                    "windlass-leader",
                )),
            ),
            ("GET", "/apis", "", None),
            ("GET", "/apis/apps/v1", "", None),
            ("GET", "/version", "", None),
            ("GET", "/openapi/v3", "", None),
        ] {
            assert_eq!(
                request_info(method, path, query),
                want,
                "{method} {path}?{query}"
            );
        }
    }
}
