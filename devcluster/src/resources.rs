//! The kinds the server serves: the built-in table and those that CRDs add at run time.

use serde_json::Value;
use std::collections::HashMap;
use std::sync::{Arc, RwLock};

/// An `additionalPrinterColumns` entry (or a built-in kind's column): a column of `kubectl get`.
#[derive(Debug, Clone, PartialEq)]
pub struct PrinterColumn {
    /// Column header.
    pub name: String,
    /// OpenAPI type: string, integer, number, boolean, date.
    pub type_: String,
    /// JSONPath-like path (`.spec.replicas`), simple dotted form only.
    pub json_path: String,
    /// 0 shows in the default view; more only with `-o wide`.
    pub priority: i64,
    /// Shown in `kubectl explain`-like places.
    pub description: String,
}

/// Where the scale subresource (`autoscaling/v1` Scale) reads and writes, as dotted paths
/// without the leading dot (a CRD's `subresources.scale`).
#[derive(Debug, Clone, PartialEq)]
pub struct ScalePaths {
    /// `spec.replicas`.
    pub spec_replicas: String,
    /// `status.replicas`.
    pub status_replicas: String,
    /// Where the label selector is: a string (a CRD's `labelSelectorPath`), or, for the
    /// built-in kinds, `spec.selector` (a LabelSelector the Scale shows as a string).
    pub label_selector: Option<String>,
}

/// A kind stored as another and shown converted.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum View {
    /// `events.k8s.io/v1` Events: stored as core `v1` Events (see `crate::events`).
    EventsV1,
}

/// One served resource (all served versions of it).
#[derive(Debug, Clone)]
pub struct ResourceType {
    /// API group, empty for the core group.
    pub group: String,
    /// Served versions; the first is the preferred (and storage) version.
    pub versions: Vec<String>,
    /// `Kind`.
    pub kind: String,
    /// `pods`.
    pub plural: String,
    /// `pod`.
    pub singular: String,
    /// Whether objects live in a namespace.
    pub namespaced: bool,
    /// `po`.
    pub short_names: Vec<String>,
    /// `all`…
    pub categories: Vec<String>,
    /// Whether `/status` is a separate subresource (status ignored on the main resource).
    pub status_subresource: bool,
    /// Printer columns after NAME (AGE is added where the kind has none of its own).
    pub printer_columns: Vec<PrinterColumn>,
    /// openAPIV3Schema per version, for CRDs.
    pub schemas: HashMap<String, Value>,
    /// True for the built-in table, false for CRD-defined kinds.
    pub builtin: bool,
    /// The scale subresource, where the kind has one.
    pub scale: Option<ScalePaths>,
    /// Fields a field selector may name besides `metadata.name` and `metadata.namespace` (the
    /// real server's per-kind field labels; a CRD's `selectableFields`).
    pub selectable_fields: Vec<String>,
    /// Stored as another kind and converted when shown.
    pub view: Option<View>,
}

impl ResourceType {
    /// The storage key: `group/plural`, the same for every version; a view's is the key of
    /// the kind it is stored as.
    pub fn key(&self) -> String {
        match self.view {
            Some(View::EventsV1) => "/events".into(),
            None => format!("{}/{}", self.group, self.plural),
        }
    }

    /// Whether objects of this kind are stored under `key` (without building the key).
    pub fn stored_under(&self, key: &str) -> bool {
        match self.view {
            Some(View::EventsV1) => key == "/events",
            None => key.split_once('/') == Some((self.group.as_str(), self.plural.as_str())),
        }
    }

    /// A stored object as this kind shows it in `version`: `apiVersion` set, a view converted.
    pub fn present(&self, obj: &Value, version: &str) -> Value {
        if self.view == Some(View::EventsV1) && obj["apiVersion"] == "v1" {
            return crate::events::to_events_v1(obj);
        }
        let mut o = obj.clone();
        let api_version = self.api_version(version);
        if o["apiVersion"].as_str() != Some(&api_version) && o["kind"] == self.kind.as_str() {
            o["apiVersion"] = Value::String(api_version);
        }
        o
    }

    /// Whether a stored object is shown as it is (no copy needed).
    pub fn shown_as_stored(&self, obj: &Value, version: &str) -> bool {
        self.view.is_none() && obj["apiVersion"].as_str() == Some(&self.api_version(version))
    }

    /// `apiVersion` for a version: `v1` or `group/v1`.
    pub fn api_version(&self, version: &str) -> String {
        if self.group.is_empty() {
            version.to_string()
        } else {
            format!("{}/{version}", self.group)
        }
    }

    /// The preferred version.
    pub fn preferred_version(&self) -> &str {
        self.versions.first().map(String::as_str).unwrap_or("v1")
    }

    /// The verbs listed in discovery.
    pub fn verbs(&self) -> Vec<&'static str> {
        vec![
            "create",
            "delete",
            "deletecollection",
            "get",
            "list",
            "patch",
            "update",
            "watch",
        ]
    }
}

fn builtin(
    group: &str,
    version: &str,
    kind: &str,
    plural: &str,
    namespaced: bool,
    short: &[&str],
    status: bool,
) -> ResourceType {
    ResourceType {
        group: group.into(),
        versions: vec![version.into()],
        kind: kind.into(),
        plural: plural.into(),
        singular: kind.to_lowercase(),
        namespaced,
        short_names: short.iter().map(|s| s.to_string()).collect(),
        categories: Vec::new(),
        status_subresource: status,
        printer_columns: Vec::new(),
        schemas: HashMap::new(),
        builtin: true,
        scale: None,
        selectable_fields: Vec::new(),
        view: None,
    }
}

fn col(name: &str, type_: &str, path: &str) -> PrinterColumn {
    PrinterColumn {
        name: name.into(),
        type_: type_.into(),
        json_path: path.into(),
        priority: 0,
        description: String::new(),
    }
}

/// A column shown only with `-o wide`.
fn wide(name: &str, path: &str) -> PrinterColumn {
    PrinterColumn {
        priority: 1,
        ..col(name, "string", path)
    }
}

/// The built-in kinds: what the issue lists, with the real server's short names and scopes.
pub fn builtins() -> Vec<ResourceType> {
    let mut all = vec![
        builtin("", "v1", "Namespace", "namespaces", false, &["ns"], true),
        builtin("", "v1", "ConfigMap", "configmaps", true, &["cm"], false),
        builtin("", "v1", "Secret", "secrets", true, &[], false),
        builtin("", "v1", "Service", "services", true, &["svc"], true),
        builtin("", "v1", "Pod", "pods", true, &["po"], true),
        builtin(
            "",
            "v1",
            "PersistentVolumeClaim",
            "persistentvolumeclaims",
            true,
            &["pvc"],
            true,
        ),
        builtin(
            "",
            "v1",
            "PersistentVolume",
            "persistentvolumes",
            false,
            &["pv"],
            true,
        ),
        builtin("", "v1", "Event", "events", true, &["ev"], false),
        builtin(
            "",
            "v1",
            "ServiceAccount",
            "serviceaccounts",
            true,
            &["sa"],
            false,
        ),
        builtin("", "v1", "Node", "nodes", false, &["no"], true),
        builtin(
            "apps",
            "v1",
            "StatefulSet",
            "statefulsets",
            true,
            &["sts"],
            true,
        ),
        builtin(
            "apps",
            "v1",
            "Deployment",
            "deployments",
            true,
            &["deploy"],
            true,
        ),
        builtin(
            "apps",
            "v1",
            "ReplicaSet",
            "replicasets",
            true,
            &["rs"],
            true,
        ),
        builtin(
            "apps",
            "v1",
            "ControllerRevision",
            "controllerrevisions",
            true,
            &[],
            false,
        ),
        builtin("", "v1", "Endpoints", "endpoints", true, &["ep"], false),
        builtin(
            "discovery.k8s.io",
            "v1",
            "EndpointSlice",
            "endpointslices",
            true,
            &[],
            false,
        ),
        builtin(
            "networking.k8s.io",
            "v1",
            "NetworkPolicy",
            "networkpolicies",
            true,
            &["netpol"],
            false,
        ),
        builtin("apps", "v1", "DaemonSet", "daemonsets", true, &["ds"], true),
        builtin(
            "",
            "v1",
            "ReplicationController",
            "replicationcontrollers",
            true,
            &["rc"],
            true,
        ),
        builtin(
            "networking.k8s.io",
            "v1",
            "Ingress",
            "ingresses",
            true,
            &["ing"],
            true,
        ),
        builtin(
            "networking.k8s.io",
            "v1",
            "IngressClass",
            "ingressclasses",
            false,
            &[],
            false,
        ),
        builtin("batch", "v1", "Job", "jobs", true, &[], true),
        builtin("batch", "v1", "CronJob", "cronjobs", true, &["cj"], true),
        builtin(
            "coordination.k8s.io",
            "v1",
            "Lease",
            "leases",
            true,
            &[],
            false,
        ),
        builtin(
            "events.k8s.io",
            "v1",
            "Event",
            "events",
            true,
            &["ev"],
            false,
        ),
        builtin(
            "apiextensions.k8s.io",
            "v1",
            "CustomResourceDefinition",
            "customresourcedefinitions",
            false,
            &["crd", "crds"],
            true,
        ),
        builtin(
            "rbac.authorization.k8s.io",
            "v1",
            "Role",
            "roles",
            true,
            &[],
            false,
        ),
        builtin(
            "policy",
            "v1",
            "PodDisruptionBudget",
            "poddisruptionbudgets",
            true,
            &["pdb"],
            true,
        ),
        builtin(
            "rbac.authorization.k8s.io",
            "v1",
            "RoleBinding",
            "rolebindings",
            true,
            &[],
            false,
        ),
        builtin(
            "rbac.authorization.k8s.io",
            "v1",
            "ClusterRole",
            "clusterroles",
            false,
            &[],
            false,
        ),
        builtin(
            "rbac.authorization.k8s.io",
            "v1",
            "ClusterRoleBinding",
            "clusterrolebindings",
            false,
            &[],
            false,
        ),
        builtin(
            "snapshot.storage.k8s.io",
            "v1",
            "VolumeSnapshot",
            "volumesnapshots",
            true,
            &["vs"],
            true,
        ),
        builtin(
            "snapshot.storage.k8s.io",
            "v1",
            "VolumeSnapshotClass",
            "volumesnapshotclasses",
            false,
            &["vsclass"],
            false,
        ),
        builtin(
            "storage.k8s.io",
            "v1",
            "StorageClass",
            "storageclasses",
            false,
            &["sc"],
            false,
        ),
    ];
    for rt in &mut all {
        let cols: Vec<PrinterColumn> = match rt.plural.as_str() {
            // As kube-apiserver's printers: the wide (`-o wide`) columns after AGE.
            "pods" => vec![
                col("Ready", "string", ".status.containerStatuses"),
                col("Status", "string", ".status.phase"),
                col("Restarts", "string", RESTARTS),
                wide("IP", POD_IP),
                wide("Node", NODE),
                wide("Nominated Node", NOMINATED_NODE),
                wide("Readiness Gates", READINESS_GATES),
            ],
            "statefulsets" => vec![
                col("Ready", "string", READY_OF),
                wide("Containers", CONTAINERS),
                wide("Images", IMAGES),
            ],
            "deployments" => vec![
                col("Ready", "string", READY_OF),
                col("Up-to-date", "integer", ".status.updatedReplicas"),
                col("Available", "integer", ".status.availableReplicas"),
                wide("Containers", CONTAINERS),
                wide("Images", IMAGES),
                wide("Selector", SELECTOR),
            ],
            "persistentvolumeclaims" => vec![
                col("Status", "string", ".status.phase"),
                col("Volume", "string", ".spec.volumeName"),
                col("Capacity", "string", ".status.capacity.storage"),
                col("Access Modes", "string", ACCESS_MODES),
                col("StorageClass", "string", ".spec.storageClassName"),
            ],
            "services" => vec![
                col("Type", "string", ".spec.type"),
                col("Cluster-IP", "string", ".spec.clusterIP"),
                col("External-IP", "string", EXTERNAL_IPS),
                col("Port(s)", "string", PORTS),
            ],
            "events" => vec![
                col("Last Seen", "string", LAST_SEEN),
                col("Type", "string", ".type"),
                col("Reason", "string", ".reason"),
                col("Object", "string", INVOLVED_OBJECT),
                col("Message", "string", ".message"),
            ],
            "namespaces" => vec![col("Status", "string", ".status.phase")],
            "volumesnapshots" => vec![col("ReadyToUse", "boolean", ".status.readyToUse")],
            _ => Vec::new(),
        };
        rt.printer_columns = cols;
        if matches!(
            rt.plural.as_str(),
            "deployments" | "statefulsets" | "replicasets" | "replicationcontrollers"
        ) {
            rt.scale = Some(ScalePaths {
                spec_replicas: "spec.replicas".into(),
                status_replicas: "status.replicas".into(),
                label_selector: Some("spec.selector".into()),
            });
        }
        rt.selectable_fields = builtin_field_labels(&rt.group, &rt.kind)
            .iter()
            .map(|f| f.to_string())
            .collect();
        if rt.group == "events.k8s.io" {
            rt.view = Some(View::EventsV1);
        }
        if matches!(
            rt.plural.as_str(),
            "pods"
                | "services"
                | "statefulsets"
                | "deployments"
                | "jobs"
                | "cronjobs"
                | "replicasets"
        ) {
            rt.categories = vec!["all".into()];
        }
    }
    all
}

/// Computed printer columns (not paths): a Service's external IPs and ports, an Event's last
/// time seen and object, a claim's access modes (`http::table` computes them).
pub const EXTERNAL_IPS: &str = "<computed>.service.externalIPs";
/// See [`EXTERNAL_IPS`].
pub const PORTS: &str = "<computed>.service.ports";
/// See [`EXTERNAL_IPS`].
pub const LAST_SEEN: &str = "<computed>.event.lastSeen";
/// See [`EXTERNAL_IPS`].
pub const INVOLVED_OBJECT: &str = "<computed>.event.object";
/// See [`EXTERNAL_IPS`].
pub const ACCESS_MODES: &str = "<computed>.pvc.accessModes";
/// See [`EXTERNAL_IPS`]: a Pod's restarts (the sum of its containers').
pub const RESTARTS: &str = "<computed>.pod.restarts";
/// See [`EXTERNAL_IPS`]: `ready/desired` of a StatefulSet or Deployment.
pub const READY_OF: &str = "<computed>.workload.ready";
/// See [`EXTERNAL_IPS`]: a workload's container names, comma-separated.
pub const CONTAINERS: &str = "<computed>.workload.containers";
/// See [`EXTERNAL_IPS`]: a workload's container images, comma-separated.
pub const IMAGES: &str = "<computed>.workload.images";
/// See [`EXTERNAL_IPS`]: a workload's selector as `k=v,…`.
pub const SELECTOR: &str = "<computed>.workload.selector";
/// See [`EXTERNAL_IPS`]: a Pod's IP, node, nominated node and readiness gates, or `<none>`.
pub const POD_IP: &str = "<computed>.pod.ip";
/// See [`POD_IP`].
pub const NODE: &str = "<computed>.pod.node";
/// See [`POD_IP`].
pub const NOMINATED_NODE: &str = "<computed>.pod.nominatedNode";
/// See [`POD_IP`].
pub const READINESS_GATES: &str = "<computed>.pod.readinessGates";

/// The field labels the real server accepts in field selectors for a built-in kind, besides
/// `metadata.name` and `metadata.namespace` (Kubernetes' per-kind field label conversions).
pub fn builtin_field_labels(group: &str, kind: &str) -> &'static [&'static str] {
    match (group, kind) {
        ("", "Pod") => &[
            "spec.nodeName",
            "spec.restartPolicy",
            "spec.schedulerName",
            "spec.serviceAccountName",
            "spec.hostNetwork",
            "spec.host",
            "status.phase",
            "status.podIP",
            "status.podIPs",
            "status.nominatedNodeName",
        ],
        ("", "Event") => &[
            "involvedObject.kind",
            "involvedObject.namespace",
            "involvedObject.name",
            "involvedObject.uid",
            "involvedObject.apiVersion",
            "involvedObject.resourceVersion",
            "involvedObject.fieldPath",
            "reason",
            "reportingComponent",
            "source",
            "type",
        ],
        ("events.k8s.io", "Event") => &[
            "regarding.kind",
            "regarding.namespace",
            "regarding.name",
            "regarding.uid",
            "regarding.apiVersion",
            "regarding.resourceVersion",
            "regarding.fieldPath",
            "reason",
            "reportingController",
            "type",
        ],
        ("", "Namespace") => &["status.phase"],
        ("", "Node") => &["spec.unschedulable"],
        ("", "Secret") => &["type"],
        ("", "ReplicationController") => &["status.replicas"],
        ("", "Service") => &["spec.clusterIP", "spec.type"],
        ("batch", "Job") => &["status.successful"],
        ("certificates.k8s.io", "CertificateSigningRequest") => &["spec.signerName"],
        _ => &[],
    }
}

/// Every served kind; CRDs add and remove entries while the server runs.
#[derive(Debug)]
pub struct Registry {
    inner: RwLock<Vec<Arc<ResourceType>>>,
}

impl Default for Registry {
    fn default() -> Self {
        Self {
            inner: RwLock::new(builtins().into_iter().map(Arc::new).collect()),
        }
    }
}

impl Registry {
    /// Every served resource.
    pub fn all(&self) -> Vec<Arc<ResourceType>> {
        self.inner.read().map(|v| v.clone()).unwrap_or_default()
    }

    /// The resource served at `group/version/plural`.
    pub fn find(&self, group: &str, version: &str, plural: &str) -> Option<Arc<ResourceType>> {
        self.all().into_iter().find(|r| {
            r.group == group && r.plural == plural && r.versions.iter().any(|v| v == version)
        })
    }

    /// The resource stored under `group/plural` (any version).
    pub fn by_key(&self, key: &str) -> Option<Arc<ResourceType>> {
        self.all().into_iter().find(|r| r.key() == key)
    }

    /// The resource for an `apiVersion` and `kind`.
    pub fn by_kind(&self, api_version: &str, kind: &str) -> Option<Arc<ResourceType>> {
        let (group, version) = api_version.split_once('/').unwrap_or(("", api_version));
        self.all()
            .into_iter()
            .find(|r| r.group == group && r.kind == kind && r.versions.iter().any(|v| v == version))
    }

    /// Adds or replaces the resource with the same key (a CRD created or updated).
    pub fn upsert(&self, rt: ResourceType) {
        if let Ok(mut all) = self.inner.write() {
            all.retain(|r| r.key() != rt.key());
            all.push(Arc::new(rt));
        }
    }

    /// Stops serving a CRD-defined resource.
    pub fn remove(&self, key: &str) {
        if let Ok(mut all) = self.inner.write() {
            all.retain(|r| r.builtin || r.key() != key);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn builtins_include_statefulsets_with_their_short_name() {
        let reg = Registry::default();
        let sts = reg
            .find("apps", "v1", "statefulsets")
            .expect("statefulsets served");
        assert_eq!(sts.short_names, vec!["sts"]);
        assert!(sts.namespaced);
        assert_eq!(
            reg.by_kind("apps/v1", "StatefulSet").map(|r| r.key()),
            Some("apps/statefulsets".into())
        );
    }

    #[test]
    fn removing_a_builtin_key_leaves_it_served() {
        let reg = Registry::default();
        reg.remove("/pods");
        assert!(reg.find("", "v1", "pods").is_some());
    }
}
