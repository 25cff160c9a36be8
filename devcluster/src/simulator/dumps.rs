//! What the SampleDB image's dump tools do to a backup volume, so that a restore fails as a
//! real one would when its backup is not there. No container runs in the simulator; the volume
//! holds names, no bytes.
//!
//! - `sampledb-backup --dir DIR [--prefix P --retain N]` writes `DIR/<its Job's name>.dump`
//!   (the name `status.lastBackup` and `spec.restoreFrom` take), then keeps only the `N` newest
//!   dumps starting with `P`; `sampledb-backup --out FILE` writes `FILE`. A dump exists only once
//!   its Pod has succeeded: a failed backup leaves nothing to restore.
//! - `sampledb-restore --from FILE` fails unless `FILE` is a dump on the volume mounted there.
//!
//! A path is resolved through the container's volume mounts to the PersistentVolumeClaim that
//! backs it, so Pods of different databases sharing a namespace's backup claim see each other's
//! dumps, as on a real volume; a path on no claim is on the Pod's own disk and gone with it.
//! The dumps live as long as the simulator: a devcluster starts empty anyway.

use std::collections::HashMap;
use std::sync::Mutex;

use serde_json::Value;

/// The dumps on each volume claim, by `(namespace, claim)`: paths relative to the claim's
/// root, oldest first.
#[derive(Debug, Default)]
pub(crate) struct Volumes(Mutex<HashMap<(String, String), Vec<String>>>);

/// One dump tool's command, with its paths resolved to a claim.
#[derive(Debug, Clone, PartialEq)]
pub(crate) enum Command {
    /// Writes `file`, then keeps the `retain` newest dumps starting with `prefix`, if given.
    Backup {
        at: Place,
        prune: Option<(String, usize)>,
    },
    /// Reads `file`.
    Restore { at: Place },
}

/// A file: the claim it is on (none: the Pod's own disk) and its path below the claim's root.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct Place {
    claim: Option<String>,
    path: String,
    /// The path the command named, for messages.
    shown: String,
}

impl Command {
    /// The dump tool a Pod runs, if any: the first container whose command is one.
    pub(crate) fn of_pod(pod: &Value) -> Option<Command> {
        let job = pod["metadata"]["labels"]["batch.kubernetes.io/job-name"]
            .as_str()
            .or_else(|| pod["metadata"]["labels"]["job-name"].as_str())
            .unwrap_or_default();
        pod["spec"]["containers"]
            .as_array()?
            .iter()
            .find_map(|c| Command::parse(&pod["spec"], c, job))
    }

    fn parse(spec: &Value, container: &Value, job: &str) -> Option<Command> {
        let argv: Vec<&str> = ["command", "args"]
            .iter()
            .filter_map(|k| container[*k].as_array())
            .flatten()
            .filter_map(Value::as_str)
            .collect();
        let (program, flags) = argv.split_first()?;
        let flag = |name: &str| {
            flags.iter().enumerate().find_map(|(i, f)| {
                f.strip_prefix(&format!("{name}="))
                    .or_else(|| (*f == name).then(|| flags.get(i + 1).copied()).flatten())
            })
        };
        let place = |file: &str| place(spec, container, file);
        match program.rsplit('/').next()? {
            "sampledb-backup" => {
                let file = match (flag("--out"), flag("--dir")) {
                    (Some(out), _) => out.to_string(),
                    (None, Some(dir)) => format!("{}/{job}.dump", dir.trim_end_matches('/')),
                    (None, None) => return None,
                };
                let prune = flag("--prefix").zip(flag("--retain")).and_then(|(p, n)| {
                    let at = place(&format!("{}/{p}", flag("--dir")?.trim_end_matches('/')));
                    Some((at.path, n.parse().ok()?))
                });
                Some(Command::Backup {
                    at: place(&file),
                    prune,
                })
            }
            "sampledb-restore" => Some(Command::Restore {
                at: place(flag("--from")?),
            }),
            _ => None,
        }
    }
}

/// Where `file` is, through the container's mounts: the longest mount path that holds it.
fn place(spec: &Value, container: &Value, file: &str) -> Place {
    let mount = container["volumeMounts"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|m| Some((m["mountPath"].as_str()?, m["name"].as_str()?)))
        .filter(|(at, _)| {
            let at = at.trim_end_matches('/');
            file.strip_prefix(at)
                .is_some_and(|rest| rest.starts_with('/'))
        })
        .max_by_key(|(at, _)| at.len());
    let claim = mount.and_then(|(_, volume)| {
        spec["volumes"]
            .as_array()?
            .iter()
            .find(|v| v["name"] == volume)?["persistentVolumeClaim"]["claimName"]
            .as_str()
            .map(str::to_string)
    });
    let path = match (mount, &claim) {
        (Some((at, _)), Some(_)) => file[at.trim_end_matches('/').len()..].to_string(),
        _ => file.to_string(),
    };
    Place {
        claim,
        path,
        shown: file.to_string(),
    }
}

impl Volumes {
    /// Carries out `cmd` for a Pod in `ns` that is about to succeed: `Err` with the tool's
    /// message when it would fail instead.
    pub(crate) fn run(&self, ns: &str, cmd: &Command) -> Result<(), String> {
        let mut volumes = self.0.lock().unwrap_or_else(|e| e.into_inner());
        match cmd {
            Command::Backup { at, prune } => {
                let Some(claim) = &at.claim else {
                    // Written to the Pod's own disk: gone with the Pod.
                    return Ok(());
                };
                let dumps = volumes.entry((ns.to_string(), claim.clone())).or_default();
                dumps.retain(|d| *d != at.path);
                dumps.push(at.path.clone());
                if let Some((prefix, keep)) = prune {
                    let mine: Vec<String> = dumps
                        .iter()
                        .filter(|d| d.starts_with(prefix.as_str()))
                        .cloned()
                        .collect();
                    let drop = mine.len().saturating_sub(*keep);
                    dumps.retain(|d| !mine[..drop].contains(d));
                }
                Ok(())
            }
            Command::Restore { at } => {
                let found = at.claim.as_ref().is_some_and(|claim| {
                    volumes
                        .get(&(ns.to_string(), claim.clone()))
                        .is_some_and(|dumps| dumps.contains(&at.path))
                });
                if found {
                    Ok(())
                } else {
                    Err(match &at.claim {
                        Some(claim) => format!(
                            "sampledb-restore: {}: no such backup on volume claim {claim} (never written, or its backup did not complete)",
                            at.shown
                        ),
                        None => format!(
                            "sampledb-restore: {}: no such backup (the path is on no volume claim)",
                            at.shown
                        ),
                    })
                }
            }
        }
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)] // Tests: a panic is the failure report.
mod tests {
    use super::*;
    use serde_json::json;

    fn pod(job: &str, command: Value) -> Value {
        json!({"metadata": {"labels": {"batch.kubernetes.io/job-name": job}},
            "spec": {"volumes": [{"name": "backups", "persistentVolumeClaim": {"claimName": "shared"}}],
                "containers": [{"name": "c", "command": command,
                    "volumeMounts": [{"name": "backups", "mountPath": "/backups"}]}]}})
    }

    fn run(v: &Volumes, ns: &str, job: &str, command: Value) -> Result<(), String> {
        v.run(ns, &Command::of_pod(&pod(job, command)).unwrap())
    }

    #[test]
    fn a_restore_finds_only_what_a_backup_wrote_on_its_claim() {
        let v = Volumes::default();
        let restore = json!(["sampledb-restore", "--from", "/backups/db-backup-1.dump"]);
        let err = run(&v, "shop", "r", restore.clone()).unwrap_err();
        assert!(
            err.contains("/backups/db-backup-1.dump") && err.contains("shared"),
            "{err}"
        );
        run(
            &v,
            "shop",
            "db-backup-1",
            json!(["sampledb-backup", "--dir", "/backups"]),
        )
        .unwrap();
        run(&v, "shop", "r", restore.clone()).unwrap();
        assert!(
            run(&v, "other", "r", restore).is_err(),
            "another namespace's claim is another volume"
        );
        // `--out` names the file; a path on no claim is not kept.
        run(
            &v,
            "shop",
            "pre",
            json!(["sampledb-backup", "--out", "/backups/pre.dump"]),
        )
        .unwrap();
        run(
            &v,
            "shop",
            "r",
            json!(["sampledb-restore", "--from=/backups/pre.dump"]),
        )
        .unwrap();
        assert!(
            run(
                &v,
                "shop",
                "r",
                json!(["sampledb-restore", "--from", "/tmp/pre.dump"])
            )
            .is_err()
        );
        assert_eq!(
            Command::of_pod(&pod("x", json!(["sampledb-init"]))),
            None,
            "not a dump tool"
        );
    }

    #[test]
    fn retention_keeps_the_newest_dumps_of_its_prefix_only() {
        let v = Volumes::default();
        let backup = json!([
            "sampledb-backup",
            "--dir",
            "/backups",
            "--prefix",
            "a-backup-",
            "--retain",
            "2"
        ]);
        run(
            &v,
            "ns",
            "b-backup-1",
            json!(["sampledb-backup", "--dir", "/backups"]),
        )
        .unwrap();
        for n in 1..=3 {
            run(&v, "ns", &format!("a-backup-{n}"), backup.clone()).unwrap();
        }
        let restore = |file: &str| {
            run(
                &v,
                "ns",
                "r",
                json!(["sampledb-restore", "--from", format!("/backups/{file}")]),
            )
        };
        assert!(restore("a-backup-1.dump").is_err(), "pruned");
        restore("a-backup-2.dump").unwrap();
        restore("a-backup-3.dump").unwrap();
        restore("b-backup-1.dump").unwrap();
    }
}
