//! Creates up to 10,000,000 pollables (a one-hour monotonic-clock timer each) and keeps them
//! all alive.
//!
//! Attacks the host's WASI resource table: every pollable is a host-side entry that guest
//! linear memory limits do not account for (the guest holds only a 4-byte handle). The host must
//! cap its resource table so that the run traps long before host memory suffers.
//!
//! Written against the WIT without the Rust SDK, as a hostile author would.
// The plugin is only exported (and so only used) when built for wasm32.
#![cfg_attr(not(target_arch = "wasm32"), allow(dead_code))]

use wasip2::clocks::monotonic_clock;

#[allow(unsafe_code, missing_docs, clippy::all)]
mod bindings {
    wit_bindgen::generate!({ path: "../../../wit", world: "plugin" });

    #[cfg(target_arch = "wasm32")]
    use super::Table;
    #[cfg(target_arch = "wasm32")]
    export!(Table);
}

use bindings::exports::windlass::plugin::reconciler::{
    Guest, PluginError, PluginInfo, Request, Response,
};

/// How many pollables to hold at once: far beyond any sane table cap.
const POLLABLES: usize = 10_000_000;
/// One hour, in nanoseconds: the timers never fire during a run.
const HOUR_NS: u64 = 3_600 * 1_000_000_000;

struct Table;

impl Guest for Table {
    fn info() -> PluginInfo {
        PluginInfo {
            name: "guest-table".into(),
            version: "0.0.0".into(),
            parent_kinds: vec!["example.com/v1/Thing".into()],
            child_kinds: Vec::new(),
            reads_kinds: Vec::new(),
            finalizes: false,
        }
    }

    fn reconcile(_req: Request) -> Result<Response, PluginError> {
        let mut held = Vec::new();
        for _ in 0..POLLABLES {
            held.push(monotonic_clock::subscribe_duration(HOUR_NS));
        }
        // Alive until here: only now are they dropped, one by one.
        std::hint::black_box(&held);
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
