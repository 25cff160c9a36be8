//! The `SampleDB` custom resource (samples.windlass.dev/v1alpha1), shared by the SampleDB
//! plugins and by the host's `windlass crds`.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

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
    /// A backup to restore from when the database is created.
    #[serde(default)]
    pub restore_from: Option<String>,
    /// What happens to the data when the SampleDB is deleted.
    #[serde(default)]
    pub deletion_policy: DeletionPolicy,
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
    /// Provisioning, Ready, Upgrading, Deleting, Failed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub phase: Option<String>,
    /// The version the database runs.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub current_version: Option<String>,
    /// Ready database Pods.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ready_replicas: Option<i32>,
    /// The Pod that takes writes.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub primary: Option<String>,
    /// The last completed backup.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_backup: Option<String>,
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
}

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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn versions_are_two_or_three_numbers() {
        assert_eq!(parse_version("16.4"), Some(vec![16, 4]));
        assert_eq!(parse_version("17.0.1"), Some(vec![17, 0, 1]));
        assert_eq!(parse_version("16"), None);
        assert_eq!(parse_version("latest"), None);
    }

    #[test]
    fn a_minimal_spec_gets_defaults() {
        let spec: SampleDbSpec =
            serde_json::from_str(r#"{"version":"16.4","storage":{"size":"1Gi"}}"#).unwrap();
        assert_eq!(spec.replicas, 1);
        assert_eq!(spec.deletion_policy, DeletionPolicy::Snapshot);
    }
}
