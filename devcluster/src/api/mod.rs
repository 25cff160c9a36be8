//! The API semantics over the store: create, update, patch, apply, delete, with the real
//! server's metadata handling (uid, generation, resourceVersion preconditions, managedFields,
//! finalizers) and validation. The HTTP layer, the simulator and the garbage collector all
//! write through here.

use crate::crd;
use crate::error::{ApiError, Result};
use crate::faults::Faults;
use crate::patch::lists::Rules;
use crate::resources::{Registry, ResourceType};
use crate::schema;
use crate::store::Store;
use crate::validate;
use serde_json::{Value, json};
use std::sync::Arc;

mod delete;
pub(crate) use delete::{CRD_CLEANUP, is_crd};
mod write;

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
/// What a generation does not count: everything else of an object is its spec.
const NOT_SPEC: [&str; 4] = ["metadata", "status", "apiVersion", "kind"];

fn spec_entries(m: &serde_json::Map<String, Value>) -> impl Iterator<Item = (&String, &Value)> {
    m.iter().filter(|(k, _)| !NOT_SPEC.contains(&k.as_str()))
}

/// Whether two objects agree on everything but metadata, status, apiVersion and kind (what a
/// generation counts), compared in place: the objects are not copied.
fn same_spec(a: &Value, b: &Value) -> bool {
    match (a.as_object(), b.as_object()) {
        (Some(a), Some(b)) => {
            spec_entries(a).count() == spec_entries(b).count()
                && spec_entries(a).all(|(k, v)| b.get(k) == Some(v))
        }
        _ => a == b,
    }
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
            crate::defaults::apply(rt, obj);
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
}
