//! A WasmPlugin's status as the host writes it: by server-side apply of the status subresource,
//! so a field the host no longer states (no error any more, no version serving) goes without a
//! hand-kept list of fields to null.
//!
//! # Guarantees
//! - Two field managers write it, each the whole of what it states: [`LOADER`] (what serves,
//!   the last load error, `Ready`) and [`RETIRE`] (the `Retiring` condition). `conditions` is an
//!   atomic list, so each writes the whole list, merged with what it read, and takes it over.
//! - A field the loader stated before and leaves out now is removed by the API server.
//!
//! # Why the hand-over
//! Hosts before this one wrote the same status with merge patches: every field they wrote is
//! owned by an `Update` entry of `managedFields`. Server-side apply removes only fields its own
//! manager owned, so an apply alone would leave an old `lastError` in place for ever. Before its
//! first apply the loader therefore hands every `Update` entry of the status subresource to its
//! own `Apply` entry, in one JSON patch of `managedFields` guarded by the resourceVersion (what
//! `kubectl` and client-go's `csaupgrade` do when they move client-side apply to server-side).
//!
//! # Assumptions
//! Only the host writes a WasmPlugin's status; a field someone else wrote there through an
//! update is the loader's to keep or remove from then on.

use std::collections::BTreeMap;

use k8s_openapi::apimachinery::pkg::apis::meta::v1::{Condition, FieldsV1, ManagedFieldsEntry};
use kube::{
    Api, Resource, ResourceExt,
    api::{Patch, PatchParams},
};
use serde_json::{Value, json};

use super::{error::LoadError, shared::Shared, status};
use crate::crd::{self, WasmPlugin};

/// The field manager of the loader's status: what serves, the last load error, `Ready`.
pub const LOADER: &str = "windlass/loader";

/// The field manager of the `Retiring` condition (`retire.rs`).
pub const RETIRE: &str = "windlass/retire";

/// How often a hand-over that lost a race with another write is tried again.
const HAND_OVER_TRIES: usize = 3;

/// Writes what the loader knows of WasmPlugin `wp`: the version serving (if any), the error
/// of the last load (if any), what the diff gate found for the serving version, and `Ready`; a failed load is told by a Warning event on the
/// WasmPlugin too, saying what `Ready` says (so `kubectl get events` and `describe` show it;
/// retries that fail the same way count into its series).
pub(super) async fn write_loaded(
    shared: &Shared,
    wp: &WasmPlugin,
    error: Option<&LoadError>,
    rollout: Option<crd::RolloutStatus>,
) -> Result<(), kube::Error> {
    let name = wp.name_any();
    let serving = shared.registry.serving(&name);
    let pipeline = shared.registry.pipeline(&wp.spec.parent.key());
    let plugin = pipeline.as_ref().and_then(|p| {
        p.stages
            .iter()
            .find(|s| Some(s.plugin.digest()) == serving.as_ref().map(|(d, _)| d.as_str()))
            .map(|s| s.plugin.clone())
    });
    let (ready, reason, message) = match (error, &serving) {
        (None, Some((digest, _))) => ("True", "Loaded".to_string(), format!("serving {digest}")),
        (Some(e), Some((digest, _))) => (
            "True",
            e.reason().to_string(),
            format!("new version refused, still serving {digest}: {e}"),
        ),
        (Some(e), None) => ("False", e.reason().to_string(), e.to_string()),
        (None, None) => (
            "False",
            "NotLoaded".to_string(),
            "no version loaded".to_string(),
        ),
    };
    let typed = crd::WasmPluginStatus {
        digest: serving.as_ref().map(|(d, _)| d.clone()),
        plugin: plugin.as_ref().map(|p| p.name().to_string()),
        version: plugin.as_ref().map(|p| p.info().version.clone()),
        child_kinds: plugin
            .as_ref()
            .map(|p| p.info().child_kinds.clone())
            .unwrap_or_default(),
        // The gate's finding for the version that serves, not for one it refused since.
        rollout: rollout.filter(|r| serving.as_ref().is_some_and(|(d, _)| *d == r.digest)),
        last_error: error.map(|e| {
            windlass_policy::cut_message(&e.to_string(), windlass_policy::MAX_CONDITION_MESSAGE)
        }),
        observed_generation: wp.metadata.generation,
        conditions: merged_conditions(wp, "Ready", ready, reason.clone(), &message)?,
    };
    if error.is_some() {
        if let Err(e) = shared
            .recorder
            .publish(&wp.object_ref(&()), true, &reason, "Load", &message)
            .await
        {
            tracing::debug!(wasm_plugin = %name, error = %e, "publishing an event");
        }
    }
    hand_over_legacy(shared, wp).await;
    apply(shared, &name, LOADER, &typed).await
}

/// Sets condition `kind` of `wp` as [`RETIRE`], unless it already says exactly that.
pub(super) async fn write_retiring(
    shared: &Shared,
    wp: &WasmPlugin,
    kind: &str,
    reason: &str,
    message: &str,
) -> Result<(), kube::Error> {
    let conditions = merged_conditions(wp, kind, "True", reason.to_string(), message)?;
    let unchanged = wp
        .status
        .as_ref()
        .is_some_and(|s| s.conditions == conditions);
    if unchanged {
        return Ok(());
    }
    let typed = crd::WasmPluginStatus {
        conditions,
        ..Default::default()
    };
    apply(shared, &wp.name_any(), RETIRE, &typed).await
}

/// `wp`'s conditions with `kind` set, merged as a parent's are: the transition time moves only
/// on a flip.
fn merged_conditions(
    wp: &WasmPlugin,
    kind: &str,
    value: &'static str,
    reason: String,
    message: &str,
) -> Result<Vec<Condition>, kube::Error> {
    let new = BTreeMap::from([(
        kind.to_string(),
        status::Cond {
            status: value,
            reason,
            message: windlass_policy::cut_message(message, windlass_policy::MAX_CONDITION_MESSAGE),
        },
    )]);
    let current = serde_json::to_value(wp).map_err(kube::Error::SerdeError)?;
    serde_json::from_value(status::merge_conditions(
        &current,
        &new,
        wp.metadata.generation.unwrap_or_default(),
        &windlass_contract::now_rfc3339(),
    ))
    .map_err(kube::Error::SerdeError)
}

/// Server-side apply of `typed` to the status of WasmPlugin `name` as `manager`.
async fn apply(
    shared: &Shared,
    name: &str,
    manager: &str,
    typed: &crd::WasmPluginStatus,
) -> Result<(), kube::Error> {
    let body = json!({
        "apiVersion": WasmPlugin::api_version(&()),
        "kind": WasmPlugin::kind(&()),
        "metadata": {"name": name},
        "status": typed,
    });
    // Forced: the host is the one writer of this status (see `# Assumptions`); the two managers
    // take `conditions` over from each other.
    Api::<WasmPlugin>::all(shared.client.clone())
        .patch_status(
            name,
            &PatchParams::apply(manager).force(),
            &Patch::Apply(&body),
        )
        .await?;
    Ok(())
}

/// Hands the status fields an older host wrote with merge patches to [`LOADER`] (see
/// `# Why the hand-over`). Nothing is read or written unless `wp` shows such fields. A failure
/// is logged and left: the apply that follows still writes the status, and the next write
/// tries the hand-over again.
async fn hand_over_legacy(shared: &Shared, wp: &WasmPlugin) {
    if hand_over(wp.managed_fields(), LOADER).is_none() {
        return;
    }
    let name = wp.name_any();
    let api: Api<WasmPlugin> = Api::all(shared.client.clone());
    let mut last = None;
    for _ in 0..HAND_OVER_TRIES {
        let result = async {
            // The watched copy may be behind: the guard below needs the current one.
            let current = api.get(&name).await?;
            let Some(entries) = hand_over(current.managed_fields(), LOADER) else {
                return Ok(());
            };
            let patch = serde_json::from_value(json!([
                {"op": "test", "path": "/metadata/resourceVersion", "value": current.resource_version()},
                {"op": "replace", "path": "/metadata/managedFields", "value": entries},
            ]))
            .map_err(kube::Error::SerdeError)?;
            api.patch(&name, &PatchParams::default(), &Patch::Json::<()>(patch))
                .await
                .map(|_| ())
        }
        .await;
        match result {
            Ok(()) => {
                tracing::info!(wasm_plugin = %name, "status fields of an older host handed to server-side apply");
                return;
            }
            Err(e) => last = Some(e),
        }
    }
    if let Some(e) = last {
        tracing::warn!(wasm_plugin = %name, error = %e, "handing an older host's status fields to server-side apply");
    }
}

/// `entries` with every `Update` entry of the status subresource folded into `manager`'s
/// `Apply` entry of the status subresource (made if missing), or `None` when there is no such
/// `Update` entry. Pure.
pub fn hand_over(entries: &[ManagedFieldsEntry], manager: &str) -> Option<Vec<ManagedFieldsEntry>> {
    let legacy = |e: &ManagedFieldsEntry| {
        e.operation.as_deref() == Some("Update") && e.subresource.as_deref() == Some("status")
    };
    if !entries.iter().any(legacy) {
        return None;
    }
    let ours = |e: &ManagedFieldsEntry| {
        e.manager.as_deref() == Some(manager)
            && e.operation.as_deref() == Some("Apply")
            && e.subresource.as_deref() == Some("status")
    };
    let mut fields = json!({});
    let mut kept = Vec::new();
    let mut apply_entry = None;
    for e in entries {
        if legacy(e) || ours(e) {
            if let Some(FieldsV1(f)) = &e.fields_v1 {
                union(&mut fields, f);
            }
            if ours(e) {
                apply_entry = Some(e.clone());
            } else if apply_entry.is_none() {
                // The template of a new entry: the apiVersion the fields were written in.
                apply_entry = Some(ManagedFieldsEntry {
                    manager: Some(manager.to_string()),
                    operation: Some("Apply".to_string()),
                    ..e.clone()
                });
            }
        } else {
            kept.push(e.clone());
        }
    }
    let mut entry = apply_entry?;
    entry.fields_type = Some("FieldsV1".to_string());
    entry.fields_v1 = Some(FieldsV1(fields));
    kept.push(entry);
    Some(kept)
}

/// Adds the field set `from` to `into` (both `FieldsV1`: nested objects, `{}` at the leaves).
fn union(into: &mut Value, from: &Value) {
    let (Some(into), Some(from)) = (into.as_object_mut(), from.as_object()) else {
        return;
    };
    for (key, value) in from {
        union(into.entry(key.clone()).or_insert_with(|| json!({})), value);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn entry(
        manager: &str,
        operation: &str,
        subresource: Option<&str>,
        fields: Value,
    ) -> ManagedFieldsEntry {
        ManagedFieldsEntry {
            api_version: Some("windlass.dev/v1alpha1".into()),
            fields_type: Some("FieldsV1".into()),
            fields_v1: Some(FieldsV1(fields)),
            manager: Some(manager.into()),
            operation: Some(operation.into()),
            subresource: subresource.map(Into::into),
            time: None,
        }
    }

    #[test]
    fn an_older_hosts_status_fields_go_to_the_loaders_apply_entry() {
        let spec = entry("test", "Apply", None, json!({"f:spec": {"f:parent": {}}}));
        let old = entry(
            "kube-rs",
            "Update",
            Some("status"),
            json!({"f:status": {"f:lastError": {}, "f:digest": {}, "f:conditions": {}}}),
        );
        let entries = hand_over(&[spec.clone(), old], LOADER).expect("there is one to hand over");
        assert_eq!(entries.len(), 2);
        assert_eq!(entries[0], spec, "an entry of the spec is left as it was");
        let ours = &entries[1];
        assert_eq!(
            (
                ours.manager.as_deref(),
                ours.operation.as_deref(),
                ours.subresource.as_deref()
            ),
            (Some(LOADER), Some("Apply"), Some("status"))
        );
        assert_eq!(
            ours.fields_v1.as_ref().unwrap().0,
            json!({"f:status": {"f:lastError": {}, "f:digest": {}, "f:conditions": {}}})
        );
    }

    #[test]
    fn handed_over_fields_join_what_the_loader_already_applies() {
        let ours = entry(
            LOADER,
            "Apply",
            Some("status"),
            json!({"f:status": {"f:digest": {}, "f:conditions": {}}}),
        );
        let old = entry(
            "windlass",
            "Update",
            Some("status"),
            json!({"f:status": {"f:lastError": {}}}),
        );
        let other = entry(
            "someone",
            "Update",
            Some("status"),
            json!({"f:status": {"f:plugin": {}}}),
        );
        let entries = hand_over(&[old, ours, other], LOADER).unwrap();
        assert_eq!(entries.len(), 1, "{entries:?}");
        assert_eq!(
            entries[0].fields_v1.as_ref().unwrap().0,
            json!({"f:status": {"f:digest": {}, "f:conditions": {}, "f:lastError": {}, "f:plugin": {}}})
        );
    }

    #[test]
    fn nothing_is_handed_over_when_only_applies_own_the_status() {
        let ours = entry(
            LOADER,
            "Apply",
            Some("status"),
            json!({"f:status": {"f:digest": {}}}),
        );
        let retire = entry(
            RETIRE,
            "Apply",
            Some("status"),
            json!({"f:status": {"f:conditions": {}}}),
        );
        let spec = entry(
            "kubectl",
            "Update",
            None,
            json!({"f:spec": {"f:config": {}}}),
        );
        assert_eq!(hand_over(&[ours, retire, spec], LOADER), None);
    }
}
