//! The review APIs kubectl's `auth can-i` and `auth whoami` call: SelfSubjectAccessReview,
//! SelfSubjectRulesReview and SelfSubjectReview. The devcluster authenticates nobody and
//! authorizes everything, so the answers say exactly that: every request allowed, every rule
//! held, and the one user every client is (`devcluster-admin`, group `system:masters`). They
//! are created, answered and not stored, as on a real server.

use serde_json::{Value, json};

/// (group, version, resource, kind) of each review.
pub const REVIEWS: &[(&str, &str, &str, &str)] = &[
    (
        "authorization.k8s.io",
        "v1",
        "selfsubjectaccessreviews",
        "SelfSubjectAccessReview",
    ),
    (
        "authorization.k8s.io",
        "v1",
        "selfsubjectrulesreviews",
        "SelfSubjectRulesReview",
    ),
    (
        "authentication.k8s.io",
        "v1",
        "selfsubjectreviews",
        "SelfSubjectReview",
    ),
];

/// The user every devcluster client is.
pub const USER: &str = "devcluster-admin";

/// Answers a review created at `/apis/<group>/<version>/<resource>`, or None if that is none.
pub fn answer(group: &str, version: &str, resource: &str, body: &Value) -> Option<Value> {
    let (_, _, _, kind) = REVIEWS
        .iter()
        .find(|(g, v, r, _)| *g == group && *v == version && *r == resource)?;
    let status = match *kind {
        "SelfSubjectAccessReview" => json!({
            "allowed": true,
            "reason": "the devcluster authorizes every request",
        }),
        "SelfSubjectRulesReview" => json!({
            "resourceRules": [{"verbs": ["*"], "apiGroups": ["*"], "resources": ["*"]}],
            "nonResourceRules": [{"verbs": ["*"], "nonResourceURLs": ["*"]}],
            "incomplete": false,
        }),
        _ => json!({"userInfo": {"username": USER,
            "groups": ["system:masters", "system:authenticated"]}}),
    };
    let mut out = json!({
        "apiVersion": format!("{group}/{version}"),
        "kind": kind,
        "metadata": {"creationTimestamp": null},
        "spec": body.get("spec").cloned().unwrap_or_else(|| json!({})),
        "status": status,
    });
    if *kind == "SelfSubjectReview"
        && let Some(map) = out.as_object_mut()
    {
        map.remove("spec");
    }
    Some(out)
}

/// The resource-list entries of the reviews in one group version.
pub fn resources(group: &str, version: &str) -> Vec<Value> {
    REVIEWS
        .iter()
        .filter(|(g, v, _, _)| *g == group && *v == version)
        .map(|(_, _, r, k)| {
            json!({"name": r, "singularName": "", "namespaced": false, "kind": k,
                "verbs": ["create"]})
        })
        .collect()
}
