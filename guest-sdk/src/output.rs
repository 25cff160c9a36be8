use std::time::Duration;

use serde::Serialize;
use serde_json::{Map, Value};

use crate::{Error, Result, context::has_kind};

/// A condition to set on the parent.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Condition {
    /// The condition type, UpperCamelCase.
    pub kind: String,
    /// Whether it holds.
    pub status: bool,
    /// One UpperCamelCase word.
    pub reason: String,
    /// For humans.
    pub message: String,
}

/// An event to record on the parent.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Event {
    /// Warning (true) or Normal.
    pub warning: bool,
    /// One UpperCamelCase word.
    pub reason: String,
    /// For humans.
    pub message: String,
}

/// What a plugin returns: the whole desired set and what to report.
#[derive(Debug, Clone, Default)]
pub struct Output {
    desired: Vec<Value>,
    status: Map<String, Value>,
    conditions: Vec<Condition>,
    events: Vec<Event>,
    requeue_after: Option<Duration>,
    finalized: bool,
}

/// An [`Output`] as the WIT response carries it.
#[doc(hidden)]
#[derive(Debug)]
pub struct Parts {
    pub desired: Vec<String>,
    pub status: Option<String>,
    pub conditions: Vec<Condition>,
    pub events: Vec<Event>,
    pub requeue_after_secs: Option<u32>,
    pub finalized: bool,
}

impl Output {
    /// An output holding `desired` (usually the earlier plugins' set, via
    /// [`Context::output`](crate::Context::output)).
    pub fn new(desired: Vec<Value>) -> Self {
        Output {
            desired,
            ..Output::default()
        }
    }

    /// Adds an object to the desired set, replacing one of the same kind and name. Any
    /// serializable object works: a k8s-openapi type (which carries its apiVersion and kind),
    /// or JSON. The host sets namespace, owner reference and labels.
    ///
    /// # Errors
    /// [`Error::Failed`] when the object lacks apiVersion, kind or metadata.name.
    pub fn apply(&mut self, object: &impl Serialize) -> Result<()> {
        let value = serde_json::to_value(object)
            .map_err(|e| Error::Failed(format!("cannot serialize a child: {e}")))?;
        let field = |v: &Value, p: &str| v.pointer(p).and_then(Value::as_str).map(str::to_string);
        let (Some(api_version), Some(kind), Some(name)) = (
            field(&value, "/apiVersion"),
            field(&value, "/kind"),
            field(&value, "/metadata/name"),
        ) else {
            return Err(Error::Failed(format!(
                "a child needs apiVersion, kind and metadata.name: {}",
                truncate(&value.to_string(), 200)
            )));
        };
        let key = format!("{api_version}/{kind}");
        match self.desired.iter_mut().find(|o| {
            has_kind(o, &key) && o.pointer("/metadata/name").and_then(Value::as_str) == Some(&name)
        }) {
            Some(existing) => *existing = value,
            None => self.desired.push(value),
        }
        Ok(())
    }

    /// Removes an object (`group/version/Kind` and name) from the desired set; returns it.
    pub fn remove(&mut self, kind: &str, name: &str) -> Option<Value> {
        let at = self.desired.iter().position(|o| {
            has_kind(o, kind) && o.pointer("/metadata/name").and_then(Value::as_str) == Some(name)
        })?;
        Some(self.desired.remove(at))
    }

    /// The desired object of a kind (`group/version/Kind`) and name.
    pub fn find(&self, kind: &str, name: &str) -> Option<&Value> {
        self.desired.iter().find(|o| {
            has_kind(o, kind) && o.pointer("/metadata/name").and_then(Value::as_str) == Some(name)
        })
    }

    /// The desired object of a kind and name, to edit in place.
    pub fn find_mut(&mut self, kind: &str, name: &str) -> Option<&mut Value> {
        self.desired.iter_mut().find(|o| {
            has_kind(o, kind) && o.pointer("/metadata/name").and_then(Value::as_str) == Some(name)
        })
    }

    /// The whole desired set.
    pub fn desired(&self) -> &[Value] {
        &self.desired
    }

    /// The whole desired set, to edit in place (e.g. to add labels to every object).
    pub fn desired_mut(&mut self) -> &mut Vec<Value> {
        &mut self.desired
    }

    /// Sets a top-level field of the status fragment.
    pub fn status(&mut self, key: &str, value: impl Serialize) {
        let value = serde_json::to_value(value).unwrap_or(Value::Null);
        self.status.insert(key.to_string(), value);
    }

    /// The status fragment so far.
    pub fn status_fragment(&self) -> &Map<String, Value> {
        &self.status
    }

    /// Sets a condition.
    pub fn condition(
        &mut self,
        kind: &str,
        status: bool,
        reason: &str,
        message: impl Into<String>,
    ) {
        self.conditions.retain(|c| c.kind != kind);
        self.conditions.push(Condition {
            kind: kind.to_string(),
            status,
            reason: reason.to_string(),
            message: message.into(),
        });
    }

    /// The conditions so far.
    pub fn conditions(&self) -> &[Condition] {
        &self.conditions
    }

    /// The condition of a type, if set.
    pub fn condition_of(&self, kind: &str) -> Option<&Condition> {
        self.conditions.iter().find(|c| c.kind == kind)
    }

    /// Records a Normal event.
    pub fn event(&mut self, reason: &str, message: impl Into<String>) {
        self.events.push(Event {
            warning: false,
            reason: reason.to_string(),
            message: message.into(),
        });
    }

    /// Records a Warning event.
    pub fn warning(&mut self, reason: &str, message: impl Into<String>) {
        self.events.push(Event {
            warning: true,
            reason: reason.to_string(),
            message: message.into(),
        });
    }

    /// The events so far.
    pub fn events(&self) -> &[Event] {
        &self.events
    }

    /// Asks to run again after `after` (the earliest request of all plugins wins).
    pub fn requeue_after(&mut self, after: Duration) {
        self.requeue_after = Some(self.requeue_after.map_or(after, |r| r.min(after)));
    }

    /// The requeue asked for.
    pub fn requeue(&self) -> Option<Duration> {
        self.requeue_after
    }

    /// Finalize phase: says whether this plugin's cleanup is complete.
    pub fn finalized(&mut self, done: bool) {
        self.finalized = done;
    }

    /// Whether the plugin reported its cleanup complete.
    pub fn is_finalized(&self) -> bool {
        self.finalized
    }

    #[doc(hidden)]
    pub fn into_parts(self) -> Result<Parts> {
        let desired = self
            .desired
            .iter()
            .map(|o| serde_json::to_string(o).map_err(|e| Error::Failed(e.to_string())))
            .collect::<Result<_>>()?;
        let status = if self.status.is_empty() {
            None
        } else {
            Some(Value::Object(self.status).to_string())
        };
        Ok(Parts {
            desired,
            status,
            conditions: self.conditions,
            events: self.events,
            requeue_after_secs: self
                .requeue_after
                .map(|d| u32::try_from(d.as_secs()).unwrap_or(u32::MAX)),
            finalized: self.finalized,
        })
    }
}

fn truncate(s: &str, max: usize) -> &str {
    match s.char_indices().nth(max) {
        Some((i, _)) => &s[..i],
        None => s,
    }
}
