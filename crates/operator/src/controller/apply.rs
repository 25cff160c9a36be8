//! The API writes of a reconcile: server-side apply of the desired objects after the checks
//! that need a read (names in use, derived names, traffic), prune, status, events, and the API
//! of a kind in a scope. The decisions they act on are pure and live in `plan.rs`.

use std::{sync::Arc, time::Instant};
use windlass_policy::At as _;

use kube::{
    Api, Resource, ResourceExt,
    api::{DeleteParams, DynamicObject, Patch, PatchParams, Preconditions},
};
use serde_json::Value;

use super::{
    context::KindCtx,
    error::{DiscoveryError, ReconcileError},
    plan::{self, Claim, PARENT_UID_LABEL, ParentRef},
    status, traffic, unchanged,
};
use windlass_policy::pipeline::{Desired, Outcome};

/// Server-side applies every desired object the parent may write, decorated with owner (see
/// [`plan::claim`]), labels, provenance and the applied stamp — except those the cluster
/// already holds exactly as they would be applied ([`plan::up_to_date`]).
///
/// # Guarantees
/// Before anything is written, every desired object that was not observed as the parent's is
/// read by name: if it exists and is not the parent's, the whole apply is refused
/// ([`ReconcileError::NotOwned`]) and nothing is written. Objects are applied with the parent's own field
/// manager; `force` only where the parent is the controller (or the host's record of an
/// outliving object), so drift on its own children is put back; creations and labels on
/// objects of the parent's children are applied without force. When the inputs of these
/// decisions are those of the parent's last apply that wrote and read nothing, nothing is
/// decided again: nothing is written this time either ([`unchanged`]).
pub(super) async fn all(
    ctx: &KindCtx,
    outcome: &Outcome,
    parent: &ParentRef,
    observed: &[Value],
    finalizing: bool,
) -> Result<(), ReconcileError> {
    let relists = ctx.caches.iter().map(|c| c.index.relists()).sum();
    let inputs = unchanged::apply_inputs(&outcome.desired, parent, observed, finalizing, relists);
    if let Some(inputs) = &inputs
        && ctx.remembered.wrote_nothing_for(&parent.uid, inputs)
    {
        for desired in &outcome.desired {
            ctx.shared.metrics.record_write(&desired.object.kind, false);
        }
        tracing::debug!(
            unchanged = outcome.desired.len(),
            changed = 0,
            "skipping applies that would change nothing: the inputs of the last apply that wrote nothing"
        );
        return Ok(());
    }
    let family = plan::family(observed, &parent.uid);
    let manager = plan::field_manager(&parent.uid);
    let find = |d: &Desired| {
        let id = d.object.key();
        observed.iter().find(|o| id.is(o))
    };
    // Reads of what was not observed: does something of that name exist already?
    let reads = outcome.desired.iter().map(|desired| async {
        let claim = plan::claim(desired, find(desired), &parent.uid, &family, finalizing);
        if !matches!(claim, Claim::New(_)) {
            return Ok::<_, ReconcileError>((claim, None));
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
            .map_err(|source| ReconcileError::Apply {
                object: windlass_policy::describe(&desired.object),
                source,
            })?
            .and_then(|o| serde_json::to_value(o).ok());
        let claim = plan::claim(desired, existing.as_ref(), &parent.uid, &family, finalizing);
        Ok((claim, existing))
    });
    let claims = futures::future::try_join_all(reads).await?;
    let read_any = claims.iter().any(|(_, read)| read.is_some());
    let mut writes = Vec::new();
    // A labels-only edit of a Pod ends up with the Pod's labels and the edit's together: the
    // traffic check judges those.
    let mut pod_labels = Vec::new();
    for (desired, (claim, read)) in outcome.desired.iter().zip(claims) {
        // What exists: as observed, or as read when the cache has not seen it yet (a reconcile
        // right after the create) — which is up to date as much as an observed one.
        let existing = read.as_ref().or_else(|| find(desired));
        let (mut object, force) =
            plan::to_apply(desired, claim, existing, parent).map_err(|why| {
                ReconcileError::NotOwned {
                    plugin: desired.plugin.clone(),
                    object: windlass_policy::describe(&desired.object),
                    why,
                }
            })?;
        let skip = existing.is_some_and(|e| plan::up_to_date(&object, std::slice::from_ref(e)));
        // After the stamp: the precondition is about this write, not part of what the host
        // applies (with it in the stamp, every child created without one would be written
        // again on the next reconcile).
        if let Some(existing) = existing.filter(|_| force) {
            plan::precondition(&mut object, existing);
        }
        ctx.shared.metrics.record_write(&desired.object.kind, !skip);
        if !skip {
            if let Some(merged) = existing.and_then(|e| plan::pod_with_labels_of(&object, e)) {
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
    let wrote_nothing = writes.is_empty() && !read_any;
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
    // Two waves: role bindings after everything else. The API server lets a binding be made
    // without the `bind` verb only when the binder holds what the bound role grants, which it
    // can check only once the role exists: applied together, a new binding fails every time.
    let (bindings, first): (Vec<_>, Vec<_>) = writes
        .into_iter()
        .partition(|(desired, _, _)| is_binding(&desired.object.kind));
    apply_all(ctx, &manager, first).await?;
    apply_all(ctx, &manager, bindings).await?;
    if let Some(inputs) = inputs.filter(|_| wrote_nothing) {
        ctx.remembered.wrote_nothing(&parent.uid, inputs);
    }
    Ok(())
}

/// A kind whose create the API server checks against the role it names.
fn is_binding(kind: &str) -> bool {
    matches!(
        kind,
        "rbac.authorization.k8s.io/v1/RoleBinding"
            | "rbac.authorization.k8s.io/v1/ClusterRoleBinding"
    )
}

/// Applies `writes` concurrently and lets every one finish (a failed one must not cancel the
/// others mid-request); the first error, if any.
async fn apply_all(
    ctx: &KindCtx,
    manager: &str,
    writes: Vec<(&Desired, Value, bool)>,
) -> Result<(), ReconcileError> {
    let writes = writes.into_iter().map(|(desired, object, force)| {
        let mut params = PatchParams::apply(manager);
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
                .map_err(|source| ReconcileError::Apply {
                    object: describe,
                    source,
                })
        }
    });
    futures::future::join_all(writes)
        .await
        .into_iter()
        .collect::<Result<Vec<()>, _>>()
        .map(|_| ())
}

/// Before a StatefulSet is written: every Pod and claim it would make by a derived name
/// ([`plan::derived`]) that exists, and was not observed as the parent's, is judged
/// ([`plan::heir`]). Someone else's refuses the whole apply before any write — the StatefulSet
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
) -> Result<(), ReconcileError> {
    let seen = |kind: &str, name: &str| {
        observed.iter().any(|o| {
            windlass_policy::kind_of(o) == kind
                && o.at("/metadata/name").and_then(Value::as_str) == Some(name)
        })
    };
    let wanted: Vec<(&Desired, plan::Derived)> = writes
        .iter()
        .flat_map(|d| plan::derived(d).into_iter().map(move |x| (*d, x)))
        .filter(|(_, x)| !seen(x.kind, &x.name))
        .collect();
    let reads = wanted.iter().map(|(desired, x)| async move {
        let namespace = desired.object.namespace.as_deref();
        let api = api_for(ctx, x.kind, namespace).await?;
        let existing = api
            .get_opt(&x.name)
            .await
            .map_err(|source| ReconcileError::Apply {
                object: format!("{} {}/{}", x.kind, namespace.unwrap_or_default(), x.name),
                source,
            })?
            .and_then(|o| serde_json::to_value(o).ok());
        Ok::<_, ReconcileError>(existing.map(|e| plan::heir(&e, parent)))
    });
    let judged = futures::future::try_join_all(reads).await?;
    let mut adopt = Vec::new();
    for ((desired, x), heir) in wanted.iter().zip(judged) {
        match heir {
            None | Some(plan::Heir::Ours) => {}
            Some(plan::Heir::Adopt) => adopt.push((*desired, x)),
            Some(plan::Heir::Foreign(why)) => {
                return Err(ReconcileError::NotOwned {
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
            serde_json::json!({"metadata": {"labels": {plan::PARENT_UID_LABEL: parent.uid}}});
        api.patch(&x.name, &PatchParams::default(), &Patch::Merge(&patch))
            .await
            .map_err(|source| ReconcileError::Apply {
                object: format!("{} {}", x.kind, x.name),
                source,
            })?;
        tracing::info!(claim = %x.name, "took over a claim the parent's namesake retained");
    }
    Ok(())
}

/// Before a CronJob is written: a Job of the namespace named as the CronJob controller names
/// its Jobs (`<cron>-<minutes>`, [`plan::cron_job_name`]) that is not the parent's refuses the
/// whole apply, as a StatefulSet's derived names do. One list of the namespace's Jobs, only when
/// a CronJob is written.
async fn check_cron_names(
    ctx: &KindCtx,
    writes: &[&Desired],
    parent: &ParentRef,
) -> Result<(), ReconcileError> {
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
        .map_err(|source| ReconcileError::Apply {
            object: format!("batch/v1/Job {}", namespace.unwrap_or_default()),
            source,
        })?;
    for desired in crons {
        let cron = &desired.object.name;
        for job in &jobs.items {
            let name = job.name_any();
            if !plan::cron_job_name(cron, &name) || job.namespace().as_deref() != namespace {
                continue;
            }
            let Ok(value) = serde_json::to_value(job) else {
                continue;
            };
            if plan::cron_job_is_ours(&value, cron, &parent.uid) {
                continue;
            }
            return Err(ReconcileError::NotOwned {
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
/// their labels ([`plan::joins_policy`]) — they would get another application's network
/// access. Read from the host's watch index of Services and NetworkPolicies (`traffic.rs`),
/// only when something with pods is written.
async fn check_traffic(
    ctx: &KindCtx,
    writes: &[(&Desired, &Value)],
    parent: &ParentRef,
) -> Result<(), ReconcileError> {
    let with_pods: Vec<(&Desired, plan::PodIdentity<'_>)> = writes
        .iter()
        .filter_map(|(d, object)| Some((*d, plan::pod_identity(&d.object.kind, object)?)))
        .collect();
    let Some(namespace) = parent.namespace.as_deref() else {
        return Ok(());
    };
    if with_pods.is_empty() {
        return Ok(());
    }
    let pods: Vec<plan::PodIdentity<'_>> = with_pods.iter().map(|(_, i)| i.clone()).collect();
    let index = match ctx.shared.traffic().await {
        Ok(traffic) => traffic.others(namespace, &parent.uid, &pods),
        Err(why) => {
            tracing::warn!(%why, "the traffic check's index is not available: listing instead");
            None
        }
    };
    let (services, foreign_policies) = match index {
        Some(both) => both,
        None => listed(ctx, namespace, &parent.uid).await?,
    };
    let foreign: Vec<_> = services
        .into_iter()
        // A Service that selects the parent's pods by its uid chose them: no hijack.
        .filter(|s| {
            s.at("/spec/selector")
                .and_then(|sel| sel.get(PARENT_UID_LABEL))
                .and_then(Value::as_str)
                != Some(parent.uid.as_str())
        })
        .collect();
    for (desired, identity) in &with_pods {
        let why = foreign
            .iter()
            .find_map(|s| plan::joins(identity, s))
            .or_else(|| {
                foreign_policies
                    .iter()
                    .find_map(|p| plan::joins_policy(identity, p))
            });
        if let Some(why) = why {
            return Err(ReconcileError::NotOwned {
                plugin: desired.plugin.clone(),
                object: windlass_policy::describe(&desired.object),
                why,
            });
        }
    }
    Ok(())
}

/// The namespace's Services and NetworkPolicies not labelled `uid`, listed from the API: what
/// the check reads while its index is not available or not sure to be current. A failed list
/// fails the reconcile.
async fn listed(
    ctx: &KindCtx,
    namespace: &str,
    uid: &str,
) -> Result<(Vec<Arc<Value>>, Vec<Arc<Value>>), ReconcileError> {
    let mut both = Vec::new();
    for (kind, cut) in [
        (
            "v1/Service",
            traffic::cut_service as fn(&DynamicObject) -> Value,
        ),
        ("networking.k8s.io/v1/NetworkPolicy", traffic::cut_policy),
    ] {
        let list = api_for(ctx, kind, Some(namespace))
            .await?
            .list(&Default::default())
            .await
            .map_err(|source| ReconcileError::Apply {
                object: format!("{kind} {namespace}"),
                source,
            })?;
        both.push(traffic::others_of(&list.items, cut, uid));
    }
    let policies = both.pop().unwrap_or_default();
    let services = both.pop().unwrap_or_default();
    Ok((services, policies))
}

/// The API of a kind in a namespace, with the scope discovery reports. A namespace given for a
/// cluster-scoped kind, or missing for a namespaced one, is an error, never a cluster-wide API.
pub(super) async fn api_for(
    ctx: &KindCtx,
    kind: &str,
    namespace: Option<&str>,
) -> Result<Api<DynamicObject>, ReconcileError> {
    let (ar, namespaced) = ctx.shared.discovery.resolve(kind).await?;
    let client = ctx.shared.client.clone();
    match crate::k8s::api(client, &ar, namespace, namespaced) {
        Some(api) => Ok(api),
        None => Err(ReconcileError::from(DiscoveryError::Unfit {
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
        })),
    }
}

/// Deletes children no plugin wants any more, each only if it is still the object observed
/// (a precondition on its uid: one deleted and re-created by someone else is left alone).
pub(super) async fn prune(ctx: &KindCtx, plan: &[&Value]) -> Result<(), ReconcileError> {
    delete_children(ctx, plan, "pruning a child no plugin wants any more").await
}

/// Deletes each of `children` (observed objects of the parent) in the background, only if it
/// is still the object observed (a uid precondition): one gone already, or replaced by another
/// object of that name, is nothing of the parent's to delete.
pub(super) async fn delete_children(
    ctx: &KindCtx,
    children: &[&Value],
    why: &str,
) -> Result<(), ReconcileError> {
    for object in children {
        let key = windlass_policy::ObjectKey::of(object);
        let api = api_for(ctx, &key.kind, key.namespace.as_deref()).await?;
        tracing::info!(child = %key, "{why}");
        let params = DeleteParams {
            preconditions: Some(Preconditions {
                uid: object
                    .at("/metadata/uid")
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
                return Err(ReconcileError::Prune {
                    object: key.to_string(),
                    source,
                });
            }
        }
    }
    Ok(())
}

/// The API of the parent's kind in the parent's scope (which a parent from the watch fits).
pub(super) fn parent_api(
    obj: &DynamicObject,
    ctx: &KindCtx,
) -> Result<Api<DynamicObject>, ReconcileError> {
    let namespace = obj.namespace();
    crate::k8s::api(
        ctx.shared.client.clone(),
        &ctx.resource,
        namespace.as_deref(),
        ctx.namespaced,
    )
    .ok_or_else(|| {
        DiscoveryError::Unfit {
            kind: ctx.parent.key(),
            why: format!("parent {} does not fit its kind's scope", obj.name_any()),
        }
        .into()
    })
}

/// After a run every plugin completed: the status it makes written, unless the parent holds it
/// already (counted either way), then the plugins' events published.
pub(super) async fn status_and_events(
    obj: &DynamicObject,
    ctx: &KindCtx,
    parent: &Value,
    outcome: &Outcome,
) -> Result<(), ReconcileError> {
    let patch = status::after_success(parent, outcome, &windlass_contract::now_rfc3339());
    let status_unchanged = plan::merge_is_noop(parent, &patch);
    ctx.shared.metrics.record_write("status", !status_unchanged);
    if status_unchanged {
        tracing::debug!("status unchanged");
    } else {
        write_status(obj, ctx, &patch).await?;
        tracing::debug!("status written");
    }
    publish_events(obj, ctx, outcome).await;
    tracing::debug!(events = outcome.events.len(), "events published");
    Ok(())
}

/// Merge-patches the parent's status subresource.
pub(super) async fn write_status(
    obj: &DynamicObject,
    ctx: &KindCtx,
    patch: &Value,
) -> Result<(), ReconcileError> {
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
pub(super) async fn report_failure(
    obj: &DynamicObject,
    parent: &Value,
    ctx: &KindCtx,
    error: &ReconcileError,
) {
    if let Err(e) = write_status(obj, ctx, &failure_patch(parent, error)).await {
        tracing::warn!(error = %e, "writing the failure condition");
    }
    publish_warning(obj, ctx, error.reason(), &error.to_string()).await;
}

/// A Warning event on the parent from the host itself.
pub(super) async fn publish_warning(obj: &DynamicObject, ctx: &KindCtx, reason: &str, note: &str) {
    let reference = obj.object_ref(&ctx.resource);
    if let Err(e) = ctx
        .shared
        .recorder
        .publish(&reference, true, reason, "Reconcile", note)
        .await
    {
        tracing::debug!(error = %e, "publishing an event");
    }
}

fn failure_patch(parent: &Value, error: &ReconcileError) -> Value {
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
        let note = format!("{}: {}", reported.plugin, e.message);
        if let Err(err) = ctx
            .shared
            .recorder
            .publish(&reference, e.warning, &e.reason, "Reconcile", &note)
            .await
        {
            tracing::debug!(error = %err, "publishing an event");
        }
    }
}
