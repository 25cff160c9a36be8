//! The long-lived objects: the two Services, the ConfigMap with the settings and connection
//! details, and the StatefulSet.

use std::collections::BTreeMap;

use sampledb_api::{
    CONTAINER, DATA_MOUNT, DeletionPolicy, PORT, SampleDbSpec, names, pod, selector_labels,
};
use windlass_sdk::k8s_openapi::{
    api::{
        apps::v1::{StatefulSet, StatefulSetPersistentVolumeClaimRetentionPolicy, StatefulSetSpec},
        core::v1::{
            ConfigMap, Container, ContainerPort, PersistentVolumeClaim, PersistentVolumeClaimSpec,
            PodSpec, PodTemplateSpec, Probe, Service, ServicePort, ServiceSpec, TCPSocketAction,
            VolumeMount, VolumeResourceRequirements,
        },
    },
    apimachinery::pkg::{
        api::resource::Quantity,
        apis::meta::v1::{LabelSelector, ObjectMeta},
        util::intstr::IntOrString,
    },
};

use crate::Config;

/// Keys of the ConfigMap that carry the connection details; `spec.config` may not set them.
pub(crate) const CONNECTION_KEYS: [&str; 2] = ["host", "port"];

pub(crate) fn meta(name: String, labels: &BTreeMap<String, String>) -> ObjectMeta {
    ObjectMeta {
        name: Some(name),
        labels: Some(labels.clone()),
        ..ObjectMeta::default()
    }
}

fn db_port() -> ServicePort {
    ServicePort {
        name: Some("db".into()),
        port: PORT,
        target_port: Some(IntOrString::String("db".into())),
        ..ServicePort::default()
    }
}

pub(crate) fn headless_service(name: &str) -> Service {
    let labels = selector_labels(name);
    Service {
        metadata: meta(names::headless_service(name), &labels),
        spec: Some(ServiceSpec {
            cluster_ip: Some("None".into()),
            // Replicas must find each other before they are ready (to form the cluster).
            publish_not_ready_addresses: Some(true),
            selector: Some(labels),
            ports: Some(vec![db_port()]),
            ..ServiceSpec::default()
        }),
        ..Service::default()
    }
}

pub(crate) fn client_service(name: &str) -> Service {
    let labels = selector_labels(name);
    Service {
        metadata: meta(names::client_service(name), &labels),
        spec: Some(ServiceSpec {
            type_: Some("ClusterIP".into()),
            selector: Some(labels),
            ports: Some(vec![db_port()]),
            ..ServiceSpec::default()
        }),
        ..Service::default()
    }
}

/// The database settings (`spec.config`) and the connection details Jobs use: `host` (the
/// client Service's DNS name) and `port`.
pub(crate) fn config_map(name: &str, namespace: &str, spec: &SampleDbSpec) -> ConfigMap {
    let mut data = spec.config.clone();
    data.insert(
        "host".into(),
        format!("{}.{namespace}.svc", names::client_service(name)),
    );
    data.insert("port".into(), PORT.to_string());
    ConfigMap {
        metadata: meta(names::config_map(name), &selector_labels(name)),
        data: Some(data),
        ..ConfigMap::default()
    }
}

pub(crate) use sampledb_api::pod::connection_env;

/// The database image for the spec's version.
pub(crate) fn image(spec: &SampleDbSpec, config: &Config) -> String {
    format!("{}:{}", config.image, spec.version)
}

/// What happens to the data volumes when the StatefulSet goes or shrinks. Scaling down never
/// deletes data. With `Snapshot` the backup plugin's finalizer holds the deletion until the
/// snapshots are taken, so the claims may go with the StatefulSet.
fn retention(policy: DeletionPolicy) -> StatefulSetPersistentVolumeClaimRetentionPolicy {
    let when_deleted = match policy {
        DeletionPolicy::Snapshot | DeletionPolicy::Delete => "Delete",
        DeletionPolicy::Retain => "Retain",
    };
    StatefulSetPersistentVolumeClaimRetentionPolicy {
        when_deleted: Some(when_deleted.into()),
        when_scaled: Some("Retain".into()),
    }
}

pub(crate) fn statefulset(name: &str, spec: &SampleDbSpec, config: &Config) -> StatefulSet {
    let labels = selector_labels(name);
    let (env_from, env) = connection_env(name, spec);
    let container = Container {
        name: CONTAINER.into(),
        image: Some(image(spec, config)),
        env_from: Some(env_from),
        env: Some(env),
        ports: Some(vec![ContainerPort {
            name: Some("db".into()),
            container_port: PORT,
            ..ContainerPort::default()
        }]),
        readiness_probe: Some(Probe {
            tcp_socket: Some(TCPSocketAction {
                port: IntOrString::String("db".into()),
                ..TCPSocketAction::default()
            }),
            period_seconds: Some(5),
            ..Probe::default()
        }),
        volume_mounts: Some(vec![VolumeMount {
            name: names::DATA_VOLUME.into(),
            mount_path: DATA_MOUNT.into(),
            ..VolumeMount::default()
        }]),
        ..Container::default()
    };
    let claim = PersistentVolumeClaim {
        metadata: meta(names::DATA_VOLUME.into(), &labels),
        spec: Some(PersistentVolumeClaimSpec {
            access_modes: Some(vec!["ReadWriteOnce".into()]),
            storage_class_name: spec.storage.storage_class_name.clone(),
            resources: Some(VolumeResourceRequirements {
                requests: Some(BTreeMap::from([(
                    "storage".to_string(),
                    Quantity(spec.storage.size.clone()),
                )])),
                ..VolumeResourceRequirements::default()
            }),
            ..PersistentVolumeClaimSpec::default()
        }),
        ..PersistentVolumeClaim::default()
    };
    StatefulSet {
        metadata: meta(names::statefulset(name), &labels),
        spec: Some(StatefulSetSpec {
            replicas: Some(spec.replicas),
            service_name: Some(names::headless_service(name)),
            selector: LabelSelector {
                match_labels: Some(labels.clone()),
                ..LabelSelector::default()
            },
            // Database replicas start one after another: the first one initialises the cluster.
            pod_management_policy: Some("OrderedReady".into()),
            persistent_volume_claim_retention_policy: Some(retention(spec.deletion_policy)),
            template: PodTemplateSpec {
                metadata: Some(ObjectMeta {
                    labels: Some(labels),
                    ..ObjectMeta::default()
                }),
                spec: Some(pod::restricted(PodSpec {
                    containers: vec![container],
                    termination_grace_period_seconds: Some(30),
                    ..PodSpec::default()
                })),
            },
            volume_claim_templates: Some(vec![claim]),
            ..StatefulSetSpec::default()
        }),
        ..StatefulSet::default()
    }
}
