//! What the host does to each desired object before applying it, and which observed children
//! it may delete. Pure decisions, tested here; the I/O lives in `apply.rs`.

use std::collections::HashSet;
use windlass_policy::At as _;

use serde_json::{Value, json};

use windlass_policy::{ObjectKey, group_kind, kind_of, pipeline::Desired};

/// Field manager prefix of every write the host makes; [`field_manager`] adds the parent.
pub const FIELD_MANAGER: &str = "windlass";

/// The field manager of a parent's children: `windlass/<parent uid>`, so `managedFields` shows
/// which parent set which field, and one parent's apply never takes fields from another's.
pub fn field_manager(parent_uid: &str) -> String {
    format!("{FIELD_MANAGER}/{parent_uid}")
}

/// Whether a field manager is the host's: [`FIELD_MANAGER`] alone, or a parent's
/// [`field_manager`].
pub fn is_host_manager(manager: &str) -> bool {
    manager
        .strip_prefix(FIELD_MANAGER)
        .is_some_and(|rest| rest.is_empty() || rest.starts_with('/'))
}

/// Label on every child: the parent's uid.
pub const PARENT_UID_LABEL: &str = "windlass.dev/parent-uid";
/// Label on every child: who manages it.
pub const MANAGED_BY_LABEL: &str = "app.kubernetes.io/managed-by";
/// Annotation on every child: the plugin (name@digest) that produced it.
pub const PRODUCED_BY_ANNOTATION: &str = "windlass.dev/produced-by";
/// Annotation on every child: a hash of what the host last applied (the decorated object
/// without this annotation). See [`up_to_date`].
pub const APPLIED_ANNOTATION: &str = "windlass.dev/applied";

/// Kinds whose objects hold data: never pruned because a plugin stopped wanting them. Only a
/// finalize phase that reported success lets them go (through owner-reference GC).
pub const PROTECTED_KINDS: &[&str] = &[
    "v1/PersistentVolumeClaim",
    "v1/PersistentVolume",
    "snapshot.storage.k8s.io/v1/VolumeSnapshot",
];

/// Kinds applied without an owner reference: a snapshot taken when the parent is deleted is
/// what is left of its data, so it must outlive the parent (owner-reference GC would take it).
pub const OUTLIVING_KINDS: &[&str] = &["snapshot.storage.k8s.io/v1/VolumeSnapshot"];

/// Whether a desired object holds data through what it makes: a StatefulSet with claim
/// templates (its claims go with it when its retention policy says `Delete`). While the parent
/// has a finalize phase pending, such an object is [`Ownership::Held`]: not a dependent of the
/// parent, so that no garbage collection — a foreground deletion of the parent deletes its
/// dependents and theirs first — can take the data before the finalize phase has kept it.
pub fn holds_data(object: &Value) -> bool {
    let kind = kind_of(object);
    kind == "apps/v1/StatefulSet"
        && object
            .at("/spec/volumeClaimTemplates")
            .and_then(Value::as_array)
            .is_some_and(|t| !t.is_empty())
}

/// How the host applies an object it may write.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Ownership {
    /// The parent is the object's controller: GC takes it with the parent, prune may delete it.
    Controller,
    /// No owner reference: the object outlives the parent ([`OUTLIVING_KINDS`]). The host's
    /// record of it is the parent-uid label and its field manager. Never pruned.
    Unowned,
    /// No owner reference while the parent's finalize phase is pending ([`holds_data`]): the
    /// garbage collector cannot reach it. Never pruned; the host deletes it itself once the
    /// finalize phase has succeeded (unless the parent is deleted with `orphan`).
    Held,
    /// Another controller that is one of the parent's children (a StatefulSet owning its Pods)
    /// or a cluster controller working from the parent's templates made it: the plugin may set
    /// labels and annotations only, applied without force and without an owner reference.
    /// Never pruned.
    LabelsOnly,
}

/// What the host may do with a desired object, judged from what exists.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Claim {
    /// The object exists and is the parent's to write, as said.
    Owned(Ownership),
    /// Nothing of this identity was observed for the parent: it may be created, once the host
    /// has made sure nothing of that name exists.
    New(Ownership),
    /// The object exists and is not the parent's: it is left untouched. The reason names who
    /// controls it.
    NotOwned(String),
}

/// The uids of the objects the parent controls, directly or through its children (a
/// StatefulSet it controls, that StatefulSet's Pods; a CronJob, its Jobs, their Pods).
///
/// Every observed object carries the parent's uid label; one without a controller (a held
/// StatefulSet, a snapshot, a retained claim) is the parent's too, and so are its dependents.
pub fn family(observed: &[Value], parent_uid: &str) -> HashSet<String> {
    let mut family: HashSet<String> = HashSet::from([parent_uid.to_string()]);
    family.extend(
        observed
            .iter()
            .filter(|o| controller_uid(o).is_none())
            .filter_map(uid_of)
            .map(str::to_string),
    );
    loop {
        let before = family.len();
        for o in observed {
            if let (Some(controller), Some(uid)) = (controller_uid(o), uid_of(o))
                && family.contains(controller)
            {
                family.insert(uid.to_string());
            }
        }
        if family.len() == before {
            return family;
        }
    }
}

/// The observed objects that are the parent's: controlled by it or by its family, or made
/// from its templates without a controller (claims of a StatefulSet that retains them, the
/// snapshots it applies without an owner). An object that carries the parent's uid label but
/// is controlled by anything else is not the parent's: a plugin never sees it.
pub fn ours(observed: Vec<Value>, parent_uid: &str) -> Vec<Value> {
    let family = family(&observed, parent_uid);
    observed
        .into_iter()
        .filter(|o| controller_uid(o).is_none_or(|c| family.contains(c)))
        .collect()
}

/// Decides what the host may do with `desired`, given the object of the same identity that
/// exists (`existing`, from the parent's observed children or a read), and the parent's
/// [`family`].
///
/// `finalizing`: the parent has a finalize phase pending (its pipeline finalizes), so an object
/// that [`holds_data`] is held rather than controlled.
pub fn claim(
    desired: &Desired,
    existing: Option<&Value>,
    parent_uid: &str,
    family: &HashSet<String>,
    finalizing: bool,
) -> Claim {
    let outliving = OUTLIVING_KINDS.contains(&desired.object.kind.as_str());
    let data = holds_data(&desired.object.object);
    let own = if finalizing && data {
        Ownership::Held
    } else {
        Ownership::Controller
    };
    let Some(existing) = existing else {
        return Claim::New(if outliving { Ownership::Unowned } else { own });
    };
    let labelled = existing
        .at("/metadata/labels")
        .and_then(|l| l.get(PARENT_UID_LABEL))
        .and_then(Value::as_str)
        == Some(parent_uid);
    let applied = applied_by_host(existing);
    match controller_uid(existing) {
        Some(uid) if uid == parent_uid => Claim::Owned(own),
        // Only what the child made from the parent's templates, which carry the parent's uid:
        // an object the child adopted (a ReplicaSet's selector matching another application's
        // Pods) is still someone else's.
        Some(uid) if family.contains(uid) && !labelled => Claim::NotOwned(format!(
            "is controlled by {}, a child of the parent, but was not made from the parent's templates (it lacks the {PARENT_UID_LABEL} label): an object a child adopted is not the parent's",
            controller_name(existing)
        )),
        Some(uid) if family.contains(uid) => match labels_only(&desired.object.object) {
            Ok(()) => Claim::Owned(Ownership::LabelsOnly),
            Err(field) => Claim::NotOwned(format!(
                "is controlled by {}, a child of the parent: a plugin may set only its labels and annotations, not {field}",
                controller_name(existing)
            )),
        },
        // Who controls it is not said: the message reaches the parent's status, which the
        // plugin reads back, and another application's layout is none of its business.
        Some(_) => Claim::NotOwned("exists and is not this parent's child".into()),
        None if labelled && outliving => Claim::Owned(Ownership::Unowned),
        // Held before (or still): the host's own, owned again once nothing is to finalize.
        None if labelled && applied && data => Claim::Owned(own),
        None if labelled => match labels_only(&desired.object.object) {
            Ok(()) => Claim::Owned(Ownership::LabelsOnly),
            Err(field) => Claim::NotOwned(format!(
                "was made from the parent's templates by the cluster, not applied by the host: a plugin may set only its labels and annotations, not {field}"
            )),
        },
        None => Claim::NotOwned("exists and is not this parent's child".into()),
    }
}

/// Whether an object sets nothing but its identity, labels and annotations; else the first
/// other field.
fn labels_only(object: &Value) -> Result<(), String> {
    let Some(map) = object.as_object() else {
        return Err("its body".into());
    };
    for (key, value) in map {
        match key.as_str() {
            "apiVersion" | "kind" => {}
            "metadata" => {
                for meta_key in value.as_object().into_iter().flat_map(|m| m.keys()) {
                    if !matches!(
                        meta_key.as_str(),
                        "name" | "namespace" | "labels" | "annotations"
                    ) {
                        return Err(format!("metadata.{meta_key}"));
                    }
                }
            }
            other => return Err(other.to_string()),
        }
    }
    Ok(())
}

/// Whether the host applied `object`: it carries the provenance annotation, which a
/// template-made object (labelled through its template) does not.
fn applied_by_host(object: &Value) -> bool {
    object
        .at("/metadata/annotations")
        .and_then(|a| a.get(PRODUCED_BY_ANNOTATION))
        .is_some()
}

/// The uid of an object's controller owner reference.
fn controller_uid(object: &Value) -> Option<&str> {
    controller_ref(object).and_then(|r| r["uid"].as_str())
}

fn controller_ref(object: &Value) -> Option<&Value> {
    object
        .at("/metadata/ownerReferences")
        .and_then(Value::as_array)?
        .iter()
        .find(|r| r["controller"].as_bool() == Some(true))
}

fn controller_name(object: &Value) -> String {
    controller_ref(object).map_or_else(
        || "nothing".into(),
        |r| {
            format!(
                "{} {}",
                r["kind"].as_str().unwrap_or("?"),
                r["name"].as_str().unwrap_or("?")
            )
        },
    )
}

fn uid_of(object: &Value) -> Option<&str> {
    object.at("/metadata/uid").and_then(Value::as_str)
}

/// The parent, as children refer to it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ParentRef {
    /// `group/version`.
    pub api_version: String,
    /// Kind.
    pub kind: String,
    /// Name.
    pub name: String,
    /// uid.
    pub uid: String,
    /// Namespace; none for a cluster-scoped parent.
    pub namespace: Option<String>,
    /// The parent asks to take over the claims an earlier parent of its kind, namespace and
    /// name retained ([`ADOPT_RETAINED_ANNOTATION`]).
    pub adopts_retained: bool,
}

/// Annotation a user sets to `"true"` on a parent to let it take over the claims that an earlier
/// parent of the same kind, namespace and name left behind (deleted with its volumes retained,
/// as SampleDB's `deletionPolicy: Retain`), when its StatefulSet would make claims of those
/// names. Without it such a claim is someone else's, and the apply is refused.
pub const ADOPT_RETAINED_ANNOTATION: &str = "windlass.dev/adopt-retained-volumes";

/// Annotation the host puts on claim templates, which the StatefulSet controller copies onto
/// the claims it makes: the identity of the parent (`Kind.group namespace/name`), so that a
/// retained claim says which parent left it.
pub const PARENT_ANNOTATION: &str = "windlass.dev/parent";

impl ParentRef {
    /// `Kind.group namespace/name` (`Kind namespace/name` for the core group).
    pub fn identity(&self) -> String {
        let group = self.api_version.rsplit_once('/').map(|(g, _)| g);
        let kind = match group {
            Some(g) => format!("{}.{g}", self.kind),
            None => self.kind.clone(),
        };
        match &self.namespace {
            Some(ns) => format!("{kind} {ns}/{}", self.name),
            None => format!("{kind} {}", self.name),
        }
    }
}

/// An object a desired object makes the cluster create under a name derived from its own: a
/// StatefulSet's Pods `<set>-<n>` and claims `<template>-<set>-<n>`, for every ordinal its
/// replicas reach.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Derived {
    /// `v1/Pod` or `v1/PersistentVolumeClaim`.
    pub kind: &'static str,
    /// The name the controller gives it.
    pub name: String,
    /// The field of the desired object it is derived from.
    pub field: String,
}

/// The objects `desired` makes the cluster create by derived names ([`Derived`]).
pub fn derived(desired: &Desired) -> Vec<Derived> {
    let object = &desired.object.object;
    if desired.object.kind != "apps/v1/StatefulSet" {
        return Vec::new();
    }
    let set = &desired.object.name;
    let replicas = object
        .at("/spec/replicas")
        .and_then(Value::as_u64)
        .unwrap_or(1);
    let start = object
        .at("/spec/ordinals/start")
        .and_then(Value::as_u64)
        .unwrap_or(0);
    let templates: Vec<(usize, &str)> = object
        .at("/spec/volumeClaimTemplates")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
        .enumerate()
        .filter_map(|(i, t)| Some((i, t.at("/metadata/name")?.as_str()?)))
        .collect();
    let mut out = Vec::new();
    for n in start..start.saturating_add(replicas) {
        out.push(Derived {
            kind: "v1/Pod",
            name: format!("{set}-{n}"),
            field: "spec.replicas".into(),
        });
        for (i, template) in &templates {
            out.push(Derived {
                kind: "v1/PersistentVolumeClaim",
                name: format!("{template}-{set}-{n}"),
                field: format!("spec.volumeClaimTemplates[{i}]"),
            });
        }
    }
    out
}

/// How the pods an object makes would take part in a Service: the labels they carry (which a
/// Service's selector may match) and the Service whose DNS names they take (`subdomain`, a
/// StatefulSet's `serviceName`), with the fields they come from. None for an object that makes
/// no pods.
#[derive(Debug, Clone, PartialEq)]
pub struct PodIdentity<'a> {
    /// The pods' labels as applied, and their field.
    pub labels: (&'a serde_json::Map<String, Value>, &'static str),
    /// The Service named for DNS, and its field.
    pub subdomain: Option<(&'a str, &'static str)>,
}

/// The [`PodIdentity`] of a decorated object's pods.
pub fn pod_identity<'a>(kind: &str, object: &'a Value) -> Option<PodIdentity<'a>> {
    let (meta, spec, labels_field, subdomain_field) = match kind {
        "v1/Pod" => ("/metadata", "/spec", "metadata.labels", "spec.subdomain"),
        "apps/v1/StatefulSet"
        | "apps/v1/Deployment"
        | "apps/v1/DaemonSet"
        | "apps/v1/ReplicaSet"
        | "v1/ReplicationController"
        | "batch/v1/Job" => (
            "/spec/template/metadata",
            "/spec/template/spec",
            "spec.template.metadata.labels",
            "spec.template.spec.subdomain",
        ),
        "batch/v1/CronJob" => (
            "/spec/jobTemplate/spec/template/metadata",
            "/spec/jobTemplate/spec/template/spec",
            "spec.jobTemplate.spec.template.metadata.labels",
            "spec.jobTemplate.spec.template.spec.subdomain",
        ),
        _ => return None,
    };
    let labels = object.at(&format!("{meta}/labels"))?.as_object()?;
    let subdomain = object
        .at(&format!("{spec}/subdomain"))
        .and_then(Value::as_str)
        .map(|s| (s, subdomain_field))
        .or_else(|| {
            (kind == "apps/v1/StatefulSet")
                .then(|| object.at("/spec/serviceName")?.as_str())
                .flatten()
                .map(|s| (s, "spec.serviceName"))
        })
        .filter(|(s, _)| !s.is_empty());
    Some(PodIdentity {
        labels: (labels, labels_field),
        subdomain,
    })
}

/// A Pod as it will be after a labels-only apply of `object` onto `existing`: the existing
/// Pod's labels with the edit's laid over them. None for anything but a Pod.
pub fn pod_with_labels_of(object: &Value, existing: &Value) -> Option<Value> {
    if kind_of(object) != "v1/Pod" {
        return None;
    }
    let mut labels = existing
        .at("/metadata/labels")
        .and_then(Value::as_object)
        .cloned()
        .unwrap_or_default();
    if let Some(new) = object.at("/metadata/labels").and_then(Value::as_object) {
        labels.extend(new.clone());
    }
    let mut merged = object.clone();
    merged["metadata"]["labels"] = Value::Object(labels);
    Some(merged)
}

/// Why pods of `identity` would take part in `service`, a Service that is not the parent's:
/// its selector matches their labels (it would send them its traffic, and the EndpointSlice
/// controller would give them its DNS name), or they take DNS names under it. None when they
/// would not.
pub fn joins(identity: &PodIdentity<'_>, service: &Value) -> Option<String> {
    let name = service.at("/metadata/name").and_then(Value::as_str)?;
    let namespace = service
        .at("/metadata/namespace")
        .and_then(Value::as_str)
        .unwrap_or_default();
    let (labels, field) = identity.labels;
    if let Some(selector) = service.at("/spec/selector").and_then(Value::as_object)
        && !selector.is_empty()
        && selector.iter().all(|(k, v)| labels.get(k) == Some(v))
    {
        return Some(format!(
            "{field}: match the selector of Service {namespace}/{name}, which is not this parent's: its traffic would reach these pods"
        ));
    }
    match identity.subdomain {
        Some((subdomain, field)) if subdomain == name => Some(format!(
            "{field}: names Service {namespace}/{name}, which is not this parent's: these pods would take DNS names under it"
        )),
        _ => None,
    }
}

/// Whether a LabelSelector (`matchLabels`, `matchExpressions`) that names at least one label
/// selects pods with `labels`. An empty selector (every pod of the namespace) is `false`: it
/// selects what it selects whatever labels a plugin chooses, so choosing them gains nothing.
pub fn selects(selector: &Value, labels: &serde_json::Map<String, Value>) -> bool {
    let match_labels = selector.get("matchLabels").and_then(Value::as_object);
    let expressions = selector
        .get("matchExpressions")
        .and_then(Value::as_array)
        .map(Vec::as_slice)
        .unwrap_or_default();
    if match_labels.is_none_or(serde_json::Map::is_empty) && expressions.is_empty() {
        return false;
    }
    let labels_match = match_labels
        .into_iter()
        .flatten()
        .all(|(k, v)| labels.get(k) == Some(v));
    let expressions_match = expressions.iter().all(|e| {
        let value = e["key"].as_str().and_then(|k| labels.get(k));
        let among = |v: Option<&Value>| {
            v.is_some_and(|v| {
                e["values"]
                    .as_array()
                    .is_some_and(|values| values.contains(v))
            })
        };
        match e["operator"].as_str() {
            Some("In") => among(value),
            Some("NotIn") => !among(value),
            Some("Exists") => value.is_some(),
            Some("DoesNotExist") => value.is_none(),
            // An operator the API server would refuse: select nothing.
            _ => false,
        }
    });
    labels_match && expressions_match
}

/// Whether pods with `identity` would fall under a NetworkPolicy of the namespace that is not
/// the parent's: its `podSelector` (the policy's rules would apply to them) or a peer's
/// `podSelector` within the namespace (`from` or `to` without a `namespaceSelector`: its
/// traffic rules would let them reach, or be reached by, the pods it protects). The reason, or
/// `None`.
pub fn joins_policy(identity: &PodIdentity<'_>, policy: &Value) -> Option<String> {
    let name = policy.at("/metadata/name").and_then(Value::as_str)?;
    let namespace = policy
        .at("/metadata/namespace")
        .and_then(Value::as_str)
        .unwrap_or_default();
    let (labels, field) = identity.labels;
    // A selector naming the parent's uid chose these pods: no one's access is taken.
    let chosen = |s: &Value| {
        s.at("/matchLabels")
            .and_then(|m| m.get(PARENT_UID_LABEL))
            .is_some_and(|uid| labels.get(PARENT_UID_LABEL) == Some(uid))
    };
    let selects = |s: &Value| selects(s, labels) && !chosen(s);
    if policy.at("/spec/podSelector").is_some_and(selects) {
        return Some(format!(
            "{field}: match the podSelector of NetworkPolicy {namespace}/{name}, which is not this parent's: its rules would apply to these pods"
        ));
    }
    for (rules, peers) in [("ingress", "from"), ("egress", "to")] {
        let peers = policy
            .at(&format!("/spec/{rules}"))
            .and_then(Value::as_array)
            .into_iter()
            .flatten()
            .flat_map(|r| r.get(peers).and_then(Value::as_array).into_iter().flatten());
        for (i, peer) in peers.enumerate() {
            if peer.get("namespaceSelector").is_none()
                && peer.get("podSelector").is_some_and(selects)
            {
                return Some(format!(
                    "{field}: match an {rules} peer ({i}) of NetworkPolicy {namespace}/{name}, which is not this parent's: these pods would get the network access it gives another application's pods"
                ));
            }
        }
    }
    None
}

/// What an existing object of a [`Derived`] name is to the parent.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Heir {
    /// Made from the parent's templates (it carries the parent's uid): the controller's to use.
    Ours,
    /// A claim an earlier parent of the same identity retained, and the parent asks to take it
    /// over: the host labels it as the parent's before the StatefulSet is applied.
    Adopt,
    /// Someone else's: the controller would take it over, so the apply is refused, saying why.
    Foreign(String),
}

/// Whether `job` is a name the CronJob controller gives the Jobs of CronJob `cron`:
/// `<cron>-<scheduled time in minutes since the epoch>`, for any time it may reach.
pub fn cron_job_name(cron: &str, job: &str) -> bool {
    job.strip_prefix(cron)
        .and_then(|rest| rest.strip_prefix('-'))
        .is_some_and(|digits| !digits.is_empty() && digits.bytes().all(|b| b.is_ascii_digit()))
}

/// Whether an existing Job of a name CronJob `cron` derives is the parent's: made from its
/// templates (its uid label) or controlled by that CronJob (which the host writes only as
/// the parent's).
pub fn cron_job_is_ours(job: &Value, cron: &str, parent_uid: &str) -> bool {
    let labelled = job
        .at("/metadata/labels")
        .and_then(|l| l.get(PARENT_UID_LABEL))
        .and_then(Value::as_str)
        == Some(parent_uid);
    let by_cron = job
        .at("/metadata/ownerReferences")
        .and_then(Value::as_array)
        .is_some_and(|refs| {
            refs.iter()
                .any(|r| r["controller"] == true && r["kind"] == "CronJob" && r["name"] == cron)
        });
    labelled || by_cron
}

/// Judges an existing object of a derived name.
pub fn heir(existing: &Value, parent: &ParentRef) -> Heir {
    let meta = |key: &str, name: &str| {
        existing
            .at(&format!("/metadata/{key}"))
            .and_then(|m| m.get(name))
            .and_then(Value::as_str)
    };
    if meta("labels", PARENT_UID_LABEL) == Some(parent.uid.as_str()) {
        return Heir::Ours;
    }
    let retained = kind_of(existing) == "v1/PersistentVolumeClaim"
        && controller_uid(existing).is_none()
        && meta("labels", PARENT_UID_LABEL).is_some()
        && meta("annotations", PARENT_ANNOTATION) == Some(parent.identity().as_str());
    match (retained, parent.adopts_retained) {
        (true, true) => Heir::Adopt,
        (true, false) => Heir::Foreign(format!(
            "exists, retained by an earlier {} of this name; the StatefulSet controller would take it over: set the annotation {ADOPT_RETAINED_ANNOTATION}: \"true\" on the parent to take it over on purpose",
            parent.kind
        )),
        (false, _) => Heir::Foreign(
            "exists and is not this parent's: the StatefulSet controller would take it over".into(),
        ),
    }
}

/// Metadata a plugin's object may not set: the API server's fields, and those through which
/// the object would be owned or held by anything but the host's decisions. [`decorate`] drops
/// them (`ownerReferences` is the host's own where the parent controls the object).
pub const SYSTEM_METADATA: &[&str] = &[
    "managedFields",
    "resourceVersion",
    "uid",
    "creationTimestamp",
    "deletionTimestamp",
    "deletionGracePeriodSeconds",
    "generation",
    "selfLink",
    "finalizers",
    "ownerReferences",
    "generateName",
];

/// Makes the apply of `object` (decorated) hold only on `existing`, the child it was decided
/// on: its uid goes into the body, which the API server checks. Should that child be deleted
/// and another object of the same name made in between, the apply fails instead of writing
/// into the newcomer.
pub fn precondition(object: &mut Value, existing: &Value) {
    if let (Some(uid), Some(meta)) = (
        uid_of(existing),
        object.get_mut("metadata").and_then(Value::as_object_mut),
    ) {
        meta.insert("uid".into(), json!(uid));
    }
}

/// Adds the controller owner reference, the labels and the provenance annotation, and carries
/// the parent-uid label into pod and claim templates, so that Pods, Jobs and PVCs the cluster
/// makes from this object are observed for the parent too.
pub fn decorate(desired: &Desired, parent: &ParentRef, ownership: Ownership) -> Value {
    let mut object = desired.object.object.clone();
    let meta = ensure_object(&mut object, "metadata");
    // What the API server or the host sets, never the plugin: managedFields must not be sent
    // with an apply, a resourceVersion or uid would be a precondition the plugin chose, owner
    // references other than the host's could hand the object to someone else, and a finalizer
    // nobody removes would keep it forever (and its namespace with it).
    for key in SYSTEM_METADATA {
        meta.remove(*key);
    }
    let labels = child_map(meta, "labels");
    labels.insert(MANAGED_BY_LABEL.into(), json!("windlass"));
    labels.insert(PARENT_UID_LABEL.into(), json!(parent.uid));
    let annotations = child_map(meta, "annotations");
    annotations.insert(
        PRODUCED_BY_ANNOTATION.into(),
        json!(format!("{}@{}", desired.plugin, desired.digest)),
    );
    if ownership == Ownership::Controller {
        meta.insert(
            "ownerReferences".into(),
            json!([{
                "apiVersion": parent.api_version,
                "kind": parent.kind,
                "name": parent.name,
                "uid": parent.uid,
                "controller": true,
                "blockOwnerDeletion": true,
            }]),
        );
    }
    for pointer in [
        "/spec/template/metadata",
        "/spec/jobTemplate/metadata",
        "/spec/jobTemplate/spec/template/metadata",
    ] {
        label_template(&mut object, pointer, &parent.uid);
    }
    narrow_selector(&mut object, &desired.object.kind, &parent.uid);
    if let Some(claims) = object
        .at_mut("/spec/volumeClaimTemplates")
        .and_then(Value::as_array_mut)
    {
        for claim in claims {
            let meta = ensure_object(claim, "metadata");
            child_map(meta, "labels").insert(PARENT_UID_LABEL.into(), json!(parent.uid));
            child_map(meta, "annotations")
                .insert(PARENT_ANNOTATION.into(), json!(parent.identity()));
        }
    }
    strip_template_metadata(&mut object, &desired.object.kind);
    object
}

/// Keeps what the API server would refuse to change on an object that exists: a selector of a
/// Deployment, StatefulSet, DaemonSet, ReplicaSet or Job and a StatefulSet's claim templates
/// are immutable, so on a child created before the host narrowed selectors and annotated claim
/// templates ([`decorate`]) they stay as they are — otherwise every apply of it would fail.
/// Such a child keeps the selector it had (docs/SECURITY.md, Known gaps).
pub fn keep_immutable(object: &mut Value, existing: &Value) {
    let kind = kind_of(object);
    let immutable_selector = matches!(
        kind.as_str(),
        "apps/v1/Deployment" | "apps/v1/StatefulSet" | "apps/v1/DaemonSet" | "apps/v1/ReplicaSet"
    ) || kind == "batch/v1/Job";
    if immutable_selector
        && let Some(old) = existing.at("/spec/selector")
        && old
            .at("/matchLabels")
            .and_then(|l| l.get(PARENT_UID_LABEL))
            .is_none()
        && let Some(selector) = object.at_mut("/spec/selector")
    {
        *selector = old.clone();
    }
    if kind == "apps/v1/StatefulSet"
        && let (Some(old), Some(new)) = (
            existing
                .at("/spec/volumeClaimTemplates")
                .and_then(Value::as_array),
            object
                .at_mut("/spec/volumeClaimTemplates")
                .and_then(Value::as_array_mut),
        )
    {
        for (old, new) in old.iter().zip(new.iter_mut()) {
            let annotated = old
                .at("/metadata/annotations")
                .and_then(|a| a.get(PARENT_ANNOTATION))
                .is_some();
            if !annotated
                && let Some(a) = new
                    .at_mut("/metadata/annotations")
                    .and_then(Value::as_object_mut)
            {
                a.remove(PARENT_ANNOTATION);
            }
        }
    }
}

/// Where a controller copies metadata from a template onto what it makes: pod templates,
/// Job templates, claim templates, and the claim templates of ephemeral volumes in pod specs.
fn template_metadata(object: &mut Value) -> Vec<&mut serde_json::Map<String, Value>> {
    let mut out = Vec::new();
    let Some(map) = object.as_object_mut() else {
        return out;
    };
    // Walk the whole object once: a template's `metadata` is any `metadata` below the top.
    fn walk<'a>(value: &'a mut Value, out: &mut Vec<&'a mut serde_json::Map<String, Value>>) {
        match value {
            Value::Object(map) => {
                for (key, v) in map.iter_mut() {
                    if key == "metadata" {
                        if let Value::Object(meta) = v {
                            out.push(meta);
                        }
                    } else {
                        walk(v, out);
                    }
                }
            }
            Value::Array(list) => list.iter_mut().for_each(|v| walk(v, out)),
            _ => {}
        }
    }
    for (key, v) in map.iter_mut() {
        if key != "metadata" {
            walk(v, &mut out);
        }
    }
    out
}

/// Drops `finalizers` and `ownerReferences` from every template: the Pods, Jobs and claims the
/// cluster's controllers make from them would carry a finalizer nobody removes (holding them,
/// and their namespace, forever) or an owner the host did not choose.
fn strip_template_metadata(object: &mut Value, kind: &str) {
    // Only the kinds whose templates the cluster's own controllers make objects from: another
    // kind's `metadata` below its top (a custom resource's own template) is its business.
    let (group, name) = group_kind(kind);
    let workload = matches!(
        (group, name),
        ("", "Pod" | "PodTemplate" | "ReplicationController")
            | (
                "apps",
                "Deployment" | "StatefulSet" | "DaemonSet" | "ReplicaSet"
            )
            | ("batch", "Job" | "CronJob")
    );
    if !workload {
        return;
    }
    for meta in template_metadata(object) {
        meta.remove("finalizers");
        meta.remove("ownerReferences");
    }
}

/// Narrows the selector of a workload, Service or disruption budget to the pods made from the
/// parent's templates (which carry the parent's uid): a ReplicaSet, Deployment, StatefulSet,
/// DaemonSet, a Job with a manual selector or a ReplicationController adopts every pod its
/// selector matches, a Service sends its traffic to them, a budget holds back their eviction.
/// Narrowed, each reaches only the parent's own pods, whatever labels the plugin chose.
fn narrow_selector(object: &mut Value, kind: &str, uid: &str) {
    let (group, name) = group_kind(kind);
    // (where the selector is, whether it is a LabelSelector rather than a plain map, whether an
    // absent selector is made: a workload's is required, a Service without one selects nothing).
    let (pointer, label_selector, make) = match (group, name) {
        ("apps", "Deployment" | "StatefulSet" | "DaemonSet" | "ReplicaSet")
        | ("policy", "PodDisruptionBudget") => ("/spec", true, true),
        // Without a manual selector the Job controller makes one from the Job's own uid.
        ("batch", "Job") => ("/spec", true, false),
        ("batch", "CronJob") => ("/spec/jobTemplate/spec", true, false),
        // Absent, it is defaulted from the template's labels, which carry the uid.
        ("", "ReplicationController") => ("/spec", false, false),
        ("", "Service") => ("/spec", false, false),
        _ => return,
    };
    let Some(spec) = object.at_mut(pointer).and_then(Value::as_object_mut) else {
        return;
    };
    let present = spec.get("selector").is_some_and(|s| match s {
        Value::Object(m) => !m.is_empty(),
        _ => false,
    });
    let manual = spec.get("manualSelector") == Some(&Value::Bool(true));
    if !(present || make || manual) {
        return;
    }
    let selector = child_map(spec, "selector");
    let labels = if label_selector {
        child_map(selector, "matchLabels")
    } else {
        selector
    };
    labels.insert(PARENT_UID_LABEL.into(), json!(uid));
}

fn label_template(object: &mut Value, pointer: &str, uid: &str) {
    let parent_pointer = &pointer[..pointer.rfind('/').unwrap_or(0)];
    if object.at(parent_pointer).is_none_or(|v| !v.is_object()) {
        return;
    }
    let holder = object.at_mut(parent_pointer).and_then(Value::as_object_mut);
    if let Some(holder) = holder {
        let meta = holder.entry("metadata").or_insert_with(|| json!({}));
        if let Some(meta) = meta.as_object_mut() {
            let labels = meta.entry("labels").or_insert_with(|| json!({}));
            if let Some(labels) = labels.as_object_mut() {
                labels.insert(PARENT_UID_LABEL.into(), json!(uid));
            }
        }
    }
}

/// The object under `key` of `value`, made an object (and `value` too) if it was not one.
fn ensure_object<'a>(value: &'a mut Value, key: &str) -> &'a mut serde_json::Map<String, Value> {
    if !value.is_object() {
        *value = json!({});
    }
    let Value::Object(map) = value else {
        unreachable!("made an object above")
    };
    child_map(map, key)
}

/// The object under `key` of `map`, made an object if it was not one.
fn child_map<'a>(
    map: &'a mut serde_json::Map<String, Value>,
    key: &str,
) -> &'a mut serde_json::Map<String, Value> {
    let entry = map.entry(key.to_string()).or_insert_with(|| json!({}));
    if !entry.is_object() {
        *entry = json!({});
    }
    let Value::Object(child) = entry else {
        unreachable!("made an object above")
    };
    child
}

/// The observed children to delete: those this parent controls (its controller owner reference)
/// that no plugin wants any more, of a kind the pipeline produces, and not data-bearing.
pub fn prune_plan<'a>(
    observed: &'a [Value],
    desired: &[Desired],
    parent_uid: &str,
    child_kinds: &HashSet<String>,
) -> Vec<&'a Value> {
    // Compared as stored: one Event is observed under both its groups.
    let wanted: HashSet<ObjectKey> = desired.iter().map(|d| d.object.key().stored()).collect();
    observed
        .iter()
        .filter(|o| controlled_by(o, parent_uid))
        .filter(|o| {
            let kind = kind_of(o);
            child_kinds.contains(&kind) && !PROTECTED_KINDS.contains(&kind.as_str())
        })
        .filter(|o| o.at("/metadata/deletionTimestamp").is_none())
        .filter(|o| !wanted.contains(&ObjectKey::of(o).stored()))
        .collect()
}

/// The held objects ([`Ownership::Held`]) among what a parent observes: the host's to delete
/// once the parent's finalize phase has succeeded.
pub fn held<'a>(observed: &'a [Value]) -> impl Iterator<Item = &'a Value> {
    observed.iter().filter(|o| {
        controller_uid(o).is_none()
            && holds_data(o)
            && applied_by_host(o)
            && o.at("/metadata/deletionTimestamp").is_none()
    })
}

/// True when `object` has a controller owner reference to the parent with this uid.
pub fn controlled_by(object: &Value, uid: &str) -> bool {
    object
        .at("/metadata/ownerReferences")
        .and_then(Value::as_array)
        .is_some_and(|refs| {
            refs.iter()
                .any(|r| r["uid"] == uid && r["controller"].as_bool() == Some(true))
        })
}

/// The form of a stamp: this prefix, then the first 16 bytes of the BLAKE3 hash of the object
/// as JSON, in lower-case hex.
pub const STAMP_PREFIX: &str = "b3:";

/// Records in `object` (a decorated child) the hash of its content, as
/// [`APPLIED_ANNOTATION`]: the object as JSON without the annotation (an `annotations` map
/// that removing it empties stays, empty). serde_json keeps object keys sorted, so equal
/// objects hash alike.
///
/// # Stamps from before BLAKE3
/// Hosts before this one stamped with the first 16 bytes of SHA-256 in hex, no prefix. When
/// `existing` (the child as observed) carries such a stamp and it is this object's, that stamp
/// is kept, so an upgrade does not re-apply every child to change nothing but the annotation;
/// the next change a child needs brings the new form. Only for such children is SHA-256
/// computed, on each reconcile until they change; a downgrade re-applies every `b3:` child once.
pub fn stamp(object: &mut Value, existing: Option<&Value>) {
    if let Some(annotations) = object
        .at_mut("/metadata/annotations")
        .and_then(Value::as_object_mut)
    {
        annotations.remove(APPLIED_ANNOTATION);
    }
    let stamp = existing
        .and_then(applied_stamp)
        .filter(|old| !old.starts_with(STAMP_PREFIX))
        .filter(|old| *old == sha256_stamp(object))
        .map_or_else(|| blake3_stamp(object), str::to_owned);
    let meta = ensure_object(object, "metadata");
    child_map(meta, "annotations").insert(APPLIED_ANNOTATION.into(), Value::String(stamp));
}

/// The stamp `object` carries, if any.
fn applied_stamp(object: &Value) -> Option<&str> {
    object
        .at("/metadata/annotations")
        .and_then(|a| a.get(APPLIED_ANNOTATION))
        .and_then(Value::as_str)
}

/// `object` as JSON, in a buffer kept per thread: serialising into a buffer and hashing it
/// once costs less than feeding the hash serde_json's many small writes.
fn with_json<T>(object: &Value, f: impl FnOnce(&[u8]) -> T) -> T {
    thread_local! {
        static BUFFER: std::cell::RefCell<Vec<u8>> = const { std::cell::RefCell::new(Vec::new()) };
    }
    BUFFER.with_borrow_mut(|buffer| {
        buffer.clear();
        // Serialising a `Value` into a `Vec` cannot fail.
        let _ = serde_json::to_writer(&mut *buffer, object);
        let out = f(buffer);
        // A rare large object does not keep its buffer.
        if buffer.capacity() > 64 * 1024 {
            *buffer = Vec::new();
        }
        out
    })
}

fn blake3_stamp(object: &Value) -> String {
    let hash = with_json(object, blake3::hash);
    format!("{STAMP_PREFIX}{}", hex::encode(&hash.as_bytes()[..16]))
}

/// The stamp of hosts before [`STAMP_PREFIX`]: the first 16 bytes of SHA-256, in hex.
fn sha256_stamp(object: &Value) -> String {
    use sha2::{Digest, Sha256};
    let digest = with_json(object, |json| Sha256::digest(json));
    hex::encode(&digest[..16])
}

/// The object the host applies for `desired` given its claim, and whether with `force`:
/// decorated ([`decorate`]), immutable fields kept as `existing` holds them, and
/// [`stamp`]ed. `force` only where the parent controls the object; creations and labels on
/// others' objects go without.
///
/// # Errors
/// Why the object is not the parent's to write ([`Claim::NotOwned`]).
pub fn to_apply(
    desired: &Desired,
    claim: Claim,
    existing: Option<&Value>,
    parent: &ParentRef,
) -> Result<(Value, bool), String> {
    let (ownership, force) = match claim {
        Claim::NotOwned(why) => return Err(why),
        Claim::New(ownership) => (ownership, false),
        Claim::Owned(Ownership::LabelsOnly) => (Ownership::LabelsOnly, false),
        Claim::Owned(ownership) => (ownership, true),
    };
    let mut object = decorate(desired, parent, ownership);
    if let Some(existing) = existing {
        keep_immutable(&mut object, existing);
    }
    stamp(&mut object, existing);
    Ok((object, force))
}

/// Whether applying `object` (decorated and [`stamp`]ed) would change nothing, judged from the
/// observed children: the observed object of the same identity carries the same stamp, so the
/// host last applied exactly these fields, and still holds every one of these values.
///
/// # Why both
/// The values alone are not enough: a field the plugin stopped setting is still there, and only
/// an apply removes it (server-side apply drops fields a manager no longer sends). The stamp
/// alone is not enough: someone may have changed a value since. Together they mean the apply is
/// a no-op, so skipping it saves a write per child per reconcile; anything else is applied.
pub fn up_to_date(object: &Value, observed: &[Value]) -> bool {
    let Some(want) = applied_stamp(object) else {
        return false;
    };
    let id = ObjectKey::of(object);
    observed
        .iter()
        .find(|o| id.is(o))
        .is_some_and(|o| applied_stamp(o) == Some(want) && holds(o, object))
}

/// Whether `observed` holds every value of `wanted`: objects key by key (extra observed keys,
/// such as defaults and status, are fine), arrays element by element with equal length,
/// scalars equal.
fn holds(observed: &Value, wanted: &Value) -> bool {
    match (observed, wanted) {
        (Value::Object(o), Value::Object(w)) => w.iter().all(|(k, wv)| match o.get(k) {
            Some(ov) => holds(ov, wv),
            None => wv.is_null(),
        }),
        (Value::Array(o), Value::Array(w)) => {
            o.len() == w.len() && o.iter().zip(w).all(|(ov, wv)| holds(ov, wv))
        }
        (o, w) => o == w,
    }
}

/// Whether merging `patch` into `current` (JSON merge patch, RFC 7386) would change nothing.
pub fn merge_is_noop(current: &Value, patch: &Value) -> bool {
    match (current, patch) {
        (Value::Object(c), Value::Object(p)) => p.iter().all(|(k, pv)| match (c.get(k), pv) {
            (None, Value::Null) => true,
            (None, _) => false,
            (Some(cv), pv) => !pv.is_null() && merge_is_noop(cv, pv),
        }),
        (c, p) => c == p,
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn the_hosts_field_managers_are_its_own_and_each_parents() {
        assert!(is_host_manager(FIELD_MANAGER));
        assert!(is_host_manager(&field_manager("0c5e-uid")));
        for other in [
            "windlassx",
            "windlass-operator",
            "kube-controller-manager",
            "",
            "w",
        ] {
            assert!(!is_host_manager(other), "{other}");
        }
    }

    #[test]
    fn label_selectors_match_as_the_api_server_does_and_empty_ones_never() {
        let labels = json!({"app": "billing", "tier": "db"});
        let labels = labels.as_object().unwrap();
        for (selector, wanted) in [
            (json!({}), false),
            (json!({"matchLabels": {}}), false),
            (json!({"matchLabels": {"app": "billing"}}), true),
            (
                json!({"matchLabels": {"app": "billing", "tier": "web"}}),
                false,
            ),
            (
                json!({"matchExpressions": [{"key": "app", "operator": "In", "values": ["billing", "x"]}]}),
                true,
            ),
            (
                json!({"matchExpressions": [{"key": "app", "operator": "NotIn", "values": ["billing"]}]}),
                false,
            ),
            (
                json!({"matchExpressions": [{"key": "zone", "operator": "NotIn", "values": ["a"]}]}),
                true,
            ),
            (
                json!({"matchExpressions": [{"key": "tier", "operator": "Exists"}]}),
                true,
            ),
            (
                json!({"matchExpressions": [{"key": "tier", "operator": "DoesNotExist"}]}),
                false,
            ),
            (
                json!({"matchLabels": {"app": "billing"}, "matchExpressions": [{"key": "tier", "operator": "In", "values": ["web"]}]}),
                false,
            ),
            (
                json!({"matchExpressions": [{"key": "tier", "operator": "Near"}]}),
                false,
            ),
        ] {
            assert_eq!(selects(&selector, labels), wanted, "{selector}");
        }
    }

    #[test]
    fn pods_under_another_applications_network_policy_are_named_by_the_rule_they_match() {
        let labels = json!({"app": "billing"});
        let identity = PodIdentity {
            labels: (labels.as_object().unwrap(), "spec.template.metadata.labels"),
            subdomain: None,
        };
        let policy =
            |spec: Value| json!({"metadata": {"name": "np", "namespace": "shop"}, "spec": spec});
        let target = policy(json!({"podSelector": {"matchLabels": {"app": "billing"}}}));
        assert!(
            joins_policy(&identity, &target)
                .unwrap()
                .contains("podSelector of NetworkPolicy shop/np")
        );
        let peer = policy(json!({"podSelector": {"matchLabels": {"app": "db"}},
            "ingress": [{"from": [{"podSelector": {"matchLabels": {"app": "billing"}}}]}]}));
        assert!(
            joins_policy(&identity, &peer)
                .unwrap()
                .contains("ingress peer (0)")
        );
        let other_namespace = policy(json!({"podSelector": {"matchLabels": {"app": "db"}},
            "ingress": [{"from": [{"podSelector": {"matchLabels": {"app": "billing"}},
                "namespaceSelector": {"matchLabels": {"team": "x"}}}]}]}));
        assert_eq!(joins_policy(&identity, &other_namespace), None);
        let default_deny = policy(json!({"podSelector": {}, "policyTypes": ["Ingress"]}));
        assert_eq!(joins_policy(&identity, &default_deny), None);
    }

    #[test]
    fn cron_job_names_are_the_cronjob_name_a_dash_and_minutes() {
        assert!(cron_job_name("nightly", "nightly-29000000"));
        assert!(!cron_job_name("nightly", "nightly-"));
        assert!(!cron_job_name("nightly", "nightly-2900x"));
        assert!(!cron_job_name("nightly", "nightly-backup-1"));
        assert!(!cron_job_name("nightly", "other-29000000"));
        let job = |labels: Value, refs: Value| json!({"metadata": {"labels": labels, "ownerReferences": refs}});
        let cron_ref = json!([{"kind": "CronJob", "name": "nightly", "controller": true}]);
        assert!(cron_job_is_ours(&job(json!({}), cron_ref), "nightly", "u"));
        assert!(cron_job_is_ours(
            &job(json!({PARENT_UID_LABEL: "u"}), json!([])),
            "nightly",
            "u"
        ));
        assert!(!cron_job_is_ours(
            &job(json!({PARENT_UID_LABEL: "other"}), json!([])),
            "nightly",
            "u"
        ));
        let other_cron = json!([{"kind": "CronJob", "name": "weekly", "controller": true}]);
        assert!(!cron_job_is_ours(
            &job(json!({}), other_cron),
            "nightly",
            "u"
        ));
    }

    use super::*;
    use windlass_policy::Checked;

    fn parent() -> ParentRef {
        ParentRef {
            api_version: "samples.windlass.dev/v1alpha1".into(),
            kind: "SampleDB".into(),
            name: "orders".into(),
            uid: "u-1".into(),
            namespace: Some("shop".into()),
            adopts_retained: false,
        }
    }

    fn desired(kind: &str, name: &str, object: Value) -> Desired {
        Desired {
            object: Checked {
                kind: kind.into(),
                namespace: Some("shop".into()),
                name: name.into(),
                object,
            },
            plugin: "storage".into(),
            digest: "sha256:ab".into(),
        }
    }

    fn child(kind: &str, api_version: &str, name: &str, owner: Option<&str>) -> Value {
        let mut o = json!({"apiVersion": api_version, "kind": kind, "metadata": {"name": name, "namespace": "shop"}});
        if let Some(uid) = owner {
            o["metadata"]["ownerReferences"] = json!([{"uid": uid, "controller": true}]);
        }
        o
    }

    #[test]
    fn decorated_children_carry_owner_labels_provenance_and_template_labels() {
        let sts = json!({
            "apiVersion": "apps/v1", "kind": "StatefulSet",
            "metadata": {"name": "orders", "namespace": "shop", "labels": {"app": "db"}},
            "spec": {"template": {"metadata": {"labels": {"app": "db"}}}, "volumeClaimTemplates": [{"metadata": {"name": "data"}}]},
        });
        let out = decorate(
            &desired("apps/v1/StatefulSet", "orders", sts),
            &parent(),
            Ownership::Controller,
        );
        assert_eq!(out["metadata"]["labels"]["app"], "db");
        assert_eq!(out["metadata"]["labels"][PARENT_UID_LABEL], "u-1");
        assert_eq!(out["metadata"]["labels"][MANAGED_BY_LABEL], "windlass");
        assert_eq!(
            out["metadata"]["annotations"][PRODUCED_BY_ANNOTATION],
            "storage@sha256:ab"
        );
        assert_eq!(out["metadata"]["ownerReferences"][0]["controller"], true);
        assert_eq!(out["metadata"]["ownerReferences"][0]["kind"], "SampleDB");
        assert_eq!(
            out["spec"]["template"]["metadata"]["labels"][PARENT_UID_LABEL],
            "u-1"
        );
        assert_eq!(out["spec"]["template"]["metadata"]["labels"]["app"], "db");
        assert_eq!(
            out["spec"]["volumeClaimTemplates"][0]["metadata"]["labels"][PARENT_UID_LABEL],
            "u-1"
        );
    }

    #[test]
    fn a_cronjob_template_gets_the_label_too_and_plain_objects_get_no_template() {
        let cron = json!({"apiVersion": "batch/v1", "kind": "CronJob", "metadata": {"name": "b"},
                          "spec": {"jobTemplate": {"spec": {"template": {"spec": {}}}}}});
        let out = decorate(
            &desired("batch/v1/CronJob", "b", cron),
            &parent(),
            Ownership::Controller,
        );
        assert_eq!(
            out["spec"]["jobTemplate"]["metadata"]["labels"][PARENT_UID_LABEL],
            "u-1"
        );
        assert_eq!(
            out["spec"]["jobTemplate"]["spec"]["template"]["metadata"]["labels"][PARENT_UID_LABEL],
            "u-1"
        );
        let cm =
            json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "c"}, "data": {}});
        let out = decorate(
            &desired("v1/ConfigMap", "c", cm),
            &parent(),
            Ownership::Controller,
        );
        assert!(out.get("spec").is_none());
    }

    fn with_uid(mut o: Value, uid: &str) -> Value {
        o["metadata"]["uid"] = json!(uid);
        o
    }

    fn labelled(mut o: Value, parent: &str) -> Value {
        o["metadata"]["labels"] = json!({PARENT_UID_LABEL: parent});
        o
    }

    #[test]
    fn a_data_bearing_statefulset_is_held_while_a_finalize_phase_is_pending() {
        let body = json!({"apiVersion": "apps/v1", "kind": "StatefulSet", "metadata": {"name": "orders"},
            "spec": {"volumeClaimTemplates": [{"metadata": {"name": "data"}}]}});
        let sts = desired("apps/v1/StatefulSet", "orders", body.clone());
        let stateless = desired(
            "apps/v1/StatefulSet",
            "orders",
            json!({"apiVersion": "apps/v1", "kind": "StatefulSet", "metadata": {"name": "orders"}, "spec": {}}),
        );
        let none = family(&[], "u-1");
        assert_eq!(
            claim(&sts, None, "u-1", &none, true),
            Claim::New(Ownership::Held)
        );
        assert_eq!(
            claim(&sts, None, "u-1", &none, false),
            Claim::New(Ownership::Controller)
        );
        assert_eq!(
            claim(&stateless, None, "u-1", &none, true),
            Claim::New(Ownership::Controller)
        );
        // Held: no owner reference, so no garbage collection reaches it.
        let out = decorate(&sts, &parent(), Ownership::Held);
        assert!(out["metadata"].get("ownerReferences").is_none());
        assert_eq!(out["metadata"]["labels"][PARENT_UID_LABEL], "u-1");
        // One the parent controls (applied before) is held from now on; a held one is owned
        // again once nothing is to finalize.
        let controlled = child("StatefulSet", "apps/v1", "orders", Some("u-1"));
        assert_eq!(
            claim(&sts, Some(&controlled), "u-1", &none, true),
            Claim::Owned(Ownership::Held)
        );
        let mut held = labelled(with_uid(body, "s-1"), "u-1");
        held["metadata"]["annotations"] = json!({PRODUCED_BY_ANNOTATION: "storage@sha256:1"});
        assert_eq!(
            claim(&sts, Some(&held), "u-1", &none, true),
            Claim::Owned(Ownership::Held)
        );
        assert_eq!(
            claim(&sts, Some(&held), "u-1", &none, false),
            Claim::Owned(Ownership::Controller)
        );
        // Without the host's provenance it was not applied by the host: labels only, as before.
        let mut made = held.clone();
        made["metadata"]["annotations"] = json!({});
        assert!(matches!(
            claim(&sts, Some(&made), "u-1", &none, true),
            Claim::NotOwned(_)
        ));
        // The host deletes it after a finalize phase; its Pods stay the parent's meanwhile.
        let pod = with_uid(child("Pod", "v1", "orders-0", Some("s-1")), "p-1");
        let observed = [held.clone(), pod, controlled];
        assert_eq!(held_objects(&observed), vec!["orders"]);
        assert!(family(&observed, "u-1").contains("p-1"));
        assert!(
            prune_plan(
                &observed[..1],
                &[],
                "u-1",
                &HashSet::from(["apps/v1/StatefulSet".to_string()])
            )
            .is_empty()
        );
    }

    fn held_objects(observed: &[Value]) -> Vec<&str> {
        held(observed)
            .map(|o| o["metadata"]["name"].as_str().unwrap_or_default())
            .collect()
    }

    #[test]
    fn new_objects_are_created_and_snapshots_without_an_owner() {
        let snap = desired(
            "snapshot.storage.k8s.io/v1/VolumeSnapshot",
            "data-final",
            json!({"apiVersion": "snapshot.storage.k8s.io/v1", "kind": "VolumeSnapshot", "metadata": {"name": "data-final"}}),
        );
        let family = family(&[], "u-1");
        assert_eq!(
            claim(&snap, None, "u-1", &family, false),
            Claim::New(Ownership::Unowned)
        );
        let out = decorate(&snap, &parent(), Ownership::Unowned);
        assert!(out["metadata"].get("ownerReferences").is_none());
        assert_eq!(out["metadata"]["labels"][PARENT_UID_LABEL], "u-1");
        let existing = labelled(
            child(
                "VolumeSnapshot",
                "snapshot.storage.k8s.io/v1",
                "data-final",
                None,
            ),
            "u-1",
        );
        assert_eq!(
            claim(&snap, Some(&existing), "u-1", &family, false),
            Claim::Owned(Ownership::Unowned)
        );
        let cm = desired(
            "v1/ConfigMap",
            "c",
            json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "c"}}),
        );
        assert_eq!(
            claim(&cm, None, "u-1", &family, false),
            Claim::New(Ownership::Controller)
        );
    }

    #[test]
    fn an_existing_object_of_someone_else_is_not_owned_whoever_controls_it() {
        let secret = desired(
            "v1/Secret",
            "app-secret",
            json!({"apiVersion": "v1", "kind": "Secret", "metadata": {"name": "app-secret"}}),
        );
        let family = family(&[], "u-1");
        // Another application's object, with no owner at all.
        let plain = child("Secret", "v1", "app-secret", None);
        let Claim::NotOwned(why) = claim(&secret, Some(&plain), "u-1", &family, false) else {
            panic!("taken over")
        };
        assert_eq!(why, "exists and is not this parent's child");
        // Another parent's child.
        let mut theirs = child("Secret", "v1", "app-secret", Some("u-2"));
        theirs["metadata"]["ownerReferences"][0]["kind"] = json!("SampleDB");
        theirs["metadata"]["ownerReferences"][0]["name"] = json!("other");
        let Claim::NotOwned(why) = claim(&secret, Some(&theirs), "u-1", &family, false) else {
            panic!("re-parented")
        };
        assert_eq!(why, "exists and is not this parent's child");
        // Labelled with this parent's uid by someone else, but not made by the host: its
        // content is still not the plugin's to set.
        let forged = labelled(plain, "u-1");
        let with_data = desired(
            "v1/Secret",
            "app-secret",
            json!({"apiVersion": "v1", "kind": "Secret", "metadata": {"name": "app-secret"}, "data": {"password": "cHduZWQ="}}),
        );
        assert!(matches!(
            claim(&with_data, Some(&forged), "u-1", &family, false),
            Claim::NotOwned(_)
        ));
    }

    #[test]
    fn pods_of_the_parents_statefulset_may_only_be_labelled() {
        let sts = with_uid(
            child("StatefulSet", "apps/v1", "orders", Some("u-1")),
            "sts-uid",
        );
        let mut pod = with_uid(child("Pod", "v1", "orders-0", Some("sts-uid")), "pod-uid");
        pod["metadata"]["ownerReferences"][0]["kind"] = json!("StatefulSet");
        pod["metadata"]["ownerReferences"][0]["name"] = json!("orders");
        // Made from the parent's template: it carries the parent's uid.
        pod["metadata"]["labels"] = json!({PARENT_UID_LABEL: "u-1"});
        let foreign = with_uid(child("Pod", "v1", "other-0", Some("someone")), "x");
        let observed = vec![sts, pod.clone(), foreign];
        let family = family(&observed, "u-1");
        assert!(family.contains("sts-uid") && family.contains("pod-uid") && !family.contains("x"));
        let label = desired(
            "v1/Pod",
            "orders-0",
            json!({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "orders-0", "labels": {"role": "primary"}}}),
        );
        assert_eq!(
            claim(&label, Some(&pod), "u-1", &family, false),
            Claim::Owned(Ownership::LabelsOnly)
        );
        let respec = desired(
            "v1/Pod",
            "orders-0",
            json!({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "orders-0"}, "spec": {"nodeName": "n"}}),
        );
        let Claim::NotOwned(why) = claim(&respec, Some(&pod), "u-1", &family, false) else {
            panic!("a Pod's spec was accepted")
        };
        assert_eq!(
            why,
            "is controlled by StatefulSet orders, a child of the parent: a plugin may set only its labels and annotations, not spec"
        );
        let out = decorate(&label, &parent(), Ownership::LabelsOnly);
        assert!(out["metadata"].get("ownerReferences").is_none());
    }

    #[test]
    fn a_plugin_sees_only_the_parents_family_of_what_carries_its_label() {
        let sts = with_uid(
            child("StatefulSet", "apps/v1", "orders", Some("u-1")),
            "sts-uid",
        );
        let pod = with_uid(child("Pod", "v1", "orders-0", Some("sts-uid")), "pod-uid");
        let claim_of_sts = with_uid(
            child("PersistentVolumeClaim", "v1", "data-orders-0", None),
            "pvc",
        );
        let foreign = with_uid(child("Secret", "v1", "stolen", Some("other-uid")), "s");
        let kept: Vec<String> = ours(vec![sts, pod, claim_of_sts, foreign], "u-1")
            .iter()
            .map(|o| o["metadata"]["name"].as_str().unwrap().to_string())
            .collect();
        assert_eq!(kept, ["orders", "orders-0", "data-orders-0"]);
    }

    #[test]
    fn only_unwanted_controlled_children_of_produced_kinds_are_pruned_and_never_volumes() {
        let kinds: HashSet<String> = [
            "v1/Service",
            "apps/v1/StatefulSet",
            "v1/PersistentVolumeClaim",
        ]
        .map(String::from)
        .into();
        let observed = vec![
            child("Service", "v1", "orders", Some("u-1")), // still wanted
            child("Service", "v1", "orders-old", Some("u-1")), // stale: pruned
            child("Service", "v1", "someone-elses", Some("u-2")), // another parent's
            child("Service", "v1", "unowned", None),       // not ours
            child("PersistentVolumeClaim", "v1", "data-orders-0", Some("u-1")), // data: kept
            child("Pod", "v1", "orders-0", Some("u-1")),   // not a produced kind
        ];
        let want = vec![desired("v1/Service", "orders", json!({}))];
        let plan = prune_plan(&observed, &want, "u-1", &kinds);
        let names: Vec<&str> = plan
            .iter()
            .map(|o| o["metadata"]["name"].as_str().unwrap())
            .collect();
        assert_eq!(names, ["orders-old"]);
    }

    fn stamped(object: Value) -> Value {
        let mut o = decorate(
            &desired("v1/ConfigMap", "orders", object),
            &parent(),
            Ownership::Controller,
        );
        stamp(&mut o, None);
        o
    }

    #[test]
    fn the_stamp_is_the_first_half_of_the_blake3_of_the_object_as_json() {
        // Fixed: a stamp that changed between versions would re-apply every child after an
        // upgrade (as the change from SHA-256 would, but for the old stamps kept: see the
        // test below). The hash is of the bytes `{"apiVersion":"v1","data":{"a":"1"},"kind":
        // "ConfigMap","metadata":{"name":"orders"}}`, keys sorted, without the stamp itself.
        let mut object = json!({"apiVersion": "v1", "kind": "ConfigMap",
            "metadata": {"name": "orders"}, "data": {"a": "1"}});
        stamp(&mut object, None);
        assert_eq!(
            object["metadata"]["annotations"][APPLIED_ANNOTATION],
            "b3:5909b12935f69f972f4f9e3297a6f4ed"
        );
        assert_eq!(
            object["metadata"]["annotations"][APPLIED_ANNOTATION],
            blake3_of(br#"{"apiVersion":"v1","data":{"a":"1"},"kind":"ConfigMap","metadata":{"name":"orders"}}"#)
        );
        // An object carrying an old stamp is hashed without it, but with the annotations map
        // that removing it leaves, empty: not the hash of the object that never had one.
        object["metadata"]
            .as_object_mut()
            .expect("metadata")
            .remove("annotations");
        let mut again = object.clone();
        again["metadata"]["annotations"] = json!({APPLIED_ANNOTATION: "stale"});
        stamp(&mut object, None);
        stamp(&mut again, None);
        assert_ne!(
            object, again,
            "an emptied annotations map is part of the object"
        );
        assert_eq!(
            again["metadata"]["annotations"],
            json!({APPLIED_ANNOTATION: blake3_of(br#"{"apiVersion":"v1","data":{"a":"1"},"kind":"ConfigMap","metadata":{"annotations":{},"name":"orders"}}"#)})
        );
    }

    fn blake3_of(bytes: &[u8]) -> String {
        format!("b3:{}", &blake3::hash(bytes).to_hex()[..32])
    }

    #[test]
    fn a_child_stamped_with_sha256_before_the_upgrade_is_not_applied_again_for_it() {
        use sha2::{Digest, Sha256};
        let v1 = stamped(json!({"apiVersion": "v1", "kind": "ConfigMap",
            "metadata": {"name": "orders", "namespace": "shop"}, "data": {"a": "1"}}));
        // What a host before BLAKE3 applied: the object stamped with the first half of the
        // SHA-256 of the same bytes the BLAKE3 stamp hashes.
        let mut bare = v1.clone();
        bare["metadata"]["annotations"]
            .as_object_mut()
            .expect("annotations")
            .remove(APPLIED_ANNOTATION);
        let old = format!(
            "{:x}",
            Sha256::digest(serde_json::to_vec(&bare).expect("json"))
        )[..32]
            .to_string();
        // The old form, pinned: what hosts before BLAKE3 wrote for these bytes.
        assert_eq!(
            sha256_stamp(&json!({"apiVersion": "v1", "kind": "ConfigMap",
                "metadata": {"name": "orders"}, "data": {"a": "1"}})),
            "659718d7659df8cc7d03344ffb2d1331"
        );
        let mut stored = as_stored(&v1);
        stored["metadata"]["annotations"][APPLIED_ANNOTATION] = json!(old);

        // Stamped against it, the same object keeps the old stamp and is up to date: no write.
        let mut object = bare.clone();
        stamp(&mut object, Some(&stored));
        assert_eq!(
            object["metadata"]["annotations"][APPLIED_ANNOTATION],
            json!(old)
        );
        assert!(up_to_date(&object, std::slice::from_ref(&stored)));

        // A changed object gets the new form, and is applied.
        let mut changed = bare.clone();
        changed["data"]["a"] = json!("2");
        stamp(&mut changed, Some(&stored));
        let new = changed["metadata"]["annotations"][APPLIED_ANNOTATION]
            .as_str()
            .expect("stamp")
            .to_owned();
        assert!(new.starts_with(STAMP_PREFIX), "{new}");
        assert!(!up_to_date(&changed, std::slice::from_ref(&stored)));

        // A stamp of the new form is never taken for an old one, nor is an old one of another
        // object: both get the new form.
        for other in [
            json!(v1["metadata"]["annotations"][APPLIED_ANNOTATION]),
            json!("0123456789abcdef0123456789abcdef"),
        ] {
            let mut observed = stored.clone();
            observed["metadata"]["annotations"][APPLIED_ANNOTATION] = other;
            let mut object = bare.clone();
            stamp(&mut object, Some(&observed));
            assert_eq!(object, v1);
        }
    }

    /// What the cluster would hold after applying `object`: defaults and status added.
    fn as_stored(object: &Value) -> Value {
        let mut o = object.clone();
        o["metadata"]["uid"] = json!("child-uid");
        o["metadata"]["resourceVersion"] = json!("7");
        o["data"]["defaulted"] = json!("x");
        o
    }

    #[test]
    fn an_apply_is_skipped_only_when_the_stamp_and_every_value_match() {
        let v1 = stamped(json!({"apiVersion": "v1", "kind": "ConfigMap",
            "metadata": {"name": "orders", "namespace": "shop"}, "data": {"a": "1", "b": "2"}}));
        let stored = as_stored(&v1);
        assert!(up_to_date(&v1, std::slice::from_ref(&stored)));
        // Stamping is deterministic and ignores an old stamp.
        let mut again = v1.clone();
        stamp(&mut again, None);
        assert_eq!(again, v1);
        // Not observed yet.
        assert!(!up_to_date(&v1, &[]));
        // Someone changed a value the host sets.
        let mut drifted = stored.clone();
        drifted["data"]["a"] = json!("9");
        assert!(!up_to_date(&v1, &[drifted]));
        // The plugin stopped setting `b`: the values are all still there, but only an apply
        // removes `b`, and the stamp differs.
        let v2 = stamped(json!({"apiVersion": "v1", "kind": "ConfigMap",
            "metadata": {"name": "orders", "namespace": "shop"}, "data": {"a": "1"}}));
        assert_ne!(
            v1["metadata"]["annotations"][APPLIED_ANNOTATION],
            v2["metadata"]["annotations"][APPLIED_ANNOTATION]
        );
        assert!(!up_to_date(&v2, std::slice::from_ref(&stored)));
        // An object another tool wrote, with no stamp.
        let mut unstamped = stored.clone();
        unstamped["metadata"]["annotations"]
            .as_object_mut()
            .unwrap()
            .remove(APPLIED_ANNOTATION);
        assert!(!up_to_date(&v1, &[unstamped]));
        // Lists compare element by element and by length.
        let list = stamped(json!({"apiVersion": "v1", "kind": "ConfigMap",
            "metadata": {"name": "orders", "namespace": "shop"}, "spec": {"ports": [{"port": 1}]}}));
        let mut longer = as_stored(&list);
        longer["spec"]["ports"] = json!([{"port": 1}, {"port": 2}]);
        assert!(!up_to_date(&list, &[longer]));
        let mut defaulted = as_stored(&list);
        defaulted["spec"]["ports"][0]["protocol"] = json!("TCP");
        assert!(up_to_date(&list, &[defaulted]));
    }

    #[test]
    fn a_merge_patch_is_a_noop_only_when_it_changes_nothing() {
        let current = json!({"status": {"phase": "Ready", "conditions": [{"type": "A"}], "x": 1}});
        assert!(merge_is_noop(
            &current,
            &json!({"status": {"phase": "Ready"}})
        ));
        assert!(merge_is_noop(&current, &json!({"status": {"gone": null}})));
        assert!(!merge_is_noop(
            &current,
            &json!({"status": {"phase": "Failed"}})
        ));
        assert!(!merge_is_noop(&current, &json!({"status": {"x": null}})));
        assert!(!merge_is_noop(&current, &json!({"status": {"new": 1}})));
        // Arrays are replaced whole by a merge patch.
        assert!(!merge_is_noop(
            &current,
            &json!({"status": {"conditions": []}})
        ));
        assert!(merge_is_noop(
            &current,
            &json!({"status": {"conditions": [{"type": "A"}]}})
        ));
    }

    #[test]
    fn a_disruption_budget_is_narrowed_to_the_parents_pods_and_plugin_metadata_is_dropped() {
        let pdb = json!({
            "apiVersion": "policy/v1", "kind": "PodDisruptionBudget",
            "metadata": {"name": "orders", "namespace": "shop", "finalizers": ["example.com/hold"],
                "ownerReferences": [{"apiVersion": "v1", "kind": "ConfigMap", "name": "x", "uid": "other", "controller": false}],
                "uid": "forged", "resourceVersion": "1"},
            "spec": {"minAvailable": 1},
        });
        let out = decorate(
            &desired("policy/v1/PodDisruptionBudget", "orders", pdb),
            &parent(),
            Ownership::Controller,
        );
        assert_eq!(
            out["spec"]["selector"],
            json!({"matchLabels": {PARENT_UID_LABEL: "u-1"}})
        );
        let meta = &out["metadata"];
        for key in ["finalizers", "uid", "resourceVersion"] {
            assert!(meta.get(key).is_none(), "{key} survived: {meta}");
        }
        assert_eq!(meta["ownerReferences"].as_array().unwrap().len(), 1);
        assert_eq!(meta["ownerReferences"][0]["uid"], "u-1");
        // Applied on an existing child, the apply holds only on that child.
        let mut out = out;
        precondition(&mut out, &json!({"metadata": {"uid": "child-uid"}}));
        assert_eq!(out["metadata"]["uid"], "child-uid");
        // Without an owner reference of the host's, none of the plugin's either.
        let snap = json!({"apiVersion": "snapshot.storage.k8s.io/v1", "kind": "VolumeSnapshot",
            "metadata": {"name": "s", "ownerReferences": [{"uid": "x", "kind": "K", "name": "n", "apiVersion": "v1"}]}});
        let out = decorate(
            &desired("snapshot.storage.k8s.io/v1/VolumeSnapshot", "s", snap),
            &parent(),
            Ownership::Unowned,
        );
        assert!(out["metadata"].get("ownerReferences").is_none());
    }

    #[test]
    fn an_object_a_child_adopted_is_not_the_parents_even_to_label() {
        let rs = with_uid(child("ReplicaSet", "apps/v1", "web", Some("u-1")), "rs-uid");
        // Another application's bare Pod, adopted by the ReplicaSet: no parent-uid label.
        let mut adopted = with_uid(child("Pod", "v1", "billing-0", Some("rs-uid")), "victim");
        adopted["metadata"]["labels"] = json!({"app": "billing"});
        let family = family(std::slice::from_ref(&rs), "u-1");
        let label = desired(
            "v1/Pod",
            "billing-0",
            json!({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "billing-0", "labels": {"x": "y"}}}),
        );
        let Claim::NotOwned(why) = claim(&label, Some(&adopted), "u-1", &family, false) else {
            panic!("an adopted Pod was labelled")
        };
        assert!(
            why.contains("was not made from the parent's templates"),
            "{why}"
        );
    }

    #[test]
    fn every_selector_reaches_only_the_parents_pods() {
        let uid =
            |v: &Value, pointer: &str| v.at(pointer).and_then(|l| l.get(PARENT_UID_LABEL)).cloned();
        let apps = json!({"metadata": {"name": "w"}, "spec": {"selector": {"matchLabels": {"app": "billing"}},
            "template": {"metadata": {"labels": {"app": "billing"}}}}});
        for kind in [
            "apps/v1/Deployment",
            "apps/v1/StatefulSet",
            "apps/v1/DaemonSet",
            "apps/v1/ReplicaSet",
        ] {
            let out = decorate(
                &desired(kind, "w", apps.clone()),
                &parent(),
                Ownership::Controller,
            );
            assert_eq!(
                uid(&out, "/spec/selector/matchLabels"),
                Some(json!("u-1")),
                "{kind}"
            );
            assert_eq!(
                out["spec"]["selector"]["matchLabels"]["app"], "billing",
                "{kind}"
            );
        }
        let manual = json!({"metadata": {"name": "j"}, "spec": {"manualSelector": true,
            "selector": {"matchExpressions": [{"key": "app", "operator": "Exists"}]}, "template": {}}});
        let out = decorate(
            &desired("batch/v1/Job", "j", manual),
            &parent(),
            Ownership::Controller,
        );
        assert_eq!(uid(&out, "/spec/selector/matchLabels"), Some(json!("u-1")));
        let auto = json!({"metadata": {"name": "j"}, "spec": {"template": {}}});
        let out = decorate(
            &desired("batch/v1/Job", "j", auto),
            &parent(),
            Ownership::Controller,
        );
        assert!(
            out["spec"].get("selector").is_none(),
            "the Job controller makes its own"
        );
        let cron = json!({"metadata": {"name": "c"}, "spec": {"jobTemplate": {"spec": {"manualSelector": true,
            "selector": {"matchLabels": {"app": "billing"}}}}}});
        let out = decorate(
            &desired("batch/v1/CronJob", "c", cron),
            &parent(),
            Ownership::Controller,
        );
        assert_eq!(
            uid(&out, "/spec/jobTemplate/spec/selector/matchLabels"),
            Some(json!("u-1"))
        );
        let plain = json!({"metadata": {"name": "s"}, "spec": {"selector": {"app": "billing"}}});
        for kind in ["v1/Service", "v1/ReplicationController"] {
            let out = decorate(
                &desired(kind, "s", plain.clone()),
                &parent(),
                Ownership::Controller,
            );
            assert_eq!(uid(&out, "/spec/selector"), Some(json!("u-1")), "{kind}");
        }
        let headless = json!({"metadata": {"name": "s"}, "spec": {"clusterIP": "None"}});
        let out = decorate(
            &desired("v1/Service", "s", headless),
            &parent(),
            Ownership::Controller,
        );
        assert!(
            out["spec"].get("selector").is_none(),
            "a Service without a selector selects nothing"
        );
    }

    #[test]
    fn finalizers_and_owners_are_dropped_from_every_template() {
        let hold = json!({"finalizers": ["example.com/hold"], "ownerReferences": [{"uid": "x"}], "labels": {"a": "b"}});
        let pod_spec = json!({"volumes": [{"name": "e", "ephemeral": {"volumeClaimTemplate": {"metadata": hold, "spec": {}}}}]});
        let sts = json!({"metadata": {"name": "s"}, "spec": {
            "template": {"metadata": hold, "spec": pod_spec},
            "volumeClaimTemplates": [{"metadata": hold}]}});
        let cron = json!({"metadata": {"name": "c"}, "spec": {"jobTemplate": {"metadata": hold,
            "spec": {"template": {"metadata": hold, "spec": pod_spec}}}}});
        for (kind, object) in [("apps/v1/StatefulSet", sts), ("batch/v1/CronJob", cron)] {
            let out = decorate(
                &desired(kind, "x", object),
                &parent(),
                Ownership::Controller,
            );
            let text = out["spec"].to_string();
            assert!(
                !text.contains("finalizers") && !text.contains("ownerReferences"),
                "{kind}: {text}"
            );
            assert!(
                text.contains(r#""a":"b""#),
                "{kind}: labels are kept: {text}"
            );
        }
    }

    #[test]
    fn a_statefulset_makes_a_pod_and_a_claim_per_template_for_every_ordinal() {
        let sts = json!({"metadata": {"name": "db"}, "spec": {"replicas": 2, "ordinals": {"start": 3},
            "volumeClaimTemplates": [{"metadata": {"name": "pgdata-orders"}}, {"metadata": {"name": "wal"}}]}});
        let names: Vec<(&str, String, String)> =
            derived(&desired("apps/v1/StatefulSet", "db", sts))
                .into_iter()
                .map(|d| (d.kind, d.name, d.field))
                .collect();
        let claim = |name: &str, i: usize| {
            (
                "v1/PersistentVolumeClaim",
                name.to_string(),
                format!("spec.volumeClaimTemplates[{i}]"),
            )
        };
        let pod = |name: &str| ("v1/Pod", name.to_string(), "spec.replicas".to_string());
        assert_eq!(
            names,
            [
                pod("db-3"),
                claim("pgdata-orders-db-3", 0),
                claim("wal-db-3", 1),
                pod("db-4"),
                claim("pgdata-orders-db-4", 0),
                claim("wal-db-4", 1)
            ]
        );
        let cm = json!({"metadata": {"name": "db"}});
        assert!(derived(&desired("v1/ConfigMap", "db", cm)).is_empty());
    }

    #[test]
    fn a_claim_of_a_derived_name_is_the_parents_only_if_made_for_it_or_retained_by_its_namesake() {
        let claim = |labels: Value, annotations: Value| {
            json!({"apiVersion": "v1", "kind": "PersistentVolumeClaim",
                "metadata": {"name": "data-orders-0", "labels": labels, "annotations": annotations}})
        };
        let p = parent();
        assert_eq!(p.identity(), "SampleDB.samples.windlass.dev shop/orders");
        let ours = claim(json!({PARENT_UID_LABEL: "u-1"}), json!({}));
        assert_eq!(heir(&ours, &p), Heir::Ours);
        let foreign = claim(json!({"app": "billing"}), json!({}));
        assert!(
            matches!(heir(&foreign, &p), Heir::Foreign(why) if why.starts_with("exists and is not this parent's"))
        );
        let retained = claim(
            json!({PARENT_UID_LABEL: "u-0"}),
            json!({PARENT_ANNOTATION: p.identity()}),
        );
        let Heir::Foreign(why) = heir(&retained, &p) else {
            panic!("taken over unasked")
        };
        assert!(why.contains(ADOPT_RETAINED_ANNOTATION), "{why}");
        let asking = ParentRef {
            adopts_retained: true,
            ..parent()
        };
        assert_eq!(heir(&retained, &asking), Heir::Adopt);
        // Left by a parent of another name, or another kind: never.
        let other = claim(
            json!({PARENT_UID_LABEL: "u-0"}),
            json!({PARENT_ANNOTATION: "SampleDB.samples.windlass.dev shop/billing"}),
        );
        assert!(matches!(heir(&other, &asking), Heir::Foreign(_)));
        let mut controlled = retained.clone();
        controlled["metadata"]["ownerReferences"] = json!([{"uid": "sts", "controller": true}]);
        assert!(
            matches!(heir(&controlled, &asking), Heir::Foreign(_)),
            "a claim someone controls is not retained"
        );
        let sts = json!({"metadata": {"name": "orders"}, "spec": {"volumeClaimTemplates": [{"metadata": {"name": "data"}}]}});
        let out = decorate(
            &desired("apps/v1/StatefulSet", "orders", sts),
            &p,
            Ownership::Controller,
        );
        assert_eq!(
            out["spec"]["volumeClaimTemplates"][0]["metadata"]["annotations"][PARENT_ANNOTATION],
            p.identity()
        );
    }

    #[test]
    fn an_event_observed_under_its_other_group_is_the_one_desired_and_not_pruned() {
        let kinds: HashSet<String> = ["v1/Event", "events.k8s.io/v1/Event"]
            .map(String::from)
            .into();
        let desired = [desired(
            "events.k8s.io/v1/Event",
            "e",
            json!({"apiVersion": "events.k8s.io/v1", "kind": "Event", "metadata": {"name": "e"}}),
        )];
        let both = [
            child("Event", "v1", "e", Some("u-1")),
            child("Event", "events.k8s.io/v1", "e", Some("u-1")),
            child("Event", "v1", "stale", Some("u-1")),
        ];
        let names: Vec<&str> = prune_plan(&both, &desired, "u-1", &kinds)
            .iter()
            .map(|o| o["metadata"]["name"].as_str().unwrap())
            .collect();
        assert_eq!(names, ["stale"]);
    }

    #[test]
    fn pods_join_a_foreign_service_by_its_selector_or_by_naming_it_for_dns() {
        let service = |name: &str, selector: Value| {
            json!({"apiVersion": "v1", "kind": "Service", "metadata": {"name": name, "namespace": "shop"},
                "spec": {"selector": selector}})
        };
        let deploy = json!({"spec": {"template": {"metadata": {"labels": {"app": "billing", PARENT_UID_LABEL: "u-1"}},
            "spec": {}}}});
        let id = pod_identity("apps/v1/Deployment", &deploy).unwrap();
        assert_eq!(
            joins(&id, &service("billing", json!({"app": "billing"}))).unwrap(),
            "spec.template.metadata.labels: match the selector of Service shop/billing, which is not this parent's: its traffic would reach these pods"
        );
        assert_eq!(joins(&id, &service("other", json!({"app": "other"}))), None);
        assert_eq!(
            joins(&id, &service("manual", json!({}))),
            None,
            "no selector selects nothing"
        );
        let pod = json!({"metadata": {"labels": {"x": "y"}}, "spec": {"hostname": "billing-0", "subdomain": "billing-headless"}});
        let id = pod_identity("v1/Pod", &pod).unwrap();
        assert_eq!(
            joins(&id, &service("billing-headless", json!({"app": "billing"}))).unwrap(),
            "spec.subdomain: names Service shop/billing-headless, which is not this parent's: these pods would take DNS names under it"
        );
        let sts = json!({"spec": {"serviceName": "billing-headless", "template": {"metadata": {"labels": {"a": "b"}}}}});
        let id = pod_identity("apps/v1/StatefulSet", &sts).unwrap();
        assert!(
            joins(&id, &service("billing-headless", json!({"app": "billing"})))
                .unwrap()
                .starts_with("spec.serviceName: names Service")
        );
        assert!(pod_identity("v1/ConfigMap", &json!({})).is_none());
        // A labels-only edit is judged with the labels the Pod has already.
        let existing =
            json!({"apiVersion": "v1", "kind": "Pod", "metadata": {"labels": {"tier": "db"}}});
        let edit =
            json!({"apiVersion": "v1", "kind": "Pod", "metadata": {"labels": {"app": "billing"}}});
        let merged = pod_with_labels_of(&edit, &existing).unwrap();
        let id = pod_identity("v1/Pod", &merged).unwrap();
        assert!(
            joins(
                &id,
                &service("billing", json!({"app": "billing", "tier": "db"}))
            )
            .is_some()
        );
    }

    #[test]
    fn an_existing_childs_immutable_selector_and_claim_templates_are_kept() {
        let sts = json!({"apiVersion": "apps/v1", "kind": "StatefulSet", "metadata": {"name": "orders"},
            "spec": {"selector": {"matchLabels": {"app": "db"}}, "template": {"metadata": {"labels": {"app": "db"}}},
                "volumeClaimTemplates": [{"metadata": {"name": "data"}}]}});
        let mut out = decorate(
            &desired("apps/v1/StatefulSet", "orders", sts.clone()),
            &parent(),
            Ownership::Controller,
        );
        // Made by a host before this one: no narrowed selector, no annotated claim template.
        keep_immutable(&mut out, &sts);
        assert_eq!(
            out["spec"]["selector"],
            json!({"matchLabels": {"app": "db"}})
        );
        assert!(
            out["spec"]["volumeClaimTemplates"][0]["metadata"]["annotations"]
                .get(PARENT_ANNOTATION)
                .is_none()
        );
        // Made by this host: unchanged.
        let fresh = decorate(
            &desired("apps/v1/StatefulSet", "orders", sts.clone()),
            &parent(),
            Ownership::Controller,
        );
        let mut again = fresh.clone();
        keep_immutable(&mut again, &fresh);
        assert_eq!(again, fresh);
    }

    #[test]
    fn a_custom_resources_own_templates_are_left_alone() {
        let app = json!({"apiVersion": "argoproj.io/v1alpha1", "kind": "ApplicationSet", "metadata": {"name": "a"},
            "spec": {"template": {"metadata": {"finalizers": ["resources-finalizer.argocd.argoproj.io"]}}}});
        let out = decorate(
            &desired("argoproj.io/v1alpha1/ApplicationSet", "a", app),
            &parent(),
            Ownership::Controller,
        );
        assert_eq!(
            out["spec"]["template"]["metadata"]["finalizers"][0],
            "resources-finalizer.argocd.argoproj.io"
        );
    }
}
