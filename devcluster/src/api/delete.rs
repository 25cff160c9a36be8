//! Delete (finalizers, propagation policies) and the hooks that serve and withdraw CRDs.

use super::{Cluster, DeleteOpts, has_finalizers, now};
use crate::crd;
use crate::error::{ApiError, Result};
use crate::resources::ResourceType;
use crate::store::Change;
use serde_json::{Value, json};
use std::sync::Arc;

/// The finalizer kube-apiserver puts on a deleted CRD until its objects are gone.
pub(crate) const CRD_CLEANUP: &str = "customresourcecleanup.apiextensions.k8s.io";

pub(crate) fn is_crd(rt: &ResourceType) -> bool {
    rt.kind == "CustomResourceDefinition" && rt.group == "apiextensions.k8s.io"
}

impl Cluster {
    /// Deletes an object: at once, or — with finalizers, or Foreground/Orphan propagation —
    /// by setting `deletionTimestamp` and leaving the rest to finalizers and the GC.
    ///
    /// # Errors
    /// 404, 409 on a failed precondition.
    pub fn delete(
        &self,
        rt: &ResourceType,
        ns: &str,
        name: &str,
        opts: &DeleteOpts,
    ) -> Result<Arc<Value>> {
        let (stored, deleted) = self.store.mutate(&rt.key(), ns, name, opts.dry_run, |cur| {
            let cur = cur.ok_or_else(|| ApiError::not_found(&rt.group, &rt.plural, name))?;
            let meta = &cur["metadata"];
            if opts.uid.as_deref().is_some_and(|u| Some(u) != meta["uid"].as_str()) {
                return Err(ApiError::conflict(&rt.group, &rt.plural, name, "Precondition failed: UID in precondition does not match the UID in record"));
            }
            if opts.resource_version.as_deref().is_some_and(|r| Some(r) != meta["resourceVersion"].as_str()) {
                return Err(ApiError::conflict(&rt.group, &rt.plural, name, "Precondition failed: ResourceVersion in precondition does not match the ResourceVersion in record"));
            }
            let mut obj = (**cur).clone();
            let extra = match opts.propagation.as_deref() {
                Some("Foreground") => Some("foregroundDeletion"),
                Some("Orphan") => Some("orphan"),
                _ => None,
            };
            if let Some(f) = extra {
                let list = obj["metadata"]["finalizers"].as_array().cloned().unwrap_or_default();
                if !list.iter().any(|x| x == f) {
                    let mut list = list;
                    list.push(json!(f));
                    obj["metadata"]["finalizers"] = Value::Array(list);
                }
            }
            if rt.kind == "Namespace" {
                obj["spec"]["finalizers"] = json!(["kubernetes"]);
                obj["status"]["phase"] = json!("Terminating");
            }
            if is_crd(rt) {
                // As kube-apiserver does: the CRD stays, Terminating, until the collector has
                // deleted its objects (their own finalizers included); then it goes.
                let list = obj["metadata"]["finalizers"].as_array().cloned().unwrap_or_default();
                if !list.iter().any(|x| x == CRD_CLEANUP) {
                    let mut list = list;
                    list.push(json!(CRD_CLEANUP));
                    obj["metadata"]["finalizers"] = Value::Array(list);
                }
                let mut conditions: Vec<Value> = obj["status"]["conditions"]
                    .as_array()
                    .cloned()
                    .unwrap_or_default();
                conditions.retain(|c| c["type"] != "Terminating");
                conditions.push(json!({"type": "Terminating", "status": "True",
                    "reason": "InstanceDeletionInProgress",
                    "message": "CustomResource deletion is in progress",
                    "lastTransitionTime": now()}));
                obj["status"]["conditions"] = Value::Array(conditions);
            }
            if !has_finalizers(&obj) {
                return Ok((Change::Delete, true));
            }
            if meta.get("deletionTimestamp").is_none() {
                obj["metadata"]["deletionTimestamp"] = Value::String(now());
                obj["metadata"]["deletionGracePeriodSeconds"] = json!(0);
            } else if extra.is_none() {
                return Ok((Change::Keep, false));
            }
            Ok((Change::Put(obj), false))
        })?;
        let stored = stored.ok_or_else(|| ApiError::internal("delete stored nothing"))?;
        if deleted && !opts.dry_run {
            self.after_delete(rt, &stored);
        }
        Ok(stored)
    }

    /// Hooks after a stored write: a CRD starts (or keeps) being served.
    pub(super) fn after_write(&self, rt: &ResourceType, obj: &Value) {
        if is_crd(rt) {
            if obj["metadata"].get("deletionTimestamp").is_some() {
                return;
            }
            if let Ok(new_rt) = crd::resource_type(obj) {
                self.registry.upsert(new_rt);
            }
        }
    }

    /// Hooks after a deletion: a deleted CRD stops being served and its objects go (there are
    /// none left when the collector removed it; a CRD whose cleanup finalizer someone removed
    /// by hand takes them along, as its data would be unreachable).
    pub(crate) fn after_delete(&self, rt: &ResourceType, obj: &Value) {
        if is_crd(rt)
            && let Ok(gone) = crd::resource_type(obj)
        {
            let key = gone.key();
            let (items, _) = self.store.list(&key, None);
            for item in items {
                let ns = item["metadata"]["namespace"].as_str().unwrap_or_default();
                let name = item["metadata"]["name"].as_str().unwrap_or_default();
                let _ = self
                    .store
                    .mutate(&key, ns, name, false, |_| Ok((Change::Delete, ())));
            }
            self.registry.remove(&key);
        }
    }
}
