//! What the host does to each desired object before applying it, and which observed children
//! it may delete. Pure decisions, tested here; the I/O lives in `parent.rs`.

use std::collections::HashSet;

use serde_json::{Value, json};

use crate::pipeline::{Desired, kind_of};

/// Field manager of every write the host makes.
pub const FIELD_MANAGER: &str = "windlass";
/// Label on every child: the parent's uid.
pub const PARENT_UID_LABEL: &str = "windlass.dev/parent-uid";
/// Label on every child: who manages it.
pub const MANAGED_BY_LABEL: &str = "app.kubernetes.io/managed-by";
/// Annotation on every child: the plugin (name@digest) that produced it.
pub const PRODUCED_BY_ANNOTATION: &str = "windlass.dev/produced-by";
/// Annotation on every child: a hash of what the host last applied (the decorated object
/// without this annotation). See [`up_to_date`].
pub const APPLIED_ANNOTATION: &str = "windlass.dev/applied";
/// The finalizer the host holds while a plugin has cleanup to do.
pub const FINALIZER: &str = "windlass.dev/finalize";

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

/// Whether the host owns an object it applies.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Ownership {
    /// The parent is the object's controller: GC takes it with the parent, prune may delete it.
    Controller,
    /// No owner reference: the object outlives the parent ([`OUTLIVING_KINDS`]), or another
    /// controller owns it (a plugin labelling a StatefulSet's Pod) and the host applies only
    /// the fields the plugin set. Never pruned.
    Unowned,
}

/// How to apply `desired`: unowned for [`OUTLIVING_KINDS`] and for objects the host observed
/// under another controller (a second controller reference is invalid, and taking over would
/// fight that controller).
pub fn ownership(desired: &Desired, observed: &[Value], parent_uid: &str) -> Ownership {
    if OUTLIVING_KINDS.contains(&desired.object.kind.as_str()) {
        return Ownership::Unowned;
    }
    let id = (
        desired.object.kind.clone(),
        desired.object.namespace.clone().unwrap_or_default(),
        desired.object.name.clone(),
    );
    let foreign = observed.iter().any(|o| {
        identity(o) == id
            && o.pointer("/metadata/ownerReferences")
                .and_then(Value::as_array)
                .is_some_and(|refs| {
                    refs.iter()
                        .any(|r| r["controller"].as_bool() == Some(true) && r["uid"] != parent_uid)
                })
    });
    if foreign {
        Ownership::Unowned
    } else {
        Ownership::Controller
    }
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
}

/// Adds the controller owner reference, the labels and the provenance annotation, and carries
/// the parent-uid label into pod and claim templates, so that Pods, Jobs and PVCs the cluster
/// makes from this object are observed for the parent too.
pub fn decorate(desired: &Desired, parent: &ParentRef, ownership: Ownership) -> Value {
    let mut object = desired.object.object.clone();
    let meta = ensure_object(&mut object, "metadata");
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
    // managedFields must not be sent with an apply.
    meta.remove("managedFields");
    meta.remove("resourceVersion");
    for pointer in [
        "/spec/template/metadata",
        "/spec/jobTemplate/metadata",
        "/spec/jobTemplate/spec/template/metadata",
    ] {
        label_template(&mut object, pointer, &parent.uid);
    }
    if let Some(claims) = object
        .pointer_mut("/spec/volumeClaimTemplates")
        .and_then(Value::as_array_mut)
    {
        for claim in claims {
            let meta = ensure_object(claim, "metadata");
            child_map(meta, "labels").insert(PARENT_UID_LABEL.into(), json!(parent.uid));
        }
    }
    object
}

fn label_template(object: &mut Value, pointer: &str, uid: &str) {
    let parent_pointer = &pointer[..pointer.rfind('/').unwrap_or(0)];
    if object
        .pointer(parent_pointer)
        .is_none_or(|v| !v.is_object())
    {
        return;
    }
    let holder = object
        .pointer_mut(parent_pointer)
        .and_then(Value::as_object_mut);
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

/// Identity of an object: kind key, namespace, name.
pub fn identity(object: &Value) -> (String, String, String) {
    let s = |p: &str| {
        object
            .pointer(p)
            .and_then(Value::as_str)
            .unwrap_or_default()
            .to_string()
    };
    (
        kind_of(object),
        s("/metadata/namespace"),
        s("/metadata/name"),
    )
}

/// The observed children to delete: those this parent controls (its controller owner reference)
/// that no plugin wants any more, of a kind the pipeline produces, and not data-bearing.
pub fn prune_plan<'a>(
    observed: &'a [Value],
    desired: &[Desired],
    parent_uid: &str,
    child_kinds: &HashSet<String>,
) -> Vec<&'a Value> {
    let wanted: HashSet<(String, String, String)> = desired
        .iter()
        .map(|d| {
            (
                d.object.kind.clone(),
                d.object.namespace.clone().unwrap_or_default(),
                d.object.name.clone(),
            )
        })
        .collect();
    observed
        .iter()
        .filter(|o| controlled_by(o, parent_uid))
        .filter(|o| {
            let kind = kind_of(o);
            child_kinds.contains(&kind) && !PROTECTED_KINDS.contains(&kind.as_str())
        })
        .filter(|o| o.pointer("/metadata/deletionTimestamp").is_none())
        .filter(|o| !wanted.contains(&identity(o)))
        .collect()
}

/// True when `object` has a controller owner reference to the parent with this uid.
pub fn controlled_by(object: &Value, uid: &str) -> bool {
    object
        .pointer("/metadata/ownerReferences")
        .and_then(Value::as_array)
        .is_some_and(|refs| {
            refs.iter()
                .any(|r| r["uid"] == uid && r["controller"].as_bool() == Some(true))
        })
}

/// Records in `object` (a decorated child) the hash of its content, as
/// [`APPLIED_ANNOTATION`].
pub fn stamp(object: &mut Value) {
    use sha2::{Digest, Sha256};
    if let Some(annotations) = object
        .pointer_mut("/metadata/annotations")
        .and_then(Value::as_object_mut)
    {
        annotations.remove(APPLIED_ANNOTATION);
    }
    // serde_json keeps object keys sorted, so equal objects serialize to equal bytes.
    let bytes = serde_json::to_vec(&*object).unwrap_or_default();
    let hash = format!("{:x}", Sha256::digest(&bytes));
    let meta = ensure_object(object, "metadata");
    child_map(meta, "annotations").insert(APPLIED_ANNOTATION.into(), json!(hash[..32]));
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
    let stamp = |o: &Value| {
        o.pointer("/metadata/annotations")
            .and_then(|a| a.get(APPLIED_ANNOTATION))
            .and_then(Value::as_str)
            .map(str::to_owned)
    };
    let Some(want) = stamp(object) else {
        return false;
    };
    let id = identity(object);
    observed
        .iter()
        .find(|o| identity(o) == id)
        .is_some_and(|o| stamp(o).as_deref() == Some(want.as_str()) && holds(o, object))
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
    use super::*;
    use crate::policy::Checked;

    fn parent() -> ParentRef {
        ParentRef {
            api_version: "samples.windlass.dev/v1alpha1".into(),
            kind: "SampleDB".into(),
            name: "orders".into(),
            uid: "u-1".into(),
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

    #[test]
    fn snapshots_and_objects_under_another_controller_are_applied_without_an_owner() {
        let snap = desired(
            "snapshot.storage.k8s.io/v1/VolumeSnapshot",
            "data-final",
            json!({"apiVersion": "snapshot.storage.k8s.io/v1", "kind": "VolumeSnapshot", "metadata": {"name": "data-final"}}),
        );
        assert_eq!(ownership(&snap, &[], "u-1"), Ownership::Unowned);
        let out = decorate(&snap, &parent(), Ownership::Unowned);
        assert!(out["metadata"].get("ownerReferences").is_none());
        assert_eq!(out["metadata"]["labels"][PARENT_UID_LABEL], "u-1");

        let pod = desired(
            "v1/Pod",
            "orders-0",
            json!({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "orders-0"}}),
        );
        let of_statefulset = child("Pod", "v1", "orders-0", Some("sts-uid"));
        assert_eq!(
            ownership(&pod, &[of_statefulset], "u-1"),
            Ownership::Unowned
        );
        let ours = child("Pod", "v1", "orders-0", Some("u-1"));
        assert_eq!(ownership(&pod, &[ours], "u-1"), Ownership::Controller);
        assert_eq!(ownership(&pod, &[], "u-1"), Ownership::Controller);
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
        stamp(&mut o);
        o
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
        stamp(&mut again);
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
}
