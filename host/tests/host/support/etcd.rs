//! etcd's own watch, read from a revision through its JSON gateway (`/v3/watch`): every change
//! the real control plane stores, in order, below kube-apiserver and anything in front of it —
//! what the devcluster's store broadcast is to the devcluster suite. The plane must store JSON
//! (`windlass_kubeplane::Options::storage_json`): protobuf values are not decoded here.
//!
//! The watch survives etcd's restarts: it is opened again from the revision after the last one
//! seen, so nothing between is missed unless etcd compacted it, which is counted.

use std::time::Duration;

use base64::{Engine, engine::general_purpose::STANDARD as B64};
use serde_json::{Value, json};
use tokio::io::{AsyncReadExt, AsyncWriteExt};

/// What happened to a stored object.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    Added,
    Modified,
    Deleted,
}

/// One change, as kube-apiserver stored it.
#[derive(Debug, Clone)]
pub struct Change {
    /// etcd's revision of the change (the object's resourceVersion).
    pub revision: u64,
    /// The resource as `group/plural` (`/configmaps` for the core group), as the devcluster's
    /// store names it.
    pub resource: String,
    pub kind: Kind,
    /// The object after the change; for a deletion, its last state.
    pub object: Value,
}

/// What went wrong reading the watch, apart from etcd being down (which is waited out).
#[derive(Debug, Default, Clone)]
pub struct Gaps {
    /// Revisions etcd had compacted before they were read.
    pub compacted: u64,
    /// Values that were not JSON (the plane stores protobuf: start it with `storage_json`).
    pub undecoded: Vec<String>,
}

/// etcd's current revision.
pub async fn revision(etcd_url: &str) -> std::io::Result<u64> {
    let key = B64.encode("/registry/");
    let body = post(
        etcd_url,
        "/v3/kv/range",
        &json!({"key": key, "count_only": true}),
    )
    .await?;
    let v: Value = serde_json::from_slice(&body).map_err(std::io::Error::other)?;
    number(&v["header"]["revision"])
        .ok_or_else(|| std::io::Error::other(format!("no revision in {v}")))
}

/// Reads every change under `/registry/` from revision `from` on, calling `each` in order, until
/// the task is dropped. Gaps are reported through `gap`.
pub async fn watch(
    etcd_url: String,
    from: u64,
    mut each: impl FnMut(Change) + Send,
    mut gap: impl FnMut(Gaps) + Send,
) {
    let mut next = from;
    loop {
        match watch_once(&etcd_url, next, &mut each).await {
            Ok(Ended::Compacted(at)) => {
                gap(Gaps {
                    compacted: at.saturating_sub(next),
                    ..Gaps::default()
                });
                next = next.max(at);
            }
            Ok(Ended::Undecoded(at, what)) => {
                gap(Gaps {
                    undecoded: vec![what],
                    ..Gaps::default()
                });
                next = at + 1;
            }
            // The stream ended, or etcd is down or restarting: opened again shortly, from the
            // revision after the last one seen.
            Ok(Ended::Closed(seen)) | Err((seen, _)) => next = next.max(seen + 1),
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

enum Ended {
    /// The stream ended; the last revision seen.
    Closed(u64),
    /// etcd had compacted the history to this revision.
    Compacted(u64),
    /// A value that was not JSON, at a revision.
    Undecoded(u64, String),
}

/// One watch connection from `from`: its changes to `each`; how it ended and the last revision
/// seen (or `from - 1`).
async fn watch_once(
    etcd_url: &str,
    from: u64,
    each: &mut (impl FnMut(Change) + Send),
) -> Result<Ended, (u64, std::io::Error)> {
    let mut seen = from.saturating_sub(1);
    let request = json!({"create_request": {
        "key": B64.encode("/registry/"),
        "range_end": B64.encode("/registry0"),
        "start_revision": from,
        "prev_kv": true,
    }});
    let mut stream = connect(etcd_url, "/v3/watch", &request)
        .await
        .map_err(|e| (seen, e))?;
    // HTTP/1.0: the body is the rest of the connection, JSON messages one after another.
    let mut buf = Vec::new();
    let mut head_done = false;
    let mut chunk = [0u8; 64 << 10];
    loop {
        let n = stream.read(&mut chunk).await.map_err(|e| (seen, e))?;
        if n == 0 {
            return Ok(Ended::Closed(seen));
        }
        buf.extend_from_slice(&chunk[..n]);
        if !head_done {
            let Some(end) = buf.windows(4).position(|w| w == b"\r\n\r\n") else {
                continue;
            };
            let head = String::from_utf8_lossy(&buf[..end]).to_string();
            if !head.contains(" 200 ") {
                return Err((seen, std::io::Error::other(head)));
            }
            buf.drain(..end + 4);
            head_done = true;
        }
        let mut messages = serde_json::Deserializer::from_slice(&buf).into_iter::<Value>();
        let mut used = 0;
        while let Some(Ok(message)) = messages.next() {
            used = messages.byte_offset();
            let result = &message["result"];
            if let Some(at) = number(&result["compact_revision"]).filter(|&r| r > 0) {
                return Ok(Ended::Compacted(at));
            }
            for event in result["events"].as_array().into_iter().flatten() {
                let deleted = event["type"] == "DELETE";
                let kv = &event["kv"];
                let Some(revision) = number(&kv["mod_revision"]) else {
                    continue;
                };
                seen = revision;
                let key = text(&kv["key"]);
                let value = if deleted {
                    text(&event["prev_kv"]["value"])
                } else {
                    text(&kv["value"])
                };
                let Ok(object) = serde_json::from_str::<Value>(&value) else {
                    return Ok(Ended::Undecoded(revision, key));
                };
                let kind = if deleted {
                    Kind::Deleted
                } else if number(&kv["version"]) == Some(1) {
                    Kind::Added
                } else {
                    Kind::Modified
                };
                each(Change {
                    revision,
                    resource: resource(&key, &object),
                    kind,
                    object,
                });
            }
        }
        buf.drain(..used);
    }
}

/// `group/plural` of a storage key: `/registry/<group>/<plural>/…` for a resource of a group
/// with a dot in its name (custom resources, aggregated APIs), `/registry/<prefix>/…` for a
/// built-in one, its group from the object. A few built-in resources keep a storage prefix of
/// their own that is not their plural (kube-apiserver's, kept for old clusters' data).
fn resource(key: &str, object: &Value) -> String {
    let mut parts = key.trim_start_matches("/registry/").split('/');
    let first = parts.next().unwrap_or_default();
    let second = parts.next().unwrap_or_default();
    if first.contains('.') {
        return format!("{first}/{second}");
    }
    let plural = match (first, second) {
        ("services", "specs") => "services",
        ("services", "endpoints") => "endpoints",
        ("minions", _) => "nodes",
        ("controllers", _) => "replicationcontrollers",
        ("ingress", _) => "ingresses",
        _ => first,
    };
    let group = object["apiVersion"]
        .as_str()
        .and_then(|v| v.split_once('/'))
        .map_or("", |(group, _)| group);
    format!("{group}/{plural}")
}

#[test]
fn storage_keys_name_their_resources_as_the_devcluster_does() {
    let object = |api_version: &str| json!({"apiVersion": api_version});
    for (key, api_version, want) in [
        ("/registry/configmaps/default/a", "v1", "/configmaps"),
        ("/registry/services/specs/default/db", "v1", "/services"),
        (
            "/registry/services/endpoints/default/db",
            "v1",
            "/endpoints",
        ),
        ("/registry/minions/node-1", "v1", "/nodes"),
        (
            "/registry/controllers/default/rc",
            "v1",
            "/replicationcontrollers",
        ),
        (
            "/registry/ingress/default/web",
            "networking.k8s.io/v1",
            "networking.k8s.io/ingresses",
        ),
        (
            "/registry/statefulsets/default/db",
            "apps/v1",
            "apps/statefulsets",
        ),
        (
            "/registry/leases/windlass-system/windlass-leader",
            "coordination.k8s.io/v1",
            "coordination.k8s.io/leases",
        ),
        (
            "/registry/samples.windlass.dev/sampledbs/default/db-000",
            "samples.windlass.dev/v1alpha1",
            "samples.windlass.dev/sampledbs",
        ),
        (
            "/registry/snapshot.storage.k8s.io/volumesnapshots/default/s",
            "snapshot.storage.k8s.io/v1",
            "snapshot.storage.k8s.io/volumesnapshots",
        ),
    ] {
        assert_eq!(resource(key, &object(api_version)), want, "{key}");
    }
}

/// A base64 field as text (empty when missing).
fn text(v: &Value) -> String {
    v.as_str()
        .and_then(|s| B64.decode(s).ok())
        .map(|b| String::from_utf8_lossy(&b).into_owned())
        .unwrap_or_default()
}

/// etcd's JSON gateway writes 64-bit numbers as strings.
fn number(v: &Value) -> Option<u64> {
    v.as_str()
        .and_then(|s| s.parse().ok())
        .or_else(|| v.as_u64())
}

/// An HTTP/1.0 POST of `body` to etcd, the connection left open for the response.
async fn connect(
    etcd_url: &str,
    path: &str,
    body: &Value,
) -> std::io::Result<tokio::net::TcpStream> {
    let addr = etcd_url.trim_start_matches("http://").trim_end_matches('/');
    let mut stream =
        tokio::time::timeout(Duration::from_secs(2), tokio::net::TcpStream::connect(addr))
            .await
            .map_err(std::io::Error::other)??;
    let body = body.to_string();
    let request = format!(
        "POST {path} HTTP/1.0\r\nHost: {addr}\r\nContent-Type: application/json\r\nContent-Length: {}\r\n\r\n{body}",
        body.len()
    );
    stream.write_all(request.as_bytes()).await?;
    Ok(stream)
}

/// A POST whose whole response body is read.
async fn post(etcd_url: &str, path: &str, body: &Value) -> std::io::Result<Vec<u8>> {
    let mut stream = connect(etcd_url, path, body).await?;
    let mut response = Vec::new();
    tokio::time::timeout(Duration::from_secs(5), stream.read_to_end(&mut response))
        .await
        .map_err(std::io::Error::other)??;
    let end = response
        .windows(4)
        .position(|w| w == b"\r\n\r\n")
        .ok_or_else(|| std::io::Error::other("no HTTP head"))?;
    let head = String::from_utf8_lossy(&response[..end]).to_string();
    if !head.contains(" 200 ") {
        return Err(std::io::Error::other(head));
    }
    Ok(response[end + 4..].to_vec())
}
