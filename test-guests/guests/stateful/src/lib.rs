//! Counts its calls in a static, prints and logs, and panics when its config asks: shows what
//! survives between calls in each instance mode, and that output reaches the host's log.
// The plugin is only exported (and so only used) when built for wasm32.
#![cfg_attr(not(target_arch = "wasm32"), allow(dead_code))]
use std::sync::atomic::{AtomicU32, Ordering};

use windlass_sdk::{Context, Info, Output, Plugin, Result, log};

static CALLS: AtomicU32 = AtomicU32::new(0);

struct Stateful;

windlass_sdk::export!(Stateful);

impl Plugin for Stateful {
    fn info() -> Info {
        Info::new("guest-stateful", "0.0.0").parent("example.com/v1/Thing")
    }

    fn reconcile(ctx: &Context) -> Result<Output> {
        let calls = CALLS.fetch_add(1, Ordering::SeqCst) + 1;
        println!("stdout line from call {calls}");
        log::info(format!("log line from call {calls}"));
        if ctx.config::<windlass_sdk::Value>()?["panic"] == true {
            panic!("asked to panic on call {calls}");
        }
        let mut out = ctx.output();
        out.status("calls", calls);
        out.status("now", ctx.now());
        Ok(out)
    }
}
