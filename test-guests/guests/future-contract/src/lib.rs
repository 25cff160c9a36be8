//! Exports a contract version this host does not speak (windlass:plugin@9.0.0).
// The plugin is only exported (and so only used) when built for wasm32.
#![cfg_attr(not(target_arch = "wasm32"), allow(dead_code))]
#![allow(unsafe_code, missing_docs)]

wit_bindgen::generate!({
    inline: "
        package windlass:plugin@9.0.0;
        interface reconciler {
            reconcile: func(req: string) -> string;
        }
        world plugin {
            export reconciler;
        }
    ",
});

struct Future;

impl exports::windlass::plugin::reconciler::Guest for Future {
    fn reconcile(req: String) -> String {
        req
    }
}

#[cfg(target_arch = "wasm32")]
export!(Future);
