//! Attacks through side channels rather than objects, chosen by the same `attack` key:
//!
//! - `sleep`: waits for `ms` milliseconds (default 0) in one of four ways, `how`: `sleep`
//!   (`std::thread::sleep`, the default), `poll` (`subscribe-duration`, then `wasi:io/poll`),
//!   `instant` (`subscribe-instant(now + ms)`, then `poll`) or `block` (`subscribe-duration`,
//!   then `pollable.block`). A guest blocked in a host call burns no fuel and never reaches an
//!   epoch check: the host must bound every run in wall-clock time, whatever the guest waits on.
//! - `clock`: reads every clock and the random source WASI offers and reports them in its
//!   status (`wall`, `wallNanos`, `monotonic`, `stdSystemTime`, `random` as a string): the
//!   host must pin or deny them, so that a run's output depends on its input alone.
//! - `flood`: returns as many events and conditions, as long messages and as many log lines as
//!   the config asks (`events`, `conditions`, `messageBytes`, `logLines`, `logBytes`, each
//!   default 0) and `requeue-after-secs` = `requeueAfter` (default none): the host must cap
//!   each, and put a floor under the requeue. Events are Normal with reason `Flood`; conditions
//!   are typed `Flood0`, `Flood1`, … (true, reason `Flood`); every message is `messageBytes`
//!   bytes of `x`, every log line `logBytes` bytes of `x` at level info; with `statusBytes`, a
//!   status fragment `{"padding": "x…"}` that many bytes of `x` long.
//! - `pollables`: creates up to 10,000,000 pollables (a one-hour timer each) and keeps them all
//!   alive. Each is a host-side entry that the guest's memory limit does not count (the guest
//!   holds a 4-byte handle): the host must cap its resource table, so the run traps long before
//!   the host's memory suffers.

use std::time::{Duration, SystemTime, UNIX_EPOCH};

use serde_json::{Value, json};
use wasip2::{
    clocks::{monotonic_clock, wall_clock},
    io::poll,
    random::random,
};

use crate::bindings::{
    exports::windlass::plugin::reconciler::{PluginError, Response},
    windlass::plugin::{
        log::{Level, log},
        types::{Condition, Event},
    },
};

/// The response of side-channel attack `attack`, or `None` when it is not one.
pub fn attack(attack: &str, config: &Value) -> Option<Result<Response, PluginError>> {
    Some(match attack {
        "sleep" => sleep(config),
        "clock" => clock(),
        "flood" => flood(config),
        "pollables" => pollables(),
        _ => return None,
    })
}

fn empty() -> Response {
    Response {
        desired: Vec::new(),
        status: None,
        conditions: Vec::new(),
        events: Vec::new(),
        requeue_after_secs: None,
        finalized: false,
    }
}

/// A non-negative integer config value, 0 when absent.
fn count(config: &Value, key: &str) -> Result<u64, PluginError> {
    match &config[key] {
        Value::Null => Ok(0),
        v => v
            .as_u64()
            .ok_or_else(|| PluginError::InvalidConfig(format!("{key}: {v}"))),
    }
}

/// A config count as a length to allocate.
fn size(config: &Value, key: &str) -> Result<usize, PluginError> {
    let n = count(config, key)?;
    usize::try_from(n).map_err(|_| PluginError::InvalidConfig(format!("{key}: {n} is too large")))
}

fn sleep(config: &Value) -> Result<Response, PluginError> {
    let how = match &config["how"] {
        Value::Null => "sleep",
        Value::String(s) => s.as_str(),
        other => return Err(PluginError::InvalidConfig(format!("how: {other}"))),
    };
    let ms = count(config, "ms")?;
    let ns = ms.saturating_mul(1_000_000);
    match how {
        "sleep" => std::thread::sleep(Duration::from_millis(ms)),
        "poll" => {
            let timer = monotonic_clock::subscribe_duration(ns);
            poll::poll(&[&timer]);
        }
        "instant" => {
            let timer =
                monotonic_clock::subscribe_instant(monotonic_clock::now().saturating_add(ns));
            poll::poll(&[&timer]);
        }
        "block" => monotonic_clock::subscribe_duration(ns).block(),
        other => {
            return Err(PluginError::InvalidConfig(format!(
                "how: unknown value {other:?}"
            )));
        }
    }
    Ok(empty())
}

fn clock() -> Result<Response, PluginError> {
    let wall = wall_clock::now();
    let monotonic = monotonic_clock::now();
    let std_secs = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_err(|e| PluginError::Failed(format!("SystemTime before the epoch: {e}")))?
        .as_secs();
    let random = random::get_random_u64();
    let status = json!({
        "wall": wall.seconds,
        "wallNanos": wall.nanoseconds,
        "monotonic": monotonic,
        "stdSystemTime": std_secs,
        "random": random.to_string(),
    });
    Ok(Response {
        status: Some(status.to_string()),
        ..empty()
    })
}

fn flood(config: &Value) -> Result<Response, PluginError> {
    let events = size(config, "events")?;
    let conditions = size(config, "conditions")?;
    let message = "x".repeat(size(config, "messageBytes")?);
    let log_lines = count(config, "logLines")?;
    let log_line = "x".repeat(size(config, "logBytes")?);
    let requeue_after_secs = match &config["requeueAfter"] {
        Value::Null => None,
        v => Some(
            v.as_u64()
                .and_then(|s| u32::try_from(s).ok())
                .ok_or_else(|| PluginError::InvalidConfig(format!("requeueAfter: {v}")))?,
        ),
    };
    for _ in 0..log_lines {
        log(Level::Info, &log_line);
    }
    let status = match &config["statusBytes"] {
        Value::Null => None,
        _ => Some(json!({"padding": "x".repeat(size(config, "statusBytes")?)}).to_string()),
    };
    Ok(Response {
        status,
        conditions: (0..conditions)
            .map(|i| Condition {
                kind: format!("Flood{i}"),
                status: true,
                reason: "Flood".into(),
                message: message.clone(),
            })
            .collect(),
        events: (0..events)
            .map(|_| Event {
                warning: false,
                reason: "Flood".into(),
                message: message.clone(),
            })
            .collect(),
        requeue_after_secs,
        ..empty()
    })
}

/// How many pollables `pollables` holds at once: far beyond any sane table cap.
const POLLABLES: usize = 10_000_000;

/// One hour, in nanoseconds: the timers never fire during a run.
const HOUR_NS: u64 = 3_600 * 1_000_000_000;

fn pollables() -> Result<Response, PluginError> {
    let mut held = Vec::new();
    for _ in 0..POLLABLES {
        held.push(monotonic_clock::subscribe_duration(HOUR_NS));
    }
    // Alive until here: only now are they dropped, one by one.
    std::hint::black_box(&held);
    Ok(empty())
}
