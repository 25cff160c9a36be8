//! The host's finalizer on parents whose plugins finalize: added before anything is created,
//! so a deletion waits for the finalize phase; removed only when every finalizing plugin said
//! `finalized`.

use kube::{
    ResourceExt,
    api::{DynamicObject, Patch, PatchParams},
};
use serde_json::{Value, json};

use super::{
    Error, apply,
    kinds::KindCtx,
    parent::{delete_children, parent_api},
};

/// The finalizer the host holds while a plugin has cleanup to do.
pub const FINALIZER: &str = "windlass.dev/finalize";

/// The garbage collector's finalizer of a deletion that orphans dependents.
const ORPHAN: &str = "orphan";

/// Whether the host is to reconcile `obj` at all, adding its finalizer first when the parent
/// lives and a plugin of its pipeline finalizes (`finalizing`). False for a deleting parent the
/// host holds no finalizer on: nothing of the host's is left to do for it.
pub(super) async fn hold(
    obj: &DynamicObject,
    ctx: &KindCtx,
    finalizing: bool,
) -> Result<bool, Error> {
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
        let held: Vec<&Value> = apply::held(observed).collect();
        delete_children(
            ctx,
            &held,
            "deleting what the host held, the finalize phase done",
        )
        .await?;
    }
    set(obj, ctx, false).await?;
    let uid = obj.uid().unwrap_or_default();
    ctx.shared.reconciles.forget_parent(&uid);
    ctx.shared.events.forget_parent(&uid);
    Ok(())
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
