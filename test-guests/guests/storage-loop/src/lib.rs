//! The SampleDB storage plugin's decision made `repeat` times (its config) within one call,
//! each time as the plugin's own component export makes it: parse the request's JSON texts,
//! decide, serialise (`windlass_sdk::testing::run_json`, the runtime benchmark's native
//! variant). It answers with the last decision's objects and status.
//!
//! For the runtime benchmark (host/benches/runtime.rs): the instructions of a call with
//! `repeat: 2` less those of one with `repeat: 1` are one decision run as wasm, inside the
//! sandbox, without crossing into it — the floor that the same logic compiled by Cranelift
//! sets under the reused-instance call, which no work on the host's side can go below.

use serde::Deserialize;
use windlass_sdk::{Context, Error, Info, Output, Phase, Plugin, Result, Value, testing::run_json};

use sampledb_storage::Storage;

/// The storage plugin's decision, `repeat` times a call.
pub struct StorageLoop;

windlass_sdk::export!(StorageLoop);

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct Config {
    repeat: u32,
}

/// `texts` parsed back into objects, as the storage plugin's export made them.
fn parsed(texts: &[String]) -> Result<Vec<Value>> {
    texts
        .iter()
        .map(|t| serde_json::from_str(t).map_err(|e| Error::Failed(e.to_string())))
        .collect()
}

impl Plugin for StorageLoop {
    fn info() -> Info {
        Storage::info()
    }

    fn reconcile(ctx: &Context) -> Result<Output> {
        let Config { repeat } = ctx.config()?;
        if repeat == 0 {
            return Err(Error::InvalidConfig("repeat: at least 1".into()));
        }
        // The request's objects as texts again, once, outside the decisions.
        let parent = ctx.parent().to_string();
        let texts = |objects: &[Value]| objects.iter().map(Value::to_string).collect::<Vec<_>>();
        let (observed, desired) = (texts(ctx.observed_all()), texts(ctx.desired()));
        let mut last = (Vec::new(), None);
        for _ in 0..repeat {
            last = run_json::<Storage>(
                Phase::Reconcile,
                &parent,
                &observed,
                &desired,
                "{}",
                ctx.now(),
            )?;
        }
        let (objects, status) = last;
        let mut out = Output::new(parsed(&objects)?);
        if let Some(status) = status {
            let status: Value =
                serde_json::from_str(&status).map_err(|e| Error::Failed(e.to_string()))?;
            for (key, value) in status.as_object().into_iter().flatten() {
                out.status(key, value);
            }
        }
        Ok(out)
    }

    fn finalize(ctx: &Context) -> Result<Output> {
        Storage::finalize(ctx)
    }
}
