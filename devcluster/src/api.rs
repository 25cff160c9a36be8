//! The API semantics over the store: create, update, patch, apply, delete, with the real
//! server's metadata handling (uid, generation, resourceVersion preconditions, managedFields,
//! finalizers) and validation. The HTTP layer, the simulator and the garbage collector all
//! write through here.

use crate::crd;
use crate::error::{ApiError, Result};
use crate::faults::Faults;
use crate::patch::apply::{self, Writer};
use crate::patch::lists::Rules;
use crate::patch::{PatchType, patch_object};
use crate::resources::{Registry, ResourceType};
use crate::schema;
use crate::store::{Change, Store};
use crate::validate;
use serde_json::{Value, json};
use std::sync::Arc;

/// Options of a write.
#[derive(Debug, Clone, Default)]
pub struct WriteOpts {
    /// `dryRun=All`: validate and answer, store nothing.
    pub dry_run: bool,
    /// `fieldManager` (defaults to the client's user agent product).
    pub field_manager: String,
    /// `force` for server-side apply.
    pub force: bool,
    /// `status` for the status subresource.
    pub subresource: String,
    /// `fieldValidation=Strict`: unknown fields are an error instead of being dropped.
    pub strict: bool,
}

/// Options of a delete.
#[derive(Debug, Clone, Default)]
pub struct DeleteOpts {
    /// `dryRun=All`.
    pub dry_run: bool,
    /// `Background` (default), `Foreground` or `Orphan`.
    pub propagation: Option<String>,
    /// Precondition on the uid.
    pub uid: Option<String>,
    /// Precondition on the resourceVersion.
    pub resource_version: Option<String>,
}

/// The cluster state: store, served kinds, faults.
#[derive(Debug)]
pub struct Cluster {
    /// Objects and events.
    pub store: Store,
    /// Served kinds.
    pub registry: Registry,
    /// Injected faults.
    pub faults: Faults,
}

/// Now, RFC 3339 to the second, as the API server writes timestamps.
pub fn now() -> String {
    let secs = jiff::Timestamp::now().as_second();
    jiff::Timestamp::from_second(secs)
        .map(|t| t.to_string())
        .unwrap_or_default()
}

fn random_suffix() -> String {
    const ALPHABET: &[u8] = b"bcdfghjklmnpqrstvwxz2456789";
    uuid::Uuid::new_v4().as_bytes()[..5]
        .iter()
        .map(|b| ALPHABET[*b as usize % ALPHABET.len()] as char)
        .collect()
}

fn rules<'a>(rt: &'a ResourceType, version: &str) -> Rules<'a> {
    if rt.builtin {
        Rules::Builtin
    } else {
        Rules::Schema(rt.schemas.get(version))
    }
}

/// Everything but metadata and status: a change here bumps `generation`.
fn spec_part(obj: &Value) -> Value {
    let mut v = obj.clone();
    if let Some(m) = v.as_object_mut() {
        for k in ["metadata", "status", "apiVersion", "kind"] {
            m.remove(k);
        }
    }
    v
}

fn has_finalizers(obj: &Value) -> bool {
    obj["metadata"]["finalizers"]
        .as_array()
        .is_some_and(|f| !f.is_empty())
        || obj["spec"]["finalizers"]
            .as_array()
            .is_some_and(|f| !f.is_empty())
            && obj["kind"] == "Namespace"
}

impl Cluster {
    /// A cluster with the built-in kinds and the usual namespaces.
    pub fn new(history: usize) -> Self {
        let cluster = Self {
            store: Store::new(history),
            registry: Registry::default(),
            faults: Faults::default(),
        };
        if let Some(ns) = cluster.registry.find("", "v1", "namespaces") {
            for name in ["default", "kube-system", "kube-public", "kube-node-lease"] {
                let obj =
                    json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": name}});
                let opts = WriteOpts {
                    field_manager: "devcluster".into(),
                    ..WriteOpts::default()
                };
                // Cannot fail: a fresh store and valid names.
                let _ = cluster.create(&ns, "v1", None, obj, &opts);
            }
        }
        cluster
    }

    /// The resource type of a stored key, if still served.
    pub fn resource(&self, key: &str) -> Option<Arc<ResourceType>> {
        self.registry.by_key(key)
    }

    /// One object.
    ///
    /// # Errors
    /// 404.
    pub fn get(&self, rt: &ResourceType, ns: &str, name: &str) -> Result<Arc<Value>> {
        self.store
            .get(&rt.key(), ns, name)
            .ok_or_else(|| ApiError::not_found(&rt.group, &rt.plural, name))
    }

    fn check_namespace(&self, rt: &ResourceType, ns: &str) -> Result<()> {
        if !rt.namespaced {
            return Ok(());
        }
        match self.store.get("/namespaces", "", ns) {
            None => Err(ApiError::not_found("", "namespaces", ns)),
            Some(n) if n["metadata"].get("deletionTimestamp").is_some() => {
                Err(ApiError::forbidden(format!(
                    "{} \"{}\" is forbidden: unable to create new content in namespace {ns} because it is being terminated",
                    rt.plural, ""
                )))
            }
            Some(_) => Ok(()),
        }
    }

    /// Checks kind-specific rules and the CRD schema; prunes unknown fields of custom resources.
    fn validate(
        &self,
        rt: &ResourceType,
        version: &str,
        obj: &mut Value,
        old: Option<&Value>,
        strict: bool,
    ) -> Result<()> {
        if rt.builtin {
            validate::builtin(rt, obj, old)?;
            if rt.kind == "CustomResourceDefinition" {
                crd::resource_type(obj)?;
            }
            return Ok(());
        }
        let name = obj["metadata"]["name"]
            .as_str()
            .unwrap_or_default()
            .to_string();
        if name.is_empty() {
            return validate::builtin(rt, obj, old);
        }
        if let Some(s) = rt.schemas.get(version) {
            let out = schema::validate(obj, s);
            if strict && !out.unknown.is_empty() {
                let fields: Vec<String> = out
                    .unknown
                    .iter()
                    .map(|f| format!("unknown field \"{f}\""))
                    .collect();
                return Err(ApiError::bad_request(format!(
                    "{} in version \"{version}\" cannot be handled as a {}: strict decoding error: {}",
                    rt.kind,
                    rt.kind,
                    fields.join(", ")
                )));
            }
            if !out.causes.is_empty() {
                return Err(ApiError::invalid(&rt.kind, &rt.group, &name, out.causes));
            }
        }
        Ok(())
    }

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
        }
        Ok(stored)
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
        if new["metadata"]["uid"]
            .as_str()
            .is_some_and(|u| Some(u) != cur["metadata"]["uid"].as_str())
        {
            return Err(ApiError::conflict(
                &rt.group,
                &rt.plural,
                name,
                "Precondition failed: UID in precondition does not match the UID in record",
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
            if spec_part(&new) != spec_part(cur) {
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
        if spec_part(&new) == spec_part(cur)
            && new["metadata"] == cur["metadata"]
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

    fn done(
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
    fn after_write(&self, rt: &ResourceType, obj: &Value) {
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
    fn after_delete(&self, rt: &ResourceType, obj: &Value) {
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
