//! What a plugin may return. Nothing a plugin produced is used before it passes these checks.
//!
//! # Guarantees
//! Every desired object has `apiVersion`, `kind` and a valid `metadata.name`; its kind was
//! declared by the plugin in `info` *and* granted by the operator; its namespace is empty or the
//! parent's; cluster-scoped kinds and kinds that confer privileges (RBAC, service-account tokens,
//! admission webhooks) are refused unless granted by name; the count and total size of objects
//! are capped; the status fragment is a JSON object; condition and event reasons have the shape
//! Kubernetes accepts. A violation names the plugin, the object and why.

use std::collections::{BTreeSet, HashSet};

use serde_json::Value;

/// Kinds that are never namespaced (`group/version/Kind`). Extended by discovery for CRDs.
const CLUSTER_SCOPED: &[&str] = &[
    "v1/Namespace",
    "v1/Node",
    "v1/PersistentVolume",
    "rbac.authorization.k8s.io/v1/ClusterRole",
    "rbac.authorization.k8s.io/v1/ClusterRoleBinding",
    "apiextensions.k8s.io/v1/CustomResourceDefinition",
    "apiregistration.k8s.io/v1/APIService",
    "admissionregistration.k8s.io/v1/ValidatingWebhookConfiguration",
    "admissionregistration.k8s.io/v1/MutatingWebhookConfiguration",
    "admissionregistration.k8s.io/v1/ValidatingAdmissionPolicy",
    "admissionregistration.k8s.io/v1/ValidatingAdmissionPolicyBinding",
    "storage.k8s.io/v1/StorageClass",
    "storage.k8s.io/v1/CSIDriver",
    "storage.k8s.io/v1/CSINode",
    "storage.k8s.io/v1/VolumeAttachment",
    "scheduling.k8s.io/v1/PriorityClass",
    "node.k8s.io/v1/RuntimeClass",
    "networking.k8s.io/v1/IngressClass",
    "certificates.k8s.io/v1/CertificateSigningRequest",
    "snapshot.storage.k8s.io/v1/VolumeSnapshotClass",
    "snapshot.storage.k8s.io/v1/VolumeSnapshotContent",
    "windlass.dev/v1alpha1/WasmPlugin",
];

/// Kinds that grant privileges or credentials: refused unless granted by name.
const PRIVILEGED: &[&str] = &[
    "v1/ServiceAccount",
    "rbac.authorization.k8s.io/v1/Role",
    "rbac.authorization.k8s.io/v1/RoleBinding",
    "rbac.authorization.k8s.io/v1/ClusterRole",
    "rbac.authorization.k8s.io/v1/ClusterRoleBinding",
    "authentication.k8s.io/v1/TokenRequest",
    "certificates.k8s.io/v1/CertificateSigningRequest",
    "admissionregistration.k8s.io/v1/ValidatingWebhookConfiguration",
    "admissionregistration.k8s.io/v1/MutatingWebhookConfiguration",
];

/// What the operator granted a plugin (from its WasmPlugin, or `--grant` in `windlass render`).
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub enum Grants {
    /// Whatever the plugin declared in `info`, except cluster-scoped and privileged kinds.
    #[default]
    Declared,
    /// Exactly these kinds (`group/version/Kind`, `v1/Kind` for core). Naming a cluster-scoped
    /// or privileged kind here is how it is allowed.
    Kinds(BTreeSet<String>),
}

/// Caps and scope knowledge shared by every plugin of a host.
#[derive(Debug, Clone)]
pub struct Policy {
    /// Most desired objects after one plugin. Default 1,000.
    pub max_objects: usize,
    /// Most bytes of JSON across all desired objects after one plugin. Default 8 MiB.
    pub max_total_bytes: usize,
    /// Most bytes of JSON in one status fragment. Default 64 KiB.
    pub max_status_bytes: usize,
    cluster_scoped: HashSet<String>,
}

impl Default for Policy {
    fn default() -> Self {
        Policy {
            max_objects: 1_000,
            max_total_bytes: 8 << 20,
            max_status_bytes: 64 << 10,
            cluster_scoped: CLUSTER_SCOPED.iter().map(|s| s.to_string()).collect(),
        }
    }
}

/// A plugin's output that broke the policy.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("plugin {plugin}: invalid output: {object}: {why}")]
pub struct Violation {
    /// The plugin that produced it.
    pub plugin: String,
    /// The object (`desired[i] Kind ns/name`, `status`, `condition X`).
    pub object: String,
    /// What is wrong.
    pub why: String,
}

/// Who produced an output and what it was allowed.
#[derive(Debug, Clone, Copy)]
pub struct Subject<'a> {
    /// The plugin's name.
    pub plugin: &'a str,
    /// The kinds it declared in `info` (`child-kinds`).
    pub declared: &'a [String],
    /// What the operator granted it.
    pub grants: &'a Grants,
    /// The parent's namespace; none for a cluster-scoped parent.
    pub namespace: Option<&'a str>,
    /// The objects earlier plugins produced (as this plugin received them). One passed on
    /// unchanged was checked against its producer's kinds and grants, not this plugin's: a
    /// backup plugin may hand on the storage plugin's Services without declaring Services.
    pub inherited: &'a [Value],
}

/// A desired object that passed the checks.
#[derive(Debug, Clone, PartialEq)]
pub struct Checked {
    /// `group/version/Kind`.
    pub kind: String,
    /// The object's namespace (the parent's when it named none and is namespaced).
    pub namespace: Option<String>,
    /// `metadata.name`.
    pub name: String,
    /// The object, with its namespace filled in.
    pub object: Value,
}

impl Policy {
    /// Tells the policy that a kind (a CRD found by discovery) is cluster-scoped.
    pub fn add_cluster_scoped(&mut self, kind: impl Into<String>) {
        self.cluster_scoped.insert(kind.into());
    }

    /// Whether objects of `kind` live outside namespaces.
    pub fn is_cluster_scoped(&self, kind: &str) -> bool {
        self.cluster_scoped.contains(kind)
    }

    /// Parses and checks the desired set a plugin returned.
    ///
    /// # Errors
    /// The first [`Violation`] found, naming the object.
    pub fn check_desired(
        &self,
        who: Subject<'_>,
        desired: &[String],
    ) -> Result<Vec<Checked>, Violation> {
        let fail = |object: String, why: String| Violation {
            plugin: who.plugin.to_string(),
            object,
            why,
        };
        if desired.len() > self.max_objects {
            return Err(fail(
                "desired".into(),
                format!(
                    "{} objects is more than the limit of {}",
                    desired.len(),
                    self.max_objects
                ),
            ));
        }
        let total: usize = desired.iter().map(String::len).sum();
        if total > self.max_total_bytes {
            return Err(fail(
                "desired".into(),
                format!(
                    "{total} bytes is more than the limit of {}",
                    self.max_total_bytes
                ),
            ));
        }
        let mut seen = HashSet::new();
        let mut out = Vec::with_capacity(desired.len());
        for (i, text) in desired.iter().enumerate() {
            let checked = self
                .check_object(who, text)
                .map_err(|(what, why)| fail(format!("desired[{i}]{what}"), why))?;
            let identity = (
                checked.kind.clone(),
                checked.namespace.clone(),
                checked.name.clone(),
            );
            if !seen.insert(identity) {
                return Err(fail(
                    format!("desired[{i}] {}", describe(&checked)),
                    "appears more than once in the desired set".into(),
                ));
            }
            out.push(checked);
        }
        Ok(out)
    }

    /// Checks one object; the error carries a description of the object (when known) and why.
    fn check_object(&self, who: Subject<'_>, text: &str) -> Result<Checked, (String, String)> {
        let mut object: Value = serde_json::from_str(text)
            .map_err(|e| (String::new(), format!("not valid JSON: {e}")))?;
        let Some(map) = object.as_object() else {
            return Err((String::new(), "not a JSON object".into()));
        };
        let field = |name: &str| {
            map.get(name)
                .and_then(Value::as_str)
                .filter(|s| !s.is_empty())
        };
        let api_version =
            field("apiVersion").ok_or((String::new(), "apiVersion is missing".into()))?;
        let kind_name = field("kind").ok_or((String::new(), "kind is missing".into()))?;
        let kind = format!("{api_version}/{kind_name}");
        let metadata = map.get("metadata").and_then(Value::as_object);
        let name = metadata
            .and_then(|m| m.get("name"))
            .and_then(Value::as_str)
            .ok_or((format!(" {kind}"), "metadata.name is missing".into()))?
            .to_string();
        let what = format!(" {kind} {name}");
        if let Err(why) = check_name(kind_name, &name) {
            return Err((what, format!("metadata.name: {why}")));
        }
        let namespace = metadata
            .and_then(|m| m.get("namespace"))
            .and_then(Value::as_str);

        let inherited = who.inherited.contains(&object);
        let declared = inherited || who.declared.iter().any(|k| *k == kind);
        if !declared {
            return Err((
                what,
                format!("kind {kind} is not among the child kinds the plugin declared in info"),
            ));
        }
        let named_grant =
            inherited || matches!(who.grants, Grants::Kinds(kinds) if kinds.contains(&kind));
        let cluster_scoped = self.is_cluster_scoped(&kind);
        if PRIVILEGED.contains(&kind.as_str()) && !named_grant {
            return Err((
                what,
                format!("kind {kind} confers privileges and is not granted by name"),
            ));
        }
        if cluster_scoped && !named_grant {
            return Err((
                what,
                format!("kind {kind} is cluster-scoped and is not granted by name"),
            ));
        }
        if let Grants::Kinds(kinds) = who.grants
            && !inherited
            && !kinds.contains(&kind)
        {
            return Err((what, format!("kind {kind} is not granted to this plugin")));
        }
        let namespace = if cluster_scoped {
            if let Some(ns) = namespace {
                return Err((what, format!("is cluster-scoped but names namespace {ns}")));
            }
            None
        } else {
            match (namespace, who.namespace) {
                (Some(ns), Some(parent)) if ns != parent => {
                    return Err((
                        what,
                        format!("namespace {ns} is not the parent's namespace {parent}"),
                    ));
                }
                (Some(ns), None) => {
                    return Err((
                        what,
                        format!("namespace {ns}: the parent is cluster-scoped"),
                    ));
                }
                (_, Some(parent)) => Some(parent.to_string()),
                (None, None) => {
                    return Err((
                        what,
                        "is namespaced but the parent is cluster-scoped".into(),
                    ));
                }
            }
        };
        if let (Some(ns), Some(meta)) = (
            &namespace,
            object.get_mut("metadata").and_then(Value::as_object_mut),
        ) {
            meta.insert("namespace".into(), Value::String(ns.clone()));
        }
        Ok(Checked {
            kind,
            namespace,
            name,
            object,
        })
    }

    /// Parses and checks a status fragment.
    ///
    /// # Errors
    /// A [`Violation`] when it is not a JSON object or is too large.
    pub fn check_status(
        &self,
        plugin: &str,
        status: &str,
    ) -> Result<serde_json::Map<String, Value>, Violation> {
        let fail = |why: String| Violation {
            plugin: plugin.to_string(),
            object: "status".into(),
            why,
        };
        if status.len() > self.max_status_bytes {
            return Err(fail(format!(
                "{} bytes is more than the limit of {}",
                status.len(),
                self.max_status_bytes
            )));
        }
        match serde_json::from_str(status) {
            Ok(Value::Object(map)) => Ok(map),
            Ok(_) => Err(fail("must be a JSON object".into())),
            Err(e) => Err(fail(format!("not valid JSON: {e}"))),
        }
    }

    /// Checks a condition's type and reason, and an event's reason, as the API server would.
    ///
    /// # Errors
    /// A [`Violation`] naming the condition or event.
    pub fn check_reason(
        &self,
        plugin: &str,
        what: &str,
        kind: Option<&str>,
        reason: &str,
    ) -> Result<(), Violation> {
        let fail = |why: String| Violation {
            plugin: plugin.to_string(),
            object: what.to_string(),
            why,
        };
        if let Some(kind) = kind
            && !is_condition_type(kind)
        {
            return Err(fail(format!(
                "type {kind:?} must be an UpperCamelCase name of at most 316 characters"
            )));
        }
        if !is_reason(reason) {
            return Err(fail(format!(
                "reason {reason:?} must start with a letter and hold only letters, digits, '_', ',' and ':' (at most 1024)"
            )));
        }
        Ok(())
    }
}

/// `Kind ns/name` for messages.
pub fn describe(c: &Checked) -> String {
    match &c.namespace {
        Some(ns) => format!("{} {ns}/{}", c.kind, c.name),
        None => format!("{} {}", c.kind, c.name),
    }
}

/// Object names: a DNS-1123 subdomain, and a DNS-1035 label for Services (their names become
/// DNS labels).
fn check_name(kind: &str, name: &str) -> Result<(), String> {
    if kind == "Service" {
        if name.len() > 63 {
            return Err(format!("{name:?} is longer than 63 characters"));
        }
        if !name.starts_with(|c: char| c.is_ascii_lowercase()) || !is_label(name) {
            return Err(format!(
                "{name:?} must be a DNS-1035 label: lowercase letters, digits and '-', starting with a letter"
            ));
        }
        return Ok(());
    }
    if name.is_empty() || name.len() > 253 {
        return Err(format!("{name:?} must be 1 to 253 characters"));
    }
    if !name.split('.').all(is_label) {
        return Err(format!(
            "{name:?} must be a DNS-1123 subdomain: lowercase letters, digits, '-' and '.', starting and ending with a letter or digit"
        ));
    }
    Ok(())
}

/// A DNS-1123 label: 1–63 of `[a-z0-9-]`, starting and ending alphanumeric.
pub fn is_label(s: &str) -> bool {
    let alnum = |c: char| c.is_ascii_lowercase() || c.is_ascii_digit();
    !s.is_empty()
        && s.len() <= 63
        && s.chars().all(|c| alnum(c) || c == '-')
        && s.starts_with(alnum)
        && s.ends_with(alnum)
}

fn is_condition_type(s: &str) -> bool {
    !s.is_empty()
        && s.len() <= 316
        && s.starts_with(|c: char| c.is_ascii_alphabetic())
        && s.chars()
            .all(|c| c.is_ascii_alphanumeric() || "-_./".contains(c))
}

fn is_reason(s: &str) -> bool {
    !s.is_empty()
        && s.len() <= 1024
        && s.starts_with(|c: char| c.is_ascii_alphabetic())
        && s.chars()
            .all(|c| c.is_ascii_alphanumeric() || "_,:".contains(c))
        && !s.ends_with([',', ':'])
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn declared() -> Vec<String> {
        [
            "apps/v1/StatefulSet",
            "v1/Service",
            "rbac.authorization.k8s.io/v1/ClusterRoleBinding",
            "v1/Namespace",
        ]
        .map(String::from)
        .to_vec()
    }

    fn check(grants: &Grants, objects: &[Value]) -> Result<Vec<Checked>, Violation> {
        let declared = declared();
        let who = Subject {
            plugin: "storage",
            declared: &declared,
            grants,
            namespace: Some("db"),
            inherited: &[],
        };
        let texts: Vec<String> = objects.iter().map(Value::to_string).collect();
        Policy::default().check_desired(who, &texts)
    }

    fn sts(name: &str) -> Value {
        json!({"apiVersion": "apps/v1", "kind": "StatefulSet", "metadata": {"name": name}})
    }

    #[test]
    fn a_declared_namespaced_object_gets_the_parents_namespace() {
        let out = check(&Grants::Declared, &[sts("db")]).unwrap();
        assert_eq!(out[0].namespace.as_deref(), Some("db"));
        assert_eq!(out[0].object["metadata"]["namespace"], "db");
        assert_eq!(describe(&out[0]), "apps/v1/StatefulSet db/db");
    }

    #[test]
    fn an_object_in_another_namespace_is_refused_with_its_name() {
        let mut obj = sts("db");
        obj["metadata"]["namespace"] = json!("kube-system");
        let err = check(&Grants::Declared, &[obj]).unwrap_err();
        assert_eq!(err.object, "desired[0] apps/v1/StatefulSet db");
        assert_eq!(
            err.why,
            "namespace kube-system is not the parent's namespace db"
        );
    }

    #[test]
    fn undeclared_kinds_are_refused_even_when_granted() {
        let obj = json!({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "p"}});
        let grants = Grants::Kinds(["v1/Pod".to_string()].into());
        let err = check(&grants, &[obj]).unwrap_err();
        assert!(
            err.why
                .contains("not among the child kinds the plugin declared"),
            "{err}"
        );
    }

    #[test]
    fn rbac_and_cluster_scoped_kinds_need_a_grant_by_name() {
        let crb = json!({"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRoleBinding", "metadata": {"name": "admin"}});
        let err = check(&Grants::Declared, std::slice::from_ref(&crb)).unwrap_err();
        assert_eq!(
            err.why,
            "kind rbac.authorization.k8s.io/v1/ClusterRoleBinding confers privileges and is not granted by name"
        );
        let ns = json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "x"}});
        let err = check(&Grants::Declared, &[ns.clone()]).unwrap_err();
        assert!(
            err.why
                .contains("cluster-scoped and is not granted by name"),
            "{err}"
        );
        let grants = Grants::Kinds(["v1/Namespace".to_string()].into());
        let out = check(&grants, &[ns]).unwrap();
        assert_eq!(out[0].namespace, None);
    }

    #[test]
    fn explicit_grants_narrow_what_was_declared() {
        let grants = Grants::Kinds(["v1/Service".to_string()].into());
        let err = check(&grants, &[sts("db")]).unwrap_err();
        assert_eq!(
            err.why,
            "kind apps/v1/StatefulSet is not granted to this plugin"
        );
    }

    #[test]
    fn names_must_be_dns_names() {
        let err = check(&Grants::Declared, &[sts("Bad_Name")]).unwrap_err();
        assert!(
            err.why
                .starts_with("metadata.name: \"Bad_Name\" must be a DNS-1123 subdomain"),
            "{err}"
        );
        let svc = json!({"apiVersion": "v1", "kind": "Service", "metadata": {"name": "1db"}});
        let err = check(&Grants::Declared, &[svc]).unwrap_err();
        assert!(err.why.contains("DNS-1035 label"), "{err}");
        let err = check(
            &Grants::Declared,
            &[json!({"apiVersion": "apps/v1", "kind": "StatefulSet", "metadata": {}})],
        )
        .unwrap_err();
        assert_eq!(
            (err.object.as_str(), err.why.as_str()),
            ("desired[0] apps/v1/StatefulSet", "metadata.name is missing")
        );
    }

    #[test]
    fn invalid_json_and_missing_type_fields_are_refused() {
        let declared = declared();
        let who = Subject {
            plugin: "p",
            declared: &declared,
            grants: &Grants::Declared,
            namespace: Some("db"),
            inherited: &[],
        };
        let err = Policy::default()
            .check_desired(who, &["{not json".to_string()])
            .unwrap_err();
        assert!(err.why.starts_with("not valid JSON"), "{err}");
        assert_eq!(err.to_string().split(':').next(), Some("plugin p"));
        let err = check(&Grants::Declared, &[json!({"kind": "StatefulSet"})]).unwrap_err();
        assert_eq!(err.why, "apiVersion is missing");
        let err = check(&Grants::Declared, &[json!([1, 2])]).unwrap_err();
        assert_eq!(err.why, "not a JSON object");
    }

    #[test]
    fn duplicates_and_oversized_sets_are_refused() {
        let err = check(&Grants::Declared, &[sts("a"), sts("a")]).unwrap_err();
        assert_eq!(err.why, "appears more than once in the desired set");
        let many: Vec<Value> = (0..1_001).map(|i| sts(&format!("s{i}"))).collect();
        let err = check(&Grants::Declared, &many).unwrap_err();
        assert_eq!(err.why, "1001 objects is more than the limit of 1000");
    }

    #[test]
    fn status_must_be_a_small_json_object() {
        let p = Policy::default();
        assert_eq!(
            p.check_status("p", r#"{"phase":"Ready"}"#).unwrap()["phase"],
            "Ready"
        );
        assert_eq!(
            p.check_status("p", "[1]").unwrap_err().why,
            "must be a JSON object"
        );
        let big = format!(r#"{{"x":"{}"}}"#, "a".repeat(70_000));
        assert!(
            p.check_status("p", &big)
                .unwrap_err()
                .why
                .contains("more than the limit")
        );
    }

    #[test]
    fn condition_types_and_reasons_follow_kubernetes_rules() {
        let p = Policy::default();
        assert!(
            p.check_reason("p", "condition", Some("StorageReady"), "WaitingForPods")
                .is_ok()
        );
        assert!(
            p.check_reason("p", "condition", Some("storage ready"), "X")
                .is_err()
        );
        let err = p.check_reason("p", "event", None, "not ok!").unwrap_err();
        assert_eq!(err.object, "event");
    }

    #[test]
    fn objects_passed_on_unchanged_need_no_declaration_but_edited_ones_do() {
        let service = json!({"apiVersion": "v1", "kind": "Service", "metadata": {"name": "db"}});
        let inherited = [service.clone()];
        let declared = vec!["batch/v1/CronJob".to_string()];
        let who = Subject {
            plugin: "backup",
            declared: &declared,
            grants: &Grants::Declared,
            namespace: Some("db"),
            inherited: &inherited,
        };
        assert!(
            Policy::default()
                .check_desired(who, &[service.to_string()])
                .is_ok()
        );
        let mut edited = service;
        edited["spec"] = json!({"type": "NodePort"});
        let err = Policy::default()
            .check_desired(who, &[edited.to_string()])
            .unwrap_err();
        assert!(err.why.contains("not among the child kinds"), "{err}");
    }
}
