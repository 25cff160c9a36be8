//! Looks at its environment and arguments and reports what it found. The sandbox has none.
// The plugin is only exported (and so only used) when built for wasm32.
#![cfg_attr(not(target_arch = "wasm32"), allow(dead_code))]
use windlass_sdk::{Context, Error, Info, Output, Plugin, Result};

struct ReadEnv;

windlass_sdk::export!(ReadEnv);

impl Plugin for ReadEnv {
    fn info() -> Info {
        Info::new("guest-read-env", "0.0.0").parent("example.com/v1/Thing")
    }

    fn reconcile(_ctx: &Context) -> Result<Output> {
        let vars: Vec<String> = std::env::vars().map(|(k, v)| format!("{k}={v}")).collect();
        let args = std::env::args().count();
        let cwd = std::env::current_dir()
            .map(|p| p.display().to_string())
            .unwrap_or_else(|e| format!("{:?}", e.kind()));
        Err(Error::Failed(format!(
            "environment: {vars:?}; arguments: {args}; cwd: {cwd}"
        )))
    }
}
