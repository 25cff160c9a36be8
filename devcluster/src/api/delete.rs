//! Delete (finalizers, propagation policies) and the hooks that serve and withdraw CRDs.

use super::{Cluster, DeleteOpts, has_finalizers, now};
use crate::crd;
use crate::error::{ApiError, Result};
use crate::resources::ResourceType;
use crate::store::Change;
use serde_json::{Value, json};
use std::sync::Arc;

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
        if rt.kind == "CustomResourceDefinition" && rt.group == "apiextensions.k8s.io" {
            if obj["metadata"].get("deletionTimestamp").is_some() {
                return;
            }
            if let Ok(new_rt) = crd::resource_type(obj) {
                self.registry.upsert(new_rt);
            }
        }
    }

    /// Hooks after a deletion: a deleted CRD stops being served and its objects go.
    pub(super) fn after_delete(&self, rt: &ResourceType, obj: &Value) {
        if rt.kind == "CustomResourceDefinition"
            && rt.group == "apiextensions.k8s.io"
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
