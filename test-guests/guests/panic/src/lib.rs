//! Panics: the host must report the panic message as a trap.
// The plugin is only exported (and so only used) when built for wasm32.
#![cfg_attr(not(target_arch = "wasm32"), allow(dead_code))]
use windlass_sdk::{Context, Info, Output, Plugin, Result};

struct Panics;

windlass_sdk::export!(Panics);

impl Plugin for Panics {
    fn info() -> Info {
        Info::new("guest-panic", "0.0.0").parent("example.com/v1/Thing")
    }

    fn reconcile(ctx: &Context) -> Result<Output> {
        panic!("cannot reconcile {}: the spec is on fire", ctx.name());
    }
}
