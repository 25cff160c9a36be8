//! Declares a child kind no API server serves (`example.com/v1/Nothing`) and returns nothing.
//!
//! Attacks the host's start-up: a watch or list on an unknown kind fails forever. The host must
//! refuse to load (or report) the plugin for a kind it cannot discover, not retry in a hot loop
//! or stall the other plugins' parents.
//!
//! Written against the WIT without the Rust SDK, as a hostile author would.
// The plugin is only exported (and so only used) when built for wasm32.
#![cfg_attr(not(target_arch = "wasm32"), allow(dead_code))]

#[allow(unsafe_code, missing_docs, clippy::all)]
mod bindings {
    wit_bindgen::generate!({ path: "../../../wit", world: "plugin" });

    #[cfg(target_arch = "wasm32")]
    use super::UnservedKind;
    #[cfg(target_arch = "wasm32")]
    export!(UnservedKind);
}

use bindings::exports::windlass::plugin::reconciler::{
    Guest, PluginError, PluginInfo, Request, Response,
};

struct UnservedKind;

impl Guest for UnservedKind {
    fn info() -> PluginInfo {
        PluginInfo {
            name: "guest-unserved-kind".into(),
            version: "0.0.0".into(),
            parent_kinds: vec!["example.com/v1/Thing".into()],
            child_kinds: vec!["example.com/v1/Nothing".into()],
            reads_kinds: Vec::new(),
            finalizes: false,
        }
    }

    fn reconcile(_req: Request) -> Result<Response, PluginError> {
        Ok(Response {
            desired: Vec::new(),
            status: None,
            conditions: Vec::new(),
            events: Vec::new(),
            requeue_after_secs: None,
            finalized: false,
        })
    }
}
