use serde::de::DeserializeOwned;
use serde_json::Value;

use crate::{Error, Output, Result};

/// Which part of the parent's life the host is running.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Phase {
    /// The parent exists: compute what should exist.
    Reconcile,
    /// The parent is being deleted: clean up, then report finalized.
    Finalize,
}

/// Everything the host gave a plugin for one run.
#[derive(Debug, Clone)]
pub struct Context {
    pub(crate) phase: Phase,
    pub(crate) parent: Value,
    pub(crate) observed: Vec<Value>,
    pub(crate) desired: Vec<Value>,
    pub(crate) config: Value,
    pub(crate) now: String,
}

impl Context {
    /// Builds a context from the JSON texts the host sends.
    ///
    /// # Errors
    /// [`Error::InvalidParent`] for an unreadable parent, [`Error::InvalidConfig`] for an
    /// unreadable config, [`Error::Failed`] for unreadable observed or desired objects.
    pub fn from_json(
        phase: Phase,
        parent: &str,
        observed: &[String],
        desired: &[String],
        config: &str,
        now: String,
    ) -> Result<Self> {
        let parent: Value = serde_json::from_str(parent)
            .map_err(|e| Error::InvalidParent(format!("not valid JSON: {e}")))?;
        if !parent.is_object() {
            return Err(Error::InvalidParent("not a JSON object".into()));
        }
        let parse_all = |texts: &[String], what: &str| {
            texts
                .iter()
                .enumerate()
                .map(|(i, t)| {
                    serde_json::from_str(t)
                        .map_err(|e| Error::Failed(format!("{what}[{i}] is not valid JSON: {e}")))
                })
                .collect::<Result<Vec<Value>>>()
        };
        let config = if config.trim().is_empty() {
            Value::Object(Default::default())
        } else {
            serde_json::from_str(config)
                .map_err(|e| Error::InvalidConfig(format!("not valid JSON: {e}")))?
        };
        Ok(Context {
            phase,
            parent,
            observed: parse_all(observed, "observed")?,
            desired: parse_all(desired, "desired")?,
            config,
            now,
        })
    }

    /// Reconcile or finalize.
    pub fn phase(&self) -> Phase {
        self.phase
    }

    /// The parent object as JSON.
    pub fn parent(&self) -> &Value {
        &self.parent
    }

    /// The parent deserialized into a type of the plugin's.
    ///
    /// # Errors
    /// [`Error::InvalidParent`] with serde's message (which names the field).
    pub fn parent_as<T: DeserializeOwned>(&self) -> Result<T> {
        T::deserialize(&self.parent).map_err(|e| Error::InvalidParent(e.to_string()))
    }

    /// The parent's `spec` deserialized into a type of the plugin's (`{}` when absent).
    ///
    /// # Errors
    /// [`Error::InvalidParent`] naming the field, e.g. `spec: missing field `storage``.
    pub fn spec<T: DeserializeOwned>(&self) -> Result<T> {
        let empty = Value::Object(Default::default());
        let spec = self.parent.get("spec").unwrap_or(&empty);
        T::deserialize(spec).map_err(|e| Error::InvalidParent(format!("spec: {e}")))
    }

    /// The parent's `metadata.name`.
    pub fn name(&self) -> &str {
        self.meta_str("name").unwrap_or_default()
    }

    /// The parent's namespace; none for a cluster-scoped parent.
    pub fn namespace(&self) -> Option<&str> {
        self.meta_str("namespace")
    }

    /// The parent's `metadata.uid`.
    pub fn uid(&self) -> &str {
        self.meta_str("uid").unwrap_or_default()
    }

    /// The parent's `metadata.generation` (0 when absent).
    pub fn generation(&self) -> i64 {
        self.parent
            .pointer("/metadata/generation")
            .and_then(Value::as_i64)
            .unwrap_or(0)
    }

    /// A label of the parent.
    pub fn label(&self, key: &str) -> Option<&str> {
        self.parent.pointer("/metadata/labels")?.get(key)?.as_str()
    }

    fn meta_str(&self, field: &str) -> Option<&str> {
        self.parent.get("metadata")?.get(field)?.as_str()
    }

    /// The parent's current `status` field at a JSON pointer below status (e.g. `/phase`).
    pub fn status(&self, pointer: &str) -> Option<&Value> {
        self.parent.get("status")?.pointer(pointer)
    }

    /// This plugin's config deserialized into a type of the plugin's.
    ///
    /// # Errors
    /// [`Error::InvalidConfig`] naming the key.
    pub fn config<T: DeserializeOwned>(&self) -> Result<T> {
        T::deserialize(&self.config).map_err(|e| Error::InvalidConfig(e.to_string()))
    }

    /// The time the host gave for this run (RFC 3339).
    pub fn now(&self) -> &str {
        &self.now
    }

    /// Every observed object.
    pub fn observed_all(&self) -> &[Value] {
        &self.observed
    }

    /// Observed objects of one kind (`group/version/Kind`).
    pub fn observed_json<'a>(&'a self, kind: &'a str) -> impl Iterator<Item = &'a Value> + 'a {
        self.observed.iter().filter(move |o| has_kind(o, kind))
    }

    /// The observed object of `kind` (`group/version/Kind`) with this name: `find_observed` in
    /// every SDK (`find_observed`, `findObserved`, `FindObserved`).
    pub fn find_observed(&self, kind: &str, name: &str) -> Option<&Value> {
        self.observed.iter().find(|o| {
            has_kind(o, kind) && o.pointer("/metadata/name").and_then(Value::as_str) == Some(name)
        })
    }

    /// The old name of [`Context::find_observed`].
    #[deprecated(note = "renamed find_observed, as the other SDKs name it")]
    pub fn observed_object(&self, kind: &str, name: &str) -> Option<&Value> {
        self.find_observed(kind, name)
    }

    /// Observed objects of a k8s-openapi type. Objects that do not deserialize are skipped and
    /// logged.
    #[cfg(feature = "k8s")]
    pub fn observed<K: k8s_openapi::Resource + DeserializeOwned>(&self) -> Vec<K> {
        let kind = crate::kind_key::<K>();
        self.observed_json(&kind)
            .filter_map(|o| match K::deserialize(o) {
                Ok(k) => Some(k),
                Err(e) => {
                    crate::log::warn(format!("observed {kind} does not deserialize: {e}"));
                    None
                }
            })
            .collect()
    }

    /// The observed object of a k8s-openapi type with this name.
    #[cfg(feature = "k8s")]
    pub fn observed_named<K: k8s_openapi::Resource + DeserializeOwned>(
        &self,
        name: &str,
    ) -> Option<K> {
        let kind = crate::kind_key::<K>();
        self.observed_json(&kind)
            .find(|o| o.pointer("/metadata/name").and_then(Value::as_str) == Some(name))
            .and_then(|o| K::deserialize(o).ok())
    }

    /// What earlier plugins of the pipeline want.
    pub fn desired(&self) -> &[Value] {
        &self.desired
    }

    /// An output that starts from the earlier plugins' desired set, ready to add to.
    pub fn output(&self) -> Output {
        Output::new(self.desired.clone())
    }
}

/// True when `object` is of `kind` (`group/version/Kind`).
pub(crate) fn has_kind(object: &Value, kind: &str) -> bool {
    let (Some(api_version), Some(k)) = (
        object.get("apiVersion").and_then(Value::as_str),
        object.get("kind").and_then(Value::as_str),
    ) else {
        return false;
    };
    kind.len() == api_version.len() + 1 + k.len()
        && kind.starts_with(api_version)
        && kind.ends_with(k)
        && kind.as_bytes()[api_version.len()] == b'/'
}
