//! Panics: the host must report the panic message as a trap.
use windlass_sdk::{Context, Info, Output, Plugin, Result};

struct Panics;

#[cfg(target_arch = "wasm32")]
windlass_sdk::export!(Panics);

impl Plugin for Panics {
    fn info() -> Info {
        Info::new("guest-panic", "0.0.0").parent("example.com/v1/Thing")
    }

    fn reconcile(ctx: &Context) -> Result<Output> {
        panic!("cannot reconcile {}: the spec is on fire", ctx.name());
    }
}
