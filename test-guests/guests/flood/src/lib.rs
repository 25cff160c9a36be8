//! Returns as many events and conditions, as long messages and as many log lines as its config
//! asks for, and optionally a requeue delay.
//!
//! Attacks the API server and the host's log through side channels rather than objects: the
//! host must cap events, conditions, message lengths, log lines and log bytes per run, and
//! enforce a floor on `requeue-after-secs`, so that one plugin cannot spam the parent's status,
//! the event stream, the host's log or the work queue.
//!
//! Config (every key optional, default 0, `requeueAfter` default none): `{"events": N,
//! "conditions": N, "messageBytes": M, "logLines": N, "logBytes": M, "requeueAfter": S}`.
//! Output: `events` Normal events with reason `Flood`; `conditions` conditions typed `Flood0`,
//! `Flood1`, … (status true, reason `Flood`); every message `messageBytes` bytes of `x`;
//! `logLines` info log lines of `logBytes` bytes of `x`; `requeue-after-secs` = `requeueAfter`.
//!
//! Written against the WIT without the Rust SDK, as a hostile author would.
// The plugin is only exported (and so only used) when built for wasm32.
#![cfg_attr(not(target_arch = "wasm32"), allow(dead_code))]

use serde_json::Value;

#[allow(unsafe_code, missing_docs, clippy::all)]
mod bindings {
    wit_bindgen::generate!({ path: "../../../wit", world: "plugin" });

    #[cfg(target_arch = "wasm32")]
    use super::Flood;
    #[cfg(target_arch = "wasm32")]
    export!(Flood);
}

use bindings::{
    exports::windlass::plugin::reconciler::{Guest, PluginError, PluginInfo, Request, Response},
    windlass::plugin::{
        log::{Level, log},
        types::{Condition, Event},
    },
};

struct Flood;

/// A non-negative integer config value, 0 when absent.
fn count(config: &Value, key: &str) -> Result<u64, PluginError> {
    match &config[key] {
        Value::Null => Ok(0),
        v => v
            .as_u64()
            .ok_or_else(|| PluginError::InvalidConfig(format!("{key}: {v}"))),
    }
}

/// A config count as a length to allocate.
fn size(config: &Value, key: &str) -> Result<usize, PluginError> {
    let n = count(config, key)?;
    usize::try_from(n).map_err(|_| PluginError::InvalidConfig(format!("{key}: {n} is too large")))
}

impl Guest for Flood {
    fn info() -> PluginInfo {
        PluginInfo {
            name: "guest-flood".into(),
            version: "0.0.0".into(),
            parent_kinds: vec!["example.com/v1/Thing".into()],
            child_kinds: Vec::new(),
            reads_kinds: Vec::new(),
            finalizes: false,
        }
    }

    fn reconcile(req: Request) -> Result<Response, PluginError> {
        let config: Value = serde_json::from_str(&req.config)
            .map_err(|e| PluginError::InvalidConfig(format!("config is not JSON: {e}")))?;
        let events = size(&config, "events")?;
        let conditions = size(&config, "conditions")?;
        let message = "x".repeat(size(&config, "messageBytes")?);
        let log_lines = count(&config, "logLines")?;
        let log_line = "x".repeat(size(&config, "logBytes")?);
        let requeue_after_secs = match &config["requeueAfter"] {
            Value::Null => None,
            v => Some(
                v.as_u64()
                    .and_then(|s| u32::try_from(s).ok())
                    .ok_or_else(|| PluginError::InvalidConfig(format!("requeueAfter: {v}")))?,
            ),
        };

        for _ in 0..log_lines {
            log(Level::Info, &log_line);
        }
        Ok(Response {
            desired: Vec::new(),
            status: None,
            conditions: (0..conditions)
                .map(|i| Condition {
                    kind: format!("Flood{i}"),
                    status: true,
                    reason: "Flood".into(),
                    message: message.clone(),
                })
                .collect(),
            events: (0..events)
                .map(|_| Event {
                    warning: false,
                    reason: "Flood".into(),
                    message: message.clone(),
                })
                .collect(),
            requeue_after_secs,
            finalized: false,
        })
    }
}
