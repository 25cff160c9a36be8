//! The host's finalizer on parents whose plugins finalize: added before anything is created,
//! so a deletion waits for the finalize phase; removed only when every finalizing plugin said
//! `finalized`.

use kube::{
    ResourceExt,
    api::{DeleteParams, DynamicObject, Patch, PatchParams, Preconditions},
};
use serde_json::{Value, json};
use windlass_policy::{ObjectKey, pipeline::Pipeline};

use super::{Error, apply, kinds::KindCtx, parent::parent_api};

/// The finalizer the host holds while a plugin has cleanup to do.
pub const FINALIZER: &str = "windlass.dev/finalize";

/// The garbage collector's finalizer of a deletion that orphans dependents.
const ORPHAN: &str = "orphan";

/// Whether the host is to reconcile `obj` at all, adding its finalizer first when the parent
/// lives and a plugin of `pipeline` finalizes. False for a deleting parent the host holds no
/// finalizer on: nothing of the host's is left to do for it.
pub(super) async fn hold(
    obj: &DynamicObject,
    ctx: &KindCtx,
    pipeline: &Pipeline,
) -> Result<bool, Error> {
    let deleting = obj.metadata.deletion_timestamp.is_some();
    let held = obj.finalizers().iter().any(|f| f == FINALIZER);
    if deleting {
        return Ok(held);
    }
    let finalizes = pipeline.stages.iter().any(|s| s.plugin.info().finalizes);
    if finalizes && !held {
        set(obj, ctx, true).await?;
    }
    Ok(true)
}

/// After a finalize phase every plugin completed: deletes what the host held for the parent
/// ([`apply::held`], among `observed`) as the garbage collector would have, unless the parent
/// is deleted with `orphan`; then removes the host's finalizer and forgets the parent's
/// rate-limit buckets. A failed delete keeps the finalizer: the next reconcile tries again.
pub(super) async fn release(
    obj: &DynamicObject,
    ctx: &KindCtx,
    observed: &[Value],
) -> Result<(), Error> {
    if !obj.finalizers().iter().any(|f| f == ORPHAN) {
        for held in apply::held(observed) {
            delete(ctx, held).await?;
        }
    }
    set(obj, ctx, false).await?;
    let uid = obj.uid().unwrap_or_default();
    ctx.shared.reconciles.forget_parent(&uid);
    ctx.shared.events.forget_parent(&uid);
    Ok(())
}

/// Deletes one held object, only if it is still the object observed (its uid), in the
/// background: a StatefulSet's own retention policy then decides about its claims.
async fn delete(ctx: &KindCtx, object: &Value) -> Result<(), Error> {
    let key = ObjectKey::of(object);
    let (ar, namespaced) = ctx.shared.discovery.resolve(&key.kind).await?;
    let describe = key.to_string();
    let api = crate::k8s::api(
        ctx.shared.client.clone(),
        &ar,
        key.namespace.as_deref(),
        namespaced,
    )
    .ok_or_else(|| Error::Discovery {
        kind: key.kind.clone(),
        why: format!("{describe} does not fit its kind's scope"),
    })?;
    let params = DeleteParams {
        preconditions: object
            .pointer("/metadata/uid")
            .and_then(Value::as_str)
            .map(|uid| Preconditions {
                uid: Some(uid.to_string()),
                resource_version: None,
            }),
        ..DeleteParams::background()
    };
    match api.delete(&key.name, &params).await {
        Ok(_) => Ok(()),
        // Gone already, or replaced by another object of that name: nothing of ours to delete.
        Err(kube::Error::Api(e)) if e.code == 404 || e.code == 409 => Ok(()),
        Err(source) => Err(Error::Prune {
            object: describe,
            source,
        }),
    }
}

/// Adds or removes the host's finalizer, guarded by the resourceVersion read so that another
/// controller's concurrent finalizer change is never overwritten.
async fn set(obj: &DynamicObject, ctx: &KindCtx, present: bool) -> Result<(), Error> {
    let mut finalizers: Vec<String> = obj.finalizers().to_vec();
    finalizers.retain(|f| f != FINALIZER);
    if present {
        finalizers.push(FINALIZER.to_string());
    }
    let patch =
        json!({"metadata": {"finalizers": finalizers, "resourceVersion": obj.resource_version()}});
    parent_api(obj, ctx)?
        .patch(
            &obj.name_any(),
            &PatchParams::default(),
            &Patch::Merge(&patch),
        )
        .await?;
    Ok(())
}
