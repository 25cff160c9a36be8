//! Returns a desired object that is not JSON, bypassing the SDK's serializer.
// The plugin is only exported (and so only used) when built for wasm32.
#![cfg_attr(not(target_arch = "wasm32"), allow(dead_code))]
use windlass_sdk::{Info, Plugin};

struct InvalidJson;

impl Plugin for InvalidJson {
    fn info() -> Info {
        Info::new("guest-invalid-json", "0.0.0")
            .parent("example.com/v1/Thing")
            .child_kind("v1/ConfigMap")
    }

    fn reconcile(ctx: &windlass_sdk::Context) -> windlass_sdk::Result<windlass_sdk::Output> {
        Ok(ctx.output())
    }
}

#[cfg(target_arch = "wasm32")]
mod export {
    use windlass_sdk::__private::{Guest, PluginError, PluginInfo, Request, Response};

    struct Raw;

    impl Guest for Raw {
        fn info() -> PluginInfo {
            windlass_sdk::__private::info::<super::InvalidJson>()
        }

        fn reconcile(_req: Request) -> Result<Response, PluginError> {
            Ok(Response {
                desired: vec![
                    r#"{"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "#
                        .to_string(),
                ],
                status: None,
                conditions: vec![],
                events: vec![],
                requeue_after_secs: None,
                finalized: false,
            })
        }
    }

    windlass_sdk::__private::export_bindings!(Raw with_types_in windlass_sdk::__private::bindings);
}
