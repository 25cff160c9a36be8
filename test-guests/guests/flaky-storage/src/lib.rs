//! The SampleDB storage plugin as a broken new version of it would be, for the chaos suite
//! (host/tests/host/chaos.rs): the same name and the same output, except on the parents its
//! config picks. Config `{"misbehave": "trap", "every": N}` traps (panics) on every parent whose
//! name ends in a number divisible by N; `"hang"` loops there until the host's time limit stops
//! it. The key is taken out of the config before the storage plugin sees it, so every other
//! parent gets exactly what the real plugin produces.

use windlass_sdk::{Context, Error, Info, Output, Plugin, Result, Value};

use sampledb_storage::Storage;

/// The storage plugin, broken on some parents.
pub struct Flaky;

windlass_sdk::export!(Flaky);

/// Whether the config says to misbehave on this parent, and how.
fn misbehaviour(ctx: &Context) -> Result<(Option<String>, Value)> {
    let mut config: serde_json::Map<String, Value> = ctx.config()?;
    let how = config
        .remove("misbehave")
        .and_then(|v| v.as_str().map(str::to_string));
    let every = config
        .remove("every")
        .and_then(|v| v.as_u64())
        .unwrap_or(2)
        .max(1);
    let number: Option<u64> = ctx.name().rsplit('-').next().and_then(|n| n.parse().ok());
    let picked = number.is_some_and(|n| n % every == 0);
    Ok((how.filter(|_| picked), Value::Object(config)))
}

/// The context the storage plugin gets: the same, with this crate's keys out of the config.
fn storage_context(ctx: &Context, config: &Value) -> Result<Context> {
    let texts =
        |objects: &[Value]| -> Vec<String> { objects.iter().map(Value::to_string).collect() };
    Context::from_json(
        ctx.phase(),
        &ctx.parent().to_string(),
        &texts(ctx.observed_all()),
        &texts(ctx.desired()),
        &config.to_string(),
        ctx.now().to_string(),
    )
}

fn misbehave(how: Option<&str>, name: &str) -> Result<()> {
    match how {
        Some("trap") => panic!("flaky storage: trapping on {name}"),
        Some("hang") => loop {
            std::hint::spin_loop();
        },
        Some(other) => Err(Error::InvalidConfig(format!(
            "misbehave: {other:?} is not trap or hang"
        ))),
        None => Ok(()),
    }
}

impl Plugin for Flaky {
    fn info() -> Info {
        Storage::info()
    }

    fn reconcile(ctx: &Context) -> Result<Output> {
        let (how, config) = misbehaviour(ctx)?;
        misbehave(how.as_deref(), ctx.name())?;
        Storage::reconcile(&storage_context(ctx, &config)?)
    }

    fn finalize(ctx: &Context) -> Result<Output> {
        let (how, config) = misbehaviour(ctx)?;
        misbehave(how.as_deref(), ctx.name())?;
        Storage::finalize(&storage_context(ctx, &config)?)
    }
}
