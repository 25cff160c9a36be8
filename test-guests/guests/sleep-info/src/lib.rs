//! Sleeps 15 s inside `info`, before the host has learnt anything about it.
//!
//! Attacks plugin loading: `info` runs once at load time, often before any per-run deadline is
//! armed. The host must time `info` like a reconcile (epoch interruption or a wall-clock bound)
//! so that one slow plugin cannot stall start-up or a hot reload.
//!
//! Written against the WIT without the Rust SDK, as a hostile author would.
// The plugin is only exported (and so only used) when built for wasm32.
#![cfg_attr(not(target_arch = "wasm32"), allow(dead_code))]

use std::time::Duration;

#[allow(unsafe_code, missing_docs, clippy::all)]
mod bindings {
    wit_bindgen::generate!({ path: "../../../wit", world: "plugin" });

    #[cfg(target_arch = "wasm32")]
    use super::SleepInfo;
    #[cfg(target_arch = "wasm32")]
    export!(SleepInfo);
}

use bindings::exports::windlass::plugin::reconciler::{
    Guest, PluginError, PluginInfo, Request, Response,
};

struct SleepInfo;

impl Guest for SleepInfo {
    fn info() -> PluginInfo {
        std::thread::sleep(Duration::from_secs(15));
        PluginInfo {
            name: "guest-sleep-info".into(),
            version: "0.0.0".into(),
            parent_kinds: vec!["example.com/v1/Thing".into()],
            child_kinds: Vec::new(),
            reads_kinds: Vec::new(),
            finalizes: false,
        }
    }

    fn reconcile(_req: Request) -> Result<Response, PluginError> {
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
