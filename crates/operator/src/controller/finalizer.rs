//! The host's finalizer on parents whose plugins finalize: added before anything is created,
//! so a deletion waits for the finalize phase; removed only when every finalizing plugin said
//! `finalized`.

use kube::{
    ResourceExt,
    api::{DynamicObject, Patch, PatchParams},
};
use serde_json::json;
use windlass_policy::pipeline::Pipeline;

use super::{Error, kinds::KindCtx, parent::parent_api};

/// The finalizer the host holds while a plugin has cleanup to do.
pub const FINALIZER: &str = "windlass.dev/finalize";

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

/// Removes the host's finalizer after a finalize phase every plugin completed, and forgets the
/// parent's rate-limit buckets.
pub(super) async fn release(obj: &DynamicObject, ctx: &KindCtx) -> Result<(), Error> {
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
