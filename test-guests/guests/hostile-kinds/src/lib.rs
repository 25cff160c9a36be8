//! Returns objects the API server would not serve as the plugin spells them, or that cluster
//! components read across namespaces: the offline gate (`windlass render`, `windlass plugin
//! test`), which has no discovery to fall back on, must refuse what the host refuses.
//!
//! Config: `{"attack": A}` (or the parent's `spec.hostile.attack`):
//! - `list`: a `v1/List` wrapping a ClusterRoleBinding to cluster-admin (`kubectl apply`
//!   unpacks it): `InvalidObject`.
//! - `upperKind`: `rbac.authorization.k8s.io/v1` `ROLEBINDING`: `InvalidObject`.
//! - `capacity`: a CSIStorageCapacity, which the scheduler reads cluster-wide: `PrivilegedKind`.
//!
//! It declares those kinds as it spells them, so no `KindNotDeclared` hides the rule; a host
//! refuses to load it at all (discovery serves no such kinds).
//!
//! Written against the WIT without the Rust SDK, as a hostile author would.
// The plugin is only exported (and so only used) when built for wasm32.
#![cfg_attr(not(target_arch = "wasm32"), allow(dead_code))]

use serde_json::{Value, json};

#[allow(unsafe_code, missing_docs, clippy::all)]
mod bindings {
    wit_bindgen::generate!({ path: "../../../wit", world: "plugin" });

    #[cfg(target_arch = "wasm32")]
    use super::HostileKinds;
    #[cfg(target_arch = "wasm32")]
    export!(HostileKinds);
}

use bindings::exports::windlass::plugin::reconciler::{
    Guest, PluginError, PluginInfo, Request, Response,
};

const CHILD_KINDS: &[&str] = &[
    "v1/List",
    "rbac.authorization.k8s.io/v1/ROLEBINDING",
    "storage.k8s.io/v1/CSIStorageCapacity",
];

struct HostileKinds;

fn attack(name: &str) -> Result<Value, PluginError> {
    let admin = json!({"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRoleBinding",
        "metadata": {"name": "owned"},
        "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": "cluster-admin"},
        "subjects": [{"kind": "ServiceAccount", "name": "default", "namespace": "default"}]});
    Ok(match name {
        "list" => {
            json!({"apiVersion": "v1", "kind": "List", "metadata": {"name": "all"}, "items": [admin]})
        }
        "upperKind" => json!({"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ROLEBINDING",
            "metadata": {"name": "owned"},
            "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": "admin"},
            "subjects": [{"kind": "ServiceAccount", "name": "default"}]}),
        "capacity" => json!({"apiVersion": "storage.k8s.io/v1", "kind": "CSIStorageCapacity",
            "metadata": {"name": "fast-zone-a"}, "storageClassName": "fast",
            "capacity": "1Pi", "maximumVolumeSize": "1Pi"}),
        other => {
            return Err(PluginError::InvalidConfig(format!(
                "unknown attack {other:?}"
            )));
        }
    })
}

impl Guest for HostileKinds {
    fn info() -> PluginInfo {
        PluginInfo {
            name: "guest-hostile-kinds".into(),
            version: "0.0.0".into(),
            parent_kinds: vec!["example.com/v1/Thing".into()],
            child_kinds: CHILD_KINDS.iter().map(|k| k.to_string()).collect(),
            reads_kinds: Vec::new(),
            finalizes: false,
        }
    }

    fn reconcile(req: Request) -> Result<Response, PluginError> {
        let config: Value = serde_json::from_str(&req.config)
            .map_err(|e| PluginError::InvalidConfig(format!("config is not JSON: {e}")))?;
        let parent: Value = serde_json::from_str(&req.parent)
            .map_err(|e| PluginError::InvalidParent(format!("parent is not JSON: {e}")))?;
        let name = parent
            .pointer("/spec/hostile/attack")
            .or_else(|| config.get("attack"))
            .and_then(Value::as_str)
            .ok_or_else(|| PluginError::InvalidConfig("attack: missing".into()))?;
        Ok(Response {
            desired: vec![attack(name)?.to_string()],
            status: None,
            conditions: Vec::new(),
            events: Vec::new(),
            requeue_after_secs: None,
            finalized: false,
        })
    }
}
