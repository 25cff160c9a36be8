//! One kube-runtime controller per parent kind, over dynamic objects, started and stopped as
//! WasmPlugins come and go. Each observes the parent kind and, through watch caches, every kind
//! its plugins produce or read (objects labelled with a parent's uid).

use std::{
    collections::{BTreeSet, HashMap},
    sync::{Arc, Mutex},
    time::Duration,
};

use futures::StreamExt;
use kube::{
    Api,
    api::DynamicObject,
    discovery::ApiResource,
    runtime::{
        Controller, WatchStreamExt,
        controller::Config as ControllerConfig,
        reflector::{self, ObjectRef, Store},
        watcher,
    },
};

use super::{Error, Shared, apply::PARENT_UID_LABEL, parent};
use crate::crd::ParentKind;

/// What a parent kind's reconciles share.
pub struct KindCtx {
    /// Everything.
    pub shared: Arc<Shared>,
    /// The parent kind.
    pub parent: ParentKind,
    /// The parent resource.
    pub resource: ApiResource,
    /// Whether parents are namespaced.
    pub namespaced: bool,
    /// Watch caches of observed kinds: (kind key, resource, store).
    pub caches: Vec<(String, ApiResource, Store<DynamicObject>)>,
    /// Parent uid → reference, so that a child's uid label finds its parent.
    pub parents: Mutex<HashMap<String, ObjectRef<DynamicObject>>>,
    /// Consecutive failures per parent uid, for backoff.
    pub failures: Mutex<HashMap<String, u32>>,
}

impl std::fmt::Debug for KindCtx {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("KindCtx")
            .field("parent", &self.parent)
            .finish_non_exhaustive()
    }
}

/// Keeps one controller running per parent kind with a pipeline, until aborted.
pub async fn run(shared: Arc<Shared>) {
    let mut changes = shared.registry.subscribe();
    let mut running: HashMap<String, (BTreeSet<String>, tokio::task::JoinHandle<()>)> =
        HashMap::new();
    loop {
        let wanted = shared.registry.kinds();
        running.retain(|kind, (observed, task)| {
            let keep = wanted
                .get(kind)
                .is_some_and(|plan| plan.observed == *observed)
                && !task.is_finished();
            if !keep {
                tracing::info!(kind, "stopping the controller of this kind");
                task.abort();
            }
            keep
        });
        let mut retry = false;
        for (kind, plan) in &wanted {
            if running.contains_key(kind) {
                continue;
            }
            match start(shared.clone(), plan.parent.clone(), &plan.observed).await {
                Ok(task) => {
                    tracing::info!(kind, observed = ?plan.observed, "started the controller of this kind");
                    running.insert(kind.clone(), (plan.observed.clone(), task));
                }
                Err(e) => {
                    tracing::warn!(kind, error = %e, "cannot start the controller of this kind yet");
                    shared.discovery.forget(kind);
                    retry = true;
                }
            }
        }
        tokio::select! {
            changed = changes.changed() => if changed.is_err() { return },
            () = tokio::time::sleep(Duration::from_secs(if retry { 3 } else { 3600 })) => {},
        }
    }
}

/// Starts the controller of one parent kind.
async fn start(
    shared: Arc<Shared>,
    parent: ParentKind,
    observed: &BTreeSet<String>,
) -> Result<tokio::task::JoinHandle<()>, Error> {
    let key = parent.key();
    let (resource, namespaced) = shared.discovery.resolve(&key).await?;
    let client = shared.client.clone();
    let mut caches = Vec::new();
    let mut streams = Vec::new();
    let mut feeders = Vec::new();
    for kind in observed {
        let (ar, _) = shared.discovery.resolve(kind).await?;
        let api: Api<DynamicObject> = Api::all_with(client.clone(), &ar);
        let writer = reflector::store::Writer::new(ar.clone());
        let reader = writer.as_reader();
        let stream = reflector::reflector(
            writer,
            watcher(api, watcher::Config::default().labels(PARENT_UID_LABEL)),
        )
        .default_backoff()
        .applied_objects();
        // The cache is driven by a task of its own, not by the controller: the controller stops
        // polling its triggers while `concurrency` reconciles run, and reconciles wait for the
        // caches to be ready, so a cache fed only through the controller could stall a fresh
        // start with many parents. The task forwards each change to the controller as a trigger.
        let (tx, rx) = tokio::sync::mpsc::unbounded_channel::<DynamicObject>();
        feeders.push(tokio::spawn(async move {
            let mut stream = std::pin::pin!(stream);
            while let Some(event) = stream.next().await {
                if let Ok(object) = event
                    && tx.send(object).is_err()
                {
                    return;
                }
            }
        }));
        let triggers = futures::stream::unfold(rx, |mut rx| async move {
            rx.recv().await.map(|o| (Ok::<_, watcher::Error>(o), rx))
        });
        caches.push((kind.clone(), ar.clone(), reader));
        streams.push((ar, triggers));
    }
    let ctx = Arc::new(KindCtx {
        shared: shared.clone(),
        parent,
        resource: resource.clone(),
        namespaced,
        caches,
        parents: Mutex::new(HashMap::new()),
        failures: Mutex::new(HashMap::new()),
    });
    let api: Api<DynamicObject> = Api::all_with(client, &resource);
    let mut controller = Controller::new_with(api, watcher::Config::default(), resource.clone())
        .with_config(ControllerConfig::default().concurrency(shared.settings.concurrency))
        .reconcile_all_on(each_change(shared.registry.trigger(&key)));
    for (ar, stream) in streams {
        let ctx = ctx.clone();
        controller = controller.watches_stream_with(
            stream,
            move |child: DynamicObject| {
                let uid = child
                    .metadata
                    .labels
                    .as_ref()
                    .and_then(|l| l.get(PARENT_UID_LABEL))
                    .cloned();
                uid.and_then(|uid| {
                    ctx.parents
                        .lock()
                        .unwrap_or_else(|e| e.into_inner())
                        .get(&uid)
                        .cloned()
                })
            },
            ar,
        );
    }
    let feeders = AbortOnDrop(feeders);
    let task = tokio::spawn(async move {
        // Stopping the controller (aborting this task) stops its caches too.
        let _feeders = feeders;
        controller
            .run(parent::reconcile, parent::error_policy, ctx)
            .for_each(|result| async move {
                if let Err(e) = result {
                    tracing::debug!(error = %e, "reconcile");
                }
            })
            .await;
    });
    Ok(task)
}

/// Aborts the tasks it holds when dropped.
struct AbortOnDrop(Vec<tokio::task::JoinHandle<()>>);

impl Drop for AbortOnDrop {
    fn drop(&mut self) {
        for task in &self.0 {
            task.abort();
        }
    }
}

/// Yields `()` each time the watched value changes after now.
fn each_change(
    mut rx: tokio::sync::watch::Receiver<u64>,
) -> impl futures::Stream<Item = ()> + Send {
    rx.mark_unchanged();
    futures::stream::unfold(rx, |mut rx| async move {
        rx.changed().await.ok()?;
        Some(((), rx))
    })
}
