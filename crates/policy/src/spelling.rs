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

/// Refuses a list, and a kind of `known` (`group/version/Kind` entries) or [`BUILT_IN`] spelled in
/// another case. `kind` is `group/version/Kind`.
///
/// # Errors
/// Why, naming the spelling the API server serves.
pub fn check<'a>(
    kind: &str,
    object: &Value,
    known: impl IntoIterator<Item = &'a str>,
) -> Result<(), String> {
    let (group, name) = group_kind(kind);
    if name == "List" || (name.ends_with("List") && object.get("items").is_some()) {
        return Err(format!(
            "kind {name} is a list, which kubectl unpacks and no rule would see inside: return its items one by one"
        ));
    }
    let built_in = BUILT_IN
        .iter()
        .map(|k| k.split_once('/').unwrap_or(("", k)));
    let known = known.into_iter().map(group_kind);
    for (g, k) in built_in.chain(known) {
        if g == group && k != name && k.eq_ignore_ascii_case(name) {
            return Err(format!(
                "kind {name} is not served: the API server serves {k} (kinds are case-sensitive)"
            ));
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    const KNOWN: &[&str] = &["rbac.authorization.k8s.io/v1/RoleBinding"];

    #[test]
    fn lists_and_other_spellings_of_known_kinds_are_refused() {
        let list = json!({"kind": "List", "items": [{"kind": "ClusterRoleBinding"}]});
        let why = check("v1/List", &list, KNOWN.iter().copied()).unwrap_err();
        assert!(why.starts_with("kind List is a list"), "{why}");
        let typed = json!({"items": []});
        assert!(check("v1/ConfigMapList", &typed, KNOWN.iter().copied()).is_err());
        let why = check(
            "rbac.authorization.k8s.io/v1/ROLEBINDING",
            &json!({}),
            KNOWN.iter().copied(),
        )
        .unwrap_err();
        assert_eq!(
            why,
            "kind ROLEBINDING is not served: the API server serves RoleBinding (kinds are case-sensitive)"
        );
        assert!(check("apps/v1/Statefulset", &json!({}), []).is_err());
        assert!(check("v1/CONFIGMAP", &json!({}), []).is_err());
    }

    #[test]
    fn canonical_kinds_and_kinds_of_other_groups_pass() {
        assert_eq!(check("apps/v1/StatefulSet", &json!({}), []), Ok(()));
        assert_eq!(
            check(
                "rbac.authorization.k8s.io/v1/RoleBinding",
                &json!({}),
                KNOWN.iter().copied()
            ),
            Ok(())
        );
        // The same letters in another group are another kind.
        assert_eq!(check("example.com/v1/STATEFULSET", &json!({}), []), Ok(()));
        // A kind ending in List without items is an ordinary kind.
        assert_eq!(
            check("example.com/v1/ShoppingList", &json!({"spec": {}}), []),
            Ok(())
        );
    }
}
