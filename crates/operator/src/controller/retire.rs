//! A WasmPlugin's own finalizer: deleting a WasmPlugin waits for the finalize phase of its
//! kind's deleting parents, as a claim in use by a Pod waits for the Pod (Kubernetes'
//! `pvc-protection`).
//!
//! # Guarantees
//! - Every live WasmPlugin the host has seen carries [`IN_USE`]. While one is being deleted its
//!   plugin keeps serving, and the finalizer stays as long as a deleting parent of its kind
//!   holds the host's finalizer: a parent's finalize phase never loses a plugin half-way (which
//!   would leave it `Terminating` with no controller to finish or release it). The WasmPlugin's
//!   `Retiring` condition names the parents it waits for.
//! - When the last WasmPlugin of a kind has gone, the host takes its finalizer off the kind's
//!   live parents: with no plugin left, no controller would remove it on their deletion. Their
//!   children go by the garbage collector's rules from then on; a child the host held for a
//!   finalize phase (no owner reference) is left in place, never deleted.
//! - A deleting parent that never finalizes keeps the WasmPlugin too; the administrator's way
//!   out is the parent's release (`windlass.dev/release: keep-data`, see `finalizer.rs`).

use kube::{
    Api, ResourceExt,
    api::{DynamicObject, Patch, PatchParams},
};
use serde_json::{Value, json};

use super::{
    error::LoadError,
    finalizer::{self, FINALIZER},
    plugin_status,
    shared::Shared,
};
use crate::crd::WasmPlugin;

/// The finalizer the host keeps on WasmPlugins.
pub const IN_USE: &str = "windlass.dev/in-use";

/// The WasmPlugin condition of a deletion that waits for parents.
pub const RETIRING: &str = "Retiring";

/// Adds [`IN_USE`] to a live WasmPlugin that lacks it (guarded by its resourceVersion).
pub(super) async fn protect(shared: &Shared, wp: &WasmPlugin) -> Result<(), kube::Error> {
    if wp.metadata.deletion_timestamp.is_some() || wp.finalizers().iter().any(|f| f == IN_USE) {
        return Ok(());
    }
    let mut finalizers = wp.finalizers().to_vec();
    finalizers.push(IN_USE.to_string());
    patch_finalizers(shared, wp, finalizers).await
}

/// What one look at a deleting WasmPlugin found.
#[derive(Debug, PartialEq, Eq)]
pub(super) enum Step {
    /// Not deleting, or without the host's finalizer: nothing to do.
    Nothing,
    /// Deleting parents of its kind still hold the host's finalizer (`namespace/name`).
    Waiting(Vec<String>),
    /// The finalizer is removed; the WasmPlugin goes.
    Released,
}

/// One look at WasmPlugin `name`: read it, and if it is being deleted and no deleting parent
/// of its kind holds the host's finalizer, remove [`IN_USE`].
pub(super) async fn step(shared: &Shared, name: &str) -> Result<Step, LoadError> {
    let api: Api<WasmPlugin> = Api::all(shared.client.clone());
    let Some(wp) = api.get_opt(name).await? else {
        return Ok(Step::Nothing);
    };
    if wp.metadata.deletion_timestamp.is_none() || !wp.finalizers().iter().any(|f| f == IN_USE) {
        return Ok(Step::Nothing);
    }
    let kind = wp.spec.parent.key();
    // A kind the API server does not serve has no parents to wait for.
    let held: Vec<DynamicObject> = match shared.discovery.resolve_served(&kind).await? {
        Some((resource, _)) => Api::<DynamicObject>::all_with(shared.client.clone(), &resource)
            .list(&Default::default())
            .await?
            .items
            .into_iter()
            .filter(|p| p.finalizers().iter().any(|f| f == FINALIZER))
            .collect(),
        None => Vec::new(),
    };
    let deleting: Vec<&DynamicObject> = held
        .iter()
        .filter(|p| p.metadata.deletion_timestamp.is_some())
        .collect();
    if !deleting.is_empty() {
        let mut names: Vec<String> = deleting.iter().map(|p| describe(p)).collect();
        names.sort();
        show_waiting(shared, &wp, &names).await?;
        return Ok(Step::Waiting(names));
    }
    let finalizers = wp
        .finalizers()
        .iter()
        .filter(|f| *f != IN_USE)
        .cloned()
        .collect();
    patch_finalizers(shared, &wp, finalizers).await?;
    tracing::info!(
        wasm_plugin = name,
        "no parent's finalize phase needs it: deletion goes on"
    );
    Ok(Step::Released)
}

/// After the last WasmPlugin of `kind` went (none of the kind is left): takes the host's
/// finalizer off the kind's live parents, since no controller of the kind is left to remove it
/// on their deletion. Done again after 2 s for a parent a reconcile still in flight held again
/// meanwhile.
pub(super) async fn orphan_parents(shared: &Shared, kind: &str) -> Result<(), LoadError> {
    // Not served: no parents.
    let Some((resource, _)) = shared.discovery.resolve_served(kind).await? else {
        return Ok(());
    };
    let api: Api<DynamicObject> = Api::all_with(shared.client.clone(), &resource);
    for pass in 0..2 {
        if pass > 0 {
            tokio::time::sleep(std::time::Duration::from_secs(2)).await;
        }
        if shared.registry.kinds().contains_key(kind) {
            // A WasmPlugin of the kind came back: its controller holds what it needs.
            return Ok(());
        }
        for parent in api.list(&Default::default()).await?.items {
            if !parent.finalizers().iter().any(|f| f == FINALIZER) {
                continue;
            }
            let api: Api<DynamicObject> = match parent.namespace() {
                Some(ns) => Api::namespaced_with(shared.client.clone(), &ns, &resource),
                None => Api::all_with(shared.client.clone(), &resource),
            };
            finalizer::set_on(&api, &parent, false).await?;
            tracing::info!(parent = %describe(&parent), kind, "the last WasmPlugin of the kind went: the host's finalizer is off this parent");
        }
    }
    Ok(())
}

fn describe(p: &DynamicObject) -> String {
    match p.namespace() {
        Some(ns) => format!("{ns}/{}", p.name_any()),
        None => p.name_any(),
    }
}

/// The `Retiring` condition: which parents the deletion waits for (the first ten).
async fn show_waiting(shared: &Shared, wp: &WasmPlugin, names: &[String]) -> Result<(), LoadError> {
    let shown: Vec<&str> = names.iter().take(10).map(String::as_str).collect();
    let more = names.len().saturating_sub(shown.len());
    let message = format!(
        "deletion waits for the finalize phase of {} deleting parent(s) of {}: {}{}",
        names.len(),
        wp.spec.parent.key(),
        shown.join(", "),
        if more > 0 {
            format!(" and {more} more")
        } else {
            String::new()
        }
    );
    plugin_status::write_retiring(shared, wp, RETIRING, "WaitingForParents", &message).await?;
    Ok(())
}

async fn patch_finalizers(
    shared: &Shared,
    wp: &WasmPlugin,
    finalizers: Vec<String>,
) -> Result<(), kube::Error> {
    let patch: Value = json!({"metadata": {
        "finalizers": finalizers,
        "resourceVersion": wp.resource_version(),
    }});
    Api::<WasmPlugin>::all(shared.client.clone())
        .patch(
            &wp.name_any(),
            &PatchParams::default(),
            &Patch::Merge(&patch),
        )
        .await?;
    Ok(())
}
