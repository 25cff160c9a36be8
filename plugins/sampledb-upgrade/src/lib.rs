//! SampleDB upgrade: moves a database to a newer `spec.version` safely, and refuses what it
//! cannot do safely.
//!
//! It runs after the storage plugin and edits the StatefulSet storage put in the desired set.
//! `status.currentVersion` is its record of the version that runs:
//!
//! - with config `supportedVersions` set, a `spec.version` not in it is refused first
//!   (`UnsupportedVersion`, naming the supported ones): a running database keeps its image; a
//!   new one gets no StatefulSet (nothing runs an image that is not supported) and no
//!   `currentVersion` until `spec.version` is one of them;
//! - absent (a new database): `spec.version` is recorded;
//! - equal to `spec.version`: nothing to do (`Upgrade` is True, `UpToDate`);
//! - newer than `spec.version`: a downgrade, refused (`DowngradeRefused`): the StatefulSet's
//!   image stays at the running version;
//! - older by more than one major version (15.x → 17.x): refused the same way
//!   (`UnsupportedUpgradePath`);
//! - otherwise an upgrade, phase `Upgrading`, in steps, the image held at the running version
//!   until the data is migrated:
//!   1. the pre-upgrade backup Job (`<name>-pre-upgrade-<version>`, the running image) dumps
//!      the database to the backup volume (config `backupClaim`, default `sampledb-backups`);
//!   2. once it completes, the upgrade Job (`<name>-upgrade-<version>`, the new image) runs
//!      `sampledb-upgrade --from <current> --to <target>`;
//!   3. once it completes, the image is released and the StatefulSet rolls, the replicas
//!      first, then a planned switchover (the primary plugin moves the primary to an updated
//!      replica), then the old primary (see `roll`) — a switchover not done within config
//!      `switchoverTimeoutSeconds` (default 300) is given up with a Warning
//!      (`SwitchoverTimedOut`) and the old primary's Pod is updated without it; when every
//!      replica runs the new image and is ready, `currentVersion` becomes the target
//!      (`Upgraded`, with a Normal event).
//!
//!   `status.upgradingTo` records the target before the upgrade Job is applied (the Job is
//!   applied only in a run that sees the record): from then on the data may be being
//!   migrated, so that upgrade is finished (image, roll, `currentVersion`) even
//!   if `spec.version` changes again meanwhile — back to the old version or on to another —
//!   and only then is the new `spec.version` considered.
//!
//!   Both Jobs stay desired throughout (the host would prune them, and they would run again),
//!   and one more run after the upgrade, until the parent's status records the new version. A
//!   failed Job is kept and not retried (`PreUpgradeBackupFailed`, `UpgradeJobFailed`, with a
//!   Warning event): delete it to try again.

mod jobs;
mod roll;

use std::time::Duration;

use sampledb_api::{
    CONTAINER, KIND_KEY, SampleDbSpec, compare_versions, image_with_tag, names, parse_version,
};
use serde::Deserialize;
use windlass_sdk::{
    Context, Error, Info, Output, Plugin, Result, Value,
    k8s_openapi::api::{apps::v1::StatefulSet, batch::v1::Job, core::v1::Pod},
};

use jobs::JobState;

/// The upgrade plugin.
#[derive(Debug)]
pub struct Upgrade;

/// The plugin's config (from its WasmPlugin).
#[derive(Debug, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
struct Config {
    /// The PersistentVolumeClaim the pre-upgrade backup is written to.
    #[serde(default = "default_backup_claim")]
    backup_claim: String,
    /// The versions this operator can run and upgrade between (one major version at a time);
    /// when absent, any version.
    #[serde(default)]
    supported_versions: Option<Vec<String>>,
    /// How long the roll waits for a planned switchover it asked for before it updates the
    /// primary's Pod without one (1 to 86400; default 300).
    #[serde(default = "default_switchover_timeout")]
    switchover_timeout_seconds: u64,
}

impl Config {
    /// The config, checked: every supported version is a version.
    fn checked(ctx: &Context) -> Result<Config> {
        Config::check(ctx.config()?)
    }

    /// `config` (the WasmPlugin's), checked as [`Config::checked`] does.
    fn from_value(config: &Value) -> Result<Config> {
        Config::check(Config::deserialize(config).map_err(|e| Error::InvalidConfig(e.to_string()))?)
    }

    fn check(config: Config) -> Result<Config> {
        if !(1..=86_400).contains(&config.switchover_timeout_seconds) {
            return Err(Error::InvalidConfig(format!(
                "switchoverTimeoutSeconds: {} is not between 1 and 86400",
                config.switchover_timeout_seconds
            )));
        }
        if let Some(versions) = &config.supported_versions {
            if versions.is_empty() {
                return Err(Error::InvalidConfig(
                    "supportedVersions: empty; list the versions (like 16.4) or leave it out to allow any"
                        .into(),
                ));
            }
            if let Some((i, v)) = versions
                .iter()
                .enumerate()
                .find(|(_, v)| parse_version(v).is_none())
            {
                return Err(Error::InvalidConfig(format!(
                    "supportedVersions[{i}]: {v:?} is not a version like 16.4"
                )));
            }
        }
        Ok(config)
    }

    /// `version` is not supported: the message saying so, naming the supported ones.
    fn unsupported(&self, version: &str) -> Option<String> {
        let supported = self.supported_versions.as_ref()?;
        if supported
            .iter()
            .any(|v| compare_versions(v, version) == Some(std::cmp::Ordering::Equal))
        {
            return None;
        }
        Some(format!(
            "spec.version {version} is not supported by this operator; supported versions: {}",
            supported.join(", ")
        ))
    }
}

fn default_switchover_timeout() -> u64 {
    300
}

fn default_backup_claim() -> String {
    "sampledb-backups".to_string()
}

/// How soon to look again while an upgrade is in progress.
pub const REQUEUE: Duration = Duration::from_secs(10);

/// The condition this plugin reports.
const CONDITION: &str = "Upgrade";

windlass_sdk::export!(Upgrade);

impl Plugin for Upgrade {
    fn info() -> Info {
        Info::new("sampledb-upgrade", env!("CARGO_PKG_VERSION"))
            .parent(KIND_KEY)
            .child::<StatefulSet>()
            .child::<Job>()
            .reads::<Pod>()
    }

    /// The config is checked when the host loads the plugin: a version list that is not one
    /// is refused there, before any SampleDB meets it.
    fn validate_config(config: &Value) -> Result<()> {
        Config::from_value(config).map(drop)
    }

    /// The upgrade, and `Ready` false whenever `Upgrade` is (under way, refused, waiting): the
    /// host combines it with the other plugins' into the SampleDB's `Ready`.
    fn reconcile(ctx: &Context) -> Result<Output> {
        let mut out = run(ctx)?;
        if let Some(c) = out.condition_of(CONDITION).filter(|c| !c.status).cloned() {
            out.condition("Ready", false, &c.reason, c.message);
        }
        Ok(out)
    }
}

/// Decides the running version and the step of an upgrade.
fn run(ctx: &Context) -> Result<Output> {
    let spec: SampleDbSpec = ctx.spec()?;
    let config = Config::checked(ctx)?;
    let target = spec.version.as_str();
    let Some(target_parts) = parse_version(target) else {
        return Err(Error::InvalidParent(format!(
            "spec.version: {target:?} is not a version like 16.4"
        )));
    };
    let mut out = ctx.output();
    let current = ctx.status("/currentVersion").and_then(Value::as_str);
    // An upgrade whose migration has started is finished whatever spec.version says (below).
    let migrating = current.is_some()
        && ctx
            .status("/upgradingTo")
            .and_then(Value::as_str)
            .is_some_and(|v| Some(v) != current);
    if !migrating && let Some(why) = config.unsupported(target) {
        refuse_unsupported(ctx, &mut out, current, why);
        return Ok(out);
    }
    let Some(current) = current else {
        out.status("currentVersion", target);
        out.condition(CONDITION, true, "UpToDate", format!("running {target}"));
        return Ok(out);
    };
    let Some(current_parts) = parse_version(current) else {
        return Err(Error::Failed(format!(
            "status.currentVersion: {current:?} is not a version"
        )));
    };
    out.status("currentVersion", current);
    // An upgrade whose migration has started is finished first, whatever spec.version says
    // now: the data is (being) migrated to that version, so neither the running version's
    // image nor another target may run on it.
    if let Some(committed) = ctx
        .status("/upgradingTo")
        .and_then(Value::as_str)
        .filter(|v| *v != current)
    {
        if parse_version(committed).is_none() {
            return Err(Error::Failed(format!(
                "status.upgradingTo: {committed:?} is not a version"
            )));
        }
        let committed = committed.to_string();
        upgrade(ctx, &spec, &config, current, &committed, &mut out)?;
        if committed != target
            && let Some(c) = out.condition_of(CONDITION).filter(|c| !c.status).cloned()
        {
            out.condition(
                CONDITION,
                false,
                &c.reason,
                format!(
                    "{}; spec.version is now {target}, which is considered once the \
                         upgrade to {committed} is done (the data is already being migrated)",
                    c.message
                ),
            );
        }
        return Ok(out);
    }
    match compare_versions(target, current) {
        Some(std::cmp::Ordering::Equal) => {
            out.condition(CONDITION, true, "UpToDate", format!("running {current}"));
        }
        Some(std::cmp::Ordering::Less) => refuse(
            ctx,
            &mut out,
            current,
            "DowngradeRefused",
            format!(
                "spec.version {target} is older than the running version {current}: \
                     downgrades are not supported, the database keeps running {current} \
                     (set spec.version back to {current})"
            ),
        ),
        _ if target_parts[0] > current_parts[0] + 1 => refuse(
            ctx,
            &mut out,
            current,
            "UnsupportedUpgradePath",
            format!(
                "spec.version {target} skips a major version from the running version \
                     {current}: upgrade one major version at a time (to {}.x first); the \
                     database keeps running {current}",
                current_parts[0] + 1
            ),
        ),
        _ => upgrade(ctx, &spec, &config, current, target, &mut out)?,
    }
    Ok(out)
}

/// Refuses a `spec.version` the config does not support: a running database keeps its version
/// (as recorded, or as its StatefulSet runs); a new one gets no StatefulSet.
fn refuse_unsupported(ctx: &Context, out: &mut Output, current: Option<&str>, why: String) {
    let name = ctx.name();
    let running = current.map(str::to_string).or_else(|| {
        let sts = ctx.observed_named::<StatefulSet>(&names::statefulset(name))?;
        let image = sts
            .spec?
            .template
            .spec?
            .containers
            .into_iter()
            .find(|c| c.name == CONTAINER)?
            .image?;
        let tag = image.rsplit_once(':')?.1.to_string();
        parse_version(&tag).map(|_| tag)
    });
    let message = match &running {
        Some(running) => {
            if let Some(current) = current {
                out.status("currentVersion", current);
            }
            hold_image(out, name, running);
            format!("{why}; the database keeps running {running}")
        }
        None => {
            out.remove("apps/v1/StatefulSet", &names::statefulset(name));
            format!("{why}; no database Pod runs until spec.version is one of them")
        }
    };
    out.condition(CONDITION, false, "UnsupportedVersion", message.clone());
    out.warning("UnsupportedVersion", message);
}

/// Keeps the running version and says why.
fn refuse(ctx: &Context, out: &mut Output, current: &str, reason: &str, message: String) {
    hold_image(out, ctx.name(), current);
    out.condition(CONDITION, false, reason, message.clone());
    out.warning(reason, message);
}

/// Sets the database container's image in the desired StatefulSet to `version`; returns the
/// image storage asked for, or none when there is no StatefulSet to edit.
fn hold_image(out: &mut Output, name: &str, version: &str) -> Option<String> {
    let container = database_container(out, name)?;
    let wanted = container.get("image")?.as_str()?.to_string();
    container["image"] = image_with_tag(&wanted, version).into();
    Some(wanted)
}

fn database_container<'a>(out: &'a mut Output, name: &str) -> Option<&'a mut Value> {
    out.find_mut("apps/v1/StatefulSet", &names::statefulset(name))?
        .pointer_mut("/spec/template/spec/containers")?
        .as_array_mut()?
        .iter_mut()
        .find(|c| c.get("name").and_then(Value::as_str) == Some(CONTAINER))
}

/// One step of a supported upgrade from `current` to `target`.
fn upgrade(
    ctx: &Context,
    spec: &SampleDbSpec,
    config: &Config,
    current: &str,
    target: &str,
    out: &mut Output,
) -> Result<()> {
    let name = ctx.name();
    out.requeue_after(REQUEUE);
    let Some(storage_image) =
        database_container(out, name).and_then(|c| c.get("image")?.as_str().map(str::to_string))
    else {
        out.condition(
            CONDITION,
            false,
            "WaitingForStatefulSet",
            format!(
                "no StatefulSet {} with a {CONTAINER} container to upgrade from {current} to \
                 {target}: the storage plugin must run before this one",
                names::statefulset(name)
            ),
        );
        return Ok(());
    };
    // Storage's image is for spec.version, which differs from `target` while a committed
    // upgrade is finished.
    let new_image = image_with_tag(&storage_image, target);
    let current_image = image_with_tag(&storage_image, current);
    let claim = &config.backup_claim;
    // While the data is not migrated, the database keeps running the current version.
    let wait = |out: &mut Output, reason: &str, message: String, failed: bool| {
        hold_image(out, name, current);
        out.status("phase", "Upgrading");
        out.condition(CONDITION, false, reason, message.clone());
        if failed {
            out.warning(reason, message);
        }
    };

    let backup = names::pre_upgrade_backup_job(name, target);
    out.apply(&jobs::pre_upgrade_backup(
        name,
        spec,
        target,
        &current_image,
        claim,
    ))?;
    match jobs::state(ctx, &backup) {
        JobState::Complete => {}
        JobState::Failed(why) => {
            let message = format!(
                "the backup before upgrading from {current} to {target} failed ({why}): Job \
                 {backup} is kept for inspection; delete it to try again"
            );
            wait(out, "PreUpgradeBackupFailed", message, true);
            return Ok(());
        }
        JobState::Absent | JobState::Running => {
            let message =
                format!("backing up before upgrading from {current} to {target} (Job {backup})");
            wait(out, "PreUpgradeBackupRunning", message, false);
            return Ok(());
        }
    }

    // From here on the data changes, so the upgrade is committed (see `reconcile`) — and
    // recorded before it starts: the upgrade Job is applied only once the parent's status
    // shows the record, so a run whose writes fail cannot leave a migration running that
    // nothing remembers.
    out.status("upgradingTo", target);
    let migration = names::upgrade_job(name, target);
    // An existing upgrade Job counts as the record too: it was started by a version of this
    // plugin that did not record, or the parent's status in the cache is not the latest.
    let started = !matches!(jobs::state(ctx, &migration), JobState::Absent);
    if !started && ctx.status("/upgradingTo").and_then(Value::as_str) != Some(target) {
        let message = format!(
            "backed up (Job {backup}); recording the upgrade from {current} to {target} \
             before migrating the data"
        );
        wait(out, "UpgradeStarting", message, false);
        return Ok(());
    }
    out.apply(&jobs::upgrade(
        name, spec, current, target, &new_image, claim,
    ))?;
    match jobs::state(ctx, &migration) {
        JobState::Complete => {}
        JobState::Failed(why) => {
            let message = format!(
                "the upgrade from {current} to {target} failed ({why}): Job {migration} is kept \
                 for inspection and the backup {backup} holds the data from before; delete the \
                 Job to try again"
            );
            wait(out, "UpgradeJobFailed", message, true);
            return Ok(());
        }
        JobState::Absent | JobState::Running => {
            let message =
                format!("migrating the data from {current} to {target} (Job {migration})");
            wait(out, "UpgradeJobRunning", message, false);
            return Ok(());
        }
    }

    // The data is migrated: the new version's image, and the StatefulSet rolls.
    hold_image(out, name, target);
    if rolled(ctx, name, &new_image) {
        // Storage's phase stands. The Jobs stay desired in this run: the next one, which sees
        // the new currentVersion, drops them.
        out.status("currentVersion", target);
        out.status("upgradingTo", Value::Null);
        let message = format!("upgraded from {current} to {target}");
        out.condition(CONDITION, true, "Upgraded", message.clone());
        out.event("Upgraded", message);
    } else {
        let replicas = out
            .find("apps/v1/StatefulSet", &names::statefulset(name))
            .and_then(|s| s.pointer("/spec/replicas")?.as_i64())
            .unwrap_or(1);
        let patience = Duration::from_secs(config.switchover_timeout_seconds);
        let plan = roll::plan(ctx, name, &new_image, replicas, patience);
        let primary = ctx.status("/primary").and_then(Value::as_str);
        roll::apply(out, name, &plan, target, primary);
        if let Some(why) = &plan.gave_up {
            out.warning("SwitchoverTimedOut", why.clone());
        }
        out.status("phase", "Upgrading");
        out.condition(
            CONDITION,
            false,
            "RollingOut",
            format!("data migrated to {target}; {}", plan.doing),
        );
    }
    Ok(())
}

/// True when the observed StatefulSet runs `image` on every replica, all ready.
fn rolled(ctx: &Context, name: &str, image: &str) -> bool {
    let Some(sts) = ctx.observed_json("apps/v1/StatefulSet").find(|s| {
        s.pointer("/metadata/name").and_then(Value::as_str) == Some(&names::statefulset(name))
    }) else {
        return false;
    };
    let int = |p: &str| sts.pointer(p).and_then(Value::as_i64);
    let text = |p: &str| sts.pointer(p).and_then(Value::as_str);
    let runs_image = roll::runs(sts.pointer("/spec/template/spec/containers"), image);
    let replicas = int("/spec/replicas").unwrap_or(1);
    runs_image
        && int("/status/observedGeneration").unwrap_or(0)
            >= int("/metadata/generation").unwrap_or(0)
        && int("/status/updatedReplicas") == Some(replicas)
        && int("/status/readyReplicas") == Some(replicas)
        && text("/status/currentRevision").is_some()
        && text("/status/currentRevision") == text("/status/updateRevision")
}
