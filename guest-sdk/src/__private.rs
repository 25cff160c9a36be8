//! Glue between the WIT bindings and the SDK's types. Not part of the public API.

#[allow(missing_docs, clippy::all, unsafe_code)]
pub mod bindings {
    wit_bindgen::generate!({
        path: "../wit/0.2.0",
        world: "windlass:plugin/plugin@0.2.0",
        generate_all,
        pub_export_macro: true,
        export_macro_name: "export_bindings",
        default_bindings_module: "windlass_sdk::__private::bindings",
    });
}

pub use bindings::export_bindings;
pub use bindings::exports::windlass::plugin0_1_0::reconciler::Guest;
pub use bindings::exports::windlass::plugin0_1_0::reconciler::{
    PluginError, PluginInfo, Request, Response,
};
pub use bindings::exports::windlass::plugin0_2_0::config::Guest as ConfigGuest;

use crate::{Context, Error, Phase, Plugin};

/// `info` for the export.
pub fn info<P: Plugin>() -> PluginInfo {
    let info = P::info();
    PluginInfo {
        name: info.name,
        version: info.version,
        parent_kinds: info.parent_kinds,
        child_kinds: info.child_kinds,
        reads_kinds: info.reads_kinds,
        finalizes: info.finalizes,
    }
}

/// `reconcile` for the export.
pub fn reconcile<P: Plugin>(req: Request) -> Result<Response, PluginError> {
    use bindings::windlass::plugin0_1_0::types::Phase as WitPhase;
    let phase = match req.phase {
        WitPhase::Reconcile => Phase::Reconcile,
        WitPhase::Finalize => Phase::Finalize,
    };
    let run = || {
        let ctx = Context::from_json(
            phase,
            &req.parent,
            &req.observed,
            &req.desired,
            &req.config,
            req.now,
        )?;
        match phase {
            Phase::Reconcile => P::reconcile(&ctx),
            Phase::Finalize => P::finalize(&ctx),
        }
    };
    let out = run().map_err(|e| match e {
        Error::InvalidParent(m) => PluginError::InvalidParent(m),
        Error::InvalidConfig(m) => PluginError::InvalidConfig(m),
        Error::Failed(m) => PluginError::Failed(m),
    })?;
    let parts = out
        .into_parts()
        .map_err(|e| PluginError::Failed(e.to_string()))?;
    Ok(Response {
        desired: parts.desired,
        status: parts.status,
        conditions: parts
            .conditions
            .into_iter()
            .map(|c| bindings::windlass::plugin0_1_0::types::Condition {
                kind: c.kind,
                status: c.status,
                reason: c.reason,
                message: c.message,
            })
            .collect(),
        events: parts
            .events
            .into_iter()
            .map(|e| bindings::windlass::plugin0_1_0::types::Event {
                warning: e.warning,
                reason: e.reason,
                message: e.message,
            })
            .collect(),
        requeue_after_secs: parts.requeue_after_secs,
        finalized: parts.finalized,
    })
}

/// `config.validate` for the export: the config as JSON, then the plugin's own checks.
pub fn validate_config<P: Plugin>(config: &str) -> Result<(), String> {
    let config: serde_json::Value =
        serde_json::from_str(config).map_err(|e| format!("not valid JSON: {e}"))?;
    P::validate_config(&config).map_err(|e| match e {
        Error::InvalidConfig(m) | Error::InvalidParent(m) | Error::Failed(m) => m,
    })
}

/// Writes a log line through the host's `log` import (natively: to stderr).
pub fn log(level: u8, message: &str) {
    #[cfg(target_arch = "wasm32")]
    {
        use bindings::windlass::plugin0_1_0::log::{Level, log};
        let level = match level {
            0 => Level::Debug,
            1 => Level::Info,
            2 => Level::Warn,
            _ => Level::Error,
        };
        log(level, message);
    }
    #[cfg(not(target_arch = "wasm32"))]
    {
        let level = ["debug", "info", "warn", "error"][usize::from(level.min(3))];
        eprintln!("[{level}] {message}");
    }
}
