//! The one place the host generates bindings for the WIT contract.
//!
//! Every other module uses the types re-exported from here, so a new contract version is added
//! in exactly one file.

wasmtime::component::bindgen!({
    path: "../wit",
    world: "plugin",
    // Exports are called asynchronously so that a call can be abandoned at its deadline even
    // while the guest waits inside a host call (a WASI sleep or poll), where epoch interruption
    // cannot reach it. The `log` import stays synchronous: it never waits.
    exports: { default: async },
});

pub use windlass::plugin::log::Level;
pub use windlass::plugin::types::{
    Condition, Event, Phase, PluginError, PluginInfo, Request, Response,
};

/// The export the host calls, with the one contract version this host speaks.
pub const RECONCILER_EXPORT: &str = "windlass:plugin/reconciler@0.1.0";
/// The prefix every version of the reconciler export shares.
pub const RECONCILER_EXPORT_PREFIX: &str = "windlass:plugin/reconciler@";
