//! Create, update, patch and server-side apply.

use super::{Cluster, WriteOpts, has_finalizers, now, random_suffix, rules, same_spec};
use crate::crd;
use crate::error::{ApiError, Result};
use crate::patch::apply::{self, Writer};
use crate::patch::{PatchType, patch_object};
use crate::resources::ResourceType;
use crate::store::Change;
use serde_json::{Value, json};
use std::sync::Arc;

impl Cluster {
    /// Creates an object.
    ///
    /// # Errors
    /// 409 AlreadyExists, 404 for a missing namespace, 422 for an invalid object.
    pub fn create(
        &self,
        rt: &ResourceType,
        version: &str,
        ns: Option<&str>,
        obj: Value,
        opts: &WriteOpts,
    ) -> Result<Arc<Value>> {
        self.create_inner(rt, version, ns, obj, opts, None)
    }

    /// Creates; `managed` is the managedFields of a server-side apply that creates.
    fn create_inner(
        &self,
        rt: &ResourceType,
        version: &str,
        ns: Option<&str>,
        mut obj: Value,
        opts: &WriteOpts,
        managed: Option<Value>,
    ) -> Result<Arc<Value>> {
        if !obj.is_object() {
            return Err(ApiError::bad_request("the body must be a JSON object"));
        }
        if !rt.builtin
            && self
                .store
                .get(
                    "apiextensions.k8s.io/customresourcedefinitions",
                    "",
                    &format!("{}.{}", rt.plural, rt.group),
                )
                .is_some_and(|crd| crd["metadata"].get("deletionTimestamp").is_some())
        {
            let name = obj["metadata"]["name"].as_str().unwrap_or_default();
            return Err(ApiError::forbidden(format!(
                "{}.{} \"{name}\" is forbidden: create not allowed while custom resource \
                 definition is terminating",
                rt.plural, rt.group
            )));
        }
        obj["apiVersion"] = Value::String(rt.api_version(version));
        obj["kind"] = Value::String(rt.kind.clone());
        if !obj["metadata"].is_object() {
            obj["metadata"] = json!({});
        }
        let ns = if rt.namespaced {
            let body_ns = obj["metadata"]["namespace"].as_str().map(String::from);
            match (ns, body_ns) {
                (Some(u), Some(b)) if u != b => {
                    return Err(ApiError::bad_request(
                        "the namespace of the provided object does not match the namespace sent on the request",
                    ));
                }
                (Some(u), _) => u.to_string(),
                (None, Some(b)) => b,
                (None, None) => "default".to_string(),
            }
        } else {
            String::new()
        };
        self.check_namespace(rt, &ns)?;
        let meta = &mut obj["metadata"];
        if meta["name"].as_str().unwrap_or_default().is_empty()
            && let Some(prefix) = meta["generateName"].as_str().filter(|p| !p.is_empty())
        {
            meta["name"] = Value::String(format!("{prefix}{}", random_suffix()));
        }
        if rt.namespaced {
            meta["namespace"] = Value::String(ns.clone());
        } else if let Some(m) = meta.as_object_mut() {
            m.remove("namespace");
        }
        let stamp = now();
        for k in [
            "resourceVersion",
            "deletionTimestamp",
            "deletionGracePeriodSeconds",
            "managedFields",
            "selfLink",
        ] {
            if let Some(m) = meta.as_object_mut() {
                m.remove(k);
            }
        }
        meta["uid"] = Value::String(uuid::Uuid::new_v4().to_string());
        meta["creationTimestamp"] = Value::String(stamp.clone());
        meta["generation"] = json!(1);
        if rt.status_subresource
            && rt.kind != "CustomResourceDefinition"
            && let Some(m) = obj.as_object_mut()
        {
            m.remove("status");
        }
        match rt.kind.as_str() {
            "Namespace" => obj["status"] = json!({"phase": "Active"}),
            "CustomResourceDefinition" => obj["status"] = crd::accepted_status(&obj, &stamp),
            _ => {}
        }
        self.validate(rt, version, &mut obj, None, opts.strict)?;
        let w = Writer {
            manager: &opts.field_manager,
            api_version: &rt.api_version(version),
            subresource: "",
            now: &stamp,
        };
        match managed {
            Some(m) => obj["metadata"]["managedFields"] = m,
            None => apply::record_update(None, &mut obj, &w, rules(rt, version)),
        }
        let name = obj["metadata"]["name"]
            .as_str()
            .unwrap_or_default()
            .to_string();
        let (stored, ()) = self
            .store
            .mutate(&rt.key(), &ns, &name, opts.dry_run, |cur| {
                if cur.is_some() {
                    return Err(ApiError::already_exists(&rt.group, &rt.plural, &name));
                }
                Ok((Change::Put(obj), ()))
            })?;
        let stored = stored.ok_or_else(|| ApiError::internal("create stored nothing"))?;
        if !opts.dry_run {
            self.after_write(rt, &stored);
            if rt.builtin && rt.kind == "Namespace" {
                self.default_service_account(&name);
            }
        }
        Ok(stored)
    }

    /// What kube-controller-manager's ServiceAccount controller does for a new namespace: its
    /// `default` ServiceAccount (the one Pods run as when they name none).
    fn default_service_account(&self, ns: &str) {
        let Some(rt) = self.registry.find("", "v1", "serviceaccounts") else {
            return;
        };
        let account = serde_json::json!({"apiVersion": "v1", "kind": "ServiceAccount",
            "metadata": {"name": "default", "namespace": ns}});
        let opts = WriteOpts {
            field_manager: "devcluster".into(),
            ..WriteOpts::default()
        };
        // Already there (made before its namespace was) is fine, as for the real controller.
        let _ = self.create(&rt, "v1", Some(ns), account, &opts);
    }

    /// Finishes an update of `cur` into `new` (the common part of update, patch and status):
    /// preconditions, immutable metadata, status separation, generation, validation,
    /// managedFields, finalizer completion.
    fn finish(
        &self,
        rt: &ResourceType,
        version: &str,
        cur: &Value,
        mut new: Value,
        opts: &WriteOpts,
        applied: bool,
    ) -> Result<Change> {
        let name = cur["metadata"]["name"].as_str().unwrap_or_default();
        if let Some(rv) = new["metadata"]["resourceVersion"].as_str()
            && !rv.is_empty()
            && Some(rv) != cur["metadata"]["resourceVersion"].as_str()
        {
            return Err(ApiError::conflict(
                &rt.group,
                &rt.plural,
                name,
                "the object has been modified; please apply your changes to the latest version and try again",
            ));
        }
        // A PUT's uid is a precondition (checked in `update`, 409); a patch that would change
        // the uid is invalid, as in kube-apiserver (422, "field is immutable").
        if let Some(uid) = new["metadata"]["uid"]
            .as_str()
            .filter(|u| Some(*u) != cur["metadata"]["uid"].as_str())
        {
            return Err(ApiError::invalid(
                &rt.kind,
                &rt.group,
                name,
                vec![crate::error::Cause {
                    reason: "FieldValueInvalid".into(),
                    message: format!("Invalid value: {uid:?}: field is immutable"),
                    field: "metadata.uid".into(),
                }],
            ));
        }
        if opts.subresource == "status" {
            let mut only_status = cur.clone();
            only_status["status"] = new["status"].take();
            if only_status["status"].is_null()
                && let Some(m) = only_status.as_object_mut()
            {
                m.remove("status");
            }
            if applied {
                only_status["metadata"]["managedFields"] = new["metadata"]["managedFields"].take();
            }
            new = only_status;
        } else {
            if !new.is_object() || !new["metadata"].is_object() {
                return Err(ApiError::bad_request(
                    "the body must be a JSON object with metadata",
                ));
            }
            new["apiVersion"] = Value::String(rt.api_version(version));
            new["kind"] = Value::String(rt.kind.clone());
            for k in [
                "name",
                "namespace",
                "uid",
                "creationTimestamp",
                "deletionTimestamp",
                "deletionGracePeriodSeconds",
                "generation",
            ] {
                match cur["metadata"].get(k) {
                    Some(v) => new["metadata"][k] = v.clone(),
                    None => {
                        if let Some(m) = new["metadata"].as_object_mut() {
                            m.remove(k);
                        }
                    }
                }
            }
            if rt.status_subresource {
                match cur.get("status") {
                    Some(s) => new["status"] = s.clone(),
                    None => {
                        if let Some(m) = new.as_object_mut() {
                            m.remove("status");
                        }
                    }
                }
                if rt.kind == "CustomResourceDefinition" {
                    new["status"] = crd::accepted_status(&new, &now());
                }
            }
            // Defaults first: a write that leaves out only defaulted fields changes nothing.
            if rt.builtin {
                crate::defaults::apply(rt, &mut new);
            }
            if !same_spec(&new, cur) {
                let g = cur["metadata"]["generation"].as_i64().unwrap_or(1) + 1;
                new["metadata"]["generation"] = json!(g);
            }
            if cur["metadata"].get("deletionTimestamp").is_some() {
                let before: Vec<Value> = cur["metadata"]["finalizers"]
                    .as_array()
                    .cloned()
                    .unwrap_or_default();
                let added = new["metadata"]["finalizers"]
                    .as_array()
                    .into_iter()
                    .flatten()
                    .any(|f| !before.contains(f));
                if added {
                    return Err(ApiError::invalid(&rt.kind, &rt.group, name, vec![crate::error::Cause {
                        reason: "FieldValueForbidden".into(),
                        field: "metadata.finalizers".into(),
                        message: "Forbidden: no new finalizers can be added if the object is being deleted".into(),
                    }]));
                }
            }
        }
        self.validate(rt, version, &mut new, Some(cur), opts.strict)?;
        if !applied {
            let stamp = now();
            let w = Writer {
                manager: &opts.field_manager,
                api_version: &rt.api_version(version),
                subresource: &opts.subresource,
                now: &stamp,
            };
            let r = rules(rt, version);
            apply::record_update(Some(cur), &mut new, &w, r);
        }
        if new["metadata"].get("deletionTimestamp").is_some() && !has_finalizers(&new) {
            return Ok(Change::Delete);
        }
        // Nothing but the time of a manager's entry changed: no write, as kube-apiserver skips
        // a no-op (a server-side apply of what is there, defaulted fields left out).
        if same_spec(&new, cur)
            && without_times(&new["metadata"]) == without_times(&cur["metadata"])
            && new.get("status") == cur.get("status")
        {
            return Ok(Change::Keep);
        }
        Ok(Change::Put(new))
    }

    /// Replaces an object (PUT), or its status with `opts.subresource == "status"`.
    ///
    /// # Errors
    /// 404, 409 on a stale resourceVersion, 422.
    pub fn update(
        &self,
        rt: &ResourceType,
        version: &str,
        ns: &str,
        name: &str,
        obj: Value,
        opts: &WriteOpts,
    ) -> Result<Arc<Value>> {
        let body_name = obj["metadata"]["name"].as_str().unwrap_or(name);
        if body_name != name {
            return Err(ApiError::bad_request(
                "the name of the object does not match the name on the URL",
            ));
        }
        let (stored, ()) = self
            .store
            .mutate(&rt.key(), ns, name, opts.dry_run, |cur| {
                let cur = cur.ok_or_else(|| ApiError::not_found(&rt.group, &rt.plural, name))?;
                if let Some(uid) = obj["metadata"]["uid"]
                    .as_str()
                    .filter(|u| !u.is_empty() && Some(*u) != cur["metadata"]["uid"].as_str())
                {
                    return Err(ApiError::conflict(
                        &rt.group,
                        &rt.plural,
                        name,
                        &format!(
                            "Precondition failed: UID in precondition: {uid}, UID in object meta: {}",
                            cur["metadata"]["uid"].as_str().unwrap_or_default()
                        ),
                    ));
                }
                Ok((self.finish(rt, version, cur, obj, opts, false)?, ()))
            })?;
        self.done(rt, stored, opts.dry_run)
    }

    /// Patches an object: JSON, merge, strategic merge, or server-side apply (which creates a
    /// missing object).
    ///
    /// # Errors
    /// 404 (not for apply), 409 (stale resourceVersion, apply conflicts), 415, 422.
    // The arguments mirror the request: resource, version, namespace, name, type, body, options.
    #[allow(clippy::too_many_arguments)]
    pub fn patch(
        &self,
        rt: &ResourceType,
        version: &str,
        ns: &str,
        name: &str,
        kind: PatchType,
        body: &[u8],
        opts: &WriteOpts,
    ) -> Result<Arc<Value>> {
        if kind == PatchType::Apply {
            let applied: Value = serde_yaml::from_slice(body)
                .map_err(|e| ApiError::bad_request(format!("error decoding YAML: {e}")))?;
            if opts.field_manager.is_empty() {
                return Err(ApiError::bad_request(
                    "PATCH requests with apply content type require a fieldManager",
                ));
            }
            let exists = self.store.get(&rt.key(), ns, name).is_some();
            if !exists {
                let stamp = now();
                let w = Writer {
                    manager: &opts.field_manager,
                    api_version: &rt.api_version(version),
                    subresource: &opts.subresource,
                    now: &stamp,
                };
                let mut obj = apply::apply(None, &applied, &w, opts.force, rules(rt, version))?;
                obj["metadata"]["name"] = Value::String(name.to_string());
                let managed = obj["metadata"]["managedFields"].clone();
                let created = self.create_inner(
                    rt,
                    version,
                    (!ns.is_empty()).then_some(ns),
                    obj,
                    opts,
                    Some(managed),
                );
                return match created {
                    // Created meanwhile: apply onto it.
                    Err(e) if e.code == 409 && e.reason == "AlreadyExists" => {
                        self.patch(rt, version, ns, name, kind, body, opts)
                    }
                    other => other,
                };
            }
            let (stored, ()) = self
                .store
                .mutate(&rt.key(), ns, name, opts.dry_run, |cur| {
                    let cur =
                        cur.ok_or_else(|| ApiError::not_found(&rt.group, &rt.plural, name))?;
                    let stamp = now();
                    let w = Writer {
                        manager: &opts.field_manager,
                        api_version: &rt.api_version(version),
                        subresource: &opts.subresource,
                        now: &stamp,
                    };
                    let merged =
                        apply::apply(Some(cur), &applied, &w, opts.force, rules(rt, version))?;
                    Ok((self.finish(rt, version, cur, merged, opts, true)?, ()))
                })?;
            return self.done(rt, stored, opts.dry_run);
        }
        let (stored, ()) = self
            .store
            .mutate(&rt.key(), ns, name, opts.dry_run, |cur| {
                let cur = cur.ok_or_else(|| ApiError::not_found(&rt.group, &rt.plural, name))?;
                // A patch that sets (or tests) resourceVersion makes it a precondition.
                let new = patch_object(cur, kind, body, rt.builtin)?;
                Ok((self.finish(rt, version, cur, new, opts, false)?, ()))
            })?;
        self.done(rt, stored, opts.dry_run)
    }

    pub(super) fn done(
        &self,
        rt: &ResourceType,
        stored: Option<Arc<Value>>,
        dry_run: bool,
    ) -> Result<Arc<Value>> {
        let stored = stored.ok_or_else(|| ApiError::internal("write stored nothing"))?;
        if !dry_run {
            self.after_write(rt, &stored);
        }
        Ok(stored)
    }
}

/// Metadata with the `time` of every managedFields entry taken out.
fn without_times(meta: &Value) -> Value {
    let mut meta = meta.clone();
    if let Some(entries) = meta["managedFields"].as_array_mut() {
        for e in entries {
            if let Some(e) = e.as_object_mut() {
                e.remove("time");
            }
        }
    }
    meta
}
