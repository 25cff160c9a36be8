//! SampleDB storage: the StatefulSet that runs the database with a volume claim template for
//! its data, a headless Service giving each replica a stable DNS name, and the client Service.
//! Reports phase Provisioning until the StatefulSet's replicas are ready, then Ready.

use std::collections::BTreeMap;

use sampledb_api::{KIND_KEY, PORT, SampleDbSpec, names, parse_version, selector_labels};
use serde::Deserialize;
use windlass_sdk::{
    Context, Error, Info, Output, Plugin, Result,
    k8s_openapi::{
        api::{
            apps::v1::{StatefulSet, StatefulSetSpec},
            core::v1::{
                Container, ContainerPort, PersistentVolumeClaim, PersistentVolumeClaimSpec,
                PodSpec, PodTemplateSpec, Probe, Service, ServicePort, ServiceSpec,
                TCPSocketAction, VolumeMount, VolumeResourceRequirements,
            },
        },
        apimachinery::pkg::{
            api::resource::Quantity,
            apis::meta::v1::{LabelSelector, ObjectMeta},
            util::intstr::IntOrString,
        },
    },
};

/// The storage plugin.
#[derive(Debug)]
pub struct Storage;

/// The plugin's config (from its WasmPlugin).
#[derive(Debug, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
struct Config {
    /// The image repository; the tag is the SampleDB's version.
    #[serde(default = "default_image")]
    image: String,
}

fn default_image() -> String {
    "sampledb".to_string()
}

#[cfg(target_arch = "wasm32")]
windlass_sdk::export!(Storage);

impl Plugin for Storage {
    fn info() -> Info {
        Info::new("sampledb-storage", env!("CARGO_PKG_VERSION"))
            .parent(KIND_KEY)
            .child::<Service>()
            .child::<StatefulSet>()
    }

    fn reconcile(ctx: &Context) -> Result<Output> {
        let spec: SampleDbSpec = ctx.spec()?;
        let config: Config = ctx.config()?;
        validate(&spec)?;
        let name = ctx.name();
        let mut out = ctx.output();
        out.apply(&headless_service(name))?;
        out.apply(&client_service(name))?;
        out.apply(&statefulset(name, &spec, &config))?;
        report(ctx, &spec, &mut out);
        Ok(out)
    }
}

fn validate(spec: &SampleDbSpec) -> Result<()> {
    if spec.replicas < 1 {
        return Err(Error::InvalidParent(format!(
            "spec.replicas: must be at least 1, got {}",
            spec.replicas
        )));
    }
    if parse_version(&spec.version).is_none() {
        return Err(Error::InvalidParent(format!(
            "spec.version: {:?} is not a version like 16.4",
            spec.version
        )));
    }
    if !is_quantity(&spec.storage.size) {
        return Err(Error::InvalidParent(format!(
            "spec.storage.size: {:?} is not a quantity like 10Gi",
            spec.storage.size
        )));
    }
    Ok(())
}

/// A Kubernetes quantity: a decimal number and an optional suffix.
fn is_quantity(q: &str) -> bool {
    let digits = q
        .find(|c: char| !(c.is_ascii_digit() || c == '.'))
        .unwrap_or(q.len());
    let (number, suffix) = q.split_at(digits);
    !number.is_empty()
        && number.parse::<f64>().is_ok()
        && [
            "", "Ki", "Mi", "Gi", "Ti", "Pi", "Ei", "k", "M", "G", "T", "P", "E",
        ]
        .contains(&suffix)
}

fn meta(name: String, labels: &BTreeMap<String, String>) -> ObjectMeta {
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

fn headless_service(name: &str) -> Service {
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

fn client_service(name: &str) -> Service {
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

fn statefulset(name: &str, spec: &SampleDbSpec, config: &Config) -> StatefulSet {
    let labels = selector_labels(name);
    let container = Container {
        name: "sampledb".into(),
        image: Some(format!("{}:{}", config.image, spec.version)),
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
            mount_path: "/var/lib/sampledb".into(),
            ..VolumeMount::default()
        }]),
        ..Container::default()
    };
    let claim = PersistentVolumeClaim {
        metadata: ObjectMeta {
            name: Some(names::DATA_VOLUME.into()),
            labels: Some(labels.clone()),
            ..ObjectMeta::default()
        },
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
            template: PodTemplateSpec {
                metadata: Some(ObjectMeta {
                    labels: Some(labels),
                    ..ObjectMeta::default()
                }),
                spec: Some(PodSpec {
                    containers: vec![container],
                    termination_grace_period_seconds: Some(30),
                    ..PodSpec::default()
                }),
            },
            volume_claim_templates: Some(vec![claim]),
            ..StatefulSetSpec::default()
        }),
        ..StatefulSet::default()
    }
}

/// Phase and readiness from the observed StatefulSet.
fn report(ctx: &Context, spec: &SampleDbSpec, out: &mut Output) {
    let name = ctx.name();
    let ready = ctx
        .observed_named::<StatefulSet>(&names::statefulset(name))
        .and_then(|s| s.status)
        .and_then(|s| s.ready_replicas)
        .unwrap_or(0);
    let ns = ctx.namespace().unwrap_or("default");
    out.status("readyReplicas", ready);
    out.status(
        "endpoints",
        windlass_sdk::json!({
            "readWrite": format!("{}.{ns}.svc:{PORT}", names::client_service(name)),
            "replicas": format!("{}.{ns}.svc:{PORT}", names::headless_service(name)),
        }),
    );
    if ready >= spec.replicas {
        out.status("phase", "Ready");
        out.condition(
            "StorageReady",
            true,
            "ReplicasReady",
            format!("{ready}/{} replicas ready", spec.replicas),
        );
    } else {
        out.status("phase", "Provisioning");
        out.condition(
            "StorageReady",
            false,
            "WaitingForReplicas",
            format!("{ready}/{} replicas ready", spec.replicas),
        );
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use windlass_sdk::{Value, testing::Harness};

    const DB: &str = r#"
apiVersion: samples.windlass.dev/v1alpha1
kind: SampleDB
metadata: {name: orders, namespace: shop, uid: 4c1f0d6e-0000-4000-8000-000000000001}
spec:
  version: "16.4"
  replicas: 3
  storage: {size: 10Gi, storageClassName: fast}
"#;

    fn run(h: Harness) -> Output {
        h.run::<Storage>().unwrap()
    }

    #[test]
    fn a_new_sampledb_gets_a_statefulset_with_a_claim_template_and_two_services() {
        let out = run(Harness::from_yaml(DB));
        let sts = out.find("apps/v1/StatefulSet", "orders").unwrap();
        assert_eq!(sts["spec"]["replicas"], 3);
        assert_eq!(sts["spec"]["serviceName"], "orders-headless");
        assert_eq!(
            sts["spec"]["template"]["spec"]["containers"][0]["image"],
            "sampledb:16.4"
        );
        let claim = &sts["spec"]["volumeClaimTemplates"][0];
        assert_eq!(claim["metadata"]["name"], "data");
        assert_eq!(claim["spec"]["resources"]["requests"]["storage"], "10Gi");
        assert_eq!(claim["spec"]["storageClassName"], "fast");
        assert_eq!(
            out.find("v1/Service", "orders-headless").unwrap()["spec"]["clusterIP"],
            "None"
        );
        assert_eq!(
            out.find("v1/Service", "orders").unwrap()["spec"]["type"],
            "ClusterIP"
        );
        assert_eq!(out.desired().len(), 3);
    }

    #[test]
    fn phase_is_provisioning_until_every_replica_is_ready() {
        let out = run(Harness::from_yaml(DB));
        assert_eq!(out.status_fragment()["phase"], "Provisioning");
        assert!(!out.condition_of("StorageReady").unwrap().status);
        let ready = Harness::from_yaml(DB).observed_yaml(
            "apiVersion: apps/v1\nkind: StatefulSet\nmetadata: {name: orders}\nstatus: {replicas: 3, readyReplicas: 3}",
        );
        let out = run(ready);
        assert_eq!(out.status_fragment()["phase"], "Ready");
        assert_eq!(out.status_fragment()["readyReplicas"], 3);
        assert_eq!(
            out.status_fragment()["endpoints"]["readWrite"],
            "orders.shop.svc:5432"
        );
    }

    #[test]
    fn bad_specs_are_refused_naming_the_field() {
        let bad = |edit: fn(&mut Value)| {
            Harness::from_yaml(DB)
                .with_parent(edit)
                .run::<Storage>()
                .unwrap_err()
        };
        assert_eq!(
            bad(|p| p["spec"]["replicas"] = 0.into()),
            Error::InvalidParent("spec.replicas: must be at least 1, got 0".into())
        );
        assert!(
            matches!(bad(|p| p["spec"]["version"] = "latest".into()), Error::InvalidParent(m) if m.starts_with("spec.version"))
        );
        assert!(
            matches!(bad(|p| p["spec"]["storage"]["size"] = "lots".into()), Error::InvalidParent(m) if m.starts_with("spec.storage.size"))
        );
        assert!(
            matches!(bad(|p| { p["spec"].as_object_mut().unwrap().remove("storage"); }), Error::InvalidParent(m) if m.contains("storage"))
        );
    }

    #[test]
    fn the_image_comes_from_config_and_unknown_keys_are_refused() {
        let out =
            run(Harness::from_yaml(DB).config(windlass_sdk::json!({"image": "mirror/sampledb"})));
        let sts = out.find("apps/v1/StatefulSet", "orders").unwrap();
        assert_eq!(
            sts["spec"]["template"]["spec"]["containers"][0]["image"],
            "mirror/sampledb:16.4"
        );
        let err = Harness::from_yaml(DB)
            .config(windlass_sdk::json!({"imag": "x"}))
            .run::<Storage>()
            .unwrap_err();
        assert!(matches!(err, Error::InvalidConfig(m) if m.contains("imag")));
    }

    #[test]
    fn objects_from_earlier_plugins_are_kept() {
        let earlier = windlass_sdk::json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "orders-config"}});
        let out = run(Harness::from_yaml(DB).desired([earlier]));
        assert!(out.find("v1/ConfigMap", "orders-config").is_some());
        assert_eq!(out.desired().len(), 4);
    }

    #[test]
    fn quantities_are_checked() {
        assert!(
            is_quantity("10Gi")
                && is_quantity("500M")
                && is_quantity("1.5Gi")
                && is_quantity("1024")
        );
        assert!(!is_quantity("Gi") && !is_quantity("10 Gi") && !is_quantity("10GB"));
    }
}
