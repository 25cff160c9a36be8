//! Copies every Secret value it can see into places the Secret's readers may not be able to
//! read: a ConfigMap, the parent's status, a condition, an event and the host's log.
//!
//! Attacks confidentiality through output: `reads-kinds` asks to observe Secrets, and earlier
//! plugins may put Secrets in `desired`. The host must refuse to load it unless `v1/Secret` is
//! granted by name, and must never show a plugin without that grant a Secret (observed, or
//! produced by an earlier plugin), so that nothing below carries a real value.
//!
//! Output: `desired` = the request's `desired` unchanged plus ConfigMap `loot` (no namespace)
//! whose `data` maps `<secret name>.<key>` to the value as found (`data` values still base64,
//! `stringData` values as written), from every Secret in `observed` and `desired`; status
//! `{"loot": {...}}`; one condition `Loot` (true, reason `Found`) and one Normal event (reason
//! `Found`) whose message is the loot as JSON; one info log line with the same text.
//!
//! Written against the WIT without the Rust SDK, as a hostile author would.
// The plugin is only exported (and so only used) when built for wasm32.
#![cfg_attr(not(target_arch = "wasm32"), allow(dead_code))]

use serde_json::{Map, Value, json};

#[allow(unsafe_code, missing_docs, clippy::all)]
mod bindings {
    wit_bindgen::generate!({ path: "../../../wit", world: "plugin" });

    #[cfg(target_arch = "wasm32")]
    use super::Exfiltrate;
    #[cfg(target_arch = "wasm32")]
    export!(Exfiltrate);
}

use bindings::{
    exports::windlass::plugin::reconciler::{Guest, PluginError, PluginInfo, Request, Response},
    windlass::plugin::{
        log::{Level, log},
        types::{Condition, Event},
    },
};

struct Exfiltrate;

/// Adds `<name>.<key>` for every string value under `data` and `stringData` of a Secret.
fn loot_from(object: &str, loot: &mut Map<String, Value>) {
    let Ok(secret) = serde_json::from_str::<Value>(object) else {
        return;
    };
    if secret["kind"] != "Secret" {
        return;
    }
    let name = secret["metadata"]["name"].as_str().unwrap_or_default();
    for field in ["data", "stringData"] {
        let Some(values) = secret[field].as_object() else {
            continue;
        };
        for (key, value) in values {
            if let Some(value) = value.as_str() {
                loot.insert(format!("{name}.{key}"), Value::from(value));
            }
        }
    }
}

impl Guest for Exfiltrate {
    fn info() -> PluginInfo {
        PluginInfo {
            name: "guest-exfiltrate".into(),
            version: "0.0.0".into(),
            parent_kinds: vec!["example.com/v1/Thing".into()],
            child_kinds: vec!["v1/ConfigMap".into()],
            reads_kinds: vec!["v1/Secret".into()],
            finalizes: false,
        }
    }

    fn reconcile(req: Request) -> Result<Response, PluginError> {
        let mut loot = Map::new();
        for object in req.observed.iter().chain(&req.desired) {
            loot_from(object, &mut loot);
        }
        let text = Value::Object(loot.clone()).to_string();
        log(Level::Info, &text);

        let config_map = json!({
            "apiVersion": "v1",
            "kind": "ConfigMap",
            "metadata": {"name": "loot"},
            "data": loot.clone(),
        });
        let mut desired = req.desired;
        desired.push(config_map.to_string());
        Ok(Response {
            desired,
            status: Some(json!({ "loot": loot }).to_string()),
            conditions: vec![Condition {
                kind: "Loot".into(),
                status: true,
                reason: "Found".into(),
                message: text.clone(),
            }],
            events: vec![Event {
                warning: false,
                reason: "Found".into(),
                message: text,
            }],
            requeue_after_secs: None,
            finalized: false,
        })
    }
}
