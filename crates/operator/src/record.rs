//! Recordings of plugin calls, for replay offline (`windlass render --replay FILE`): for a
//! parent annotated `windlass.dev/record: "true"`, with the host given a directory
//! (`--record-dir`), each plugin call of each reconcile is written as one file — the request
//! exactly as the plugin got it (its parent, observed and desired objects and config as the
//! JSON text it was given, the phase, the time), the plugin and digest, the randomness the call
//! drew, and the plugin's answer. A call recorded runs in an instance of its own whose
//! randomness is on tape (`windlass_contract::Tape`), so the same component given the same
//! request and entropy answers the same, byte for byte.
//!
//! The store is bounded: the newest [`KEPT`] files per parent. The files hold what the plugin
//! saw, Secrets it may read included: the directory is the host's, and as private as its
//! memory.

use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};
use serde_json::{Value, json};
use windlass_contract::{Entropy, Phase, Request, Response};

/// The annotation that asks for a parent's calls to be recorded.
pub const RECORD_ANNOTATION: &str = "windlass.dev/record";
/// The format of a recording file.
pub const FORMAT: &str = "windlass.dev/recording/v1";
/// How many recordings are kept per parent (six plugins: the last ten reconciles).
pub const KEPT: usize = 60;

/// Which parent a recording is of.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ParentId {
    /// The parent kind's key.
    pub kind: String,
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub namespace: String,
    pub name: String,
    pub uid: String,
}

/// A request as recorded: every object as the JSON text the plugin was given.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct RecordedRequest {
    /// `reconcile` or `finalize`.
    pub phase: String,
    pub parent: String,
    pub observed: Vec<String>,
    pub desired: Vec<String>,
    pub config: String,
    pub now: String,
}

/// One recorded call.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Recording {
    /// [`FORMAT`].
    pub format: String,
    pub parent: ParentId,
    /// The plugin's name.
    pub plugin: String,
    /// The component's digest: a replay with another is a diff, not a reproduction.
    pub digest: String,
    pub request: RecordedRequest,
    /// The bytes the call drew, hex.
    pub entropy: String,
    /// What `wasi:random/insecure-seed` answered, in decimal.
    pub insecure_seed: String,
    /// The plugin's answer ([`answer`]).
    pub response: Value,
}

/// A plugin's answer as recorded and compared: its response, every object as the text it
/// returned, or its error.
pub fn answer(response: Result<&Response, &str>) -> Value {
    match response {
        Ok(r) => json!({
            "desired": r.desired,
            "status": r.status,
            "conditions": r.conditions.iter().map(|c| json!({
                "type": c.kind, "status": c.status, "reason": c.reason, "message": c.message,
            })).collect::<Vec<_>>(),
            "events": r.events.iter().map(|e| json!({
                "warning": e.warning, "reason": e.reason, "message": e.message,
            })).collect::<Vec<_>>(),
            "requeueAfterSecs": r.requeue_after_secs,
            "finalized": r.finalized,
        }),
        Err(e) => json!({ "error": e }),
    }
}

impl Recording {
    /// The recording of one call of `parent`'s run.
    pub fn of(
        parent: ParentId,
        plugin: &str,
        digest: &str,
        request: &Request,
        entropy: &Entropy,
        response: Result<&Response, &str>,
    ) -> Self {
        Recording {
            format: FORMAT.to_string(),
            parent,
            plugin: plugin.to_string(),
            digest: digest.to_string(),
            request: RecordedRequest {
                phase: match request.phase {
                    Phase::Reconcile => "reconcile",
                    Phase::Finalize => "finalize",
                }
                .to_string(),
                parent: request.parent.clone(),
                observed: request.observed.clone(),
                desired: request.desired.clone(),
                config: request.config.clone(),
                now: request.now.clone(),
            },
            entropy: hex::encode(&entropy.bytes),
            insecure_seed: entropy.insecure_seed.to_string(),
            response: answer(response),
        }
    }

    /// The request to give the plugin again.
    ///
    /// # Errors
    /// An unknown phase.
    pub fn request(&self) -> Result<Request, String> {
        let r = &self.request;
        Ok(Request {
            phase: match r.phase.as_str() {
                "reconcile" => Phase::Reconcile,
                "finalize" => Phase::Finalize,
                other => {
                    return Err(format!(
                        "request.phase: {other:?} is not reconcile or finalize"
                    ));
                }
            },
            parent: r.parent.clone(),
            observed: r.observed.clone(),
            desired: r.desired.clone(),
            config: r.config.clone(),
            now: r.now.clone(),
        })
    }

    /// The randomness to give back.
    ///
    /// # Errors
    /// `entropy` not hex, or `insecureSeed` not a number.
    pub fn entropy(&self) -> Result<Entropy, String> {
        Ok(Entropy {
            bytes: hex::decode(&self.entropy).map_err(|e| format!("entropy: {e}"))?,
            insecure_seed: self
                .insecure_seed
                .parse()
                .map_err(|e| format!("insecureSeed: {e}"))?,
            overdrawn: false,
        })
    }
}

/// The directory of `parent`'s recordings under `root`.
pub fn dir_of(root: &Path, parent: &ParentId) -> PathBuf {
    let namespace = if parent.namespace.is_empty() {
        "_cluster"
    } else {
        &parent.namespace
    };
    root.join(namespace).join(&parent.name)
}

/// Writes one run's recordings (`started`: milliseconds since the epoch, so that names sort in
/// time) and keeps the newest [`KEPT`] of the parent.
///
/// # Errors
/// The directory or a file cannot be written.
pub fn write(root: &Path, started: u128, recordings: &[Recording]) -> std::io::Result<()> {
    let Some(first) = recordings.first() else {
        return Ok(());
    };
    let dir = dir_of(root, &first.parent);
    std::fs::create_dir_all(&dir)?;
    for (i, r) in recordings.iter().enumerate() {
        let path = dir.join(format!("{started:015}-{i:02}-{}.json", r.plugin));
        let text = serde_json::to_string_pretty(r).map_err(std::io::Error::other)?;
        std::fs::write(path, text + "\n")?;
    }
    let mut files: Vec<PathBuf> = std::fs::read_dir(&dir)?
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| p.extension().is_some_and(|e| e == "json"))
        .collect();
    files.sort();
    let excess = files.len().saturating_sub(KEPT);
    for old in &files[..excess] {
        std::fs::remove_file(old)?;
    }
    Ok(())
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    fn parent() -> ParentId {
        ParentId {
            kind: "samples/v1/DB".into(),
            namespace: "shop".into(),
            name: "orders".into(),
            uid: "u1".into(),
        }
    }

    #[test]
    fn a_recording_gives_back_its_request_and_entropy_exactly_and_the_store_is_bounded() {
        let request = Request {
            phase: Phase::Finalize,
            parent: "{\"b\":1,\"a\":2}".into(),
            observed: vec!["{}".into()],
            desired: vec![],
            config: "{ }".into(),
            now: "2026-12-05T10:00:00Z".into(),
        };
        let entropy = Entropy {
            bytes: vec![0, 1, 254, 255],
            insecure_seed: u128::MAX - 7,
            overdrawn: false,
        };
        let response = Response {
            desired: vec!["{\"kind\":\"ConfigMap\"}".into()],
            ..Response::default()
        };
        let r = Recording::of(parent(), "p", "sha256:1", &request, &entropy, Ok(&response));
        let text = serde_json::to_string(&r).unwrap();
        let back: Recording = serde_json::from_str(&text).unwrap();
        assert_eq!(back.request().unwrap(), request);
        assert_eq!(back.entropy().unwrap(), entropy);
        assert_eq!(back.response, answer(Ok(&response)));
        let root = tempfile::tempdir().unwrap();
        for run in 0..(KEPT as u128 / 2 + 5) {
            write(root.path(), 1_000 + run, &[r.clone(), r.clone()]).unwrap();
        }
        let dir = dir_of(root.path(), &parent());
        let mut names: Vec<String> = std::fs::read_dir(&dir)
            .unwrap()
            .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
            .collect();
        names.sort();
        assert_eq!(names.len(), KEPT);
        assert!(names[0].starts_with("000000000001005-00-p"), "{names:?}");
    }
}
