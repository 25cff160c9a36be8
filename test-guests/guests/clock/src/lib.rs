//! Reads every clock and the random source WASI offers and reports them in its status.
//!
//! Attacks determinism: the contract gives a plugin no clock but `request.now`. The host must
//! pin (or deny) wall-clock, monotonic-clock and random so that a run's output depends on its
//! input alone; the status shows what the guest actually saw.
//!
//! Status: `{"wall": <wall-clock seconds>, "wallNanos": <its nanoseconds>, "monotonic":
//! <monotonic-clock ns>, "stdSystemTime": <SystemTime::now() seconds since the epoch>,
//! "random": "<a u64 from wasi:random, as a string>"}`.
//!
//! Written against the WIT without the Rust SDK, as a hostile author would.
// The plugin is only exported (and so only used) when built for wasm32.
#![cfg_attr(not(target_arch = "wasm32"), allow(dead_code))]

use std::time::{SystemTime, UNIX_EPOCH};

use serde_json::json;
use wasip2::{
    clocks::{monotonic_clock, wall_clock},
    random::random,
};

#[allow(unsafe_code, missing_docs, clippy::all)]
mod bindings {
    wit_bindgen::generate!({ path: "../../../wit", world: "plugin" });

    #[cfg(target_arch = "wasm32")]
    use super::Clock;
    #[cfg(target_arch = "wasm32")]
    export!(Clock);
}

use bindings::exports::windlass::plugin::reconciler::{
    Guest, PluginError, PluginInfo, Request, Response,
};

struct Clock;

impl Guest for Clock {
    fn info() -> PluginInfo {
        PluginInfo {
            name: "guest-clock".into(),
            version: "0.0.0".into(),
            parent_kinds: vec!["example.com/v1/Thing".into()],
            child_kinds: Vec::new(),
            reads_kinds: Vec::new(),
            finalizes: false,
        }
    }

    fn reconcile(_req: Request) -> Result<Response, PluginError> {
        let wall = wall_clock::now();
        let monotonic = monotonic_clock::now();
        let std_secs = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map_err(|e| PluginError::Failed(format!("SystemTime before the epoch: {e}")))?
            .as_secs();
        let random = random::get_random_u64();
        let status = json!({
            "wall": wall.seconds,
            "wallNanos": wall.nanoseconds,
            "monotonic": monotonic,
            "stdSystemTime": std_secs,
            "random": random.to_string(),
        });
        Ok(Response {
            desired: Vec::new(),
            status: Some(status.to_string()),
            conditions: Vec::new(),
            events: Vec::new(),
            requeue_after_secs: None,
            finalized: false,
        })
    }
}
