//! The `SampleDB` custom resource (samples.windlass.dev/v1alpha1), shared by the SampleDB
//! plugins and by the host's `windlass crds`.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

#[cfg(feature = "schema")]
pub mod crd;
pub mod pod;
#[cfg(feature = "testing")]
pub mod testing;

/// API group of SampleDB.
pub const GROUP: &str = "samples.windlass.dev";
/// API version of SampleDB, with its group.
pub const API_VERSION: &str = "samples.windlass.dev/v1alpha1";
/// Kind of SampleDB.
pub const KIND: &str = "SampleDB";
/// `group/version/Kind`, as plugins declare parent kinds.
pub const KIND_KEY: &str = "samples.windlass.dev/v1alpha1/SampleDB";
/// The port the database listens on.
pub const PORT: i32 = 5432;

/// What a user asks of a SampleDB.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
#[serde(rename_all = "camelCase")]
pub struct SampleDbSpec {
    /// The database version to run, `major.minor` (e.g. `16.4`).
    #[cfg_attr(
        feature = "schema",
        schemars(regex(pattern = r"^[0-9]+\.[0-9]+(\.[0-9]+)?$"))
    )]
    pub version: String,
    /// How many database Pods to run. At least 1.
    #[serde(default = "one")]
    #[cfg_attr(feature = "schema", schemars(range(min = 1, max = 15)))]
    pub replicas: i32,
    /// The data volume of each replica.
    pub storage: Storage,
    /// Database settings, written to the config ConfigMap.
    #[serde(default)]
    pub config: BTreeMap<String, String>,
    /// Where the credentials live; generated when absent.
    #[serde(default)]
    pub credentials: Option<Credentials>,
    /// Scheduled backups.
    #[serde(default)]
    pub backup: Option<Backup>,
    /// A backup to restore from when the database is created: the name of a completed backup
    /// (`status.lastBackup` of any SampleDB in the namespace) on the backup volume.
    #[serde(default)]
    #[cfg_attr(
        feature = "schema",
        schemars(regex(pattern = r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$"), length(max = 63))
    )]
    pub restore_from: Option<String>,
    /// What happens to the data when the SampleDB is deleted.
    #[serde(default)]
    pub deletion_policy: DeletionPolicy,
    /// Failures to inject on purpose, to test that the database survives them. Off unless set.
    #[serde(default)]
    pub chaos: Option<Chaos>,
}

fn one() -> i32 {
    1
}

/// The data volume of each replica.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
#[serde(rename_all = "camelCase")]
pub struct Storage {
    /// The volume size, a Kubernetes quantity (e.g. `10Gi`).
    #[cfg_attr(
        feature = "schema",
        schemars(regex(pattern = r"^[0-9]+(\.[0-9]+)?(Ki|Mi|Gi|Ti|Pi|Ei|k|M|G|T|P|E)?$"))
    )]
    pub size: String,
    /// The StorageClass; the cluster's default when absent.
    #[serde(default)]
    pub storage_class_name: Option<String>,
}

/// Where the database credentials live.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
#[serde(rename_all = "camelCase")]
pub struct Credentials {
    /// A Secret in the SampleDB's namespace with keys `username` and `password`.
    pub secret_name: String,
}

/// Scheduled backups.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
#[serde(rename_all = "camelCase")]
pub struct Backup {
    /// A cron schedule (five fields), e.g. `0 3 * * *`.
    #[cfg_attr(
        feature = "schema",
        schemars(regex(
            pattern = r"^(@(yearly|annually|monthly|weekly|daily|midnight|hourly)|([0-9*/,-]+ +){4}[0-9A-Za-z*/,-]+)$"
        ))
    )]
    pub schedule: String,
    /// How many backups to keep.
    #[serde(default = "seven")]
    #[cfg_attr(feature = "schema", schemars(range(min = 1)))]
    pub retain: i32,
}

fn seven() -> i32 {
    7
}

/// Failures to inject on purpose (the `sampledb-chaos` plugin).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
#[serde(rename_all = "camelCase")]
pub struct Chaos {
    /// Delete the primary's Pod this often, through the API, from a CronJob: minutes dividing an
    /// hour (`10m`) or hours dividing a day (`2h`). A new primary is elected each time.
    #[serde(default)]
    #[cfg_attr(feature = "schema", schemars(regex(pattern = r"^[1-9][0-9]*[mh]$")))]
    pub kill_primary_every: Option<String>,
}

/// What happens to the data when the SampleDB is deleted.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
pub enum DeletionPolicy {
    /// Take a snapshot of every data volume, then delete.
    #[default]
    Snapshot,
    /// Keep the data volumes.
    Retain,
    /// Delete the data volumes.
    Delete,
}

/// What the operator reports.
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
#[serde(rename_all = "camelCase")]
pub struct SampleDbStatus {
    /// Provisioning, Initializing, Restoring, Ready, Upgrading, Deleting.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub phase: Option<String>,
    /// The version the database runs.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub current_version: Option<String>,
    /// The version the data is being migrated to, from the start of the upgrade Job until
    /// every replica runs it; that upgrade is finished before a newer `spec.version` counts.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub upgrading_to: Option<String>,
    /// Ready database Pods.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ready_replicas: Option<i32>,
    /// The Pod that takes writes.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub primary: Option<String>,
    /// The uid of the primary's Pod: a Pod of that name made again (the old one deleted) is
    /// another Pod, and a ready replica takes over from it.
    #[serde(
        default,
        rename = "primaryUID",
        skip_serializing_if = "Option::is_none"
    )]
    pub primary_uid: Option<String>,
    /// The last completed backup (the name `restoreFrom` takes).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_backup: Option<String>,
    /// When the last backup completed (RFC 3339).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_backup_time: Option<String>,
    /// True once the one-time init Job has completed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub initialized: Option<bool>,
    /// The backup the database was restored from, once the restore Job has completed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub restored_from: Option<String>,
    /// Where clients connect.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub endpoints: Option<Endpoints>,
}

/// Where clients connect.
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
#[serde(rename_all = "camelCase")]
pub struct Endpoints {
    /// `host:port` of the read-write Service.
    pub read_write: String,
    /// `host:port` of the headless Service (every replica).
    pub replicas: String,
}

/// Names of the objects the plugins make for a SampleDB called `name`, in one place so the
/// plugins agree.
pub mod names {
    /// The StatefulSet, and the client (read-write) Service.
    pub fn statefulset(name: &str) -> String {
        name.to_string()
    }
    /// The headless Service that gives each replica a DNS name.
    pub fn headless_service(name: &str) -> String {
        format!("{name}-headless")
    }
    /// The client Service.
    pub fn client_service(name: &str) -> String {
        name.to_string()
    }
    /// The volume claim template (PVCs are `data-<name>-<ordinal>`).
    pub const DATA_VOLUME: &str = "data";
    /// The PVC of replica `ordinal`.
    pub fn data_pvc(name: &str, ordinal: i32) -> String {
        format!("{DATA_VOLUME}-{name}-{ordinal}")
    }
    /// The ConfigMap with the database settings and the connection details (`host`, `port`).
    pub fn config_map(name: &str) -> String {
        format!("{name}-config")
    }
    /// The generated credentials Secret (keys `username`, `password`), when the spec names none.
    pub fn generated_secret(name: &str) -> String {
        format!("{name}-credentials")
    }
    /// The credentials Secret in use: the spec's, or the generated one.
    pub fn credentials_secret(name: &str, spec: &super::SampleDbSpec) -> String {
        spec.credentials
            .as_ref()
            .map_or_else(|| generated_secret(name), |c| c.secret_name.clone())
    }
    /// The one-time init Job.
    pub fn init_job(name: &str) -> String {
        format!("{name}-init")
    }
    /// The backup CronJob; its Jobs (the backups) are `<name>-backup-<n>`.
    pub fn backup_cronjob(name: &str) -> String {
        format!("{name}-backup")
    }
    /// The restore Job (restore on create).
    pub fn restore_job(name: &str) -> String {
        format!("{name}-restore")
    }
    /// The backup Job run before upgrading to `version`.
    pub fn pre_upgrade_backup_job(name: &str, version: &str) -> String {
        format!("{name}-pre-upgrade-{}", version.replace('.', "-"))
    }
    /// The upgrade (migration) Job to `version`.
    pub fn upgrade_job(name: &str, version: &str) -> String {
        format!("{name}-upgrade-{}", version.replace('.', "-"))
    }
    /// The VolumeSnapshot of a data PVC taken when the SampleDB with uid `uid` is deleted.
    /// Snapshots outlive their SampleDB, so the name carries the start of its uid: a SampleDB
    /// created again under the same name takes its own snapshots instead of colliding with its
    /// predecessor's.
    pub fn final_snapshot(pvc: &str, uid: &str) -> String {
        let short: String = uid.chars().filter(|c| *c != '-').take(8).collect();
        if short.is_empty() {
            format!("{pvc}-final")
        } else {
            format!("{pvc}-final-{short}")
        }
    }
    /// The final dump Job run on delete when the backup plugin is configured for dumps
    /// instead of VolumeSnapshots.
    pub fn final_backup_job(name: &str) -> String {
        format!("{name}-final-backup")
    }
    /// The file on the backup volume that holds backup `backup` (a backup Job's name, the name
    /// `restoreFrom` takes).
    pub fn backup_file(backup: &str) -> String {
        format!("{}/{backup}.dump", super::BACKUP_MOUNT)
    }
    /// The PodDisruptionBudget of the database Pods.
    pub fn pdb(name: &str) -> String {
        name.to_string()
    }
}

/// The database container in the StatefulSet's Pod template.
pub const CONTAINER: &str = "sampledb";
/// Where the data volume is mounted in the database container.
pub const DATA_MOUNT: &str = "/var/lib/sampledb";
/// Where backup, restore and upgrade Jobs mount the backup volume.
pub const BACKUP_MOUNT: &str = "/backups";
/// Label on each database Pod: `primary` or `replica` (set by the primary election plugin); the
/// client (read-write) Service selects `primary`.
pub const ROLE_LABEL: &str = "samples.windlass.dev/role";
/// Annotation on the desired StatefulSet by which the upgrade plugin asks the primary plugin
/// (later in the pipeline) for a planned switchover to the Pod it names, before the roll
/// restarts the primary's Pod.
pub const SWITCHOVER_TO: &str = "samples.windlass.dev/switchover-to";
/// Beside [`SWITCHOVER_TO`]: the primary the switchover was asked from; the primary plugin acts
/// only while that Pod is still the primary.
pub const SWITCHOVER_FROM: &str = "samples.windlass.dev/switchover-from";
/// Beside [`SWITCHOVER_TO`]: why, for the primary plugin's event (`the upgrade to 17.0`).
pub const SWITCHOVER_FOR: &str = "samples.windlass.dev/switchover-for";
/// Beside [`SWITCHOVER_TO`]: when that switchover was first asked (RFC 3339): the upgrade
/// waits for it only so long (its config's `switchoverTimeoutSeconds`).
pub const SWITCHOVER_SINCE: &str = "samples.windlass.dev/switchover-since";

/// The labels every SampleDB object carries and selects on.
pub fn selector_labels(name: &str) -> BTreeMap<String, String> {
    BTreeMap::from([
        ("app.kubernetes.io/name".to_string(), "sampledb".to_string()),
        ("app.kubernetes.io/instance".to_string(), name.to_string()),
    ])
}

/// Checks that a version is `major.minor` or `major.minor.patch` of numbers.
pub fn parse_version(version: &str) -> Option<Vec<u64>> {
    let parts: Option<Vec<u64>> = version.split('.').map(|p| p.parse().ok()).collect();
    parts.filter(|p| (2..=3).contains(&p.len()))
}

/// Orders two versions (`16.4` < `16.10` < `17.0`); `None` when either is not a version.
pub fn compare_versions(a: &str, b: &str) -> Option<std::cmp::Ordering> {
    let (mut a, mut b) = (parse_version(a)?, parse_version(b)?);
    a.resize(3, 0);
    b.resize(3, 0);
    Some(a.cmp(&b))
}

/// Seconds since the Unix epoch of a time in UTC as the host writes a request's `now`
/// (`2026-01-01T00:05:00Z`; a fraction of a second is allowed and dropped); none for any
/// other form.
pub fn unix_seconds(time: &str) -> Option<i64> {
    let (date, clock) = time.split_once('T')?;
    let clock = clock.strip_suffix('Z')?;
    let clock = match clock.split_once('.') {
        Some((whole, fraction))
            if !fraction.is_empty() && fraction.bytes().all(|b| b.is_ascii_digit()) =>
        {
            whole
        }
        Some(_) => return None,
        None => clock,
    };
    let fields = |text: &str, sep: char, widths: [usize; 3]| -> Option<[i64; 3]> {
        let parts: Vec<&str> = text.split(sep).collect();
        let mut out = [0; 3];
        if parts.len() != 3 {
            return None;
        }
        for ((part, width), slot) in parts.iter().zip(widths).zip(&mut out) {
            if part.len() != width || !part.bytes().all(|b| b.is_ascii_digit()) {
                return None;
            }
            *slot = part.parse().ok()?;
        }
        Some(out)
    };
    let [year, month, day] = fields(date, '-', [4, 2, 2])?;
    let [hour, minute, second] = fields(clock, ':', [2, 2, 2])?;
    if !(1..=12).contains(&month) || !(1..=31).contains(&day) || hour > 23 || minute > 59 {
        return None;
    }
    if second > 60 {
        return None;
    }
    // Days since 1970-01-01 in the proleptic Gregorian calendar, counting years from March so
    // that the leap day comes last.
    let (y, m) = if month <= 2 {
        (year - 1, month + 9)
    } else {
        (year, month - 3)
    };
    let days =
        365 * y + y.div_euclid(4) - y.div_euclid(100) + y.div_euclid(400) + (153 * m + 2) / 5 + day
            - 1
            - 719_468;
    Some(days * 86_400 + hour * 3_600 + minute * 60 + second)
}

/// `image` with its tag replaced by `version` (`repo/sampledb:16.4` → `repo/sampledb:17.0`).
pub fn image_with_tag(image: &str, version: &str) -> String {
    let repo = match image.rfind(':') {
        // A colon after the last slash starts the tag; before it, it is a registry port.
        Some(i) if !image[i..].contains('/') => &image[..i],
        _ => image,
    };
    format!("{repo}:{version}")
}

#[cfg(test)]
#[allow(clippy::unwrap_used)] // Tests: a panic is the failure report.
mod tests {
    use super::*;

    #[test]
    fn unix_seconds_reads_the_hosts_now_and_nothing_else() {
        // The figures are `date -u -d TIME +%s`.
        assert_eq!(unix_seconds("1970-01-01T00:00:00Z"), Some(0));
        assert_eq!(unix_seconds("2026-01-01T00:05:00Z"), Some(1_767_225_900));
        assert_eq!(unix_seconds("2024-02-29T23:59:59Z"), Some(1_709_251_199));
        assert_eq!(unix_seconds("1969-12-31T23:59:59Z"), Some(-1));
        assert_eq!(
            unix_seconds("2026-01-01T00:05:00.250Z"),
            Some(1_767_225_900)
        );
        for bad in [
            "2026-01-01T00:05:00",
            "2026-01-01T00:05:00+02:00",
            "2026-1-01T00:05:00Z",
            "2026-13-01T00:05:00Z",
            "2026-01-01T24:00:00Z",
            "2026-01-01T00:05:00.Z",
            "2026-01-01 00:05:00Z",
            "",
        ] {
            assert_eq!(unix_seconds(bad), None, "{bad}");
        }
    }

    #[test]
    fn final_snapshots_of_two_sampledbs_of_one_name_differ() {
        let first = names::final_snapshot("data-orders-0", "9d0c7c57-3a7e-4c55-b2a4-6d8f1b1f5e01");
        let second = names::final_snapshot("data-orders-0", "4c1f0d6e-0000-4000-8000-000000000001");
        assert_eq!(first, "data-orders-0-final-9d0c7c57");
        assert_ne!(first, second);
        assert_eq!(
            names::final_snapshot("data-orders-0", ""),
            "data-orders-0-final"
        );
    }

    #[test]
    fn versions_are_two_or_three_numbers() {
        assert_eq!(parse_version("16.4"), Some(vec![16, 4]));
        assert_eq!(parse_version("17.0.1"), Some(vec![17, 0, 1]));
        assert_eq!(parse_version("16"), None);
        assert_eq!(parse_version("latest"), None);
    }

    #[test]
    fn versions_order_numerically() {
        use std::cmp::Ordering::*;
        assert_eq!(compare_versions("16.4", "16.10"), Some(Less));
        assert_eq!(compare_versions("17.0", "16.4"), Some(Greater));
        assert_eq!(compare_versions("16.4", "16.4.0"), Some(Equal));
        assert_eq!(compare_versions("16.4", "latest"), None);
    }

    #[test]
    fn image_tags_are_replaced_but_registry_ports_kept() {
        assert_eq!(image_with_tag("sampledb:16.4", "17.0"), "sampledb:17.0");
        assert_eq!(
            image_with_tag("reg:5000/db/sampledb:16.4", "17.0"),
            "reg:5000/db/sampledb:17.0"
        );
        assert_eq!(
            image_with_tag("reg:5000/sampledb", "17.0"),
            "reg:5000/sampledb:17.0"
        );
    }

    #[test]
    fn a_minimal_spec_gets_defaults() {
        let spec: SampleDbSpec =
            serde_json::from_str(r#"{"version":"16.4","storage":{"size":"1Gi"}}"#).unwrap();
        assert_eq!(spec.replicas, 1);
        assert_eq!(spec.deletion_policy, DeletionPolicy::Snapshot);
    }
}
