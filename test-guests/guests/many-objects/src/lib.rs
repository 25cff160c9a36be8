//! Returns 100,000 ConfigMaps: the host's object cap must refuse them.
// The plugin is only exported (and so only used) when built for wasm32.
#![cfg_attr(not(target_arch = "wasm32"), allow(dead_code))]
use windlass_sdk::{Context, Info, Output, Plugin, Result, json};

struct ManyObjects;

windlass_sdk::export!(ManyObjects);

impl Plugin for ManyObjects {
    fn info() -> Info {
        Info::new("guest-many-objects", "0.0.0")
            .parent("example.com/v1/Thing")
            .child_kind("v1/ConfigMap")
    }

    fn reconcile(ctx: &Context) -> Result<Output> {
        let mut out = ctx.output();
        out.desired_mut().extend(
            (0..100_000).map(|i| json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": format!("cm-{i}")}})),
        );
        Ok(out)
    }
}
