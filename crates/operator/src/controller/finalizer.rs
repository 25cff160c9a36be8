//! The host's finalizer on parents whose plugins finalize: added before anything is created,
//! so a deletion waits for the finalize phase; removed only when every finalizing plugin said
//! `finalized` — or when an administrator releases the parent keeping its data.
//!
//! # Guarantees
//! - A finalize phase that has not completed `Settings::finalize_stuck_after` after the
//!   deletion is said: the `FinalizeStuck` condition and a Warning event name the plugins that
//!   hold it (not finalized, failing, or not loaded) and why, and the `finalize_stuck` gauge
//!   counts the parent under each of them.
//! - `windlass.dev/release: keep-data` on a deleting parent removes the host's finalizer
//!   without running the finalize phase, after taking the parent's owner reference off every
//!   data-bearing child ([`keeps_data`]): those are left in place, orphaned, never deleted.
//!   What else the parent controls goes with it, as the garbage collector decides.

use kube::{
    Api, ResourceExt,
    api::{DynamicObject, Patch, PatchParams},
};
use serde_json::{Value, json};
use windlass_policy::At as _;

use super::{
    apply::{api_for, delete_children, parent_api, publish_warning, write_status},
    context::KindCtx,
    error::ReconcileError,
    plan, status,
};

/// The finalizer the host holds while a plugin has cleanup to do.
pub const FINALIZER: &str = "windlass.dev/finalize";

/// The annotation an administrator sets on a deleting parent to release it without its
/// finalize phase; [`KEEP_DATA`] is the one value.
pub const RELEASE_ANNOTATION: &str = "windlass.dev/release";

/// Release, keeping every data-bearing child.
pub const KEEP_DATA: &str = "keep-data";

/// The condition type of a finalize phase held past the threshold.
pub const STUCK: &str = "FinalizeStuck";

/// Kinds whose objects hold data whoever made them: claims, snapshots, and Secrets (a
/// generated password is what opens a kept volume).
const DATA_KINDS: &[&str] = &[
    "v1/PersistentVolumeClaim",
    "v1/Secret",
    "snapshot.storage.k8s.io/v1/VolumeSnapshot",
];

/// The garbage collector's finalizer of a deletion that orphans dependents.
const ORPHAN: &str = "orphan";

/// Whether the host is to reconcile `obj` at all, adding its finalizer first when the parent
/// lives and a plugin of its pipeline finalizes (`finalizing`). False for a deleting parent the
/// host holds no finalizer on: nothing of the host's is left to do for it.
pub(super) async fn hold(
    obj: &DynamicObject,
    ctx: &KindCtx,
    finalizing: bool,
) -> Result<bool, ReconcileError> {
    let deleting = obj.metadata.deletion_timestamp.is_some();
    let held = obj.finalizers().iter().any(|f| f == FINALIZER);
    if deleting {
        return Ok(held);
    }
    if finalizing && !held {
        set(obj, ctx, true).await?;
    }
    Ok(true)
}

/// After a finalize phase every plugin completed: removes the host's finalizer, then deletes
/// what the host held for the parent ([`plan::held`], among `observed`) as the garbage
/// collector would have, unless the parent is deleted with `orphan`, and forgets the parent's
/// rate-limit buckets.
///
/// The finalizer goes first: while it is on, a failed step means another finalize phase, which
/// would make again what was deleted (a plugin returns its children in the finalize phase too)
/// and leave it behind. A delete that fails after it leaves the held object in place, without
/// an owner: kept, never lost.
pub(super) async fn release(
    obj: &DynamicObject,
    ctx: &KindCtx,
    observed: &[Value],
) -> Result<(), ReconcileError> {
    set(obj, ctx, false).await?;
    if !obj.finalizers().iter().any(|f| f == ORPHAN) {
        let held: Vec<&Value> = plan::held(observed).collect();
        delete_children(
            ctx,
            &held,
            "deleting what the host held, the finalize phase done",
        )
        .await?;
    }
    let uid = obj.uid().unwrap_or_default();
    ctx.shared.reconciles.forget_parent(&uid);
    ctx.shared.events.forget_parent(&uid);
    Ok(())
}

/// Whether the parent, read again from the API, is still this one (same uid) and still holds
/// the host's finalizer.
pub(super) async fn still_held(obj: &DynamicObject, ctx: &KindCtx) -> Result<bool, ReconcileError> {
    let current = parent_api(obj, ctx)?.get_opt(&obj.name_any()).await?;
    Ok(current
        .is_some_and(|p| p.uid() == obj.uid() && p.finalizers().iter().any(|f| f == FINALIZER)))
}

/// Whether an administrator asked to release this parent: `Ok(true)` for
/// `windlass.dev/release: keep-data`, an error naming the annotation for any other value.
pub(super) fn release_asked(obj: &DynamicObject) -> Result<bool, ReconcileError> {
    match obj
        .annotations()
        .get(RELEASE_ANNOTATION)
        .map(String::as_str)
    {
        None => Ok(false),
        Some(KEEP_DATA) => Ok(true),
        Some(other) => Err(ReconcileError::Release {
            parent: obj.name_any(),
            why: format!(
                "annotation {RELEASE_ANNOTATION} is {other:?}; the one release the host knows is {KEEP_DATA:?}, so nothing was released"
            ),
        }),
    }
}

/// Whether an observed child holds data: a StatefulSet with claim templates
/// ([`plan::holds_data`]) or an object of [`DATA_KINDS`].
pub fn keeps_data(child: &Value) -> bool {
    plan::holds_data(child) || DATA_KINDS.contains(&windlass_policy::kind_of(child).as_str())
}

/// The administrator's way out of a finalize phase that does not complete: every data-bearing
/// child among `observed` loses the parent's owner reference (under its resourceVersion, so a
/// concurrent change is never overwritten), then the host's finalizer is removed. Nothing is
/// deleted by the host; a Warning event lists what was kept. A failed patch keeps the
/// finalizer: the next reconcile tries again.
pub(super) async fn release_keeping_data(
    obj: &DynamicObject,
    ctx: &KindCtx,
    observed: &[Value],
) -> Result<(), ReconcileError> {
    let uid = obj.uid().unwrap_or_default();
    let mut kept = Vec::new();
    for child in observed.iter().filter(|c| keeps_data(c)) {
        let key = windlass_policy::ObjectKey::of(child);
        kept.push(key.to_string());
        let refs: Vec<Value> = child
            .at("/metadata/ownerReferences")
            .and_then(Value::as_array)
            .cloned()
            .unwrap_or_default();
        let remaining: Vec<Value> = refs
            .iter()
            .filter(|r| r["uid"].as_str() != Some(uid.as_str()))
            .cloned()
            .collect();
        if remaining.len() == refs.len() {
            continue;
        }
        let patch = json!({"metadata": {
            "ownerReferences": remaining,
            "resourceVersion": child.at("/metadata/resourceVersion"),
        }});
        let api = api_for(ctx, &key.kind, key.namespace.as_deref()).await?;
        api.patch(&key.name, &PatchParams::default(), &Patch::Merge(&patch))
            .await
            .map_err(|source| ReconcileError::Apply {
                object: key.to_string(),
                source,
            })?;
        tracing::info!(child = %key, "orphaned a data-bearing child: the parent is released keeping its data");
    }
    set(obj, ctx, false).await?;
    ctx.shared.reconciles.forget_parent(&uid);
    ctx.shared.events.forget_parent(&uid);
    ctx.remembered.stuck(obj, &[]);
    let note = format!(
        "released by {RELEASE_ANNOTATION}={KEEP_DATA} without its finalize phase; kept, orphaned: {}",
        if kept.is_empty() {
            "nothing data-bearing".to_string()
        } else {
            kept.join(", ")
        }
    );
    tracing::warn!(parent = %obj.name_any(), "{note}");
    publish_warning(obj, ctx, "Released", &note).await;
    Ok(())
}

/// After a deleting parent's reconcile that did not complete its finalize phase: once
/// `finalize_stuck_after` has passed since the deletion, says so — the `FinalizeStuck`
/// condition (reason: why, message: who and the way out), a Warning event when it first turns
/// true, and the `finalize_stuck` gauge under each of `holders` (an empty plugin label for the
/// host's own API calls).
pub(super) async fn report_stuck(
    obj: &DynamicObject,
    ctx: &KindCtx,
    holders: &[String],
    reason: &str,
    why: &str,
) {
    let Some(since) = obj.metadata.deletion_timestamp.as_ref() else {
        return;
    };
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| i64::try_from(d.as_secs()).unwrap_or(i64::MAX));
    let elapsed = now - since.0.as_second();
    let threshold =
        i64::try_from(ctx.shared.settings.finalize_stuck_after.as_secs()).unwrap_or(i64::MAX);
    if elapsed < threshold {
        return;
    }
    let holders: Vec<String> = if holders.is_empty() {
        vec![String::new()]
    } else {
        holders.to_vec()
    };
    ctx.remembered.stuck(obj, &holders);
    let who = match holders
        .iter()
        .filter(|h| !h.is_empty())
        .cloned()
        .collect::<Vec<_>>()
    {
        named if named.is_empty() => "the host's own API calls".to_string(),
        named => format!("plugin {}", named.join(", ")),
    };
    let namespace = obj
        .namespace()
        .map(|ns| format!(" -n {ns}"))
        .unwrap_or_default();
    let message = windlass_policy::cut_message(
        &format!(
            "the finalize phase has not completed since the deletion at {}: held by {who}: {why}. \
             To release the parent keeping every data-bearing child: kubectl annotate {}.{} {}{namespace} {RELEASE_ANNOTATION}={KEEP_DATA}",
            since.0,
            ctx.resource.plural,
            ctx.resource.group,
            obj.name_any(),
        ),
        windlass_policy::MAX_CONDITION_MESSAGE,
    );
    let parent = match parent_api(obj, ctx) {
        Ok(api) => match api.get(&obj.name_any()).await {
            Ok(p) => serde_json::to_value(p).unwrap_or_default(),
            Err(e) => {
                tracing::warn!(error = %e, "reading the parent for its FinalizeStuck condition");
                return;
            }
        },
        Err(e) => {
            tracing::warn!(error = %e, "reading the parent for its FinalizeStuck condition");
            return;
        }
    };
    let parent = &parent;
    let was_stuck = parent
        .at("/status/conditions")
        .and_then(Value::as_array)
        .is_some_and(|c| {
            c.iter()
                .any(|c| c["type"] == STUCK && c["status"] == "True")
        });
    let generation = parent
        .at("/metadata/generation")
        .and_then(Value::as_i64)
        .unwrap_or(0);
    let conditions = std::collections::BTreeMap::from([(
        STUCK.to_string(),
        status::Cond {
            status: "True",
            reason: reason.to_string(),
            message: message.clone(),
        },
    )]);
    let patch = json!({"status": {"conditions": status::merge_conditions(
        parent,
        &conditions,
        generation,
        &windlass_contract::now_rfc3339(),
    )}});
    if !plan::merge_is_noop(parent, &patch)
        && let Err(e) = write_status(obj, ctx, &patch).await
    {
        tracing::warn!(error = %e, "writing the FinalizeStuck condition");
    }
    if !was_stuck {
        tracing::warn!(parent = %obj.name_any(), "{message}");
        publish_warning(obj, ctx, STUCK, &message).await;
    }
}

/// Adds or removes the host's finalizer on the parent ([`set_on`] its API).
async fn set(obj: &DynamicObject, ctx: &KindCtx, present: bool) -> Result<(), ReconcileError> {
    Ok(set_on(&parent_api(obj, ctx)?, obj, present).await?)
}

/// Adds or removes the host's finalizer on `obj` through `api` (its kind's, in its namespace),
/// guarded by the resourceVersion read so that another controller's concurrent finalizer
/// change is never overwritten. On a conflict (the object changed since it was read: this
/// reconcile's own status write, or anyone's) it reads the object again and tries again, up to
/// three times in all; another object of the name by then is left alone.
pub(super) async fn set_on(
    api: &Api<DynamicObject>,
    obj: &DynamicObject,
    present: bool,
) -> Result<(), kube::Error> {
    let mut current = obj.clone();
    for attempt in 1..=3 {
        let mut finalizers: Vec<String> = current.finalizers().to_vec();
        finalizers.retain(|f| f != FINALIZER);
        if present {
            finalizers.push(FINALIZER.to_string());
        }
        let patch = json!({"metadata": {
            "finalizers": finalizers,
            "resourceVersion": current.resource_version(),
        }});
        match api
            .patch(
                &obj.name_any(),
                &PatchParams::default(),
                &Patch::Merge(&patch),
            )
            .await
        {
            Ok(_) => return Ok(()),
            Err(kube::Error::Api(s)) if s.code == 409 && attempt < 3 => {
                current = api.get(&obj.name_any()).await?;
                if current.uid() != obj.uid() {
                    // Another object of that name now: nothing of this parent's to change.
                    return Ok(());
                }
            }
            Err(e) => return Err(e),
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn with_annotation(value: Option<&str>) -> DynamicObject {
        let mut meta = json!({"name": "orders", "namespace": "shop"});
        if let Some(v) = value {
            meta["annotations"] = json!({ RELEASE_ANNOTATION: v });
        }
        serde_json::from_value(
            json!({"apiVersion": "example.com/v1", "kind": "Thing", "metadata": meta}),
        )
        .unwrap()
    }

    #[test]
    fn only_keep_data_releases_and_any_other_value_is_refused_naming_the_annotation() {
        assert!(!release_asked(&with_annotation(None)).unwrap());
        assert!(release_asked(&with_annotation(Some("keep-data"))).unwrap());
        for other in ["yes", "Keep-Data", ""] {
            let e = release_asked(&with_annotation(Some(other))).unwrap_err();
            assert_eq!(e.reason(), "ReleaseRefused");
            let message = e.to_string();
            assert!(message.contains("orders"), "{message}");
            assert!(message.contains(RELEASE_ANNOTATION), "{message}");
            assert!(message.contains("nothing was released"), "{message}");
        }
    }

    #[test]
    fn data_bearing_children_are_claims_snapshots_secrets_and_sets_with_claim_templates() {
        let kept = [
            json!({"apiVersion": "v1", "kind": "PersistentVolumeClaim"}),
            json!({"apiVersion": "v1", "kind": "Secret"}),
            json!({"apiVersion": "snapshot.storage.k8s.io/v1", "kind": "VolumeSnapshot"}),
            json!({"apiVersion": "apps/v1", "kind": "StatefulSet",
                "spec": {"volumeClaimTemplates": [{"metadata": {"name": "data"}}]}}),
        ];
        for object in &kept {
            assert!(keeps_data(object), "{object}");
        }
        let not = [
            json!({"apiVersion": "v1", "kind": "ConfigMap"}),
            json!({"apiVersion": "apps/v1", "kind": "StatefulSet", "spec": {}}),
            json!({"apiVersion": "apps/v1", "kind": "Deployment"}),
            json!({"apiVersion": "v1", "kind": "Pod"}),
        ];
        for object in &not {
            assert!(!keeps_data(object), "{object}");
        }
    }
}
