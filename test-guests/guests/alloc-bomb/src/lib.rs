//! Allocates until something stops it: the host's memory limit must.
use windlass_sdk::{Context, Info, Output, Plugin, Result};

struct AllocBomb;

#[cfg(target_arch = "wasm32")]
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
