//! One kube-runtime controller per parent kind, over dynamic objects, started and stopped as
//! WasmPlugins come and go. Each observes the parent kind and, through watch caches, every kind
//! its plugins produce or read (objects labelled with a parent's uid).

use std::{
    collections::{BTreeSet, HashMap},
    sync::Arc,
    time::Duration,
};

use futures::StreamExt;
use kube::{
    Api, ResourceExt,
    api::DynamicObject,
    discovery::ApiResource,
    runtime::{
        Controller, WatchStreamExt,
        controller::Config as ControllerConfig,
        reflector::{self, Store},
        watcher,
    },
};

use tokio_util::task::AbortOnDropHandle;

use super::{
    context::KindCtx,
    error::DiscoveryError,
    gate::{AGE_LIMIT, Gate},
    index::{self, Cache, ChildIndex},
    parent,
    plan::PARENT_UID_LABEL,
    queue::Queue,
    remembered::Remembered,
    shared::Shared,
};
use crate::crd::ParentKind;

/// Keeps one controller running per parent kind with a pipeline, until aborted.
pub async fn run(shared: Arc<Shared>) {
    let mut changes = shared.registry.subscribe();
    // Aborted on drop, so that this task being aborted (the lease lost, shutdown) stops every
    // controller and every watch feeding one, all in the same step.
    let mut running: HashMap<String, (BTreeSet<String>, Running)> = HashMap::new();
    loop {
        let wanted = shared.registry.kinds();
        running.retain(|kind, (observed, Running { task, .. })| {
            let keep = wanted
                .get(kind)
                .is_some_and(|plan| plan.observed == *observed)
                && !task.is_finished();
            if !keep {
                tracing::info!(kind, "stopping the controller of this kind");
                task.abort();
                // Nothing of this kind waits any more (a restarted controller counts anew).
                shared.metrics.queue_of(kind).depth.set(0);
            }
            keep
        });
        let mut retry = false;
        for (kind, plan) in &wanted {
            if running.contains_key(kind) {
                continue;
            }
            match start(shared.clone(), plan.parent.clone(), &plan.observed).await {
                Ok(started) => {
                    tracing::info!(kind, observed = ?plan.observed, "started the controller of this kind");
                    running.insert(kind.clone(), (plan.observed.clone(), started));
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

/// A watch feeding a controller: its events as triggers, and the task draining the watch.
type Triggers = futures::stream::BoxStream<'static, Result<DynamicObject, watcher::Error>>;

/// A running controller of one kind, and the tasks draining its watches: dropped, all are
/// aborted at once. (Were the watches owned by the controller's task, they would be aborted
/// only once that task's cancellation ran: a moment in which a host stopping with its API
/// server, as `windlass dev` does, saw each watch fail and retry and logged it.)
struct Running {
    task: AbortOnDropHandle<()>,
    _feeders: Vec<AbortOnDropHandle<()>>,
}

/// Starts the controller of one parent kind: a cache per observed kind, the parents' watch,
/// and the controller over them, all stopped together when the returned [`Running`] goes.
async fn start(
    shared: Arc<Shared>,
    parent: ParentKind,
    observed: &BTreeSet<String>,
) -> Result<Running, DiscoveryError> {
    let key = parent.key();
    let (resource, namespaced) = shared.discovery.resolve(&key).await?;
    shared
        .metrics
        .controller_started(&key, shared.settings.concurrency);
    let (gate, woken) = Gate::new(usize::from(shared.settings.concurrency), AGE_LIMIT);
    let queue = Arc::new(Queue::new(shared.metrics.queue_of(&key), gate));
    let mut caches = Vec::new();
    let mut children = Vec::new();
    let mut feeders = Vec::new();
    for kind in observed {
        let (ar, _) = shared.discovery.resolve(kind).await?;
        let (cache, triggers, feeder) = watch_children(&shared, &ar, &queue);
        caches.push(cache);
        children.push((ar, triggers));
        feeders.push(AbortOnDropHandle::new(feeder));
    }
    let api: Api<DynamicObject> = Api::all_with(shared.client.clone(), &resource);
    let writer = reflector::store::Writer::new(resource.clone());
    let parents = writer.as_reader();
    let ctx = Arc::new(KindCtx {
        shared: shared.clone(),
        parent,
        resource: resource.clone(),
        namespaced,
        caches: caches.into(),
        remembered: Remembered::new(
            parents.clone(),
            resource.clone(),
            shared.metrics.tracked_of(&key, "parents"),
            shared.metrics.tracked_of(&key, "backoffs"),
            &key,
            shared.metrics.finalize_stuck.clone(),
            shared.runs.clone(),
        ),
        queue: queue.clone(),
    });
    let stream = reflector::reflector(
        writer,
        watcher(api, watcher::Config::default()).modify(index::without_managed_fields),
    )
    .default_backoff();
    let (parent_triggers, feeder) = feed_parents(stream, queue.clone(), Arc::downgrade(&ctx));
    feeders.push(AbortOnDropHandle::new(feeder));
    // A hot swap queues every parent at the gate, which triggers each as its permit comes.
    let swaps = each_change(shared.registry.trigger(&key));
    feeders.push(AbortOnDropHandle::new(tokio::spawn(swaps.for_each(
        move |()| {
            queue.all_changed();
            async {}
        },
    ))));
    let mut controller = Controller::for_stream_with(parent_triggers, parents, resource)
        // Unbounded: each reconcile enters the gate for one of the kind's `concurrency`
        // permits, which orders them, and returns if it has to wait (see `gate`).
        .with_config(ControllerConfig::default().concurrency(0))
        .reconcile_on(permits_held(woken, Arc::downgrade(&ctx)));
    for (ar, triggers) in children {
        let ctx = ctx.clone();
        controller = controller.watches_stream_with(
            triggers,
            move |child: DynamicObject| {
                let uid = child.labels().get(PARENT_UID_LABEL)?;
                ctx.remembered.parent(uid)
            },
            ar,
        );
    }
    let caches: Vec<_> = ctx.caches.iter().map(|c| c.store.clone()).collect();
    let observed = observed.clone();
    let task = tokio::spawn(async move {
        wait_for_caches(&caches).await;
        // From now on a canary of the kind's plugins reads children where its reconciles do.
        ctx.shared
            .listed
            .listed(&ctx.parent.key(), observed, &ctx.caches);
        controller
            .run(parent::reconcile, parent::error_policy, ctx)
            .for_each(|result| async move {
                if let Err(e) = result {
                    tracing::debug!(error = %e, "reconcile");
                }
            })
            .await;
    });
    Ok(Running {
        task: AbortOnDropHandle::new(task),
        _feeders: feeders,
    })
}

/// The cache of one observed kind (objects carrying a parent uid label), with its child index.
///
/// The cache is driven by a task of its own, not by the controller: the controller stops
/// polling its triggers while `concurrency` reconciles run, and reconciles wait for the caches
/// to be ready, so a cache fed only through the controller could stall a fresh start with many
/// parents. The task keeps the child index and forwards each touched object (applied, listed or
/// deleted) to the controller as a trigger — but not while the parent's reconcile waits at the
/// gate (see `parent_event`).
fn watch_children(
    shared: &Shared,
    ar: &ApiResource,
    queue: &Arc<Queue>,
) -> (Cache, Triggers, tokio::task::JoinHandle<()>) {
    let api: Api<DynamicObject> = Api::all_with(shared.client.clone(), ar);
    let writer = reflector::store::Writer::new(ar.clone());
    let store = writer.as_reader();
    let stream = reflector::reflector(
        writer,
        watcher(api, watcher::Config::default().labels(PARENT_UID_LABEL))
            .modify(index::without_managed_fields),
    )
    .default_backoff();
    let index = Arc::new(ChildIndex::default());
    let (tx, rx) = tokio::sync::mpsc::unbounded_channel::<DynamicObject>();
    let feeder_index = index.clone();
    let queue = queue.clone();
    let feeder = tokio::spawn(async move {
        let mut stream = std::pin::pin!(stream);
        while let Some(event) = stream.next().await {
            let Ok(event) = event else { continue };
            feeder_index.apply(&event);
            let (touched, listed) = match event {
                watcher::Event::Apply(o) | watcher::Event::Delete(o) => (o, false),
                watcher::Event::InitApply(o) => (o, true),
                watcher::Event::Init | watcher::Event::InitDone => continue,
            };
            if let Some(uid) = touched.labels().get(PARENT_UID_LABEL) {
                queue.child_changed(uid);
                // Its parent's reconcile waits at the gate and reads the caches only once let
                // through, after this change reached them: a trigger would only make one more.
                // Not for a relist's objects: the cache takes them only at `InitDone`.
                if !listed && queue.gate.is_waiting(uid) {
                    continue;
                }
            }
            if tx.send(trigger_of(&touched)).is_err() {
                return;
            }
        }
    });
    let triggers = futures::stream::unfold(rx, |mut rx| async move {
        rx.recv().await.map(|o| (Ok::<_, watcher::Error>(o), rx))
    })
    .boxed();
    let cache = Cache {
        resource: ar.clone(),
        store,
        index,
    };
    (cache, triggers, feeder)
}

/// What a trigger carries to the controller: the object's reference and its labels, all that
/// kube-runtime and the mapper to the parent read. Not the whole object: a trigger waits in an
/// unbounded channel until the controller takes it, and after a relist there is one for every
/// object of the kind — the whole objects were a second copy of the cache.
fn trigger_of(object: &DynamicObject) -> DynamicObject {
    let meta = &object.metadata;
    DynamicObject {
        types: object.types.clone(),
        metadata: kube::api::ObjectMeta {
            name: meta.name.clone(),
            namespace: meta.namespace.clone(),
            uid: meta.uid.clone(),
            resource_version: meta.resource_version.clone(),
            labels: meta.labels.as_ref().map(|labels| {
                labels
                    .iter()
                    .filter(|(k, _)| k.as_str() == PARENT_UID_LABEL)
                    .map(|(k, v)| (k.clone(), v.clone()))
                    .collect()
            }),
            ..Default::default()
        },
        data: serde_json::Value::Null,
    }
}

/// Drains the parents' watch in a task of its own, like the children's, so that the queue
/// depth counts a change when it arrives, not when the controller gets round to it; forgets
/// what the host remembers of a deleted parent. `ctx` is weak: the controller task owns the
/// context, and this task must not keep it alive.
fn feed_parents(
    stream: impl futures::Stream<Item = Result<watcher::Event<DynamicObject>, watcher::Error>>
    + Send
    + 'static,
    queue: Arc<Queue>,
    ctx: std::sync::Weak<KindCtx>,
) -> (Triggers, tokio::task::JoinHandle<()>) {
    let (tx, rx) = tokio::sync::mpsc::unbounded_channel::<Result<DynamicObject, watcher::Error>>();
    let feeder = tokio::spawn(async move {
        let mut stream = std::pin::pin!(stream);
        while let Some(event) = stream.next().await {
            let trigger = match event {
                Ok(event) => match parent_event(event, &queue, &ctx) {
                    Some(parent) => Ok(trigger_of(&parent)),
                    None => continue,
                },
                // Passed on for the controller to report, as its own watch did.
                Err(e) => Err(e),
            };
            if tx.send(trigger).is_err() {
                return;
            }
        }
    });
    let triggers =
        futures::stream::unfold(rx, |mut rx| async move { rx.recv().await.map(|o| (o, rx)) })
            .boxed();
    (triggers, feeder)
}

/// Accounts for one event of the parents' watch; the parent to reconcile, if any.
fn parent_event(
    event: watcher::Event<DynamicObject>,
    queue: &Queue,
    ctx: &std::sync::Weak<KindCtx>,
) -> Option<DynamicObject> {
    match event {
        // A parent whose reconcile waits at the gate gets no trigger for a change: that
        // reconcile reads the parent from the store once let through, after this event reached
        // it (the reflector writes the store before it yields the event), so the trigger would
        // only queue one more reconcile behind it. A relist's objects are triggered always: the
        // store takes them only at `InitDone`, and a reconcile let through before that would
        // read the old listing. Triggers for parents already waiting made kube-runtime's
        // scheduler hold one message per waiting parent, which it scans on every poll, and fed
        // its last-in-first-out queue of due messages faster than it was drained.
        watcher::Event::Apply(o) => {
            let uid = o.uid().unwrap_or_default();
            queue.parent_changed(&uid, o.metadata.generation);
            (!queue.gate.is_waiting(&uid)).then_some(o)
        }
        watcher::Event::InitApply(o) => {
            queue.parent_listed(&o.uid().unwrap_or_default());
            Some(o)
        }
        watcher::Event::Delete(o) => {
            let uid = o.uid().unwrap_or_default();
            queue.parent_deleted(&uid);
            if let Some(ctx) = ctx.upgrade() {
                ctx.remembered.forget(&uid);
                // Its rate-limit buckets too (a parent deleted without a finalize phase never
                // reached the forget at its end).
                ctx.shared.reconciles.forget_parent(&uid);
                ctx.shared.events.forget_parent(&uid);
            }
            None
        }
        watcher::Event::Init => {
            queue.relist_started();
            None
        }
        watcher::Event::InitDone => {
            queue.relist_done();
            if let Some(ctx) = ctx.upgrade() {
                ctx.remembered.keep_listed();
            }
            None
        }
    }
}

/// Waits, as the only waiter, until every cache has listed once; reconciles start only then.
///
/// # Why
/// kube-runtime 5.0.0's `Store::wait_until_ready` keeps one waker: of several tasks waiting at
/// once, only the one that polled last is woken when the cache is ready, and the others wait
/// forever. With `concurrency` reconciles all waiting on a fresh cache (a restart with many
/// parents), that stalled all of them but one. Once this single wait has returned, the store
/// remembers it is ready and every later `wait_until_ready` returns at once.
async fn wait_for_caches(caches: &[Store<DynamicObject>]) {
    for store in caches {
        // An error means the writer is gone: the controller is being stopped anyway.
        let _ = store.wait_until_ready().await;
    }
}

/// Yields `()` each time the watched value changes after now.
/// The parents the gate holds a permit for, as triggers: each one's next reconcile claims it.
/// A parent no longer known (deleted meanwhile) leaves the gate instead, its permit going on.
fn permits_held(
    woken: tokio::sync::mpsc::UnboundedReceiver<String>,
    ctx: std::sync::Weak<KindCtx>,
) -> impl futures::Stream<Item = kube::runtime::reflector::ObjectRef<DynamicObject>> + Send {
    futures::stream::unfold((woken, ctx), |(mut woken, ctx)| async move {
        loop {
            let uid = woken.recv().await?;
            let ctx_now = ctx.upgrade()?;
            match ctx_now.remembered.parent(&uid) {
                Some(parent) => return Some((parent, (woken, ctx))),
                None => ctx_now.queue.gate.forget(&uid),
            }
        }
    })
}

fn each_change(
    mut rx: tokio::sync::watch::Receiver<u64>,
) -> impl futures::Stream<Item = ()> + Send {
    rx.mark_unchanged();
    futures::stream::unfold(rx, |mut rx| async move {
        rx.changed().await.ok()?;
        Some(((), rx))
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_trigger_carries_the_reference_and_parent_label_and_the_caches_no_managed_fields() {
        let mut child: DynamicObject = serde_json::from_value(serde_json::json!({
            "apiVersion": "apps/v1", "kind": "StatefulSet",
            "metadata": {
                "name": "db", "namespace": "shop", "uid": "u-1", "resourceVersion": "7",
                "labels": {PARENT_UID_LABEL: "p-1", "app": "db"},
                "annotations": {"a": "b"},
                "managedFields": [{"manager": "windlass/p-1", "operation": "Apply",
                                   "fieldsV1": {"f:spec": {"f:replicas": {}}}}],
            },
            "spec": {"replicas": 1},
        }))
        .unwrap();
        let trigger = trigger_of(&child);
        let ar = ApiResource::erase::<k8s_openapi::api::apps::v1::StatefulSet>(&());
        // What kube-runtime makes of it, and what the mapper reads, are the child's.
        assert_eq!(
            kube::runtime::reflector::ObjectRef::from_obj_with(&trigger, ar.clone()),
            kube::runtime::reflector::ObjectRef::from_obj_with(&child, ar)
        );
        assert_eq!(
            trigger.labels().get(PARENT_UID_LABEL).map(String::as_str),
            Some("p-1")
        );
        assert_eq!(trigger.uid().as_deref(), Some("u-1"));
        // Nothing else: no second copy of the object.
        assert_eq!(trigger.labels().len(), 1);
        assert!(trigger.metadata.annotations.is_none());
        assert!(trigger.metadata.managed_fields.is_none());
        assert!(trigger.data.is_null());

        index::without_managed_fields(&mut child);
        let json = serde_json::to_value(&child).unwrap();
        assert!(json.pointer("/metadata/managedFields").is_none(), "{json}");
        assert_eq!(json["spec"]["replicas"], 1);
        assert_eq!(json["metadata"]["labels"]["app"], "db");
    }

    #[tokio::test]
    async fn dropping_a_controllers_handle_stops_its_task() {
        let (tx, mut rx) = tokio::sync::mpsc::channel::<()>(1);
        let task = AbortOnDropHandle::new(tokio::spawn(async move {
            // Holds the sender until stopped.
            let _tx = tx;
            std::future::pending::<()>().await;
        }));
        drop(task);
        // The sender is dropped only if the task was stopped.
        assert!(
            tokio::time::timeout(Duration::from_secs(5), rx.recv())
                .await
                .is_ok_and(|v| v.is_none()),
            "the task still runs"
        );
    }

    fn store() -> (
        reflector::store::Writer<DynamicObject>,
        Store<DynamicObject>,
    ) {
        let ar = ApiResource::erase::<k8s_openapi::api::core::v1::ConfigMap>(&());
        let writer = reflector::store::Writer::new(ar);
        let reader = writer.as_reader();
        (writer, reader)
    }

    /// How many of `n` tasks that all wait on `store` at once are woken when it becomes ready.
    /// (A waiter that is not woken is only polled again by its timeout, which then finds the
    /// store ready: so what counts is finishing well before the timeout.)
    async fn woken(
        n: usize,
        store: &Store<DynamicObject>,
        writer: &mut reflector::store::Writer<DynamicObject>,
    ) -> usize {
        let waiters: Vec<_> = (0..n)
            .map(|_| {
                let store = store.clone();
                tokio::spawn(async move {
                    let _ = tokio::time::timeout(Duration::from_secs(3), store.wait_until_ready())
                        .await;
                    std::time::Instant::now()
                })
            })
            .collect();
        // Let every waiter register before the store becomes ready.
        tokio::time::sleep(Duration::from_millis(100)).await;
        let ready_at = std::time::Instant::now();
        writer.apply_watcher_event(&watcher::Event::Init);
        writer.apply_watcher_event(&watcher::Event::InitDone);
        let mut woken = 0;
        for w in waiters {
            let done = w.await.expect("waiter");
            woken += usize::from(done.duration_since(ready_at) < Duration::from_secs(1));
        }
        woken
    }

    /// The reason for `wait_for_caches`. When this fails, kube-runtime wakes every waiter and
    /// the workaround may go.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn kube_wakes_only_one_of_several_tasks_waiting_for_a_store_at_once() {
        let (mut writer, store) = store();
        assert_eq!(woken(8, &store, &mut writer).await, 1);
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn after_wait_for_caches_every_waiter_goes_through() {
        let (mut writer, store) = store();
        let single = tokio::spawn({
            let store = store.clone();
            async move { wait_for_caches(&[store]).await }
        });
        tokio::time::sleep(Duration::from_millis(50)).await;
        writer.apply_watcher_event(&watcher::Event::Init);
        writer.apply_watcher_event(&watcher::Event::InitDone);
        tokio::time::timeout(Duration::from_secs(2), single)
            .await
            .expect("the single waiter is woken")
            .expect("task");
        let started = std::time::Instant::now();
        let waiters: Vec<_> = (0..8)
            .map(|_| {
                let store = store.clone();
                tokio::spawn(async move {
                    let _ = tokio::time::timeout(Duration::from_secs(3), store.wait_until_ready())
                        .await;
                })
            })
            .collect();
        for w in waiters {
            w.await.expect("task");
        }
        assert!(
            started.elapsed() < Duration::from_secs(1),
            "a reconcile would have waited forever"
        );
    }
}
