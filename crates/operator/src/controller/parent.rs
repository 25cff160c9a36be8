//! One reconcile of one parent: observe from the watch caches, run the pipeline, and — only if
//! every plugin succeeded — apply, prune and write status; on deletion, finalize.

use std::{
    collections::HashSet,
    sync::Arc,
    time::{Duration, Instant},
};

use kube::{
    Api, Resource, ResourceExt,
    api::{DeleteParams, DynamicObject, Patch, PatchParams, Preconditions},
    runtime::{
        controller::Action,
        events::{Event, EventType},
        reflector::ObjectRef,
    },
};
use serde_json::Value;

use super::{
    Error,
    apply::{self, Claim, Ownership, PARENT_UID_LABEL, ParentRef},
    finalizer,
    kinds::KindCtx,
    status,
};
use windlass_contract::Phase;
use windlass_policy::pipeline::{Desired, Input, Outcome, Pipeline};

use crate::metrics::KindResult;

/// Reconciles one parent, at most as often as the per-parent rate limit allows.
pub async fn reconcile(obj: Arc<DynamicObject>, ctx: Arc<KindCtx>) -> Result<Action, Error> {
    let started = Instant::now();
    // Deleting parents too: a finalize phase that never finishes and keeps writing would
    // otherwise loop as fast as its own watch events arrive.
    if let Err(wait) = ctx
        .shared
        .reconciles
        .take(&obj.uid().unwrap_or_default(), started)
    {
        tracing::debug!(parent = %obj.name_any(), ?wait, "reconcile rate limit: later");
        return Ok(Action::requeue(wait));
    }
    ctx.queue.started(&obj.uid().unwrap_or_default());
    let metrics = &ctx.shared.metrics;
    metrics.in_flight.inc();
    let span = tracing::info_span!(
        "reconcile",
        kind = %ctx.parent.key(),
        namespace = obj.metadata.namespace.as_deref().unwrap_or(""),
        name = %obj.name_any(),
    );
    let result = tracing::Instrument::instrument(reconcile_inner(&obj, &ctx), span).await;
    metrics.in_flight.dec();
    let labels = KindResult {
        kind: ctx.parent.key(),
        result: result
            .as_ref()
            .map_or_else(|e| e.reason().to_string(), |_| "success".to_string()),
    };
    metrics.reconciles.get_or_create(&labels).inc();
    metrics
        .reconcile_seconds
        .get_or_create(&labels)
        .observe(started.elapsed().as_secs_f64());
    if result.is_ok() {
        ctx.remembered.succeeded(&obj.uid().unwrap_or_default());
    }
    result
}

/// Retries a failed parent with per-object exponential backoff.
pub fn error_policy(obj: Arc<DynamicObject>, error: &Error, ctx: Arc<KindCtx>) -> Action {
    let n = ctx.remembered.failed(&obj);
    let settings = &ctx.shared.settings;
    let delay = settings
        .backoff_base
        .saturating_mul(2u32.saturating_pow((n - 1).min(16)))
        .min(settings.backoff_max);
    tracing::warn!(parent = %obj.name_any(), error = %error, retry_in = ?delay, "reconcile failed");
    Action::requeue(delay)
}

async fn reconcile_inner(obj: &DynamicObject, ctx: &KindCtx) -> Result<Action, Error> {
    tracing::debug!("reconcile starts");
    let Some(pipeline) = ctx.shared.registry.pipeline(&ctx.parent.key()) else {
        return Ok(Action::await_change());
    };
    // A partial pipeline would prune what a missing plugin keeps, or let a parent go without
    // the cleanup a missing plugin does: with a plugin missing that the run may not go without
    // (`failurePolicy: Fail`, or any while the parent is being deleted), nothing runs, nothing
    // is applied or deleted; with only `Ignore` ones missing it runs, incomplete, and prunes
    // nothing.
    let deleting = obj.metadata.deletion_timestamp.is_some();
    let uid = obj.uid().unwrap_or_default();
    // An administrator's release of a deleting parent needs no plugin: it runs first, even
    // with the pipeline incomplete.
    if deleting && obj.finalizers().iter().any(|f| f == finalizer::FINALIZER) {
        match finalizer::release_asked(obj) {
            Ok(false) => {}
            Ok(true) => {
                let observed = apply::ours(observe(obj, ctx), &uid);
                finalizer::release_keeping_data(obj, ctx, &observed).await?;
                return Ok(Action::await_change());
            }
            Err(e) => {
                if let Ok(parent) = crate::k8s::typed_json(obj, &ctx.resource) {
                    report_failure(obj, &parent, ctx, &e).await;
                }
                return Err(e);
            }
        }
    }
    let (waiting, ignored): (Vec<_>, Vec<_>) = ctx
        .shared
        .registry
        .not_serving(&ctx.parent.key())
        .into_iter()
        .partition(|(_, policy)| deleting || *policy == crate::crd::FailurePolicy::Fail);
    let waiting: Vec<String> = waiting.into_iter().map(|(name, _)| name).collect();
    if !waiting.is_empty() {
        let e = Error::NotServing {
            plugins: waiting.clone(),
        };
        if let Ok(parent) = crate::k8s::typed_json(obj, &ctx.resource) {
            report_failure(obj, &parent, ctx, &e).await;
        }
        if deleting {
            let why = "not loaded: its WasmPlugin has no serving version (deleted, or refused)";
            finalizer::report_stuck(obj, ctx, &waiting, e.reason(), why).await;
        }
        return Err(e);
    }
    ctx.remembered.reconciling(obj);
    let parent = crate::k8s::typed_json(obj, &ctx.resource).map_err(|source| Error::Encode {
        object: obj.name_any(),
        source,
    })?;
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
    let observed = apply::ours(observe(obj, ctx), &uid);
    tracing::debug!(observed = observed.len(), "observed from the caches");
    let phase = if deleting {
        Phase::Finalize
    } else {
        Phase::Reconcile
    };
    let outcome = match run_pipeline(
        ctx,
        pipeline.clone(),
        phase,
        parent.clone(),
        observed.clone(),
    )
    .await
    {
        Ok(mut outcome) => {
            outcome.skipped.extend(
                ignored
                    .into_iter()
                    .map(|(name, _)| windlass_policy::pipeline::Error::NotServing(name)),
            );
            outcome
        }
        Err(e) => {
            if let Error::Pipeline(p) = &e
                && let (Some(rule), Some(plugin)) = (p.rule(), p.plugin())
            {
                ctx.shared.metrics.record_refusal(plugin, rule.as_str());
            }
            report_failure(obj, &parent, ctx, &e).await;
            if deleting {
                report_stuck_by(obj, ctx, &e).await;
            }
            return Err(e);
        }
    };
    let parent_ref = ParentRef {
        api_version: ctx.resource.api_version.clone(),
        kind: ctx.resource.kind.clone(),
        name: obj.name_any(),
        uid: uid.clone(),
        namespace: obj.namespace(),
        adopts_retained: obj.annotations().get(apply::ADOPT_RETAINED_ANNOTATION)
            == Some(&"true".to_string()),
    };
    tracing::debug!(desired = outcome.desired.len(), "pipeline ran");
    if let Err(e) = apply_all(ctx, &outcome, &parent_ref, &observed, finalizing).await {
        if let Error::NotOwned { plugin, .. } = &e {
            ctx.shared.metrics.record_refusal(plugin, "ObjectNotOwned");
        }
        report_failure(obj, &parent, ctx, &e).await;
        if deleting {
            report_stuck_by(obj, ctx, &e).await;
        }
        return Err(e);
    }
    tracing::debug!("applied");
    if !deleting && !outcome.incomplete() {
        let child_kinds: HashSet<String> = pipeline
            .stages
            .iter()
            .flat_map(|s| s.plugin.info().child_kinds.iter().cloned())
            .collect();
        prune(
            ctx,
            &apply::prune_plan(&observed, &outcome.desired, &uid, &child_kinds),
        )
        .await?;
    }
    let patch = status::after_success(&parent, &outcome, &windlass_contract::now_rfc3339());
    let status_unchanged = apply::merge_is_noop(&parent, &patch);
    ctx.shared.metrics.record_write("status", !status_unchanged);
    if status_unchanged {
        tracing::debug!("status unchanged");
    } else {
        write_status(obj, ctx, &patch).await?;
        tracing::debug!("status written");
    }
    publish_events(obj, ctx, &outcome).await;
    tracing::debug!(events = outcome.events.len(), "events published");
    // A plugin picks when it runs again, but never sooner than the floor.
    let floor = ctx.shared.settings.min_requeue;
    if deleting {
        if outcome.finalized {
            finalizer::release(obj, ctx, &observed).await?;
            return Ok(Action::await_change());
        }
        finalizer::report_stuck(
            obj,
            ctx,
            &outcome.unfinalized,
            "NotFinalized",
            "reported not finalized yet",
        )
        .await;
        return Ok(Action::requeue(
            outcome
                .requeue_after
                .unwrap_or(Duration::from_secs(5))
                .max(floor),
        ));
    }
    Ok(Action::requeue(
        outcome
            .requeue_after
            .unwrap_or(ctx.shared.settings.resync)
            .max(floor),
    ))
}

/// The objects of the observed kinds labelled with this parent's uid, from the watch caches.
/// The caches have listed once: the controller reconciles only after that
/// (`kinds::wait_for_caches`), since a reconcile on a half-filled cache could re-create what
/// exists (and, for a generated Secret, change it).
fn observe(obj: &DynamicObject, ctx: &KindCtx) -> Vec<Value> {
    let uid = obj.uid().unwrap_or_default();
    let namespace = obj.namespace();
    let mut out = Vec::new();
    // One object observed under two kinds (an Event under both its groups) is seen once.
    let mut seen = HashSet::new();
    for cache in &ctx.caches {
        for (ns, name) in cache.index.children(&uid) {
            if namespace.as_ref().is_some_and(|parent_ns| *parent_ns != ns) {
                continue;
            }
            let mut key = ObjectRef::new_with(&name, cache.resource.clone());
            if !ns.is_empty() {
                key = key.within(&ns);
            }
            // The index and the store are fed by the same events; an object the index knows
            // but the store no longer has was deleted in between.
            let Some(child) = cache.store.get(&key) else {
                continue;
            };
            if child.labels().get(PARENT_UID_LABEL) != Some(&uid) {
                continue;
            }
            if let Some(child_uid) = child.uid()
                && !seen.insert(child_uid)
            {
                continue;
            }
            out.extend(observed_json(&child, &cache.resource));
        }
    }
    out
}

/// A child as the JSON a plugin observes (`apiVersion` and `kind` set); none, with a warning,
/// for one that cannot be encoded — not expected of an object decoded from JSON, and said
/// rather than lost. Reconciles and the canary observe through this.
pub(super) fn observed_json(
    child: &DynamicObject,
    resource: &kube::discovery::ApiResource,
) -> Option<Value> {
    crate::k8s::typed_json(child, resource)
        .inspect_err(|e| {
            tracing::warn!(child = %child.name_any(), error = %e, "an observed child cannot be encoded; left out");
        })
        .ok()
}

/// Runs the pipeline on a blocking thread (plugin calls are synchronous), recording calls.
async fn run_pipeline(
    ctx: &KindCtx,
    pipeline: Arc<Pipeline>,
    phase: Phase,
    parent: Value,
    observed: Vec<Value>,
) -> Result<Outcome, Error> {
    let metrics = ctx.shared.metrics.clone();
    let now = windlass_contract::now_rfc3339();
    let span = tracing::Span::current();
    tokio::task::spawn_blocking(move || {
        let _entered = span.enter();
        pipeline.run_observed(
            Input::new(phase, &parent, &observed, &now),
            &|plugin, stats, outcome| {
                metrics.record_call(plugin.name(), stats, outcome);
            },
        )
    })
    .await
    .map_err(|e| Error::Join(e.to_string()))?
    .map_err(Error::from)
}

/// Server-side applies every desired object the parent may write, decorated with owner (see
/// [`apply::claim`]), labels, provenance and the applied stamp — except those the cluster
/// already holds exactly as they would be applied ([`apply::up_to_date`]).
///
/// # Guarantees
/// Before anything is written, every desired object that was not observed as the parent's is
/// read by name: if it exists and is not the parent's, the whole apply is refused
/// ([`Error::NotOwned`]) and nothing is written. Objects are applied with the parent's own field
/// manager; `force` only where the parent is the controller (or the host's record of an
/// outliving object), so drift on its own children is put back; creations and labels on
/// objects of the parent's children are applied without force.
async fn apply_all(
    ctx: &KindCtx,
    outcome: &Outcome,
    parent: &ParentRef,
    observed: &[Value],
    finalizing: bool,
) -> Result<(), Error> {
    let family = apply::family(observed, &parent.uid);
    let manager = apply::field_manager(&parent.uid);
    let find = |d: &Desired| {
        let id = d.object.key();
        observed.iter().find(|o| id.is(o))
    };
    // Reads of what was not observed: does something of that name exist already?
    let reads = outcome.desired.iter().map(|desired| async {
        let claim = apply::claim(desired, find(desired), &parent.uid, &family, finalizing);
        if !matches!(claim, Claim::New(_)) {
            return Ok::<_, Error>((claim, None));
        }
        let api = api_for(
            ctx,
            &desired.object.kind,
            desired.object.namespace.as_deref(),
        )
        .await?;
        let existing = api
            .get_opt(&desired.object.name)
            .await
            .map_err(|source| Error::Apply {
                object: windlass_policy::describe(&desired.object),
                source,
            })?
            .and_then(|o| serde_json::to_value(o).ok());
        let claim = apply::claim(desired, existing.as_ref(), &parent.uid, &family, finalizing);
        Ok((claim, existing))
    });
    let claims = futures::future::try_join_all(reads).await?;
    let mut writes = Vec::new();
    // A labels-only edit of a Pod ends up with the Pod's labels and the edit's together: the
    // traffic check judges those.
    let mut pod_labels = Vec::new();
    for (desired, (claim, read)) in outcome.desired.iter().zip(claims) {
        let (ownership, force) = match claim {
            Claim::NotOwned(why) => {
                return Err(Error::NotOwned {
                    plugin: desired.plugin.clone(),
                    object: windlass_policy::describe(&desired.object),
                    why,
                });
            }
            Claim::New(ownership) => (ownership, false),
            Claim::Owned(Ownership::LabelsOnly) => (Ownership::LabelsOnly, false),
            Claim::Owned(ownership) => (ownership, true),
        };
        // What exists: as observed, or as read when the cache has not seen it yet (a reconcile
        // right after the create) — which is up to date as much as an observed one.
        let existing = read.as_ref().or_else(|| find(desired));
        let mut object = apply::decorate(desired, parent, ownership);
        if let Some(existing) = existing {
            apply::keep_immutable(&mut object, existing);
        }
        apply::stamp(&mut object);
        let skip = existing.is_some_and(|e| apply::up_to_date(&object, std::slice::from_ref(e)));
        // After the stamp: the precondition is about this write, not part of what the host
        // applies (with it in the stamp, every child created without one would be written
        // again on the next reconcile).
        if let Some(existing) = existing.filter(|_| force) {
            apply::precondition(&mut object, existing);
        }
        ctx.shared.metrics.record_write(&desired.object.kind, !skip);
        if !skip {
            if let Some(merged) = existing.and_then(|e| apply::pod_with_labels_of(&object, e)) {
                pod_labels.push((desired, merged));
            }
            writes.push((desired, object, force));
        }
    }
    tracing::debug!(
        unchanged = outcome.desired.len() - writes.len(),
        changed = writes.len(),
        "skipping applies that would change nothing"
    );
    let desired_writes: Vec<&Desired> = writes.iter().map(|(d, _, _)| *d).collect();
    check_derived(ctx, &desired_writes, parent, observed).await?;
    check_cron_names(ctx, &desired_writes, parent).await?;
    let views: Vec<(&Desired, &Value)> = writes
        .iter()
        .filter(|(d, _, _)| !pod_labels.iter().any(|(p, _)| std::ptr::eq(*p, *d)))
        .map(|(d, object, _)| (*d, object))
        .chain(pod_labels.iter().map(|(d, merged)| (*d, merged)))
        .collect();
    check_traffic(ctx, &views, parent).await?;
    let writes = writes.into_iter().map(|(desired, object, force)| {
        let mut params = PatchParams::apply(&manager);
        params.force = force;
        async move {
            let describe = windlass_policy::describe(&desired.object);
            let api = api_for(
                ctx,
                &desired.object.kind,
                desired.object.namespace.as_deref(),
            )
            .await?;
            api.patch(&desired.object.name, &params, &Patch::Apply(&object))
                .await
                .map(|_| ())
                .map_err(|source| Error::Apply {
                    object: describe,
                    source,
                })
        }
    });
    futures::future::try_join_all(writes).await.map(|_| ())
}

/// Before a StatefulSet is written: every Pod and claim it would make by a derived name
/// ([`apply::derived`]) that exists, and was not observed as the parent's, is judged
/// ([`apply::heir`]). Someone else's refuses the whole apply before any write — the StatefulSet
/// controller would otherwise mount another application's volume and put its own owner
/// reference on it, so that the volume goes when this parent does. A claim the parent's
/// namesake retained, taken over on purpose, is labelled as the parent's.
///
/// Only what is written is checked: an apply skipped as unchanged makes no new names, and a
/// StatefulSet's names are checked again whenever its replicas or templates change.
async fn check_derived(
    ctx: &KindCtx,
    writes: &[&Desired],
    parent: &ParentRef,
    observed: &[Value],
) -> Result<(), Error> {
    let seen = |kind: &str, name: &str| {
        observed.iter().any(|o| {
            windlass_policy::kind_of(o) == kind
                && o.pointer("/metadata/name").and_then(Value::as_str) == Some(name)
        })
    };
    let wanted: Vec<(&Desired, apply::Derived)> = writes
        .iter()
        .flat_map(|d| apply::derived(d).into_iter().map(move |x| (*d, x)))
        .filter(|(_, x)| !seen(x.kind, &x.name))
        .collect();
    let reads = wanted.iter().map(|(desired, x)| async move {
        let namespace = desired.object.namespace.as_deref();
        let api = api_for(ctx, x.kind, namespace).await?;
        let existing = api
            .get_opt(&x.name)
            .await
            .map_err(|source| Error::Apply {
                object: format!("{} {}/{}", x.kind, namespace.unwrap_or_default(), x.name),
                source,
            })?
            .and_then(|o| serde_json::to_value(o).ok());
        Ok::<_, Error>(existing.map(|e| apply::heir(&e, parent)))
    });
    let judged = futures::future::try_join_all(reads).await?;
    let mut adopt = Vec::new();
    for ((desired, x), heir) in wanted.iter().zip(judged) {
        match heir {
            None | Some(apply::Heir::Ours) => {}
            Some(apply::Heir::Adopt) => adopt.push((*desired, x)),
            Some(apply::Heir::Foreign(why)) => {
                return Err(Error::NotOwned {
                    plugin: desired.plugin.clone(),
                    object: windlass_policy::describe(&desired.object),
                    why: format!(
                        "{}: would make {} {}/{}, which {why}",
                        x.field,
                        x.kind,
                        desired.object.namespace.as_deref().unwrap_or_default(),
                        x.name
                    ),
                });
            }
        }
    }
    for (desired, x) in adopt {
        let api = api_for(ctx, x.kind, desired.object.namespace.as_deref()).await?;
        let patch =
            serde_json::json!({"metadata": {"labels": {apply::PARENT_UID_LABEL: parent.uid}}});
        api.patch(&x.name, &PatchParams::default(), &Patch::Merge(&patch))
            .await
            .map_err(|source| Error::Apply {
                object: format!("{} {}", x.kind, x.name),
                source,
            })?;
        tracing::info!(claim = %x.name, "took over a claim the parent's namesake retained");
    }
    Ok(())
}

/// Before a CronJob is written: a Job of the namespace named as the CronJob controller names
/// its Jobs (`<cron>-<minutes>`, [`apply::cron_job_name`]) that is not the parent's refuses the
/// whole apply, as a StatefulSet's derived names do. One list of the namespace's Jobs, only when
/// a CronJob is written.
async fn check_cron_names(
    ctx: &KindCtx,
    writes: &[&Desired],
    parent: &ParentRef,
) -> Result<(), Error> {
    let crons: Vec<&&Desired> = writes
        .iter()
        .filter(|d| d.object.kind == "batch/v1/CronJob")
        .collect();
    let Some(first) = crons.first() else {
        return Ok(());
    };
    let namespace = first.object.namespace.as_deref();
    let api = api_for(ctx, "batch/v1/Job", namespace).await?;
    let jobs = api
        .list(&Default::default())
        .await
        .map_err(|source| Error::Apply {
            object: format!("batch/v1/Job {}", namespace.unwrap_or_default()),
            source,
        })?;
    for desired in crons {
        let cron = &desired.object.name;
        for job in &jobs.items {
            let name = job.name_any();
            if !apply::cron_job_name(cron, &name) || job.namespace().as_deref() != namespace {
                continue;
            }
            let Ok(value) = serde_json::to_value(job) else {
                continue;
            };
            if apply::cron_job_is_ours(&value, cron, &parent.uid) {
                continue;
            }
            return Err(Error::NotOwned {
                plugin: desired.plugin.clone(),
                object: windlass_policy::describe(&desired.object),
                why: format!(
                    "spec.schedule: the CronJob controller names its Jobs {cron}-<minutes>; batch/v1/Job {}/{name} exists and is not this parent's",
                    namespace.unwrap_or_default()
                ),
            });
        }
    }
    Ok(())
}

/// Before pods are written (a Pod, or a workload's template): a Service of the namespace that
/// is not the parent's and whose selector matches their labels, or that they name for their DNS
/// names (`subdomain`, a StatefulSet's `serviceName`), refuses the whole apply naming it —
/// the pods would receive another application's traffic, or answer to its DNS names; so does a
/// NetworkPolicy not the parent's whose pod selector, or a peer's within the namespace, matches
/// their labels ([`apply::joins_policy`]) — they would get another application's network
/// access. One list each of the namespace's Services and NetworkPolicies, only when something
/// with pods is written.
async fn check_traffic(
    ctx: &KindCtx,
    writes: &[(&Desired, &Value)],
    parent: &ParentRef,
) -> Result<(), Error> {
    let with_pods: Vec<(&Desired, apply::PodIdentity<'_>)> = writes
        .iter()
        .filter_map(|(d, object)| Some((*d, apply::pod_identity(&d.object.kind, object)?)))
        .collect();
    let Some(namespace) = parent.namespace.as_deref() else {
        return Ok(());
    };
    if with_pods.is_empty() {
        return Ok(());
    }
    let api = api_for(ctx, "v1/Service", Some(namespace)).await?;
    let services = api
        .list(&Default::default())
        .await
        .map_err(|source| Error::Apply {
            object: format!("v1/Service {namespace}"),
            source,
        })?;
    let foreign: Vec<Value> = services
        .items
        .iter()
        .filter(|s| s.labels().get(PARENT_UID_LABEL) != Some(&parent.uid))
        // A Service that selects the parent's pods by its uid chose them: no hijack.
        .filter(|s| {
            s.data
                .pointer("/spec/selector")
                .and_then(|sel| sel.get(PARENT_UID_LABEL))
                .and_then(Value::as_str)
                != Some(parent.uid.as_str())
        })
        .filter_map(|s| serde_json::to_value(s).ok())
        .collect();
    let policies = api_for(ctx, "networking.k8s.io/v1/NetworkPolicy", Some(namespace))
        .await?
        .list(&Default::default())
        .await
        .map_err(|source| Error::Apply {
            object: format!("networking.k8s.io/v1/NetworkPolicy {namespace}"),
            source,
        })?;
    let foreign_policies: Vec<Value> = policies
        .items
        .iter()
        .filter(|p| p.labels().get(PARENT_UID_LABEL) != Some(&parent.uid))
        .filter_map(|p| serde_json::to_value(p).ok())
        .collect();
    for (desired, identity) in &with_pods {
        let why = foreign
            .iter()
            .find_map(|s| apply::joins(identity, s))
            .or_else(|| {
                foreign_policies
                    .iter()
                    .find_map(|p| apply::joins_policy(identity, p))
            });
        if let Some(why) = why {
            return Err(Error::NotOwned {
                plugin: desired.plugin.clone(),
                object: windlass_policy::describe(&desired.object),
                why,
            });
        }
    }
    Ok(())
}

/// A deleting parent's finalize phase failed: the plugin the error names holds it (none: the
/// host's own calls).
async fn report_stuck_by(obj: &DynamicObject, ctx: &KindCtx, e: &Error) {
    let holders: Vec<String> = match e {
        Error::Pipeline(p) => p.plugin().map(str::to_string).into_iter().collect(),
        Error::NotOwned { plugin, .. } => vec![plugin.clone()],
        _ => Vec::new(),
    };
    finalizer::report_stuck(obj, ctx, &holders, e.reason(), &e.to_string()).await;
}

/// The API of a kind in a namespace, with the scope discovery reports. A namespace given for a
/// cluster-scoped kind, or missing for a namespaced one, is an error, never a cluster-wide API.
pub(super) async fn api_for(
    ctx: &KindCtx,
    kind: &str,
    namespace: Option<&str>,
) -> Result<Api<DynamicObject>, Error> {
    let (ar, namespaced) = ctx.shared.discovery.resolve(kind).await?;
    let client = ctx.shared.client.clone();
    match crate::k8s::api(client, &ar, namespace, namespaced) {
        Some(api) => Ok(api),
        None => Err(Error::Discovery {
            kind: kind.to_string(),
            why: format!(
                "the kind is {}, but the object {}",
                if namespaced {
                    "namespaced"
                } else {
                    "cluster-scoped"
                },
                match namespace {
                    Some(ns) if !ns.is_empty() => format!("names namespace {ns}"),
                    _ => "names no namespace".to_string(),
                }
            ),
        }),
    }
}

/// Deletes children no plugin wants any more, each only if it is still the object observed
/// (a precondition on its uid: one deleted and re-created by someone else is left alone).
async fn prune(ctx: &KindCtx, plan: &[&Value]) -> Result<(), Error> {
    delete_children(ctx, plan, "pruning a child no plugin wants any more").await
}

/// Deletes each of `children` (observed objects of the parent) in the background, only if it
/// is still the object observed (a uid precondition): one gone already, or replaced by another
/// object of that name, is nothing of the parent's to delete.
pub(super) async fn delete_children(
    ctx: &KindCtx,
    children: &[&Value],
    why: &str,
) -> Result<(), Error> {
    for object in children {
        let key = windlass_policy::ObjectKey::of(object);
        let api = api_for(ctx, &key.kind, key.namespace.as_deref()).await?;
        tracing::info!(child = %key, "{why}");
        let params = DeleteParams {
            preconditions: Some(Preconditions {
                uid: object
                    .pointer("/metadata/uid")
                    .and_then(Value::as_str)
                    .map(str::to_string),
                resource_version: None,
            }),
            ..DeleteParams::background()
        };
        match api.delete(&key.name, &params).await {
            Ok(_) => {}
            Err(kube::Error::Api(s)) if s.code == 404 || s.code == 409 => {}
            Err(source) => {
                return Err(Error::Prune {
                    object: key.to_string(),
                    source,
                });
            }
        }
    }
    Ok(())
}

/// The API of the parent's kind in the parent's scope (which a parent from the watch fits).
pub(super) fn parent_api(obj: &DynamicObject, ctx: &KindCtx) -> Result<Api<DynamicObject>, Error> {
    let namespace = obj.namespace();
    crate::k8s::api(
        ctx.shared.client.clone(),
        &ctx.resource,
        namespace.as_deref(),
        ctx.namespaced,
    )
    .ok_or_else(|| Error::Discovery {
        kind: ctx.parent.key(),
        why: format!("parent {} does not fit its kind's scope", obj.name_any()),
    })
}

pub(super) async fn write_status(
    obj: &DynamicObject,
    ctx: &KindCtx,
    patch: &Value,
) -> Result<(), Error> {
    parent_api(obj, ctx)?
        .patch_status(
            &obj.name_any(),
            &PatchParams::default(),
            &Patch::Merge(patch),
        )
        .await?;
    Ok(())
}

/// On failure: a condition naming the plugin and the reason, and a Warning event. Nothing else
/// changes.
async fn report_failure(obj: &DynamicObject, parent: &Value, ctx: &KindCtx, error: &Error) {
    if let Err(e) = write_status(obj, ctx, &failure_patch(parent, error)).await {
        tracing::warn!(error = %e, "writing the failure condition");
    }
    publish_warning(obj, ctx, error.reason(), &error.to_string()).await;
}

/// A Warning event on the parent from the host itself.
pub(super) async fn publish_warning(obj: &DynamicObject, ctx: &KindCtx, reason: &str, note: &str) {
    let event = Event {
        type_: EventType::Warning,
        reason: reason.to_string(),
        note: Some(truncate(note, 1000)),
        action: "Reconcile".into(),
        secondary: None,
    };
    if let Err(e) = ctx
        .shared
        .recorder
        .publish(&event, &obj.object_ref(&ctx.resource))
        .await
    {
        tracing::debug!(error = %e, "publishing an event");
    }
}

fn failure_patch(parent: &Value, error: &Error) -> Value {
    status::after_failure(parent, error, &windlass_contract::now_rfc3339())
}

async fn publish_events(obj: &DynamicObject, ctx: &KindCtx, outcome: &Outcome) {
    let reference = obj.object_ref(&ctx.resource);
    let uid = obj.uid().unwrap_or_default();
    for reported in &outcome.events {
        let e = &reported.item;
        // One bucket per parent and plugin, as client-go's spam filter keys by event source:
        // a chatty plugin cannot silence the others.
        let key = format!("{uid}/{}", reported.plugin);
        if ctx.shared.events.take(&key, Instant::now()).is_err() {
            tracing::debug!(plugin = %reported.plugin, reason = %e.reason, "event dropped by the per-parent event rate limit");
            ctx.shared
                .metrics
                .record_refusal(&reported.plugin, "EventRate");
            continue;
        }
        let event = Event {
            type_: if e.warning {
                EventType::Warning
            } else {
                EventType::Normal
            },
            reason: e.reason.clone(),
            note: Some(truncate(
                &format!("{}: {}", reported.plugin, e.message),
                1000,
            )),
            action: "Reconcile".into(),
            secondary: None,
        };
        if let Err(err) = ctx.shared.recorder.publish(&event, &reference).await {
            tracing::debug!(error = %err, "publishing an event");
        }
    }
}

/// Cuts an event note to the API's limit in bytes (1,000 characters of non-ASCII text would
/// be over it, and the event refused).
fn truncate(s: &str, max: usize) -> String {
    windlass_policy::cut_message(s, max.min(windlass_policy::MAX_EVENT_NOTE))
}
