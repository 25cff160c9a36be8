//! Kinds as the API server serves them. The host learns at load, from discovery, that every kind
//! a plugin declares is served; `windlass render` and `windlass plugin test` run without a
//! cluster. So what the host would refuse because the API server serves no such kind is refused
//! here for both, before any rule that compares kinds by name could be fooled by another
//! spelling:
//!
//! - a list (`kind: List`, or `…List` with `items`): `kubectl apply` unpacks it, so a
//!   ClusterRoleBinding wrapped in a List would pass every rule as the List and reach the cluster
//!   as itself;
//! - a known kind in another case (`ROLEBINDING`, `Rolebinding`): the rules for `RoleBinding`
//!   would not see it.

use std::collections::HashMap;

use serde_json::Value;

use crate::group_kind;

/// Kinds the API server serves in every cluster (`group/Kind`, any version), besides those the
/// rules already list as privileged or cluster-scoped.
#[rustfmt::skip]
const BUILT_IN: &[&str] = &[
    "/Pod", "/Service", "/ConfigMap", "/Secret", "/PersistentVolumeClaim", "/ReplicationController",
    "/PodTemplate", "/Event", "/Binding",
    "apps/Deployment", "apps/StatefulSet", "apps/DaemonSet", "apps/ReplicaSet",
    "apps/ControllerRevision", "batch/Job", "batch/CronJob", "autoscaling/HorizontalPodAutoscaler",
    "policy/PodDisruptionBudget", "storage.k8s.io/CSIStorageCapacity",
    "snapshot.storage.k8s.io/VolumeSnapshot", "resource.k8s.io/ResourceClaim",
    "resource.k8s.io/ResourceClaimTemplate",
];

/// Kinds by group, to compare a kind with those of its group only: what [`check`] compares with
/// ([`BUILT_IN`] and the kinds added), and the privileged kinds. Built once: the comparisons run
/// for every desired object of every reconcile.
#[derive(Debug, Clone, Default)]
pub struct Kinds {
    by_group: HashMap<String, Vec<String>>,
}

impl Kinds {
    /// [`BUILT_IN`] only.
    pub fn built_in() -> Self {
        let mut kinds = Kinds::default();
        for k in BUILT_IN {
            let (group, name) = k.split_once('/').unwrap_or(("", k));
            kinds.insert(group, name);
        }
        kinds
    }

    /// Adds a known kind, `group/version/Kind`.
    pub fn add(&mut self, kind: &str) {
        let (group, name) = group_kind(kind);
        self.insert(group, name);
    }

    /// Whether `kind` (`group/version/Kind`) is one of these in any version, in any case.
    pub fn holds_in_any_case(&self, kind: &str) -> bool {
        let (group, name) = group_kind(kind);
        self.of_group(group)
            .iter()
            .any(|k| k.eq_ignore_ascii_case(name))
    }

    fn of_group(&self, group: &str) -> &[String] {
        self.by_group
            .get(group)
            .map(Vec::as_slice)
            .unwrap_or_default()
    }

    fn insert(&mut self, group: &str, name: &str) {
        let names = self.by_group.entry(group.to_string()).or_default();
        if !names.iter().any(|n| n == name) {
            names.push(name.to_string());
        }
    }
}

/// Refuses a list, and a kind of `kinds` spelled in another case. `kind` is
/// `group/version/Kind`.
///
/// # Errors
/// Why, naming the spelling the API server serves.
pub fn check(kind: &str, object: &Value, kinds: &Kinds) -> Result<(), String> {
    let (group, name) = group_kind(kind);
    if name == "List" || (name.ends_with("List") && object.get("items").is_some()) {
        return Err(format!(
            "kind {name} is a list, which kubectl unpacks and no rule would see inside: return its items one by one"
        ));
    }
    match kinds
        .of_group(group)
        .iter()
        .find(|k| *k != name && k.eq_ignore_ascii_case(name))
    {
        Some(k) => Err(format!(
            "kind {name} is not served: the API server serves {k} (kinds are case-sensitive)"
        )),
        None => Ok(()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    const KNOWN: &[&str] = &["rbac.authorization.k8s.io/v1/RoleBinding"];

    fn known() -> Kinds {
        let mut kinds = Kinds::built_in();
        for k in KNOWN {
            kinds.add(k);
        }
        kinds
    }

    #[test]
    fn lists_and_other_spellings_of_known_kinds_are_refused() {
        let list = json!({"kind": "List", "items": [{"kind": "ClusterRoleBinding"}]});
        let why = check("v1/List", &list, &known()).unwrap_err();
        assert!(why.starts_with("kind List is a list"), "{why}");
        let typed = json!({"items": []});
        assert!(check("v1/ConfigMapList", &typed, &known()).is_err());
        let why = check(
            "rbac.authorization.k8s.io/v1/ROLEBINDING",
            &json!({}),
            &known(),
        )
        .unwrap_err();
        assert_eq!(
            why,
            "kind ROLEBINDING is not served: the API server serves RoleBinding (kinds are case-sensitive)"
        );
        assert!(check("apps/v1/Statefulset", &json!({}), &Kinds::built_in()).is_err());
        assert!(check("v1/CONFIGMAP", &json!({}), &Kinds::built_in()).is_err());
    }

    #[test]
    fn canonical_kinds_and_kinds_of_other_groups_pass() {
        assert_eq!(
            check("apps/v1/StatefulSet", &json!({}), &Kinds::built_in()),
            Ok(())
        );
        assert_eq!(
            check(
                "rbac.authorization.k8s.io/v1/RoleBinding",
                &json!({}),
                &known()
            ),
            Ok(())
        );
        // The same letters in another group are another kind.
        assert_eq!(
            check("example.com/v1/STATEFULSET", &json!({}), &Kinds::built_in()),
            Ok(())
        );
        // A kind ending in List without items is an ordinary kind.
        assert_eq!(
            check(
                "example.com/v1/ShoppingList",
                &json!({"spec": {}}),
                &Kinds::built_in()
            ),
            Ok(())
        );
    }

    #[test]
    fn a_kind_added_later_is_compared_too() {
        let mut kinds = Kinds::built_in();
        assert_eq!(check("example.com/v1/WIDGET", &json!({}), &kinds), Ok(()));
        kinds.add("example.com/v1/Widget");
        kinds.add("example.com/v1/Widget");
        assert!(check("example.com/v1/WIDGET", &json!({}), &kinds).is_err());
        assert_eq!(
            check("example.com/v1beta1/Widget", &json!({}), &kinds),
            Ok(())
        );
        assert_eq!(kinds.by_group["example.com"], ["Widget"]);
    }
}
