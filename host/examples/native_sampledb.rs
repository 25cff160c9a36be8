//! The SampleDB plugins' logic compiled into a plain kube-runtime controller: the native
//! baseline of the host benchmark (`cargo xtask bench host`), variant (b).
//!
//! It does what `windlass run` does for a SampleDB with the same plugins, minus the sandbox, the
//! plugin machinery and the host's containment checks, with kube-runtime's scheduler in place
//! of the host's gate (so the converge ratios price the gate too; variant (c) prices the
//! sandbox alone):
//!
//! - one `Controller<DynamicObject>` over SampleDB with the host's default concurrency (16);
//! - every kind the plugins produce or read, labelled `windlass.dev/parent-uid`, through
//!   reflectors that both cache (without `managedFields`) and trigger the parent
//!   (`watches_stream_with`), as `controller/kinds.rs` does, and the host's own
//!   `controller::index::ChildIndex` to find a parent's children in them
//!   (`controller::plan::ours` keeps those of its family);
//! - the plugins' decisions run natively, in pipeline order, each on the request the host would
//!   give its component (`common/sampledb_native.rs`: the Rust plugins compiled in, the Python,
//!   JavaScript and Go ones in processes of their language): the parent, the observed objects
//!   of the kinds it produces or reads, the desired set its predecessors left, its manifest's
//!   config. As in the host, a plugin not granted Secrets sees none and passes the desired
//!   ones on untouched; status fragments are composed in order (`pipeline::merge`), conditions
//!   kept, and the earliest requeue asked for is the requeue;
//! - every desired object claimed, decorated and stamped by the host's own
//!   `controller::plan` (`claim`, `to_apply`: owner reference, labels, provenance; held
//!   without an owner reference while a plugin finalizes and it holds data; labels only on a
//!   Pod its StatefulSet made) and server-side applied with the parent's field manager —
//!   unless it would change nothing (below);
//! - the status subresource merge-patched by the host's own `controller::status::after_success`
//!   (fragment, observedGeneration, the plugins' conditions, `Reconciled`), unless it would
//!   change nothing.
//!
//! By default it runs the storage plugin alone; `--plugin NAME`, repeated in pipeline order,
//! names others (storage, backup, upgrade, primary, conventions, chaos: the whole pipeline).
//!
//! # Differences from the host
//! No policy check of the plugins' output (nor cutting long condition messages), no read of an
//! object before creating it, no checks of the names a StatefulSet or CronJob derives, no
//! traffic check, no uid precondition on forced applies, no per-parent rate limit, a fixed
//! 0.5 s retry instead of a backoff, no two-step apply of RoleBindings, no pruning, no
//! finalizer (so a parent's deletion is not finalized), no events, no metrics, and no
//! WasmPlugin watch: the plugins and their configs are fixed at start. Each of these costs the
//! host something; the benchmark counts them as the host's overhead. Requeues are as the
//! host's: what a plugin asks for, never sooner than 1 s, else 10 minutes.
//!
//! # The same no-op write skipping
//! Like the host, it sends no apply and no status patch that would change nothing: an object
//! is skipped when the cached child holds the same stamp and every value
//! (`plan::up_to_date`), and the status patch when merging it into the parent changes nothing
//! (`plan::merge_is_noop`). Without this the controller re-sends every apply and a status
//! patch for each reconcile its own children trigger, and the comparison would measure those
//! writes rather than the sandbox.
//!
//! `native_sampledb [--kubeconfig FILE] [--concurrency N] [--plugin NAME …] [--debounce-ms MS]
//! [--workers N]`;
//! without `--kubeconfig`, $KUBECONFIG.

use std::{
    collections::HashMap,
    path::PathBuf,
    sync::{
        Arc, Mutex,
        atomic::{AtomicU64, Ordering},
    },
    time::Duration,
};

use anyhow::Context as _;
use clap::Parser;
use futures::StreamExt;
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
use serde_json::Value;
use windlass::{
    contract::{self, Reconciler as _, Request, testing::Native},
    controller::{
        index::{self, ChildIndex},
        plan::{self, PARENT_UID_LABEL, ParentRef},
        status,
    },
    pipeline::{self, Desired, Outcome, Reported},
    policy::{Checked, SECRET, kind_of},
};

#[path = "common/sampledb_native.rs"]
mod sampledb_native;

/// A native SampleDB controller running the SampleDB plugins' logic.
#[derive(Debug, Parser)]
struct Args {
    /// A kubeconfig file; default: $KUBECONFIG.
    #[arg(long, env = "KUBECONFIG")]
    kubeconfig: PathBuf,
    /// Parents reconciled at once (the host's default is 16).
    #[arg(long, default_value_t = 16)]
    concurrency: u16,
    /// A SampleDB plugin whose logic runs, in pipeline order: storage, backup, upgrade,
    /// primary, conventions or chaos. Repeatable; default: storage alone.
    #[arg(long = "plugin", value_name = "NAME", default_values_t = ["storage".to_string()])]
    plugins: Vec<String>,
    /// kube-runtime's trailing-edge debounce of reconcile requests, in milliseconds (its
    /// default, 0, is none): a setting a native controller's author may choose to coalesce
    /// the triggers of its own writes, which the host's gate does instead.
    #[arg(long, default_value_t = 0)]
    debounce_ms: u64,
    /// Processes per plugin that runs in a process of its own (primary, conventions, chaos).
    #[arg(long, default_value_t = 2, value_parser = clap::value_parser!(u16).range(1..))]
    workers: u16,
}

/// Why a reconcile failed.
#[derive(Debug, thiserror::Error)]
enum Error {
    /// A plugin refused the parent or failed.
    #[error("{0}")]
    Plugin(String),
    /// The host's plan does not let the parent write a desired object.
    #[error("{object}: {why}")]
    NotOwned { object: String, why: String },
    /// A desired object of a kind none of the plugins declares.
    #[error("{0}: not a kind the plugins declare")]
    Undeclared(String),
    /// A desired object or the parent is not the JSON expected.
    #[error("json: {0}")]
    Json(#[from] serde_json::Error),
    /// An API call failed.
    #[error("kubernetes API: {0}")]
    Kube(#[from] kube::Error),
}

/// One plugin in the pipeline, with what its manifest gives it.
struct Stage {
    /// The WasmPlugin's name (`sampledb-<name>`).
    name: String,
    plugin: Native,
    /// Its config, as JSON text.
    config: String,
    /// The kinds it produces or reads: what it observes.
    kinds: Vec<String>,
    /// Granted Secrets: it sees desired and observed ones.
    secrets: bool,
}

/// What reconciles share.
struct Ctx {
    client: Client,
    sampledb: ApiResource,
    stages: Vec<Stage>,
    /// A plugin finalizes: objects holding data are held, not owned ([`plan::claim`]).
    finalizing: bool,
    /// Watch caches of the observed kinds: (`group/version/Kind`, resource, store, the host's
    /// child index).
    children: Vec<(String, ApiResource, Store<DynamicObject>, Arc<ChildIndex>)>,
    /// Parent uid → reference, so that a child's uid label finds its parent.
    parents: Mutex<HashMap<String, ObjectRef<DynamicObject>>>,
    /// True once every child cache has listed (see [`wait_for_caches`]).
    ready: tokio::sync::watch::Receiver<bool>,
    /// Reconciles started, written to stderr every second while it grows (the benchmark reads
    /// the last such line when its parents have converged).
    reconciles: AtomicU64,
    /// Reconciles that failed, said with them.
    failed: AtomicU64,
}

/// Says how many reconciles have started, every second while the count grows.
async fn count_reconciles(ctx: Arc<Ctx>) {
    let mut said = 0;
    loop {
        tokio::time::sleep(Duration::from_secs(1)).await;
        let now = ctx.reconciles.load(Ordering::Relaxed);
        if now != said {
            let failed = ctx.failed.load(Ordering::Relaxed);
            eprintln!("native_sampledb: {now} reconciles ({failed} failed)");
            said = now;
        }
    }
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

/// The stages for the plugins named, in that order, each with its manifest's config and
/// whether its manifest grants it Secrets.
fn stages(
    names: &[String],
    workers: u16,
    scratch: &tempfile::TempDir,
) -> anyhow::Result<Vec<Stage>> {
    let mut stages = Vec::new();
    for short in names {
        let name = format!("sampledb-{short}");
        let manifest = windlass::dev::sampledb_manifest(&name)
            .with_context(|| format!("--plugin {short}: no plugins/{name}/wasmplugin.yaml"))?;
        let spec = &manifest["spec"];
        let config = match spec.get("config") {
            Some(config) => config.to_string(),
            None => "{}".to_string(),
        };
        let secrets = spec["grants"]
            .as_array()
            .is_some_and(|g| g.iter().any(|k| k == SECRET));
        let plugin = sampledb_native::sampledb(short, scratch, workers)
            .with_context(|| format!("--plugin {short}"))?;
        let info = plugin.info();
        let kinds = info
            .child_kinds
            .iter()
            .chain(&info.reads_kinds)
            .cloned()
            .collect();
        stages.push(Stage {
            name,
            plugin,
            config,
            kinds,
            secrets,
        });
    }
    Ok(stages)
}

/// `group/version/Kind` (or `version/Kind`) as a GroupVersionKind.
fn gvk(kind: &str) -> Option<GroupVersionKind> {
    let (api_version, kind) = kind.rsplit_once('/')?;
    let (group, version) = api_version.rsplit_once('/').unwrap_or(("", api_version));
    Some(GroupVersionKind::gvk(group, version, kind))
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
    // The Go plugin's native build.
    let scratch = tempfile::tempdir()?;
    let stages = stages(&args.plugins, args.workers, &scratch)?;
    let finalizing = stages.iter().any(|s| s.plugin.info().finalizes);
    let mut kinds: Vec<String> = stages.iter().flat_map(|s| s.kinds.clone()).collect();
    kinds.sort();
    kinds.dedup();
    let mut children = Vec::new();
    let mut streams = Vec::new();
    // Every kind the plugins produce or read, as the host watches them.
    for kind in kinds {
        let gvk = gvk(&kind).with_context(|| format!("{kind}: not group/version/Kind"))?;
        // A kind the cluster does not serve is not watched, as in the host.
        let ar = match kube::discovery::pinned_kind(&client, &gvk).await {
            Ok((ar, _)) => ar,
            Err(e) => {
                eprintln!("native_sampledb: {kind} not watched: {e}");
                continue;
            }
        };
        let api: Api<DynamicObject> = Api::all_with(client.clone(), &ar);
        let writer = reflector::store::Writer::new(ar.clone());
        let index = Arc::new(ChildIndex::default());
        children.push((kind, ar.clone(), writer.as_reader(), index.clone()));
        // Without managedFields, as the host caches children: no plugin reads them, and
        // kube-runtime's own advice for a reflector's memory.
        let stream = reflector::reflector(
            writer,
            watcher(api, watcher::Config::default().labels(PARENT_UID_LABEL))
                .modify(index::without_managed_fields),
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
        children
            .iter()
            .map(|(_, _, store, _)| store.clone())
            .collect(),
        ready_tx,
    ));
    let ctx = Arc::new(Ctx {
        client: client.clone(),
        sampledb: sampledb.clone(),
        stages,
        finalizing,
        children,
        parents: Mutex::new(HashMap::new()),
        ready,
        reconciles: AtomicU64::new(0),
        failed: AtomicU64::new(0),
    });
    tokio::spawn(count_reconciles(ctx.clone()));
    let api: Api<DynamicObject> = Api::all_with(client, &sampledb);
    let mut controller = Controller::new_with(api, watcher::Config::default(), sampledb)
        .with_config(
            ControllerConfig::default()
                .concurrency(args.concurrency)
                .debounce(Duration::from_millis(args.debounce_ms)),
        );
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
    eprintln!("native_sampledb: running {}", args.plugins.join(", "));
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
    ctx.reconciles.fetch_add(1, Ordering::Relaxed);
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
    // As the host gives plugins the parent: without managedFields.
    index::without_managed_fields(&mut parent);
    parent.types = Some(TypeMeta {
        api_version: ctx.sampledb.api_version.clone(),
        kind: ctx.sampledb.kind.clone(),
    });
    let parent = Arc::new(serde_json::to_value(&parent)?);
    let observed = Arc::new(plan::ours(observe(&ctx, &uid, &namespace).await?, &uid));
    let now = now();
    // Plugin calls block (a pipe to a serving process), as in the host: off the runtime.
    let outcome = {
        let (ctx, parent, observed, namespace, now) = (
            ctx.clone(),
            parent.clone(),
            observed.clone(),
            namespace.clone(),
            now.clone(),
        );
        tokio::task::spawn_blocking(move || run(&ctx.stages, &parent, &observed, &namespace, &now))
            .await
            .map_err(|e| Error::Plugin(format!("the pipeline's thread: {e}")))??
    };

    let parent_ref = ParentRef {
        api_version: ctx.sampledb.api_version.clone(),
        kind: ctx.sampledb.kind.clone(),
        name: obj.name_any(),
        uid: uid.clone(),
        namespace: Some(namespace.clone()),
        adopts_retained: false,
    };
    let family = plan::family(&observed, &uid);
    let manager = plan::field_manager(&uid);
    let mut writes = Vec::new();
    for desired in &outcome.desired {
        let id = desired.object.key();
        let existing = observed.iter().find(|o| id.is(o));
        let claim = plan::claim(desired, existing, &uid, &family, ctx.finalizing);
        let (object, force) =
            plan::to_apply(desired, claim, existing, &parent_ref).map_err(|why| {
                Error::NotOwned {
                    object: format!("{} {}", desired.object.kind, desired.object.name),
                    why,
                }
            })?;
        if existing.is_some_and(|e| plan::up_to_date(&object, std::slice::from_ref(e))) {
            continue;
        }
        let ar = ctx
            .children
            .iter()
            .find(|(kind, ..)| *kind == desired.object.kind)
            .map(|(_, ar, ..)| ar)
            .ok_or_else(|| Error::Undeclared(desired.object.kind.clone()))?;
        let api: Api<DynamicObject> = Api::namespaced_with(ctx.client.clone(), &namespace, ar);
        let mut params = PatchParams::apply(&manager);
        params.force = force;
        let name = desired.object.name.clone();
        writes.push(async move { api.patch(&name, &params, &Patch::Apply(&object)).await });
    }
    // Every write runs to its end, as in the host; the first failure fails the reconcile.
    for written in futures::future::join_all(writes).await {
        written?;
    }
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
    // As the host: a plugin picks when it runs again, never sooner than 1 s; else the resync.
    Ok(Action::requeue(
        outcome
            .requeue_after
            .unwrap_or(Duration::from_secs(600))
            .max(Duration::from_secs(1)),
    ))
}

/// Runs the plugins in order on the parent and what was observed, as the host's pipeline
/// composes them (`windlass::pipeline`), without its policy check.
fn run(
    stages: &[Stage],
    parent: &Value,
    observed: &[Value],
    namespace: &str,
    now: &str,
) -> Result<Outcome, Error> {
    let parent_text = parent.to_string();
    let observed: Vec<(String, String)> = observed
        .iter()
        .map(|o| (kind_of(o), o.to_string()))
        .collect();
    // The desired set so far: (kind, text, object).
    let mut desired: Vec<(String, String, Value)> = Vec::new();
    let mut out = Outcome {
        finalized: true,
        ..Outcome::default()
    };
    for stage in stages {
        let (shown, withheld): (Vec<_>, Vec<_>) = desired
            .into_iter()
            .partition(|(kind, ..)| stage.secrets || kind != SECRET);
        let req = Request {
            phase: contract::Phase::Reconcile,
            parent: parent_text.clone(),
            observed: observed
                .iter()
                .filter(|(kind, _)| stage.kinds.contains(kind))
                .filter(|(kind, _)| stage.secrets || kind != SECRET)
                .map(|(_, text)| text.clone())
                .collect(),
            desired: shown.into_iter().map(|(_, text, _)| text).collect(),
            config: stage.config.clone(),
            now: now.to_string(),
        };
        let (resp, _) = stage.plugin.call_for(namespace, &req);
        let resp = resp.map_err(|e| Error::Plugin(e.to_string()))?;
        desired = resp
            .desired
            .into_iter()
            .map(|text| {
                let object: Value = serde_json::from_str(&text)?;
                Ok((kind_of(&object), text, object))
            })
            .collect::<Result<_, Error>>()?;
        desired.extend(withheld);
        if let Some(fragment) = resp.status
            && let Value::Object(fragment) = serde_json::from_str::<Value>(&fragment)?
        {
            pipeline::merge(&mut out.status, fragment);
        }
        out.conditions
            .extend(resp.conditions.into_iter().map(|item| Reported {
                plugin: stage.name.clone(),
                item,
            }));
        if let Some(secs) = resp.requeue_after_secs {
            let after = Duration::from_secs(secs.into());
            out.requeue_after = Some(out.requeue_after.map_or(after, |r| r.min(after)));
        }
    }
    out.desired = desired
        .into_iter()
        .map(|(kind, _, mut object)| {
            // The host's policy fills in the parent's namespace; the plugins name none.
            if let Some(meta) = object.get_mut("metadata").and_then(Value::as_object_mut) {
                meta.insert("namespace".into(), Value::String(namespace.to_string()));
            }
            let name = object["metadata"]["name"]
                .as_str()
                .unwrap_or_default()
                .to_string();
            Desired {
                object: Checked {
                    kind,
                    namespace: Some(namespace.to_string()),
                    name,
                    object,
                },
                plugin: "sampledb".into(),
                digest: "native".into(),
            }
        })
        .collect();
    Ok(out)
}

/// The parent's children and read objects from the watch caches, as JSON.
async fn observe(ctx: &Ctx, uid: &str, namespace: &str) -> Result<Vec<Value>, Error> {
    // As in the host: a reconcile on a half-filled cache could re-create what exists.
    let _ = ctx.ready.clone().wait_for(|ready| *ready).await;
    let mut out = Vec::new();
    for (_, ar, store, index) in &ctx.children {
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
fn error_policy(obj: Arc<DynamicObject>, error: &Error, ctx: Arc<Ctx>) -> Action {
    ctx.failed.fetch_add(1, Ordering::Relaxed);
    eprintln!("reconcile {} failed: {error}", obj.name_any());
    Action::requeue(Duration::from_millis(500))
}

fn now() -> String {
    jiff::Timestamp::now()
        .round(jiff::Unit::Second)
        .map(|t| t.to_string())
        .unwrap_or_default()
}
