//! `windlass render`: the pipeline run offline, exactly as the host runs it (same runtime, same
//! policy), on a parent from a file. Like `crossplane render` or `kwctl run`.

use std::{
    collections::{BTreeMap, BTreeSet},
    path::{Path, PathBuf},
    sync::Arc,
};

use anyhow::{Context as _, Result, bail};
use serde::Deserialize;
use serde_json::{Map, Value, json};

use crate::{
    pipeline::{self, Outcome, Pipeline, Stage},
    policy::{Grants, Policy},
    runtime::{LoadOptions, Phase, Runtime},
};

/// What to render.
#[derive(Debug, Clone)]
pub struct Input {
    /// The parent object.
    pub parent: Value,
    /// Plugin components, in pipeline order.
    pub plugins: Vec<PathBuf>,
    /// Observed objects.
    pub observed: Vec<Value>,
    /// Config per plugin name; key `*` applies to every plugin (a plugin's own keys win).
    pub config: BTreeMap<String, Value>,
    /// Kinds granted by name on top of what each plugin declared.
    pub grants: Vec<String>,
    /// Reconcile or finalize.
    pub phase: Phase,
    /// RFC 3339 time given to plugins.
    pub now: String,
    /// Limits and instance mode for every plugin.
    pub options: LoadOptions,
}

/// Parses one or more YAML (or JSON) documents; a `kind: List` is flattened; empty documents are
/// skipped.
pub fn parse_docs(text: &str, origin: &str) -> Result<Vec<Value>> {
    let mut out = Vec::new();
    for (i, doc) in serde_yaml::Deserializer::from_str(text).enumerate() {
        let value = Value::deserialize(doc)
            .with_context(|| format!("{origin}: document {} is not valid YAML", i + 1))?;
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
            Value::Object(_) => out.push(value),
            other => bail!("{origin}: document {} is not an object but {other}", i + 1),
        }
    }
    Ok(out)
}

/// Reads the parent: exactly one object, with apiVersion, kind and metadata.name. A missing
/// namespace becomes `default` and a missing uid a fixed placeholder, as the API server would
/// have filled them in.
pub fn read_parent(path: &Path) -> Result<Value> {
    let text =
        std::fs::read_to_string(path).with_context(|| format!("reading {}", path.display()))?;
    let mut docs = parse_docs(&text, &path.display().to_string())?;
    if docs.len() != 1 {
        bail!(
            "{}: expected one parent object, found {}",
            path.display(),
            docs.len()
        );
    }
    let mut parent = docs.remove(0);
    for field in ["/apiVersion", "/kind", "/metadata/name"] {
        if parent.pointer(field).and_then(Value::as_str).is_none() {
            bail!(
                "{}: the parent has no {}",
                path.display(),
                &field[1..].replace('/', ".")
            );
        }
    }
    let meta = parent["metadata"]
        .as_object_mut()
        .context("metadata is not an object")?;
    meta.entry("namespace").or_insert_with(|| json!("default"));
    meta.entry("uid")
        .or_insert_with(|| json!("00000000-0000-0000-0000-000000000000"));
    meta.entry("generation").or_insert_with(|| json!(1));
    Ok(parent)
}

/// Reads observed objects from a file or from every `.yaml`, `.yml` and `.json` file of a
/// directory (sorted by name).
pub fn read_observed(path: &Path) -> Result<Vec<Value>> {
    let files = if path.is_dir() {
        let mut files: Vec<PathBuf> = std::fs::read_dir(path)
            .with_context(|| format!("reading directory {}", path.display()))?
            .filter_map(|e| e.ok().map(|e| e.path()))
            .filter(|p| {
                matches!(
                    p.extension().and_then(|e| e.to_str()),
                    Some("yaml" | "yml" | "json")
                )
            })
            .collect();
        files.sort();
        files
    } else {
        vec![path.to_path_buf()]
    };
    let mut out = Vec::new();
    for file in files {
        let text = std::fs::read_to_string(&file)
            .with_context(|| format!("reading {}", file.display()))?;
        out.extend(parse_docs(&text, &file.display().to_string())?);
    }
    Ok(out)
}

/// Applies one `--config [PLUGIN:]KEY=VALUE` to `config`. KEY may be dotted (`a.b.c`) to reach
/// nested keys; VALUE is JSON when it parses as JSON, a string otherwise.
pub fn set_config(config: &mut BTreeMap<String, Value>, assignment: &str) -> Result<()> {
    let (target, value) = assignment
        .split_once('=')
        .with_context(|| format!("--config {assignment:?}: expected [PLUGIN:]KEY=VALUE"))?;
    let (plugin, key) = match target.split_once(':') {
        Some((plugin, key)) => (plugin, key),
        None => ("*", target),
    };
    if key.is_empty() || key.split('.').any(str::is_empty) {
        bail!("--config {assignment:?}: the key is empty");
    }
    let value = serde_json::from_str(value).unwrap_or_else(|_| Value::String(value.to_string()));
    let mut node = config
        .entry(plugin.to_string())
        .or_insert_with(|| json!({}));
    let mut parts = key.split('.').peekable();
    while let Some(part) = parts.next() {
        let map = match node {
            Value::Object(map) => map,
            other => {
                *other = json!({});
                other.as_object_mut().context("just made an object")?
            }
        };
        if parts.peek().is_none() {
            map.insert(part.to_string(), value);
            break;
        }
        node = map.entry(part.to_string()).or_insert_with(|| json!({}));
    }
    Ok(())
}

/// Reads `--config-file`: a mapping of plugin name (or `*`) to that plugin's config object.
pub fn read_config_file(path: &Path) -> Result<BTreeMap<String, Value>> {
    let text =
        std::fs::read_to_string(path).with_context(|| format!("reading {}", path.display()))?;
    let value: Value = serde_yaml::from_str(&text)
        .with_context(|| format!("{}: not valid YAML", path.display()))?;
    let Value::Object(map) = value else {
        bail!(
            "{}: expected a mapping of plugin name to config",
            path.display()
        );
    };
    map.into_iter()
        .map(|(plugin, config)| {
            if !config.is_object() {
                bail!(
                    "{}: the config of {plugin} is not a mapping",
                    path.display()
                );
            }
            Ok((plugin, config))
        })
        .collect()
}

/// A plugin's component from its file, inflated if the file is gzip-compressed (as a
/// ConfigMap may hold it), so that what runs here, and its digest, are what the host would load.
///
/// # Errors
/// When the file cannot be read, or is a gzip stream that is corrupt or inflates past `limit`
/// bytes.
pub fn read_plugin(path: &std::path::Path, limit: u64) -> Result<Vec<u8>> {
    let bytes =
        std::fs::read(path).with_context(|| format!("reading plugin {}", path.display()))?;
    Ok(crate::source::compressed::inflate(
        bytes,
        limit,
        &format!("file {}", path.display()),
    )?)
}

/// Loads the plugins and runs the pipeline.
pub fn render(runtime: &Runtime, input: &Input) -> Result<Outcome> {
    let mut stages = Vec::new();
    for path in &input.plugins {
        let bytes = read_plugin(path, crate::source::oci::DEFAULT_MAX_LAYER_BYTES)?;
        let label = path
            .file_stem()
            .and_then(|s| s.to_str())
            .unwrap_or("plugin");
        let plugin = Arc::new(runtime.load(label, &bytes, input.options.clone())?);
        let mut stage = Stage::new(plugin.clone());
        let mut config = input.config.get("*").cloned().unwrap_or_else(|| json!({}));
        if let (Some(own), Some(base)) = (input.config.get(plugin.name()), config.as_object_mut()) {
            base.extend(own.as_object().cloned().unwrap_or_default());
        }
        // As the host does at load: a plugin that checks its config refuses a bad one before
        // any parent is rendered.
        plugin.validate_config(&config.to_string())?;
        stage.config = config;
        if !input.grants.is_empty() {
            let mut kinds: BTreeSet<String> = plugin.info().child_kinds.iter().cloned().collect();
            kinds.extend(input.grants.iter().cloned());
            stage.grants = Grants::Kinds(kinds);
        }
        stages.push(stage);
    }
    let unknown: Vec<&String> = input
        .config
        .keys()
        .filter(|k| *k != "*" && !stages.iter().any(|s| s.plugin.name() == k.as_str()))
        .collect();
    if !unknown.is_empty() {
        let loaded: Vec<&str> = stages.iter().map(|s| s.plugin.name()).collect();
        bail!(
            "config given for plugins that are not in the pipeline: {unknown:?} (loaded: {loaded:?})"
        );
    }
    // The kinds the host would serve as parents: this parent's, and each plugin's.
    let mut policy = Policy::default();
    policy.add_parent_kind(crate::policy::kind_of(&input.parent));
    for stage in &stages {
        for kind in &stage.plugin.info().parent_kinds {
            policy.add_parent_kind(kind.clone());
        }
    }
    let pipeline = Pipeline {
        stages,
        policy: Arc::new(policy),
    };
    Ok(pipeline.run(pipeline::Input::new(
        input.phase,
        &input.parent,
        &input.observed,
        &input.now,
    ))?)
}

/// The outcome as one JSON document.
pub fn to_json(outcome: &Outcome) -> Value {
    json!({
        "desired": outcome.desired.iter().map(|d| &d.object.object).collect::<Vec<_>>(),
        "status": Value::Object(outcome.status.clone()),
        "conditions": outcome.conditions.iter().map(|c| json!({
            "type": c.item.kind, "status": if c.item.status { "True" } else { "False" },
            "reason": c.item.reason, "message": c.item.message, "plugin": c.plugin,
        })).collect::<Vec<_>>(),
        "events": outcome.events.iter().map(|e| json!({
            "type": if e.item.warning { "Warning" } else { "Normal" },
            "reason": e.item.reason, "message": e.item.message, "plugin": e.plugin,
        })).collect::<Vec<_>>(),
        "requeueAfterSeconds": outcome.requeue_after.map(|d| d.as_secs()),
        "finalized": outcome.finalized,
        "producers": outcome.desired.iter().map(|d| json!({
            "object": crate::policy::describe(&d.object), "plugin": d.plugin, "digest": d.digest,
        })).collect::<Vec<_>>(),
    })
}

/// The outcome as YAML: each desired object as a document (so the output can be piped to
/// `kubectl apply -f -`), then status, conditions, events, requeue and finalized as a comment
/// block.
pub fn to_yaml(outcome: &Outcome) -> Result<String> {
    let mut out = String::new();
    for d in &outcome.desired {
        out.push_str("---\n");
        out.push_str(&format!("# produced by {} ({})\n", d.plugin, d.digest));
        out.push_str(&serde_yaml::to_string(&d.object.object)?);
    }
    let full = to_json(outcome);
    let mut summary = Map::new();
    for key in [
        "status",
        "conditions",
        "events",
        "requeueAfterSeconds",
        "finalized",
    ] {
        summary.insert(key.to_string(), full[key].clone());
    }
    out.push_str("---\n# status, conditions and events the host would write to the parent:\n");
    for line in serde_yaml::to_string(&summary)?.lines() {
        out.push_str("# ");
        out.push_str(line);
        out.push('\n');
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn config_assignments_nest_parse_json_and_target_plugins() {
        let mut c = BTreeMap::new();
        set_config(&mut c, "image=mirror/db").unwrap();
        set_config(&mut c, "storage:limits.cpu=2").unwrap();
        set_config(&mut c, "storage:debug=true").unwrap();
        assert_eq!(c["*"], json!({"image": "mirror/db"}));
        assert_eq!(c["storage"], json!({"limits": {"cpu": 2}, "debug": true}));
        assert!(set_config(&mut c, "novalue").is_err());
        assert!(set_config(&mut c, "a..b=1").is_err());
    }

    #[test]
    fn documents_are_split_and_lists_flattened() {
        let docs =
            parse_docs("a: 1\n---\nkind: List\nitems: [{b: 2}, {c: 3}]\n---\n", "t").unwrap();
        assert_eq!(
            docs,
            vec![json!({"a": 1}), json!({"b": 2}), json!({"c": 3})]
        );
        assert!(
            parse_docs("- 1\n", "t")
                .unwrap_err()
                .to_string()
                .contains("not an object")
        );
    }
}

/// A replayed call: whether it reproduced the recording.
#[derive(Debug)]
pub struct Replayed {
    /// The recording's plugin and digest.
    pub recorded: (String, String),
    /// The replaying component's digest.
    pub digest: String,
    /// The answer now, as the recording holds answers.
    pub answer: Value,
    /// The recording's answer.
    pub expected: Value,
    /// The replayed guest asked for more randomness than the call drew.
    pub overdrawn: bool,
}

impl Replayed {
    /// The same component gave the same answer.
    pub fn reproduced(&self) -> bool {
        self.digest == self.recorded.1 && self.answer == self.expected && !self.overdrawn
    }

    /// A unified diff of the answers as YAML (empty when they are the same).
    pub fn diff(&self) -> String {
        let yaml = |v: &Value| serde_yaml::to_string(&readable(v)).unwrap_or_default();
        let (before, after) = (yaml(&self.expected), yaml(&self.answer));
        if before == after {
            return String::new();
        }
        similar::TextDiff::from_lines(&before, &after)
            .unified_diff()
            .context_radius(3)
            .header(
                &format!("recorded {}@{}", self.recorded.0, self.recorded.1),
                &format!("replayed {}@{}", self.recorded.0, self.digest),
            )
            .to_string()
    }
}

/// An answer with its object texts parsed, for a diff a person reads (the comparison is on
/// the texts).
fn readable(answer: &Value) -> Value {
    let mut v = answer.clone();
    if let Some(desired) = v.get_mut("desired").and_then(Value::as_array_mut) {
        for d in desired {
            if let Some(parsed) = d.as_str().and_then(|t| serde_json::from_str(t).ok()) {
                *d = parsed;
            }
        }
    }
    if let Some(status) = v.get_mut("status") {
        if let Some(parsed) = status.as_str().and_then(|t| serde_json::from_str(t).ok()) {
            *status = parsed;
        }
    }
    v
}

/// Replays a recorded call (`windlass render --replay`) with the component at `plugin`: the
/// recorded request, and the randomness the call drew given back in order.
///
/// # Errors
/// The recording cannot be read, or the component loaded.
pub fn replay(
    runtime: &Runtime,
    recording: &Path,
    plugin: &Path,
    options: LoadOptions,
) -> Result<Replayed> {
    use crate::contract::{Reconciler as _, Tape};
    use windlass_operator::record::{self, Recording};
    let text = std::fs::read_to_string(recording)
        .with_context(|| format!("reading {}", recording.display()))?;
    let r: Recording = serde_json::from_str(&text)
        .with_context(|| format!("{}: not a recording", recording.display()))?;
    if r.format != record::FORMAT {
        bail!(
            "{}: format {:?}, this windlass reads {:?}",
            recording.display(),
            r.format,
            record::FORMAT
        );
    }
    let request = r
        .request()
        .map_err(|e| anyhow::anyhow!("{}: {e}", recording.display()))?;
    let entropy = r
        .entropy()
        .map_err(|e| anyhow::anyhow!("{}: {e}", recording.display()))?;
    let bytes = read_plugin(plugin, crate::source::oci::DEFAULT_MAX_LAYER_BYTES)?;
    let label = plugin
        .file_stem()
        .and_then(|s| s.to_str())
        .unwrap_or("plugin");
    let loaded = runtime.load(label, &bytes, options)?;
    let (result, _, drawn) = loaded.call_recorded("", &request, Tape::Replay(entropy));
    let error = result.as_ref().err().map(ToString::to_string);
    let answer = record::answer(result.as_ref().map_err(|_| error.as_deref().unwrap_or("")));
    Ok(Replayed {
        recorded: (r.plugin.clone(), r.digest.clone()),
        digest: loaded.digest().to_string(),
        answer,
        expected: r.response,
        overdrawn: drawn.is_some_and(|d| d.overdrawn),
    })
}
