//! Recordings of plugin calls, for replay offline (`windlass render --replay FILE`): for a
//! parent annotated `windlass.dev/record: "true"`, with the host given a directory
//! (`--record-dir`), each plugin call of each reconcile is written as one file — the request
//! exactly as the plugin got it (its parent, observed and desired objects and config as the
//! JSON text it was given, the phase, the time), the plugin and digest, the randomness the call
//! drew, and the plugin's answer. A call recorded runs in an instance of its own whose
//! randomness is on tape (`windlass_contract::Tape`), so the same component given the same
//! request and entropy answers the same, byte for byte.
//!
//! The store is bounded: the newest [`KEPT`] files per parent, and [`KEPT_BYTES`] in all (the
//! oldest of any parent going first, so a deleted parent's go in time). The files hold what the
//! plugin saw, Secrets it may read included: the directory is the host's, and as private as
//! its memory; the admin server serves them to its own address only.

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
/// How many bytes of recordings are kept in all, the oldest going first (the chart's emptyDir
/// is 256 MiB): many recorded parents, or parents long deleted, cannot fill the disk.
pub const KEPT_BYTES: u64 = 128 << 20;

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
        // A plugin names itself: only its plain characters go into a file name.
        let plugin: String = r
            .plugin
            .chars()
            .map(|c| {
                if c.is_ascii_alphanumeric() || c == '-' {
                    c
                } else {
                    '_'
                }
            })
            .collect();
        let path = dir.join(format!("{started:015}-{i:02}-{plugin}.json"));
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
    keep_within(root, KEPT_BYTES)
}

/// Removes the oldest recordings under `root`, of any parent, until they take at most
/// `budget` bytes; and the directories left empty.
fn keep_within(root: &Path, budget: u64) -> std::io::Result<()> {
    let mut all: Vec<(String, PathBuf, u64)> = Vec::new();
    for namespace in std::fs::read_dir(root)?.filter_map(Result::ok) {
        for parent in std::fs::read_dir(namespace.path())?.filter_map(Result::ok) {
            for file in std::fs::read_dir(parent.path())?.filter_map(Result::ok) {
                let size = file.metadata().map_or(0, |m| m.len());
                let name = file.file_name().to_string_lossy().into_owned();
                all.push((name, file.path(), size));
            }
        }
    }
    let mut total: u64 = all.iter().map(|f| f.2).sum();
    // Names start with the run's time: sorted by name, oldest first.
    all.sort();
    for (_, path, size) in &all {
        if total <= budget {
            break;
        }
        std::fs::remove_file(path)?;
        total -= size;
        if let Some(dir) = path.parent()
            && std::fs::read_dir(dir)?.next().is_none()
        {
            std::fs::remove_dir(dir)?;
        }
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

    #[test]
    fn the_whole_store_keeps_to_its_budget_oldest_first_whatever_the_parent() {
        let root = tempfile::tempdir().unwrap();
        let mut r = Recording::of(
            parent(),
            "a/b c",
            "sha256:1",
            &Request {
                phase: Phase::Reconcile,
                parent: "{}".into(),
                observed: vec![],
                desired: vec![],
                config: "{}".into(),
                now: "2026-12-05T10:00:00Z".into(),
            },
            &Entropy::default(),
            Err("boom"),
        );
        write(root.path(), 1, std::slice::from_ref(&r)).unwrap();
        let old = dir_of(root.path(), &parent());
        assert!(old.join("000000000000001-00-a_b_c.json").exists());
        r.parent.name = "other".into();
        write(root.path(), 2, std::slice::from_ref(&r)).unwrap();
        let size = std::fs::metadata(old.join("000000000000001-00-a_b_c.json"))
            .unwrap()
            .len();
        // Room for one: the older parent's file goes, and its directory with it.
        keep_within(root.path(), size).unwrap();
        assert!(!old.exists());
        assert!(
            dir_of(root.path(), &r.parent)
                .join("000000000000002-00-a_b_c.json")
                .exists()
        );
    }
}
