//! Fault injection as clients experience it: error rates with their codes, latency, watch
//! cuts, restarts that keep resourceVersion continuity, and the HTTP control endpoint.

use futures::{StreamExt, TryStreamExt};
use k8s_openapi::api::core::v1::ConfigMap;
use kube::api::{Api, PostParams, WatchParams};
use serde_json::json;
use std::time::{Duration, Instant};
use windlass_devcluster::{DevCluster, Options};

async fn start() -> DevCluster {
    DevCluster::start(Options {
        simulator: false,
        ..Options::default()
    })
    .await
    .expect("devcluster starts")
}

/// A client that does not retry 429s itself, so the tests see them.
fn no_retry(dc: &DevCluster) -> kube::Client {
    let mut config = dc.config();
    config.default_retry = false;
    kube::Client::try_from(config).expect("client")
}

fn cm(name: &str) -> ConfigMap {
    serde_json::from_value(json!({"metadata": {"name": name}})).expect("configmap")
}

fn code<T: std::fmt::Debug>(r: Result<T, kube::Error>) -> u16 {
    match r {
        Err(kube::Error::Api(s)) => s.code,
        other => panic!("expected an API error, got {other:?}"),
    }
}

#[tokio::test]
async fn injected_errors_reach_clients_with_their_codes_until_cleared() {
    let dc = start().await;
    let api: Api<ConfigMap> = Api::default_namespaced(no_retry(&dc));
    dc.faults().set_error_rate("create", 500, 1.0);
    assert_eq!(
        code(api.create(&PostParams::default(), &cm("a")).await),
        500
    );
    dc.faults().set_error_rate("create", 429, 1.0);
    assert_eq!(
        code(api.create(&PostParams::default(), &cm("a")).await),
        429
    );
    dc.faults().set_error_rate("get", 409, 1.0);
    assert_eq!(code(api.get("a").await), 409);
    dc.faults().clear();
    api.create(&PostParams::default(), &cm("a"))
        .await
        .expect("no more faults");
    api.get("a").await.expect("get");
    dc.shutdown().await;
}

#[tokio::test]
async fn a_429_carries_retry_after() {
    let dc = start().await;
    dc.faults().set(windlass_devcluster::FaultConfig {
        errors: [(
            "list".to_string(),
            windlass_devcluster::ErrorRate {
                code: 429,
                rate: 1.0,
                retry_after_secs: Some(7),
            },
        )]
        .into(),
        ..Default::default()
    });
    let req = http_request("GET", "/api/v1/namespaces/default/configmaps", Vec::new());
    let resp = no_retry(&dc)
        .send(req.map(kube::client::Body::from))
        .await
        .expect("response");
    assert_eq!(resp.status().as_u16(), 429);
    assert_eq!(
        resp.headers()
            .get("retry-after")
            .and_then(|v| v.to_str().ok()),
        Some("7")
    );
    dc.shutdown().await;
}

fn http_request(method: &str, path: &str, body: Vec<u8>) -> axum::http::Request<Vec<u8>> {
    axum::http::Request::builder()
        .method(method)
        .uri(path)
        .header("content-type", "application/json")
        .body(body)
        .expect("request")
}

#[tokio::test]
async fn latency_is_added_to_every_request() {
    let dc = start().await;
    let api: Api<ConfigMap> = Api::default_namespaced(dc.client());
    dc.faults().set_latency(Duration::from_millis(300));
    let t = Instant::now();
    let _ = api.get_opt("x").await.expect("get");
    assert!(
        t.elapsed() >= Duration::from_millis(300),
        "{:?}",
        t.elapsed()
    );
    dc.shutdown().await;
}

#[tokio::test]
async fn watches_are_cut_after_the_configured_interval() {
    let dc = start().await;
    let api: Api<ConfigMap> = Api::default_namespaced(dc.client());
    dc.faults().set_watch_cut(Some(Duration::from_secs(1)));
    let t = Instant::now();
    let stream = api
        .watch(&WatchParams::default().timeout(60), "0")
        .await
        .expect("watch");
    let events: Vec<_> =
        tokio::time::timeout(Duration::from_secs(10), stream.try_collect::<Vec<_>>())
            .await
            .expect("the watch is cut")
            .expect("clean end");
    assert!(events.is_empty());
    assert!(t.elapsed() < Duration::from_secs(5), "{:?}", t.elapsed());
    dc.shutdown().await;
}

#[tokio::test]
async fn a_restart_ends_open_watches_and_keeps_the_store_and_resource_versions() {
    let dc = start().await;
    let api: Api<ConfigMap> = Api::default_namespaced(dc.client());
    let before = api
        .create(&PostParams::default(), &cm("kept"))
        .await
        .expect("create");
    let rv: u64 = before
        .metadata
        .resource_version
        .as_deref()
        .and_then(|r| r.parse().ok())
        .expect("rv");
    let mut stream = api
        .watch(&WatchParams::default().timeout(120), &rv.to_string())
        .await
        .expect("watch")
        .boxed();
    dc.faults().restart();
    let ended = tokio::time::timeout(Duration::from_secs(5), async {
        loop {
            match stream.next().await {
                None | Some(Err(_)) => return,
                Some(Ok(_)) => {}
            }
        }
    })
    .await;
    assert!(ended.is_ok(), "the watch ends on restart");
    let kept = api.get("kept").await.expect("the store survives");
    assert_eq!(kept.metadata.uid, before.metadata.uid);
    let after = api
        .create(&PostParams::default(), &cm("next"))
        .await
        .expect("create after restart");
    let rv2: u64 = after
        .metadata
        .resource_version
        .as_deref()
        .and_then(|r| r.parse().ok())
        .expect("rv");
    assert!(rv2 > rv, "resourceVersions continue: {rv2} > {rv}");
    dc.shutdown().await;
}

#[tokio::test]
async fn faults_are_set_over_http_too() {
    let dc = start().await;
    let body = serde_json::to_vec(
        &json!({"errors": {"create": {"code": 500, "rate": 1.0}}, "latencyMs": 0}),
    )
    .expect("json");
    let text = dc
        .client()
        .request_text(http_request("PUT", "/devcluster/faults", body))
        .await
        .expect("set faults");
    assert!(text.contains("\"create\""), "{text}");
    assert_eq!(dc.faults().config().errors["create"].code, 500);
    let api: Api<ConfigMap> = Api::default_namespaced(dc.client());
    assert_eq!(
        code(api.create(&PostParams::default(), &cm("a")).await),
        500
    );
    dc.client()
        .request_text(http_request("PUT", "/devcluster/faults", b"{}".to_vec()))
        .await
        .expect("clear");
    api.create(&PostParams::default(), &cm("a"))
        .await
        .expect("cleared");
    dc.shutdown().await;
}
