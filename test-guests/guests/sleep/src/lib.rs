//! Waits for `ms` milliseconds in one of four ways, then returns an empty response.
//!
//! Attacks the host's run deadline: a guest blocked in a host call (a WASI sleep or poll) burns
//! no fuel and never reaches an epoch check, so fuel and epoch interruption alone cannot stop
//! it. The host must bound every run in wall-clock time (an async call with a timeout), whatever
//! the guest is waiting on.
//!
//! Config: `{"how": "sleep" | "poll" | "instant" | "block", "ms": N}` (defaults `"sleep"`, 0):
//! - `sleep`: `std::thread::sleep`;
//! - `poll`: `wasi:clocks/monotonic-clock.subscribe-duration`, then `wasi:io/poll.poll`;
//! - `instant`: `subscribe-instant(now + ms)`, then `poll`;
//! - `block`: `subscribe-duration`, then `pollable.block`.
//!
//! Written against the WIT without the Rust SDK, as a hostile author would.
// The plugin is only exported (and so only used) when built for wasm32.
#![cfg_attr(not(target_arch = "wasm32"), allow(dead_code))]

use std::time::Duration;

use serde_json::Value;
use wasip2::{clocks::monotonic_clock, io::poll};

#[allow(unsafe_code, missing_docs, clippy::all)]
mod bindings {
    wit_bindgen::generate!({ path: "../../../wit", world: "plugin" });

    #[cfg(target_arch = "wasm32")]
    use super::Sleep;
    #[cfg(target_arch = "wasm32")]
    export!(Sleep);
}

use bindings::exports::windlass::plugin::reconciler::{
    Guest, PluginError, PluginInfo, Request, Response,
};

struct Sleep;

impl Guest for Sleep {
    fn info() -> PluginInfo {
        PluginInfo {
            name: "guest-sleep".into(),
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
        let how = match &config["how"] {
            Value::Null => "sleep",
            Value::String(s) => s.as_str(),
            other => return Err(PluginError::InvalidConfig(format!("how: {other}"))),
        };
        let ms = match &config["ms"] {
            Value::Null => 0,
            v => v
                .as_u64()
                .ok_or_else(|| PluginError::InvalidConfig(format!("ms: {v}")))?,
        };
        let ns = ms.saturating_mul(1_000_000);
        match how {
            "sleep" => std::thread::sleep(Duration::from_millis(ms)),
            "poll" => {
                let timer = monotonic_clock::subscribe_duration(ns);
                poll::poll(&[&timer]);
            }
            "instant" => {
                let timer =
                    monotonic_clock::subscribe_instant(monotonic_clock::now().saturating_add(ns));
                poll::poll(&[&timer]);
            }
            "block" => monotonic_clock::subscribe_duration(ns).block(),
            other => {
                return Err(PluginError::InvalidConfig(format!(
                    "how: unknown value {other:?}"
                )));
            }
        }
        Ok(Response {
            desired: Vec::new(),
            status: None,
            conditions: Vec::new(),
            events: Vec::new(),
            requeue_after_secs: None,
            finalized: false,
        })
    }
}
