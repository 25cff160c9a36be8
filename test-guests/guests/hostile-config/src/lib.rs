//! Attacks the config check: contract 0.2.0's `config.validate`, which the host calls when it
//! loads a version or its config changes — before any parent exists, so no parent's reconcile
//! stands between the guest and the host's loader. The config says what `validate` does
//! (`{"validate": …}`):
//!
//! - `loop`: spins for ever (epoch interruption must stop it at the time limit);
//! - `sleep`: sleeps a minute inside a WASI call, where epoch interruption cannot reach it
//!   (the wall-clock bound must);
//! - `grow`: allocates until the memory limit;
//! - `panic`: traps;
//! - `long`: refuses with an 8 MiB message (a condition and an event must carry it cut);
//! - `refuse`: refuses the config, as a plugin refusing a bad one does;
//! - anything else, or nothing: accepts it.
//!
//! Its `reconcile` passes the desired set through. Written against the WIT without the Rust
//! SDK, as a hostile author would.
// The plugin is only exported (and so only used) when built for wasm32.
#![cfg_attr(not(target_arch = "wasm32"), allow(dead_code))]

use std::time::Duration;

#[allow(unsafe_code, missing_docs, clippy::all)]
mod bindings {
    wit_bindgen::generate!({
        path: "../../../wit/0.2.0",
        world: "windlass:plugin/plugin@0.2.0",
        generate_all,
    });

    #[cfg(target_arch = "wasm32")]
    use super::HostileConfig;
    #[cfg(target_arch = "wasm32")]
    export!(HostileConfig);
}

use bindings::exports::windlass::plugin0_1_0::reconciler::{
    Guest, PluginError, PluginInfo, Request, Response,
};
use bindings::exports::windlass::plugin0_2_0::config::Guest as ConfigGuest;

struct HostileConfig;

impl ConfigGuest for HostileConfig {
    fn validate(config: String) -> Result<(), String> {
        let config: serde_json::Value =
            serde_json::from_str(&config).map_err(|e| format!("config is not JSON: {e}"))?;
        match config["validate"].as_str().unwrap_or("") {
            "loop" => {
                let mut n: u64 = 0;
                loop {
                    n = std::hint::black_box(n.wrapping_add(1));
                }
            }
            "sleep" => {
                std::thread::sleep(Duration::from_secs(60));
                Ok(())
            }
            "grow" => {
                let mut hoard: Vec<Vec<u8>> = Vec::new();
                loop {
                    hoard.push(vec![1; 1 << 20]);
                    std::hint::black_box(&hoard);
                }
            }
            "panic" => panic!("validate panicked on purpose"),
            "long" => Err("validate: ".to_string() + &"x".repeat(8 << 20)),
            "refuse" => Err("validate: refused on purpose".into()),
            _ => Ok(()),
        }
    }
}

impl Guest for HostileConfig {
    fn info() -> PluginInfo {
        PluginInfo {
            name: "guest-hostile-config".into(),
            version: "0.0.0".into(),
            parent_kinds: vec!["example.com/v1/Thing".into()],
            child_kinds: vec!["v1/ConfigMap".into()],
            reads_kinds: Vec::new(),
            finalizes: false,
        }
    }

    fn reconcile(req: Request) -> Result<Response, PluginError> {
        Ok(Response {
            desired: req.desired,
            status: None,
            conditions: Vec::new(),
            events: Vec::new(),
            requeue_after_secs: None,
            finalized: false,
        })
    }
}
