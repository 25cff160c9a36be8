//! The one place the host generates bindings for the WIT contract.
//!
//! The generated types stay in this module: the rest of the runtime, and every other layer,
//! uses the plain types of `windlass-contract`, converted here. A new contract version is added
//! in exactly one file.

wasmtime::component::bindgen!({
    path: "../../wit",
    world: "plugin",
    // Exports are called asynchronously so that a call can be abandoned at its deadline even
    // while the guest waits inside a host call (a WASI sleep or poll), where epoch interruption
    // cannot reach it. The `log` import stays synchronous: it never waits.
    exports: { default: async },
});

pub use windlass::plugin::log::Level;
use windlass::plugin::types as wit;
use windlass_contract as contract;

/// The request as the generated call takes it (the strings are copied: the bindings own theirs).
pub fn wit_request(req: &contract::Request) -> wit::Request {
    wit::Request {
        phase: match req.phase {
            contract::Phase::Reconcile => wit::Phase::Reconcile,
            contract::Phase::Finalize => wit::Phase::Finalize,
        },
        parent: req.parent.clone(),
        observed: req.observed.clone(),
        desired: req.desired.clone(),
        config: req.config.clone(),
        now: req.now.clone(),
    }
}

impl From<wit::Response> for contract::Response {
    fn from(r: wit::Response) -> Self {
        contract::Response {
            desired: r.desired,
            status: r.status,
            conditions: r
                .conditions
                .into_iter()
                .map(|c| contract::Condition {
                    kind: c.kind,
                    status: c.status,
                    reason: c.reason,
                    message: c.message,
                })
                .collect(),
            events: r
                .events
                .into_iter()
                .map(|e| contract::Event {
                    warning: e.warning,
                    reason: e.reason,
                    message: e.message,
                })
                .collect(),
            requeue_after_secs: r.requeue_after_secs,
            finalized: r.finalized,
        }
    }
}

impl From<wit::PluginInfo> for contract::PluginInfo {
    fn from(i: wit::PluginInfo) -> Self {
        contract::PluginInfo {
            name: i.name,
            version: i.version,
            parent_kinds: i.parent_kinds,
            child_kinds: i.child_kinds,
            reads_kinds: i.reads_kinds,
            finalizes: i.finalizes,
        }
    }
}

impl From<wit::PluginError> for contract::PluginError {
    fn from(e: wit::PluginError) -> Self {
        match e {
            wit::PluginError::InvalidParent(m) => contract::PluginError::InvalidParent(m),
            wit::PluginError::InvalidConfig(m) => contract::PluginError::InvalidConfig(m),
            wit::PluginError::Failed(m) => contract::PluginError::Failed(m),
        }
    }
}
