//! Tries to read a host file and reports what happened. The sandbox has no files at all.
// The plugin is only exported (and so only used) when built for wasm32.
#![cfg_attr(not(target_arch = "wasm32"), allow(dead_code))]
use windlass_sdk::{Context, Error, Info, Output, Plugin, Result};

struct ReadFile;

windlass_sdk::export!(ReadFile);

impl Plugin for ReadFile {
    fn info() -> Info {
        Info::new("guest-read-file", "0.0.0").parent("example.com/v1/Thing")
    }

    fn reconcile(ctx: &Context) -> Result<Output> {
        let path = ctx.config::<windlass_sdk::Value>()?["path"]
            .as_str()
            .unwrap_or("/etc/passwd")
            .to_string();
        match std::fs::read_to_string(&path) {
            Ok(text) => {
                let mut out = ctx.output();
                out.status("leaked", text);
                Ok(out)
            }
            Err(e) => Err(Error::Failed(format!("reading {path}: {:?}", e.kind()))),
        }
    }
}
