//! `windlass plugin test`: a component, whatever its language, run against a directory of
//! recorded cases through the same runtime and output policy as the host.
//!
//! A suite is a directory whose subdirectories are cases (a directory holding `parent.yaml` is
//! a case by itself). A case holds:
//!
//! - `parent.yaml` — the parent object (required);
//! - `observed.yaml` — the objects the host observed (any number of documents);
//! - `desired.yaml` — what earlier plugins of the pipeline produced;
//! - `config.yaml` — the plugin's config (merged over the suite's);
//! - `phase.txt` — `reconcile` (the default) or `finalize`;
//! - `now.txt` — the time given to the plugin (default [`DEFAULT_NOW`]);
//! - and what must come out: `expected.yaml` (`desired`, `status`, `conditions`, `events`,
//!   `requeueAfterSeconds`, and `finalized` in the finalize phase) or `error.txt` (the exact
//!   error the host reports).
//!
//! The suite may hold `settings.yaml` with what a WasmPlugin would give the plugin: `config`
//! (the default for every case), `grants` (exactly these kinds, as `spec.grants`) and
//! `podSecurity` (as `spec.podSecurity`), and `now`.
//!
//! A generated value cannot be predicted: in `expected.yaml` the string `<random:N>` matches any
//! string of exactly N characters (and nothing else).

use std::{
    path::{Path, PathBuf},
    sync::Arc,
};

use anyhow::{Context as _, Result, bail};
use serde::Deserialize;
use serde_json::{Map, Value, json};

use crate::{
    contract::Reconciler,
    pipeline::{self, Outcome, Pipeline, Stage},
    policy::Grants,
    render::{parse_docs, to_json},
    runtime::Phase,
};

/// The time a case gives the plugin unless its `now.txt` or the suite says otherwise.
pub const DEFAULT_NOW: &str = "2026-01-01T00:00:00Z";

/// What the suite's `settings.yaml` gives every case: what a WasmPlugin would give the plugin.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct Settings {
    /// The plugin's config; a case's `config.yaml` is merged over it, key by key.
    #[serde(default)]
    pub config: Map<String, Value>,
    /// Exactly these kinds are granted (as a WasmPlugin's `spec.grants`); none: what the plugin
    /// declares.
    #[serde(default)]
    pub grants: Vec<String>,
    /// What the plugin's pods may do (as a WasmPlugin's `spec.podSecurity`).
    #[serde(default)]
    pub pod_security: crate::crd::PodSecurity,
    /// The time given to the plugin unless a case says otherwise.
    #[serde(default)]
    pub now: Option<String>,
}

/// A directory of cases.
#[derive(Debug, Clone)]
pub struct Suite {
    /// Its `settings.yaml`, or the defaults.
    pub settings: Settings,
    /// The case directories, sorted by name.
    pub cases: Vec<PathBuf>,
}

impl Suite {
    /// Reads the suite in `dir`.
    ///
    /// # Errors
    /// When `dir` holds no case, or `settings.yaml` is not valid.
    pub fn open(dir: &Path) -> Result<Suite> {
        let settings_path = dir.join("settings.yaml");
        let settings = match std::fs::read_to_string(&settings_path) {
            Ok(text) => serde_yaml::from_str(&text)
                .with_context(|| format!("{}: not valid settings", settings_path.display()))?,
            Err(_) => Settings::default(),
        };
        let cases = if dir.join("parent.yaml").is_file() {
            vec![dir.to_path_buf()]
        } else {
            let mut cases: Vec<PathBuf> = std::fs::read_dir(dir)
                .with_context(|| format!("reading cases from {}", dir.display()))?
                .filter_map(|e| e.ok().map(|e| e.path()))
                .filter(|p| p.join("parent.yaml").is_file())
                .collect();
            cases.sort();
            cases
        };
        if cases.is_empty() {
            bail!(
                "{}: no cases (a case is a directory holding parent.yaml)",
                dir.display()
            );
        }
        Ok(Suite { settings, cases })
    }

    /// The pipeline stage running `plugin` as the settings say.
    pub fn stage(&self, plugin: Arc<dyn Reconciler>, case: &Case) -> Stage {
        let mut stage = Stage::new(plugin);
        stage.config = case.config.clone();
        if !self.settings.grants.is_empty() {
            stage.grants = Grants::Kinds(self.settings.grants.iter().cloned().collect());
        }
        stage.pods = self.settings.pod_security.grants();
        stage
    }
}

/// What a case gives the plugin.
#[derive(Debug, Clone)]
pub struct Case {
    /// The case directory's name.
    pub name: String,
    /// The case directory.
    pub dir: PathBuf,
    /// Reconcile or finalize.
    pub phase: Phase,
    /// The parent.
    pub parent: Value,
    /// What the host observed.
    pub observed: Vec<Value>,
    /// What earlier plugins produced.
    pub desired: Vec<Value>,
    /// The plugin's config: the suite's, with the case's merged over it.
    pub config: Value,
    /// The time given to the plugin.
    pub now: String,
}

fn read_docs(path: &Path) -> Result<Option<Vec<Value>>> {
    match std::fs::read_to_string(path) {
        Ok(text) => Ok(Some(parse_docs(&text, &path.display().to_string())?)),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(None),
        Err(e) => Err(e).with_context(|| format!("reading {}", path.display())),
    }
}

fn read_text(path: &Path) -> Result<Option<String>> {
    match std::fs::read_to_string(path) {
        Ok(text) => Ok(Some(text.trim().to_string())),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(None),
        Err(e) => Err(e).with_context(|| format!("reading {}", path.display())),
    }
}

impl Case {
    /// Reads the case in `dir`.
    ///
    /// # Errors
    /// Naming the file, when one is missing or not valid.
    pub fn load(suite: &Suite, dir: &Path) -> Result<Case> {
        let name = dir
            .file_name()
            .map_or_else(|| dir.display().to_string(), |n| n.to_string_lossy().into());
        let parent_path = dir.join("parent.yaml");
        let mut parents = read_docs(&parent_path)?
            .with_context(|| format!("{}: missing", parent_path.display()))?;
        if parents.len() != 1 {
            bail!(
                "{}: holds {} objects, not one parent",
                parent_path.display(),
                parents.len()
            );
        }
        let phase = match read_text(&dir.join("phase.txt"))?.as_deref() {
            None | Some("reconcile") => Phase::Reconcile,
            Some("finalize") => Phase::Finalize,
            Some(other) => bail!(
                "{}: {other:?} is not a phase (reconcile or finalize)",
                dir.join("phase.txt").display()
            ),
        };
        let mut config = suite.settings.config.clone();
        let config_path = dir.join("config.yaml");
        if let Some(docs) = read_docs(&config_path)? {
            match docs.as_slice() {
                [Value::Object(own)] => config.extend(own.clone()),
                [] => {}
                _ => bail!("{}: expected one object", config_path.display()),
            }
        }
        let now = match read_text(&dir.join("now.txt"))? {
            Some(now) => now,
            None => suite
                .settings
                .now
                .clone()
                .unwrap_or_else(|| DEFAULT_NOW.into()),
        };
        Ok(Case {
            name,
            dir: dir.to_path_buf(),
            phase,
            parent: parents.remove(0),
            observed: read_docs(&dir.join("observed.yaml"))?.unwrap_or_default(),
            desired: read_docs(&dir.join("desired.yaml"))?.unwrap_or_default(),
            config: Value::Object(config),
            now,
        })
    }

    /// Runs the plugin on this case through the output policy, as the host runs it.
    ///
    /// # Errors
    /// The pipeline's error: the plugin's own, or a policy refusal.
    pub fn run(&self, stage: Stage) -> Result<Outcome, pipeline::Error> {
        // The kinds the host would serve as parents: this parent's, and the plugin's.
        let mut policy = crate::policy::Policy::default();
        policy.add_parent_kind(crate::policy::kind_of(&self.parent));
        for kind in &stage.plugin.info().parent_kinds {
            policy.add_parent_kind(kind.clone());
        }
        let pipeline = Pipeline {
            stages: vec![stage],
            policy: std::sync::Arc::new(policy),
        };
        pipeline.run(pipeline::Input {
            earlier: &self.desired,
            ..pipeline::Input::new(self.phase, &self.parent, &self.observed, &self.now)
        })
    }

    /// What `expected.yaml` holds for an outcome of this case.
    pub fn recorded(&self, outcome: &Outcome) -> Value {
        let mut all = to_json(outcome);
        let mut out = json!({
            "desired": all["desired"].take(),
            "status": all["status"].take(),
            "conditions": all["conditions"].take(),
            "events": all["events"].take(),
            "requeueAfterSeconds": all["requeueAfterSeconds"].take(),
        });
        // In the finalize phase, whether the plugin let the parent go is the point.
        if self.phase == Phase::Finalize {
            out["finalized"] = all["finalized"].take();
        }
        out
    }

    /// Runs the case and compares with what it expects; with `bless`, records what came out
    /// instead (`expected.yaml` or `error.txt`, the other removed).
    ///
    /// # Errors
    /// When an expectation cannot be read or written.
    pub fn check(
        &self,
        stage: Stage,
        bless: bool,
    ) -> Result<(Verdict, Result<Outcome, pipeline::Error>)> {
        let result = self.run(stage);
        let expected_path = self.dir.join("expected.yaml");
        let error_path = self.dir.join("error.txt");
        let expected_error = read_text(&error_path)?;
        let expected = read_docs(&expected_path)?
            .map(|mut docs| {
                if docs.len() == 1 {
                    Ok(docs.remove(0))
                } else {
                    Err(anyhow::anyhow!(
                        "{}: expected one document",
                        expected_path.display()
                    ))
                }
            })
            .transpose()?;
        let got = match &result {
            Ok(outcome) => {
                let mut got = self.recorded(outcome);
                if let Some(expected) = &expected {
                    match_random(&mut got, expected);
                }
                Ok(got)
            }
            Err(e) => Err(e.to_string()),
        };
        if bless {
            let unchanged = match (&got, &expected, &expected_error) {
                (Ok(got), Some(expected), None) => got == expected,
                (Err(got), None, Some(expected)) => got == expected,
                _ => false,
            };
            if unchanged {
                return Ok((Verdict::Passed, result));
            }
            match &got {
                Ok(got) => {
                    std::fs::write(&expected_path, serde_yaml::to_string(got)?)
                        .with_context(|| format!("writing {}", expected_path.display()))?;
                    remove_if_present(&error_path)?;
                }
                Err(error) => {
                    std::fs::write(&error_path, format!("{error}\n"))
                        .with_context(|| format!("writing {}", error_path.display()))?;
                    remove_if_present(&expected_path)?;
                }
            }
            return Ok((Verdict::Blessed, result));
        }
        let verdict = match (got, expected, expected_error) {
            (_, Some(_), Some(_)) => Verdict::Failed(
                "holds both expected.yaml and error.txt: keep the one that applies".into(),
            ),
            (_, None, None) => Verdict::Failed(
                "holds neither expected.yaml nor error.txt (--bless records what came out)".into(),
            ),
            (Ok(got), Some(expected), None) if got == expected => Verdict::Passed,
            (Ok(got), Some(expected), None) => Verdict::Failed(format!(
                "the output differs from expected.yaml (- expected, + got):\n{}",
                diff(&yaml(&expected), &yaml(&got))
            )),
            (Err(got), None, Some(expected)) if got == expected => Verdict::Passed,
            (Err(got), None, Some(expected)) => Verdict::Failed(format!(
                "the error differs from error.txt:\n- {expected}\n+ {got}"
            )),
            (Ok(got), None, Some(expected)) => Verdict::Failed(format!(
                "expected the error\n  {expected}\nbut the plugin succeeded with:\n{}",
                yaml(&got)
            )),
            (Err(got), Some(_), None) => Verdict::Failed(format!(
                "expected the output in expected.yaml but the run failed:\n  {got}"
            )),
        };
        Ok((verdict, result))
    }
}

/// How a case ended.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Verdict {
    /// The plugin produced what the case expects.
    Passed,
    /// What came out was recorded as the expectation.
    Blessed,
    /// Why the case failed, with a diff where there is one.
    Failed(String),
}

fn remove_if_present(path: &Path) -> Result<()> {
    match std::fs::remove_file(path) {
        Err(e) if e.kind() != std::io::ErrorKind::NotFound => {
            Err(e).with_context(|| format!("removing {}", path.display()))
        }
        _ => Ok(()),
    }
}

fn yaml(value: &Value) -> String {
    serde_yaml::to_string(value).unwrap_or_else(|e| format!("<not YAML: {e}>"))
}

/// A line diff of two texts, only the changed lines with three lines of context.
pub fn diff(expected: &str, got: &str) -> String {
    similar::TextDiff::from_lines(expected, got)
        .unified_diff()
        .context_radius(3)
        .to_string()
}

/// `got` with every string that `expected` holds as `<random:N>` at the same place, and that
/// has exactly N characters, replaced by that placeholder.
pub fn match_random(got: &mut Value, expected: &Value) {
    match (got, expected) {
        (Value::String(g), Value::String(e)) => {
            if let Some(n) = e
                .strip_prefix("<random:")
                .and_then(|r| r.strip_suffix('>'))
                .and_then(|n| n.parse::<usize>().ok())
                && g.chars().count() == n
            {
                *g = e.clone();
            }
        }
        (Value::Array(g), Value::Array(e)) => {
            for (g, e) in g.iter_mut().zip(e) {
                match_random(g, e);
            }
        }
        (Value::Object(g), Value::Object(e)) => {
            for (k, g) in g.iter_mut() {
                if let Some(e) = e.get(k) {
                    match_random(g, e);
                }
            }
        }
        _ => {}
    }
}
