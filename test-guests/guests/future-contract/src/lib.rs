//! Exports a contract version this host does not speak (windlass:plugin@9.0.0).
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

export!(Future);
