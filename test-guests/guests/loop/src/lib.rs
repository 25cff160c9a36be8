//! Never returns: the host must interrupt it at its time limit.
// The plugin is only exported (and so only used) when built for wasm32.
#![cfg_attr(not(target_arch = "wasm32"), allow(dead_code))]
use windlass_sdk::{Context, Info, Output, Plugin, Result};

struct Loop;

windlass_sdk::export!(Loop);

impl Plugin for Loop {
    fn info() -> Info {
        Info::new("guest-loop", "0.0.0").parent("example.com/v1/Thing")
    }

    fn reconcile(_ctx: &Context) -> Result<Output> {
        let mut n: u64 = 0;
        loop {
            n = std::hint::black_box(n.wrapping_add(1));
        }
    }
}
