//! Writes through a view — `events.k8s.io/v1` Events, stored as core `v1` Events: the body is
//! converted to the stored shape and written as the stored kind; reads convert back
//! (`ResourceType::present`).

use crate::api::{Cluster, WriteOpts};
use crate::error::{ApiError, Result};
use crate::events;
use crate::patch::{PatchType, patch_object};
use crate::resources::{ResourceType, View};
use serde_json::Value;
use std::sync::Arc;

/// How often a patch through a view is retried when the object changed under it.
const PATCH_ATTEMPTS: usize = 5;

/// The kind a view is stored as, and its version.
///
/// # Errors
/// 500 when the stored kind is not served (cannot happen with the built-in table).
pub(super) fn stored_kind(
    cluster: &Cluster,
    view: View,
) -> Result<(Arc<ResourceType>, &'static str)> {
    match view {
        View::EventsV1 => cluster
            .registry
            .find("", "v1", "events")
            .map(|rt| (rt, "v1"))
            .ok_or_else(|| ApiError::internal("core v1 events are not served")),
    }
}

/// A body in the view's shape, converted to the stored shape.
pub(super) fn to_stored(view: View, body: &Value) -> Value {
    match view {
        View::EventsV1 => events::to_core(body),
    }
}

/// A patch through a view: server-side apply converts the applied object; the other patch
/// types are applied to the object as the view shows it, then written back with the
/// resourceVersion read as a precondition (retried if the object changed meanwhile, unless the
/// patch itself set a resourceVersion).
///
/// # Errors
/// As `Cluster::patch` and `Cluster::update`.
#[allow(clippy::too_many_arguments)]
pub(super) fn patch(
    cluster: &Cluster,
    rt: &ResourceType,
    version: &str,
    view: View,
    ns: &str,
    name: &str,
    kind: PatchType,
    body: &[u8],
    opts: &WriteOpts,
) -> Result<Arc<Value>> {
    let (stored, stored_version) = stored_kind(cluster, view)?;
    if kind == PatchType::Apply {
        let applied: Value = serde_yaml::from_slice(body)
            .map_err(|e| ApiError::bad_request(format!("error decoding YAML: {e}")))?;
        let converted = serde_json::to_vec(&to_stored(view, &applied))
            .map_err(|e| ApiError::internal(e.to_string()))?;
        return cluster.patch(&stored, stored_version, ns, name, kind, &converted, opts);
    }
    let mut attempt = 0;
    loop {
        attempt += 1;
        let cur = cluster.get(&stored, ns, name)?;
        let shown = rt.present(&cur, version);
        let patched = patch_object(&shown, kind, body, true)?;
        let pinned = patched["metadata"]["resourceVersion"] != shown["metadata"]["resourceVersion"];
        let mut new = to_stored(view, &patched);
        if !pinned {
            new["metadata"]["resourceVersion"] = shown["metadata"]["resourceVersion"].clone();
        }
        match cluster.update(&stored, stored_version, ns, name, new, opts) {
            Err(e) if e.code == 409 && !pinned && attempt < PATCH_ATTEMPTS => continue,
            other => return other,
        }
    }
}
