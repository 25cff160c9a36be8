//! One reconcile of one parent, in order: preconditions, the host's finalizer, observe from the
//! watch caches, run the pipeline, and — only if every plugin succeeded — apply; then by phase,
//! prune and write status, or finalize. A failure is told to the parent in one place (`tell`).

use std::{
    collections::HashSet,
    sync::Arc,
    time::{Duration, Instant},
};
use windlass_policy::At as _;

use kube::{ResourceExt, api::DynamicObject, runtime::controller::Action};
use serde_json::Value;

use super::{
    apply,
    context::KindCtx,
    error::ReconcileError,
    finalizer,
    gate::{Entry, Lane},
    plan::{self, ParentRef},
};
use crate::runs::{LastRun, PluginRun};
use windlass_contract::Phase;
use windlass_policy::pipeline::{Input, Outcome, Pipeline};

/// Reconciles one parent, at most as often as the per-parent rate limit allows, once the
/// kind's gate lets it run (see `gate`): with a permit the gate held for it, or one free on
/// entering. A parent that has to wait takes its place at the gate and returns; the gate
/// triggers it again when its permit comes.
pub async fn reconcile(
    obj: Arc<DynamicObject>,
    ctx: Arc<KindCtx>,
) -> Result<Action, ReconcileError> {
    let uid = obj.uid().unwrap_or_default();
    let (permit, lane, waited) = match ctx.queue.gate.claim(&uid) {
        // Let through the rate limit when it entered.
        Some(claimed) => (claimed.permit, claimed.lane, claimed.waited),
        None => {
            // Deleting parents too: a finalize phase that never finishes and keeps writing
            // would otherwise loop as fast as its own watch events arrive.
            if let Err(wait) = ctx.shared.reconciles.take(&uid, Instant::now()) {
                tracing::debug!(parent = %obj.name_any(), ?wait, "reconcile rate limit: later");
                return Ok(Action::requeue(wait));
            }
            ctx.queue.handed_out(&uid);
            let lane = ctx.queue.lane(&uid, obj.metadata.generation);
            // Before entering: the gate's trigger finds the parent by its uid.
            ctx.remembered.reconciling(&obj);
            match ctx.queue.gate.enter(&uid, lane) {
                Entry::Run(permit) => (permit, lane, Duration::ZERO),
                Entry::Queued => return Ok(Action::await_change()),
            }
        }
    };
    ctx.shared
        .metrics
        .queue_wait_of(&ctx.parent.key(), lane.name())
        .observe(waited.as_secs_f64());
    // The parent as it is now: it may have changed, or gone, while it waited.
    let Some(obj) = ctx.remembered.latest(&obj) else {
        return Ok(Action::await_change());
    };
    // A host that is stopping starts no new reconcile; it waits for those past this point.
    let Some(running) = ctx.shared.running.enter() else {
        return Ok(Action::await_change());
    };
    let result = run(obj, ctx.clone(), lane == Lane::Changed).await;
    drop(running);
    drop(permit);
    result
}

/// The end of one reconcile, told to its span and its parent's last run. Dropped before it was
/// told — the reconcile's future dropped halfway because its controller stopped (the host
/// stopping past its drain, the lease lost, the kind's observed kinds changed) — it tells the
/// span `cancelled` and counts it (`controller_runtime_reconcile_total{result="cancelled"}`);
/// the last runs of a stopped controller are forgotten anyway.
struct Ending<'a> {
    span: tracing::Span,
    ctx: &'a KindCtx,
    kind: &'a str,
    uid: &'a str,
    obj: &'a DynamicObject,
    started: Instant,
    started_at: String,
    ended: bool,
}

impl Ending<'_> {
    /// Records `result` on the span and as the parent's last run; returns the seconds it took.
    fn end(&mut self, result: &str, message: Option<String>) -> f64 {
        self.ended = true;
        self.span.record("result", result);
        let took = self.started.elapsed().as_secs_f64();
        self.ctx.shared.runs.end(
            self.uid,
            LastRun {
                kind: self.kind.to_string(),
                namespace: self.obj.namespace().unwrap_or_default(),
                name: self.obj.name_any(),
                started: std::mem::take(&mut self.started_at),
                duration_ms: took * 1e3,
                result: result.to_string(),
                message,
                plugins: Vec::new(),
            },
        );
        took
    }
}

impl Drop for Ending<'_> {
    fn drop(&mut self) {
        if !self.ended {
            self.span.record("result", "cancelled");
            self.ctx.shared.metrics.record_cancelled(self.kind);
            tracing::info!(
                parent = %self.obj.name_any(),
                namespace = self.obj.namespace().unwrap_or_default(),
                "reconcile stopped halfway: its controller stopped"
            );
        }
    }
}

/// One reconcile, given leave to run; `changed`: the parent is new or its spec changed since
/// its last reconcile.
async fn run(
    obj: Arc<DynamicObject>,
    ctx: Arc<KindCtx>,
    changed: bool,
) -> Result<Action, ReconcileError> {
    let started = Instant::now();
    let started_at = windlass_contract::now_rfc3339();
    let uid = obj.uid().unwrap_or_default();
    ctx.queue.started(&uid, obj.metadata.generation);
    ctx.shared.runs.begin(&uid);
    let kind = ctx.parent.key();
    let work = ctx.shared.metrics.work_started(&kind);
    let span = tracing::info_span!(
        "reconcile",
        kind = %kind,
        namespace = obj.metadata.namespace.as_deref().unwrap_or(""),
        name = %obj.name_any(),
        generation = obj.metadata.generation.unwrap_or(0),
        result = tracing::field::Empty,
        otel.status_code = tracing::field::Empty,
        otel.status_description = tracing::field::Empty,
    );
    if let Some(remote) = crate::telemetry::remote_parent(&obj) {
        use opentelemetry::trace::TraceContextExt as _;
        use tracing_opentelemetry::OpenTelemetrySpanExt as _;
        // The reconcile the change led to joins the trace it came with; later ones (requeues,
        // children's changes) only link to it, or the annotation, which stays, would grow that
        // trace for the parent's whole life. Without an OpenTelemetry layer (no OTLP endpoint
        // configured) there is no trace: both do nothing.
        if changed {
            let _ = span.set_parent(remote);
        } else {
            span.add_link(remote.span().span_context().clone());
        }
    }
    let mut ending = Ending {
        span: span.clone(),
        ctx: &ctx,
        kind: &kind,
        uid: &uid,
        obj: &obj,
        started,
        started_at,
        ended: false,
    };
    let result = tracing::Instrument::instrument(reconcile_inner(&obj, &ctx), span).await;
    // Whether it asked to run again after a delay, or why it failed: for the span, the metrics
    // and the parent's last run.
    let outcome = result
        .as_ref()
        .map(|action| *action != Action::await_change())
        .map_err(ReconcileError::reason);
    let named = match outcome {
        Ok(false) => "success",
        Ok(true) => "requeue_after",
        Err(reason) => reason,
    };
    if let Err(e) = &result {
        ending.span.record("otel.status_code", "ERROR");
        ending
            .span
            .record("otel.status_description", tracing::field::display(e));
    }
    work.done();
    let took = ending.end(named, result.as_ref().err().map(ToString::to_string));
    ctx.shared.metrics.record_reconcile(&kind, outcome, took);
    // The parent may have gone meanwhile, and its record been forgotten before this end: the
    // check after the insert, as `remembered.rs` does.
    if ctx
        .remembered
        .latest(&obj)
        .is_none_or(|now| now.metadata.uid != obj.metadata.uid)
    {
        ctx.shared.runs.forget(&uid);
    }
    if result.is_ok() {
        ctx.remembered.succeeded(&uid);
    }
    result
}

/// Retries a failed parent with per-object exponential backoff.
pub fn error_policy(obj: Arc<DynamicObject>, error: &ReconcileError, ctx: Arc<KindCtx>) -> Action {
    let n = ctx.remembered.failed(&obj);
    ctx.shared.metrics.record_retry(&ctx.parent.key());
    let settings = &ctx.shared.settings;
    let delay = settings
        .backoff_base
        .saturating_mul(2u32.saturating_pow((n - 1).min(16)))
        .min(settings.backoff_max);
    tracing::warn!(parent = %obj.name_any(), error = %error, retry_in = ?delay, "reconcile failed");
    Action::requeue(delay)
}

async fn reconcile_inner(obj: &DynamicObject, ctx: &KindCtx) -> Result<Action, ReconcileError> {
    tracing::debug!("reconcile starts");
    let phase = if obj.metadata.deletion_timestamp.is_some() {
        Phase::Finalize
    } else {
        Phase::Reconcile
    };
    let Some(pipeline) = ctx.shared.registry.pipeline(&ctx.parent.key()) else {
        // No plugin of the kind serves. If some failed to load, the parent says which, whatever
        // their failure policy: there is nothing to run. (Still loading, as at every start,
        // is no news: the load's outcome reconciles the kind's parents.)
        let failed = ctx.shared.registry.failed_to_load(&ctx.parent.key());
        if failed.is_empty() {
            return Ok(Action::await_change());
        }
        let e = ReconcileError::NotServing { plugins: failed };
        tell(obj, ctx, &e, phase).await;
        return Err(e);
    };
    match steps(obj, ctx, &pipeline, phase).await {
        Ok(action) => Ok(action),
        Err(Failure::Quiet(e)) => Err(e),
        Err(Failure::Told(e)) => {
            tell(obj, ctx, &e, phase).await;
            Err(e)
        }
    }
}

/// A failed reconcile: `Told` ones are the parent's to see (a failure condition and a Warning
/// event, and while it is deleting its `FinalizeStuck` naming who holds it); `Quiet` ones are
/// the host's own API calls, retried with backoff and logged.
enum Failure {
    Told(ReconcileError),
    Quiet(ReconcileError),
}

impl From<ReconcileError> for Failure {
    fn from(e: ReconcileError) -> Self {
        Failure::Quiet(e)
    }
}

/// The reconcile in order: preconditions (an administrator's release, every plugin the run
/// needs serving), the host's finalizer, observe, run the pipeline, apply; then by phase, prune
/// and requeue, or release the parent when every finalizing plugin is done.
async fn steps(
    obj: &DynamicObject,
    ctx: &KindCtx,
    pipeline: &Arc<Pipeline>,
    phase: Phase,
) -> Result<Action, Failure> {
    let deleting = phase == Phase::Finalize;
    let uid = obj.uid().unwrap_or_default();
    // Preconditions. An administrator's release of a deleting parent needs no plugin: it runs
    // first, even with the pipeline incomplete.
    if deleting
        && obj.finalizers().iter().any(|f| f == finalizer::FINALIZER)
        && finalizer::release_asked(obj).map_err(Failure::Told)?
    {
        let observed = plan::ours(observe(obj, ctx), &uid);
        finalizer::release_keeping_data(obj, ctx, &observed).await?;
        return Ok(Action::await_change());
    }
    let ignored = serving(ctx, deleting).map_err(Failure::Told)?;
    // Remembered again, as the parent now is: `reconcile` did so only if it entered the gate,
    // and a permit can be claimed by a parent that never entered: a hot swap queues every known
    // parent at the gate, one created just before it included, and without this its children's
    // events would find no parent until its next resync.
    ctx.remembered.reconciling(obj);
    let parent: Arc<Value> = crate::k8s::typed_json(obj, &ctx.resource)
        .map_err(|source| ReconcileError::Encode {
            object: obj.name_any(),
            source,
        })?
        .into();
    // The host's finalizer.
    let finalizing = pipeline.stages.iter().any(|s| s.plugin.info().finalizes);
    if !finalizer::hold(obj, ctx, finalizing).await? {
        return Ok(Action::await_change());
    }
    // A deleting parent as the watch last showed it may be gone already: the reconcile before
    // released it, and its delete event has not arrived. A finalize phase run for it would make
    // again what that release deleted, and leave it behind. One read per finalize reconcile.
    if deleting && !finalizer::still_held(obj, ctx).await? {
        return Ok(Action::await_change());
    }
    // Observe.
    // Shared with the pipeline's blocking task, not copied for it.
    let observed: Arc<[Value]> = plan::ours(observe(obj, ctx), &uid).into();
    tracing::debug!(observed = observed.len(), "observed from the caches");
    // Run.
    let mut outcome = run_pipeline(
        ctx,
        &uid,
        pipeline.clone(),
        phase,
        parent.clone(),
        Arc::clone(&observed),
    )
    .await
    .map_err(Failure::Told)?;
    outcome.skipped.extend(
        ignored
            .into_iter()
            .map(windlass_policy::pipeline::Error::NotServing),
    );
    tracing::debug!(desired = outcome.desired.len(), "pipeline ran");
    let parent_ref = ParentRef {
        api_version: ctx.resource.api_version.clone(),
        kind: ctx.resource.kind.clone(),
        name: obj.name_any(),
        uid: uid.clone(),
        namespace: obj.namespace(),
        adopts_retained: obj.annotations().get(plan::ADOPT_RETAINED_ANNOTATION)
            == Some(&"true".to_string()),
    };
    apply::all(ctx, &outcome, &parent_ref, &observed, finalizing)
        .await
        .map_err(Failure::Told)?;
    tracing::debug!("applied");
    if phase == Phase::Reconcile && !outcome.incomplete() {
        let child_kinds: HashSet<String> = pipeline
            .stages
            .iter()
            .flat_map(|s| s.plugin.info().child_kinds.iter().cloned())
            .collect();
        apply::prune(
            ctx,
            &plan::prune_plan(&observed, &outcome.desired, &uid, &child_kinds),
        )
        .await?;
    }
    apply::status_and_events(obj, ctx, &parent, &outcome).await?;
    // A plugin picks when it runs again, but never sooner than the floor.
    let floor = ctx.shared.settings.min_requeue;
    Ok(match phase {
        Phase::Reconcile => Action::requeue(
            outcome
                .requeue_after
                .unwrap_or(ctx.shared.settings.resync)
                .max(floor),
        ),
        Phase::Finalize if outcome.finalized => {
            finalizer::release(obj, ctx, &observed).await?;
            Action::await_change()
        }
        Phase::Finalize => {
            finalizer::report_stuck(
                obj,
                ctx,
                &outcome.unfinalized,
                "NotFinalized",
                "reported not finalized yet",
            )
            .await;
            Action::requeue(
                outcome
                    .requeue_after
                    .unwrap_or(Duration::from_secs(5))
                    .max(floor),
            )
        }
    })
}

/// The WasmPlugins of the kind with no serving version that the run may go without: those with
/// `failurePolicy: Ignore` while the parent lives. Any other missing refuses the run
/// ([`ReconcileError::NotServing`]): a partial pipeline would prune what a missing plugin keeps, or let a
/// parent go without the cleanup a missing plugin does; with only `Ignore` ones missing it runs,
/// incomplete, and prunes nothing.
fn serving(ctx: &KindCtx, deleting: bool) -> Result<Vec<String>, ReconcileError> {
    let (waiting, ignored): (Vec<_>, Vec<_>) = ctx
        .shared
        .registry
        .not_serving(&ctx.parent.key())
        .into_iter()
        .partition(|(_, policy)| deleting || *policy == crate::crd::FailurePolicy::Fail);
    if !waiting.is_empty() {
        return Err(ReconcileError::NotServing {
            plugins: waiting.into_iter().map(|(name, _)| name).collect(),
        });
    }
    Ok(ignored.into_iter().map(|(name, _)| name).collect())
}

/// Tells the parent of a failure, once: the refusal metric when a rule or the ownership check
/// refused, the failure condition and a Warning event, and — while it is deleting — its
/// `FinalizeStuck` naming the plugins that hold it (none: the host's own calls).
async fn tell(obj: &DynamicObject, ctx: &KindCtx, e: &ReconcileError, phase: Phase) {
    match e {
        ReconcileError::Pipeline(p) => {
            if let (Some(rule), Some(plugin)) = (p.rule(), p.plugin()) {
                ctx.shared.metrics.record_refusal(plugin, rule.as_str());
            }
        }
        ReconcileError::NotOwned { plugin, .. } => {
            ctx.shared.metrics.record_refusal(plugin, "ObjectNotOwned");
        }
        _ => {}
    }
    if let Ok(parent) = crate::k8s::typed_json(obj, &ctx.resource) {
        apply::report_failure(obj, &parent, ctx, e).await;
    }
    if phase != Phase::Finalize {
        return;
    }
    let (holders, why): (Vec<String>, String) = match e {
        // The release was refused: nothing holds the finalize phase that the refusal names.
        ReconcileError::Release { .. } => return,
        ReconcileError::NotServing { plugins } => (
            plugins.clone(),
            "not loaded: its WasmPlugin has no serving version (deleted, or refused)".into(),
        ),
        ReconcileError::Pipeline(p) => (
            p.plugin().map(str::to_string).into_iter().collect(),
            e.to_string(),
        ),
        ReconcileError::NotOwned { plugin, .. } => (vec![plugin.clone()], e.to_string()),
        _ => (Vec::new(), e.to_string()),
    };
    finalizer::report_stuck(obj, ctx, &holders, e.reason(), &why).await;
}

/// The objects of the observed kinds labelled with this parent's uid, from the watch caches.
/// The caches have listed once: the controller reconciles only after that
/// (`kinds::wait_for_caches`), since a reconcile on a half-filled cache could re-create what
/// exists (and, for a generated Secret, change it).
fn observe(obj: &DynamicObject, ctx: &KindCtx) -> Vec<Value> {
    let uid = obj.uid().unwrap_or_default();
    super::index::children_of(&ctx.caches, &uid, obj.namespace().as_deref())
}

/// The text at `pointer` of `v`, or empty.
fn text_at(v: &Value, pointer: &str) -> String {
    v.at(pointer)
        .and_then(Value::as_str)
        .unwrap_or_default()
        .to_string()
}

/// Runs the pipeline on a blocking thread (plugin calls are synchronous), recording calls in
/// the metrics and the parent's last run, and for replay when the parent asks for it.
async fn run_pipeline(
    ctx: &KindCtx,
    uid: &str,
    pipeline: Arc<Pipeline>,
    phase: Phase,
    parent: Arc<Value>,
    observed: Arc<[Value]>,
) -> Result<Outcome, ReconcileError> {
    let metrics = ctx.shared.metrics.clone();
    let now = windlass_contract::now_rfc3339();
    let span = tracing::Span::current();
    // Recorded for replay: asked for by the parent, where the host has somewhere to keep it.
    let record = ctx.shared.settings.record_dir.clone().filter(|_| {
        parent
            .at("/metadata/annotations")
            .and_then(|a| a.get(crate::record::RECORD_ANNOTATION))
            .and_then(Value::as_str)
            == Some("true")
    });
    let id = crate::record::ParentId {
        kind: ctx.parent.key(),
        namespace: text_at(&parent, "/metadata/namespace"),
        name: text_at(&parent, "/metadata/name"),
        uid: uid.to_string(),
    };
    let (outcome, calls) = tokio::task::spawn_blocking(move || {
        let _entered = span.enter();
        let calls = std::sync::Mutex::new(Vec::new());
        let recordings = std::sync::Mutex::new(Vec::new());
        let started = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_millis());
        let outcome = pipeline.run_observed(
            Input {
                record: record.is_some(),
                ..Input::new(phase, &parent, &observed, &now)
            },
            &|call| {
                if let Some(r) = &call.recorded {
                    recordings.lock().unwrap_or_else(|e| e.into_inner()).push(
                        crate::record::Recording::of(
                            id.clone(),
                            call.plugin.name(),
                            call.plugin.digest(),
                            r.request,
                            r.entropy,
                            r.response.as_ref().map_err(String::as_str).copied(),
                        ),
                    );
                }
                let (plugin, stats, result) = (call.plugin, call.stats, call.result);
                let reason = result.map_or_else(|e| e.reason(), |()| "ok");
                metrics.record_call(plugin.name(), stats, reason);
                let mut calls = calls.lock().unwrap_or_else(|e| e.into_inner());
                calls.push(PluginRun {
                    name: plugin.name().to_string(),
                    digest: plugin.digest().to_string(),
                    duration_ms: stats.duration.as_secs_f64() * 1e3,
                    memory_bytes: u64::try_from(stats.memory_peak_bytes).unwrap_or(u64::MAX),
                    fuel: stats.fuel_consumed,
                    result: reason.to_string(),
                    rule: result
                        .err()
                        .and_then(|e| e.rule())
                        .map(|r| r.as_str().to_string()),
                    message: result.err().map(ToString::to_string),
                });
            },
        );
        if let Some(dir) = &record {
            let recordings = recordings.into_inner().unwrap_or_else(|e| e.into_inner());
            if let Err(e) = crate::record::write(dir, started, &recordings) {
                tracing::warn!(dir = %dir.display(), error = %e, "writing the recordings of a run");
            }
        }
        (
            outcome,
            calls.into_inner().unwrap_or_else(|e| e.into_inner()),
        )
    })
    .await
    .map_err(ReconcileError::Join)?;
    ctx.shared.runs.called(uid, calls);
    outcome.map_err(ReconcileError::from)
}
