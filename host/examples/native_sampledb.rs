//! The SampleDB storage logic compiled into a plain kube-runtime controller: the native
//! baseline of the host benchmark (`cargo xtask bench host`).
//!
//! It does what `windlass run` does for a SampleDB with the storage plugin, minus the sandbox
//! and the plugin machinery, so that the benchmark's ratios price exactly those:
//!
//! - one `Controller<DynamicObject>` over SampleDB with the host's default concurrency (16);
//! - the kinds the storage plugin produces (StatefulSets, Services, ConfigMaps, Secrets, Jobs)
//!   labelled `windlass.dev/parent-uid` through reflectors that both
//!   cache and trigger the parent (`watches_stream_with`), as `controller/kinds.rs` does, and
//!   the host's own `controller::index::ChildIndex` to find a parent's children in them;
//! - the storage decision run natively (`run_json`, what the wasm export runs), on the parent
//!   and its observed children as JSON;
//! - every desired object server-side applied, decorated by the host's own
//!   `controller::plan::decorate` (owner reference, labels, provenance annotation), unless it
//!   would change nothing (below);
//! - the status subresource merge-patched by the host's own `controller::status::after_success`
//!   (fragment, observedGeneration, the `Reconciled` condition), unless it would change nothing.
//!
//! # Differences from the host
//! No policy check of the plugin's output, no pruning, no finalizer, no events, no metrics, no
//! WasmPlugin watch, and no plugin-reported conditions (`run_json` returns the desired set and
//! the status fragment only, so `StorageReady` is not written). Each of these costs the host
//! something; the benchmark counts them as the host's overhead.
//!
//! # The same no-op write skipping
//! Like the host, it sends no apply and no status patch that would change nothing: each
//! decorated object is stamped (`controller::plan::stamp`) and skipped when the cached child
//! holds the same stamp and every value (`plan::up_to_date`), and the status patch is skipped
//! when merging it into the parent changes nothing (`plan::merge_is_noop`). Without this the
//! controller re-sends five applies and a status patch for every reconcile its own children
//! trigger, and the comparison would measure those writes rather than the sandbox.
//!
//! `native_sampledb [--kubeconfig FILE] [--concurrency N]`; without `--kubeconfig`, $KUBECONFIG.

use std::{
    collections::HashMap,
    path::PathBuf,
    sync::{Arc, Mutex},
    time::Duration,
};

use anyhow::Context as _;
use clap::Parser;
use futures::StreamExt;
use k8s_openapi::api::{
    apps::v1::StatefulSet,
    batch::v1::Job,
    core::v1::{ConfigMap, Secret, Service},
};
use kube::{
    Api, Client, ResourceExt,
    api::{DynamicObject, Patch, PatchParams},
    core::{GroupVersionKind, TypeMeta},
    discovery::ApiResource,
    runtime::{
        Controller, WatchStreamExt,
        controller::{Action, Config as ControllerConfig},
        reflector::{self, ObjectRef, Store},
        watcher,
    },
};
use sampledb_storage::Storage;
use serde_json::Value;
use windlass::{
    controller::{
        index::ChildIndex,
        plan::{self, FIELD_MANAGER, PARENT_UID_LABEL, ParentRef},
        status,
    },
    pipeline::{Desired, Outcome},
    policy::{Checked, kind_of},
};
use windlass_sdk::testing::run_json;

/// A native SampleDB controller running the storage plugin's logic.
#[derive(Debug, Parser)]
struct Args {
    /// A kubeconfig file; default: $KUBECONFIG.
    #[arg(long, env = "KUBECONFIG")]
    kubeconfig: PathBuf,
    /// Parents reconciled at once (the host's default is 16).
    #[arg(long, default_value_t = 16)]
    concurrency: u16,
}

/// Why a reconcile failed.
#[derive(Debug, thiserror::Error)]
enum Error {
    /// The storage logic refused the parent.
    #[error("storage: {0}")]
    Plugin(String),
    /// A desired object or the parent is not the JSON expected.
    #[error("json: {0}")]
    Json(#[from] serde_json::Error),
    /// An API call failed.
    #[error("kubernetes API: {0}")]
    Kube(#[from] kube::Error),
}

/// What reconciles share.
struct Ctx {
    client: Client,
    sampledb: ApiResource,
    /// Watch caches of the children: (resource, store, the host's child index).
    children: Vec<(ApiResource, Store<DynamicObject>, Arc<ChildIndex>)>,
    /// Parent uid → reference, so that a child's uid label finds its parent.
    parents: Mutex<HashMap<String, ObjectRef<DynamicObject>>>,
    /// True once every child cache has listed (see [`wait_for_caches`]).
    ready: tokio::sync::watch::Receiver<bool>,
}

/// Waits, as the only waiter, until every child cache has listed once, then says so on
/// `ready`, as the host does (`controller/kinds.rs`): kube-runtime 5.0.0's
/// `Store::wait_until_ready` wakes only one of several waiting tasks, so reconciles waiting on
/// it themselves would stall, all but one, when they start before the caches are filled.
async fn wait_for_caches(
    stores: Vec<Store<DynamicObject>>,
    ready: tokio::sync::watch::Sender<bool>,
) {
    for store in stores {
        let _ = store.wait_until_ready().await;
    }
    let _ = ready.send(true);
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let args = Args::parse();
    windlass::source::install_crypto_provider();
    let kubeconfig = kube::config::Kubeconfig::read_from(&args.kubeconfig)
        .with_context(|| format!("reading kubeconfig {}", args.kubeconfig.display()))?;
    let config = kube::Config::from_custom_kubeconfig(kubeconfig, &Default::default()).await?;
    let client = Client::try_from(config)?;
    let sampledb = ApiResource::from_gvk_with_plural(
        &GroupVersionKind::gvk("samples.windlass.dev", "v1alpha1", "SampleDB"),
        "sampledbs",
    );
    let mut children = Vec::new();
    let mut streams = Vec::new();
    // Every kind the storage plugin produces (its `info().child_kinds`), as the host watches.
    for ar in [
        ApiResource::erase::<StatefulSet>(&()),
        ApiResource::erase::<Service>(&()),
        ApiResource::erase::<ConfigMap>(&()),
        ApiResource::erase::<Secret>(&()),
        ApiResource::erase::<Job>(&()),
    ] {
        let api: Api<DynamicObject> = Api::all_with(client.clone(), &ar);
        let writer = reflector::store::Writer::new(ar.clone());
        let index = Arc::new(ChildIndex::default());
        children.push((ar.clone(), writer.as_reader(), index.clone()));
        let stream = reflector::reflector(
            writer,
            watcher(api, watcher::Config::default().labels(PARENT_UID_LABEL)),
        )
        .default_backoff()
        .inspect(move |event| {
            if let Ok(event) = event {
                index.apply(event);
            }
        })
        .applied_objects();
        streams.push((ar, stream));
    }
    let (ready_tx, ready) = tokio::sync::watch::channel(false);
    tokio::spawn(wait_for_caches(
        children.iter().map(|(_, store, _)| store.clone()).collect(),
        ready_tx,
    ));
    let ctx = Arc::new(Ctx {
        client: client.clone(),
        sampledb: sampledb.clone(),
        children,
        parents: Mutex::new(HashMap::new()),
        ready,
    });
    let api: Api<DynamicObject> = Api::all_with(client, &sampledb);
    let mut controller = Controller::new_with(api, watcher::Config::default(), sampledb)
        .with_config(ControllerConfig::default().concurrency(args.concurrency));
    for (ar, stream) in streams {
        let ctx = ctx.clone();
        controller = controller.watches_stream_with(
            stream,
            move |child: DynamicObject| {
                let uid = child.labels().get(PARENT_UID_LABEL)?.clone();
                ctx.parents
                    .lock()
                    .unwrap_or_else(|e| e.into_inner())
                    .get(&uid)
                    .cloned()
            },
            ar,
        );
    }
    eprintln!("native_sampledb: running");
    controller
        .shutdown_on_signal()
        .run(reconcile, error_policy, ctx)
        .for_each(|result| async move {
            if let Err(e) = result {
                eprintln!("reconcile: {e}");
            }
        })
        .await;
    Ok(())
}

async fn reconcile(obj: Arc<DynamicObject>, ctx: Arc<Ctx>) -> Result<Action, Error> {
    let uid = obj.uid().unwrap_or_default();
    ctx.parents
        .lock()
        .unwrap_or_else(|e| e.into_inner())
        .insert(
            uid.clone(),
            ObjectRef::from_obj_with(obj.as_ref(), ctx.sampledb.clone()),
        );
    if obj.metadata.deletion_timestamp.is_some() {
        return Ok(Action::await_change());
    }
    let namespace = obj.namespace().unwrap_or_default();
    let mut parent = (*obj).clone();
    parent.types = Some(TypeMeta {
        api_version: ctx.sampledb.api_version.clone(),
        kind: ctx.sampledb.kind.clone(),
    });
    let parent = serde_json::to_value(&parent)?;
    let observed = observe(&ctx, &uid, &namespace).await?;
    let texts: Vec<String> = observed.iter().map(Value::to_string).collect();
    let now = now();
    let (desired, fragment) = run_json::<Storage>(
        windlass_sdk::Phase::Reconcile,
        &parent.to_string(),
        &texts,
        &[],
        "{}",
        &now,
    )
    .map_err(|e| Error::Plugin(e.to_string()))?;

    let parent_ref = ParentRef {
        api_version: ctx.sampledb.api_version.clone(),
        kind: ctx.sampledb.kind.clone(),
        name: obj.name_any(),
        uid,
        namespace: Some(namespace.clone()),
        adopts_retained: false,
    };
    let mut outcome = Outcome::default();
    for text in desired {
        let mut object: Value = serde_json::from_str(&text)?;
        // The host's policy fills in the parent's namespace; the storage plugin names none.
        object["metadata"]["namespace"] = Value::String(namespace.clone());
        let name = object["metadata"]["name"]
            .as_str()
            .unwrap_or_default()
            .to_string();
        outcome.desired.push(Desired {
            object: Checked {
                kind: kind_of(&object),
                namespace: Some(namespace.clone()),
                name,
                object,
            },
            plugin: "sampledb-storage".into(),
            digest: "native".into(),
        });
    }
    if let Some(fragment) = fragment
        && let Value::Object(map) = serde_json::from_str(&fragment)?
    {
        outcome.status = map;
    }
    let params = PatchParams::apply(FIELD_MANAGER).force();
    let writes = outcome.desired.iter().filter_map(|desired| {
        let mut object = plan::decorate(desired, &parent_ref, plan::Ownership::Controller);
        plan::stamp(&mut object);
        if plan::up_to_date(&object, &observed) {
            return None;
        }
        let ar = ctx
            .children
            .iter()
            .map(|(ar, _, _)| ar)
            .find(|ar| format!("{}/{}", ar.api_version, ar.kind) == desired.object.kind)
            .cloned()
            .unwrap_or_else(|| ctx.children[0].0.clone());
        let api: Api<DynamicObject> = Api::namespaced_with(ctx.client.clone(), &namespace, &ar);
        let params = params.clone();
        Some(async move {
            api.patch(&desired.object.name, &params, &Patch::Apply(&object))
                .await
        })
    });
    futures::future::try_join_all(writes).await?;
    let patch = status::after_success(&parent, &outcome, &now);
    if !plan::merge_is_noop(&parent, &patch) {
        Api::<DynamicObject>::namespaced_with(ctx.client.clone(), &namespace, &ctx.sampledb)
            .patch_status(
                &obj.name_any(),
                &PatchParams::default(),
                &Patch::Merge(&patch),
            )
            .await?;
    }
    Ok(Action::requeue(Duration::from_secs(600)))
}

/// The parent's children from the watch caches, as JSON.
async fn observe(ctx: &Ctx, uid: &str, namespace: &str) -> Result<Vec<Value>, Error> {
    // As in the host: a reconcile on a half-filled cache could re-create what exists.
    let _ = ctx.ready.clone().wait_for(|ready| *ready).await;
    let mut out = Vec::new();
    for (ar, store, index) in &ctx.children {
        // As in the host: only this parent's children, through the same index.
        for (ns, name) in index.children(uid) {
            if ns != namespace {
                continue;
            }
            let Some(child) = store.get(&ObjectRef::new_with(&name, ar.clone()).within(&ns)) else {
                continue;
            };
            let mut child = (*child).clone();
            child.types = Some(TypeMeta {
                api_version: ar.api_version.clone(),
                kind: ar.kind.clone(),
            });
            out.push(serde_json::to_value(&child)?);
        }
    }
    Ok(out)
}

/// The host's policy on failure: retry soon; the benchmark expects no failures.
fn error_policy(obj: Arc<DynamicObject>, error: &Error, _ctx: Arc<Ctx>) -> Action {
    eprintln!("reconcile {} failed: {error}", obj.name_any());
    Action::requeue(Duration::from_millis(500))
}

fn now() -> String {
    jiff::Timestamp::now()
        .round(jiff::Unit::Second)
        .map(|t| t.to_string())
        .unwrap_or_default()
}
