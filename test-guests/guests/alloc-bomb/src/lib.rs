//! Allocates until something stops it: the host's memory limit must.
// The plugin is only exported (and so only used) when built for wasm32.
#![cfg_attr(not(target_arch = "wasm32"), allow(dead_code))]
use windlass_sdk::{Context, Info, Output, Plugin, Result};

struct AllocBomb;

windlass_sdk::export!(AllocBomb);

impl Plugin for AllocBomb {
    fn info() -> Info {
        Info::new("guest-alloc-bomb", "0.0.0").parent("example.com/v1/Thing")
    }

    fn reconcile(_ctx: &Context) -> Result<Output> {
        let mut hoard: Vec<Vec<u8>> = Vec::new();
        loop {
            hoard.push(vec![1u8; 1 << 20]);
            std::hint::black_box(&hoard);
        }
    }
}
