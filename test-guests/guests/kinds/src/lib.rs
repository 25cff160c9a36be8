//! One plain plugin for many parent kinds, for the host benchmark's memory per kind: it declares
//! `bench.windlass.dev/v1/Kind00` … `Kind49` and makes one ConfigMap per parent. The benchmark
//! loads it once per kind, each copy made distinct by a custom section so that each is its own
//! plugin to the host (its own digest, compile and instances), as 50 operators' plugins would be.
// The plugin is only exported (and so only used) when built for wasm32.
#![cfg_attr(not(target_arch = "wasm32"), allow(dead_code))]

use windlass_sdk::{Context, Info, Output, Plugin, Result, json};

/// How many parent kinds the plugin declares.
pub const KINDS: usize = 50;

struct Kinds;

windlass_sdk::export!(Kinds);

impl Plugin for Kinds {
    fn info() -> Info {
        (0..KINDS)
            .fold(Info::new("guest-kinds", "1.0.0"), |info, i| {
                info.parent(&format!("bench.windlass.dev/v1/Kind{i:02}"))
            })
            .child_kind("v1/ConfigMap")
    }

    fn reconcile(ctx: &Context) -> Result<Output> {
        let mut out = ctx.output();
        out.apply(&json!({
            "apiVersion": "v1", "kind": "ConfigMap",
            "metadata": {"name": ctx.name()},
            "data": {"value": ctx.parent().pointer("/spec/value").cloned().unwrap_or_default()},
        }))?;
        out.condition("Applied", true, "Applied", "one ConfigMap");
        Ok(out)
    }
}
