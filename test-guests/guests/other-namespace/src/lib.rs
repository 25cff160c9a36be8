//! Returns a ConfigMap in kube-system: children must stay in the parent's namespace.
// The plugin is only exported (and so only used) when built for wasm32.
#![cfg_attr(not(target_arch = "wasm32"), allow(dead_code))]
use windlass_sdk::{Context, Info, Output, Plugin, Result, json};

struct OtherNamespace;

windlass_sdk::export!(OtherNamespace);

impl Plugin for OtherNamespace {
    fn info() -> Info {
        Info::new("guest-other-namespace", "0.0.0")
            .parent("example.com/v1/Thing")
            .child_kind("v1/ConfigMap")
    }

    fn reconcile(ctx: &Context) -> Result<Output> {
        let mut out = ctx.output();
        out.apply(&json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "coredns", "namespace": "kube-system"}}))?;
        Ok(out)
    }
}
