//! Watch streams: newline-delimited watch events from a resourceVersion (or from a snapshot),
//! bookmarks, `timeoutSeconds`, 410 Gone as an `ERROR` event, the initial events of a
//! streaming list (`sendInitialEvents`), and cuts on injected faults and restarts.

use super::table;
use crate::api::Cluster;
use crate::resources::ResourceType;
use crate::selector::{FieldSelector, LabelSelector};
use crate::store::{Event, EventType};
use axum::body::Body;
use axum::response::Response;
use bytes::Bytes;
use futures::SinkExt;
use futures::channel::mpsc;
use serde_json::{Value, json};
use std::convert::Infallible;
use std::sync::Arc;
use std::time::Duration;
use tokio::sync::broadcast::error::RecvError;

/// What a watch asks for.
#[derive(Debug, Clone)]
pub struct WatchRequest {
    /// The served resource.
    pub rt: Arc<ResourceType>,
    /// The requested version (objects are shown in it).
    pub version: String,
    /// Namespace filter.
    pub namespace: Option<String>,
    /// Label filter.
    pub labels: LabelSelector,
    /// Field filter.
    pub fields: FieldSelector,
    /// `resourceVersion`: None or 0 start with the current objects as ADDED.
    pub since: Option<u64>,
    /// `allowWatchBookmarks`.
    pub bookmarks: bool,
    /// `sendInitialEvents`.
    pub initial_events: bool,
    /// `timeoutSeconds`.
    pub timeout: Option<Duration>,
    /// Table rows instead of objects (`kubectl get -w`).
    pub table: bool,
    /// How often to send bookmarks.
    pub bookmark_every: Duration,
}

impl WatchRequest {
    fn matches(&self, obj: &Value) -> bool {
        let ns_ok = self
            .namespace
            .as_deref()
            .is_none_or(|ns| obj["metadata"]["namespace"].as_str() == Some(ns));
        ns_ok && self.labels.matches(obj) && self.fields.matches(obj)
    }

    fn line(&self, kind: &str, obj: &Value) -> Bytes {
        let object = if self.table {
            let mut t = json!({"kind": "Table", "apiVersion": "meta.k8s.io/v1", "metadata": {"resourceVersion": obj["metadata"]["resourceVersion"]},
                "columnDefinitions": table::definitions(&self.rt), "rows": [table::row(&self.rt, obj, "Metadata")]});
            if kind == "BOOKMARK" || kind == "ERROR" {
                t = obj.clone();
            }
            t
        } else if kind != "BOOKMARK"
            && kind != "ERROR"
            && !self.rt.shown_as_stored(obj, &self.version)
        {
            self.rt.present(obj, &self.version)
        } else {
            return event_bytes(kind, obj);
        };
        event_bytes(kind, &object)
    }

    /// The line a store event becomes for this watch, if any: with a selector, an object that
    /// starts matching is ADDED and one that stops matching is DELETED, as the real server
    /// reports them.
    fn translate(&self, e: &Event) -> Option<Bytes> {
        if !self.rt.stored_under(&e.key) {
            return None;
        }
        let now = self.matches(&e.object);
        let before = e.prev.as_ref().is_some_and(|p| self.matches(p));
        match (e.kind, before, now) {
            (EventType::Modified, false, true) => Some(self.line("ADDED", &e.object)),
            (EventType::Modified, true, false) => Some(self.line("DELETED", &e.object)),
            (_, _, true) => Some(self.event_line(e)),
            _ => None,
        }
    }

    fn event_line(&self, e: &Event) -> Bytes {
        let plain = !self.table && self.rt.shown_as_stored(&e.object, &self.version);
        if plain {
            return e
                .line
                .get_or_init(|| self.line(e.kind.as_str(), &e.object))
                .clone();
        }
        self.line(e.kind.as_str(), &e.object)
    }

    fn bookmark(&self, rv: u64, initial_end: bool) -> Bytes {
        let mut meta = json!({"resourceVersion": rv.to_string()});
        if initial_end {
            meta["annotations"] = json!({"k8s.io/initial-events-end": "true"});
        }
        let obj = json!({"kind": self.rt.kind, "apiVersion": self.rt.api_version(&self.version), "metadata": meta});
        self.line("BOOKMARK", &obj)
    }
}

/// A watch line: `{"type":KIND,"object":OBJ}` and a newline, the object serialised straight
/// into the bytes (not through `Display`'s formatter).
fn event_bytes(kind: &str, obj: &Value) -> Bytes {
    let mut line = Vec::with_capacity(256);
    line.extend_from_slice(b"{\"type\":\"");
    line.extend_from_slice(kind.as_bytes());
    line.extend_from_slice(b"\",\"object\":");
    // Serialising a `Value` into a Vec cannot fail.
    let _ = serde_json::to_writer(&mut line, obj);
    line.extend_from_slice(b"}\n");
    Bytes::from(line)
}

type Tx = mpsc::Sender<Result<Bytes, Infallible>>;

/// Starts a watch and answers with its streaming body.
pub fn start(cluster: Arc<Cluster>, req: WatchRequest) -> Response {
    let (mut tx, rx) = mpsc::channel::<Result<Bytes, Infallible>>(1024);
    tokio::spawn(async move {
        // The receiver hung up or the stream ended: either way there is nothing to report.
        let _ = run(&cluster, &req, &mut tx).await;
    });
    Response::builder()
        .header("content-type", "application/json")
        .header("transfer-encoding", "chunked")
        .body(Body::from_stream(rx))
        .unwrap_or_default()
}

async fn run(cluster: &Cluster, req: &WatchRequest, tx: &mut Tx) -> Result<(), mpsc::SendError> {
    let key = req.rt.key();
    let mut restarts = cluster.faults.restarts();
    restarts.borrow_and_update();
    let cut = cluster
        .faults
        .config()
        .watch_cut_secs
        .map(Duration::from_secs);
    let limit = match (req.timeout, cut) {
        (Some(a), Some(b)) => Some(a.min(b)),
        (a, b) => a.or(b),
    };
    let deadline = tokio::time::sleep(limit.unwrap_or(Duration::from_secs(3600 * 24 * 365)));
    tokio::pin!(deadline);

    let (mut rx, mut last_rv) = match req.since.filter(|rv| *rv > 0) {
        Some(since) => match cluster.store.watch_from(since) {
            Ok((past, rx)) => {
                for e in &past {
                    if let Some(line) = req.translate(e) {
                        tx.send(Ok(line)).await?;
                    }
                }
                (rx, past.last().map_or(since, |e| e.rv))
            }
            Err(gone) => {
                let line = req.line("ERROR", &gone.status());
                tx.send(Ok(line)).await?;
                return Ok(());
            }
        },
        None => {
            let (items, rv, rx) = cluster.store.snapshot_and_watch(&key);
            for obj in items.iter().filter(|o| req.matches(o)) {
                tx.send(Ok(req.line("ADDED", obj))).await?;
            }
            if req.initial_events && req.bookmarks {
                tx.send(Ok(req.bookmark(rv, true))).await?;
            }
            (rx, rv)
        }
    };

    let mut ticker = tokio::time::interval(req.bookmark_every);
    ticker.tick().await;
    loop {
        tokio::select! {
            ev = rx.recv() => match ev {
                Ok(e) => {
                    last_rv = e.rv;
                    if let Some(line) = req.translate(&e) {
                        tx.send(Ok(line)).await?;
                    }
                }
                // Too slow a reader: end the stream; the client resumes from its last version.
                Err(RecvError::Lagged(_)) | Err(RecvError::Closed) => return Ok(()),
            },
            _ = ticker.tick(), if req.bookmarks => {
                tx.send(Ok(req.bookmark(last_rv, false))).await?;
            }
            _ = &mut deadline => return Ok(()),
            _ = restarts.changed() => return Ok(()),
        }
    }
}
