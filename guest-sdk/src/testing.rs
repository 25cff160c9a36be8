//! Run a plugin natively on YAML fixtures, without a wasm runtime: fast unit tests.
//!
//! The host runs the same code compiled to wasm; the conformance tests in the host check that
//! the two agree.

use serde_json::Value;

use crate::{Context, Error, Output, Phase, Plugin, Result};

/// A parent, observed objects, earlier plugins' desired set and config, for one run.
#[derive(Debug, Clone)]
pub struct Harness {
    ctx: Context,
}

/// Parses one or more YAML documents (`---`-separated; a `kind: List` is flattened).
///
/// # Panics
/// On YAML that does not parse: fixtures are test code.
pub fn yaml_docs(yaml: &str) -> Vec<Value> {
    use serde::Deserialize;
    let mut out = Vec::new();
    for doc in serde_yaml::Deserializer::from_str(yaml) {
        let value =
            Value::deserialize(doc).unwrap_or_else(|e| panic!("fixture YAML does not parse: {e}"));
        match value {
            Value::Null => {}
            Value::Object(ref m) if m.get("kind").and_then(Value::as_str) == Some("List") => {
                out.extend(
                    m.get("items")
                        .and_then(Value::as_array)
                        .cloned()
                        .unwrap_or_default(),
                );
            }
            other => out.push(other),
        }
    }
    out
}

impl Harness {
    /// A harness for the parent given as YAML (one document).
    ///
    /// # Panics
    /// When the YAML does not hold exactly one object.
    pub fn from_yaml(parent: &str) -> Self {
        let mut docs = yaml_docs(parent);
        assert_eq!(
            docs.len(),
            1,
            "the parent fixture must be one YAML document"
        );
        Self::new(docs.remove(0))
    }

    /// A harness for the parent given as JSON.
    pub fn new(parent: Value) -> Self {
        Harness {
            ctx: Context {
                phase: Phase::Reconcile,
                parent,
                observed: Vec::new(),
                desired: Vec::new(),
                config: Value::Object(Default::default()),
                now: "2026-01-01T00:00:00Z".to_string(),
            },
        }
    }

    /// Adds observed objects (YAML, one or more documents).
    pub fn observed_yaml(mut self, yaml: &str) -> Self {
        self.ctx.observed.extend(yaml_docs(yaml));
        self
    }

    /// Adds observed objects.
    pub fn observed(mut self, objects: impl IntoIterator<Item = Value>) -> Self {
        self.ctx.observed.extend(objects);
        self
    }

    /// Sets the desired set earlier plugins produced.
    pub fn desired(mut self, objects: impl IntoIterator<Item = Value>) -> Self {
        self.ctx.desired = objects.into_iter().collect();
        self
    }

    /// Sets the plugin's config.
    pub fn config(mut self, config: Value) -> Self {
        self.ctx.config = config;
        self
    }

    /// Sets the time of the run (RFC 3339).
    pub fn now(mut self, now: &str) -> Self {
        self.ctx.now = now.to_string();
        self
    }

    /// Runs the finalize phase instead of reconcile.
    pub fn finalizing(mut self) -> Self {
        self.ctx.phase = Phase::Finalize;
        self
    }

    /// Edits the parent in place (e.g. to set a field for one test).
    pub fn with_parent(mut self, edit: impl FnOnce(&mut Value)) -> Self {
        edit(&mut self.ctx.parent);
        self
    }

    /// The context the plugin will see.
    pub fn context(&self) -> &Context {
        &self.ctx
    }

    /// Runs the plugin's phase.
    ///
    /// # Errors
    /// The plugin's own error.
    pub fn run<P: Plugin>(&self) -> Result<Output> {
        match self.ctx.phase {
            Phase::Reconcile => P::reconcile(&self.ctx),
            Phase::Finalize => P::finalize(&self.ctx),
        }
    }
}

/// Runs a plugin natively on the JSON texts the host would send, exactly as the exported
/// component does (parse, run, serialize), returning the serialized desired set and status.
/// This is the native baseline the runtime benchmark measures the sandbox against.
///
/// # Errors
/// The plugin's own error, or a parse error of the inputs.
pub fn run_json<P: Plugin>(
    phase: Phase,
    parent: &str,
    observed: &[String],
    desired: &[String],
    config: &str,
    now: &str,
) -> Result<(Vec<String>, Option<String>)> {
    let parts = run_parts::<P>(phase, parent, observed, desired, config, now)?;
    Ok((parts.desired, parts.status))
}

/// The whole of a native run's answer, as the WIT response carries it.
pub use crate::output::Parts;

/// Like [`run_json`], returning the whole answer — conditions, events, requeue and
/// `finalized` as well: what a native stand-in for the component (the host benchmark's native
/// `Engine`) answers the host with.
///
/// # Errors
/// The plugin's own error, or a parse error of the inputs.
pub fn run_parts<P: Plugin>(
    phase: Phase,
    parent: &str,
    observed: &[String],
    desired: &[String],
    config: &str,
    now: &str,
) -> Result<Parts> {
    let ctx = Context::from_json(phase, parent, observed, desired, config, now.to_string())?;
    let out = match phase {
        Phase::Reconcile => P::reconcile(&ctx)?,
        Phase::Finalize => P::finalize(&ctx)?,
    };
    // As the export reports an output it cannot serialise: a failure saying so.
    out.into_parts().map_err(|e| Error::Failed(e.to_string()))
}
