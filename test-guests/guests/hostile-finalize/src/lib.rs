//! A plugin whose finalize phase never completes, to test that a stuck finalize is said and
//! that an administrator can release the parent keeping its data.
//!
//! Config: `{"finalize": F}` (laid over by the parent's `spec.hostile`), where `F` is `never`
//! (reports not finalized, forever), `trap` (traps in the finalize phase) or `done` (finalizes
//! at once). In both phases it returns the same children of the parent `P`: a StatefulSet `P-db`
//! with a claim template (held by the host while a finalize phase is pending), a Secret
//! `P-password` (data: kept on release) and a ConfigMap `P-settings` (not data: goes with the
//! parent).
//!
//! Written against the WIT without the Rust SDK, as a hostile author would.
// The plugin is only exported (and so only used) when built for wasm32.
#![cfg_attr(not(target_arch = "wasm32"), allow(dead_code))]

use serde_json::{Value, json};

#[allow(unsafe_code, missing_docs, clippy::all)]
mod bindings {
    wit_bindgen::generate!({ path: "../../../wit", world: "plugin" });

    #[cfg(target_arch = "wasm32")]
    use super::HostileFinalize;
    #[cfg(target_arch = "wasm32")]
    export!(HostileFinalize);
}

use bindings::exports::windlass::plugin::reconciler::{
    Guest, PluginError, PluginInfo, Request, Response,
};
use bindings::windlass::plugin::types::Phase;

struct HostileFinalize;

/// The children of the parent named `parent`.
fn children(parent: &str) -> Vec<Value> {
    let labels = json!({"app": format!("{parent}-db")});
    vec![
        json!({
            "apiVersion": "apps/v1", "kind": "StatefulSet",
            "metadata": {"name": format!("{parent}-db")},
            "spec": {
                "replicas": 1,
                "serviceName": format!("{parent}-db"),
                "selector": {"matchLabels": labels},
                "persistentVolumeClaimRetentionPolicy": {"whenDeleted": "Delete", "whenScaled": "Retain"},
                "template": {
                    "metadata": {"labels": labels},
                    "spec": {
                        "automountServiceAccountToken": false,
                        "securityContext": {"runAsNonRoot": true, "runAsUser": 999,
                            "seccompProfile": {"type": "RuntimeDefault"}},
                        "containers": [{"name": "db", "image": "busybox",
                            "volumeMounts": [{"name": "data", "mountPath": "/data"}],
                            "securityContext": {"allowPrivilegeEscalation": false,
                                "capabilities": {"drop": ["ALL"]}}}],
                    },
                },
                "volumeClaimTemplates": [{
                    "metadata": {"name": "data"},
                    "spec": {"accessModes": ["ReadWriteOnce"],
                        "resources": {"requests": {"storage": "1Gi"}}},
                }],
            },
        }),
        json!({
            "apiVersion": "v1", "kind": "Secret",
            "metadata": {"name": format!("{parent}-password")},
            "stringData": {"password": "kept"},
        }),
        json!({
            "apiVersion": "v1", "kind": "ConfigMap",
            "metadata": {"name": format!("{parent}-settings")},
            "data": {"mode": "stuck"},
        }),
    ]
}

fn mode(req: &Request) -> Result<String, PluginError> {
    let mut config: Value = serde_json::from_str(&req.config)
        .map_err(|e| PluginError::InvalidConfig(format!("config is not JSON: {e}")))?;
    let parent: Value = serde_json::from_str(&req.parent)
        .map_err(|e| PluginError::InvalidParent(format!("parent is not JSON: {e}")))?;
    if let (Some(base), Some(over)) = (
        config.as_object_mut(),
        parent.pointer("/spec/hostile").and_then(Value::as_object),
    ) {
        base.extend(over.clone());
    }
    Ok(config["finalize"].as_str().unwrap_or("never").to_string())
}

impl Guest for HostileFinalize {
    fn info() -> PluginInfo {
        PluginInfo {
            name: "guest-hostile-finalize".into(),
            version: "0.0.0".into(),
            parent_kinds: vec!["example.com/v1/Thing".into()],
            child_kinds: vec![
                "apps/v1/StatefulSet".into(),
                "v1/Secret".into(),
                "v1/ConfigMap".into(),
            ],
            reads_kinds: vec!["v1/PersistentVolumeClaim".into()],
            finalizes: true,
        }
    }

    fn reconcile(req: Request) -> Result<Response, PluginError> {
        let mode = mode(&req)?;
        let parent: Value = serde_json::from_str(&req.parent)
            .map_err(|e| PluginError::InvalidParent(format!("parent is not JSON: {e}")))?;
        let name = parent
            .pointer("/metadata/name")
            .and_then(Value::as_str)
            .unwrap_or("p");
        let finalized = match (req.phase, mode.as_str()) {
            (Phase::Reconcile, _) => false,
            (Phase::Finalize, "trap") => {
                // A trap, not an error the plugin chose to return.
                #[allow(clippy::unreachable)]
                {
                    unreachable!("hostile-finalize traps in the finalize phase")
                }
            }
            (Phase::Finalize, "done") => true,
            (Phase::Finalize, _) => false,
        };
        Ok(Response {
            desired: children(name).iter().map(Value::to_string).collect(),
            status: None,
            conditions: Vec::new(),
            events: Vec::new(),
            requeue_after_secs: Some(1),
            finalized,
        })
    }
}
