//! The per-instance state a guest runs against: an empty WASI context with the host's clocks
//! hidden, a memory limiter, a bounded resource table, output capture and the `log` import.

use std::{
    sync::{Arc, Mutex},
    time::{Duration, Instant},
};

use wasmtime::ResourceLimiter;
use wasmtime_wasi::{
    HostMonotonicClock, HostWallClock, ResourceTable, WasiCtx, WasiCtxBuilder, WasiCtxView,
    WasiView,
};

use super::{bindings, output::GuestOutput};

/// How much of each of stdout and stderr is kept per call.
const OUTPUT_CAPACITY: usize = 64 * 1024;
/// How many `log` lines a guest may write per call before the rest are dropped.
pub(crate) const MAX_LOG_LINES: u32 = 200;
/// How many bytes of one `log` line are kept; the rest is cut, saying how much.
pub(crate) const MAX_LOG_LINE_BYTES: usize = 4 << 10;
/// How many WASI resources (streams, pollables, …) an instance may hold at once. A guest
/// needs a handful; without a cap each one is host memory the memory limit does not count.
pub(crate) const MAX_RESOURCES: usize = 10_000;
/// How many table elements a guest may grow its tables to.
const MAX_TABLE_ELEMENTS: usize = 1_000_000;

/// Store data for one guest instance.
pub(crate) struct Sandbox {
    pub(crate) plugin: Arc<str>,
    wasi: WasiCtx,
    table: ResourceTable,
    pub(crate) limiter: MemoryLimiter,
    pub(crate) stdout: GuestOutput,
    pub(crate) stderr: GuestOutput,
    log_lines: u32,
    pub(crate) clock: Arc<GuestClock>,
}

impl Sandbox {
    /// A sandbox with no files, no environment, no arguments and no network: a WASI context
    /// built from defaults grants none of them. With a `tape`, its randomness is recorded, or
    /// given back from a recording ([`TapeRng`]).
    pub(crate) fn new(plugin: Arc<str>, memory_limit: usize, tape: Option<&TapeRng>) -> Self {
        let stdout = GuestOutput::new(OUTPUT_CAPACITY);
        let stderr = GuestOutput::new(OUTPUT_CAPACITY);
        let clock = Arc::new(GuestClock::new(tape.is_some()));
        let mut builder = WasiCtxBuilder::new();
        builder
            .stdout(stdout.clone())
            .stderr(stderr.clone())
            .wall_clock(WallClock(clock.clone()))
            .monotonic_clock(MonotonicClock(clock.clone()));
        if let Some(tape) = tape {
            builder
                .secure_random(tape.clone())
                .insecure_random(tape.clone())
                .insecure_random_seed(tape.seed());
        }
        let wasi = builder.build();
        let mut table = ResourceTable::new();
        table.set_max_capacity(MAX_RESOURCES);
        Sandbox {
            plugin,
            wasi,
            table,
            clock,
            limiter: MemoryLimiter::new(memory_limit),
            stdout,
            stderr,
            log_lines: 0,
        }
    }

    /// Forgets per-call counters before a call on a reused instance.
    pub(crate) fn reset_call(&mut self) {
        self.log_lines = 0;
    }

    /// Sends what the guest printed to the host's log and returns stderr's text (for traps).
    pub(crate) fn flush_output(&self) -> String {
        let (out, out_dropped) = self.stdout.drain();
        for line in out.lines().filter(|l| !l.trim().is_empty()) {
            let line = escape_controls(line);
            tracing::info!(plugin = %self.plugin, stream = "stdout", "{line}");
        }
        let (err, err_dropped) = self.stderr.drain();
        for line in err.lines().filter(|l| !l.trim().is_empty()) {
            let line = escape_controls(line);
            tracing::warn!(plugin = %self.plugin, stream = "stderr", "{line}");
        }
        if out_dropped + err_dropped > 0 {
            tracing::warn!(
                plugin = %self.plugin,
                dropped_bytes = out_dropped + err_dropped,
                "guest output beyond {OUTPUT_CAPACITY} bytes per stream was dropped"
            );
        }
        err
    }
}

impl WasiView for Sandbox {
    fn ctx(&mut self) -> WasiCtxView<'_> {
        WasiCtxView {
            ctx: &mut self.wasi,
            table: &mut self.table,
        }
    }
}

impl bindings::windlass::plugin::log::Host for Sandbox {
    fn log(&mut self, level: bindings::Level, message: String) {
        self.log_lines += 1;
        let message = escape_controls(&cut_line(message)).into_owned();
        if self.log_lines > MAX_LOG_LINES {
            if self.log_lines == MAX_LOG_LINES + 1 {
                tracing::warn!(plugin = %self.plugin, "more than {MAX_LOG_LINES} log lines in one call; dropping the rest");
            }
            return;
        }
        let plugin = &*self.plugin;
        match level {
            bindings::Level::Debug => tracing::debug!(plugin, "{message}"),
            bindings::Level::Info => tracing::info!(plugin, "{message}"),
            bindings::Level::Warn => tracing::warn!(plugin, "{message}"),
            bindings::Level::Error => tracing::error!(plugin, "{message}"),
        }
    }
}

/// A guest's text as one line of the host's log: every control character (newline, carriage
/// return, escape sequences, …) written as its Rust escape (`\n`, `\r`, `\u{1b}`), so a guest
/// can neither start a line that looks like the host's in the text format nor rewrite the
/// terminal. Borrowed when there is nothing to escape (most lines).
pub(crate) fn escape_controls(text: &str) -> std::borrow::Cow<'_, str> {
    if !text.chars().any(char::is_control) {
        return std::borrow::Cow::Borrowed(text);
    }
    let mut out = String::with_capacity(text.len() + 8);
    for c in text.chars() {
        if c.is_control() {
            out.extend(c.escape_default());
        } else {
            out.push(c);
        }
    }
    std::borrow::Cow::Owned(out)
}

/// Cuts a log line to [`MAX_LOG_LINE_BYTES`] (on a character boundary), saying how much went.
fn cut_line(mut message: String) -> String {
    if message.len() <= MAX_LOG_LINE_BYTES {
        return message;
    }
    let mut end = MAX_LOG_LINE_BYTES;
    while !message.is_char_boundary(end) {
        end -= 1;
    }
    let cut = message.len() - end;
    message.truncate(end);
    message.push_str(&format!(" … [{cut} more bytes cut by the host]"));
    message
}

/// A call's randomness on tape: drawn from the thread RNG and recorded, or given back from a
/// recording in the order it was drawn — bytes, `u32`s and `u64`s alike, as little-endian bytes
/// — so that a replayed guest draws what it drew. Past the recording's end it gives zeros and
/// says so ([`windlass_contract::Entropy::overdrawn`]). Shared by both `wasi:random` interfaces
/// of one instance: their draws interleave in one order either way.
#[derive(Debug, Clone)]
pub(crate) struct TapeRng(Arc<Mutex<TapeState>>);

#[derive(Debug)]
struct TapeState {
    /// Given back from a recording (else recorded).
    replay: bool,
    entropy: windlass_contract::Entropy,
    /// How far a replay has read.
    at: usize,
}

impl TapeRng {
    pub(crate) fn new(tape: windlass_contract::Tape) -> Self {
        use rand::RngExt as _;
        let state = match tape {
            windlass_contract::Tape::Record => TapeState {
                replay: false,
                entropy: windlass_contract::Entropy {
                    insecure_seed: rand::rng().random(),
                    ..Default::default()
                },
                at: 0,
            },
            windlass_contract::Tape::Replay(mut entropy) => {
                entropy.overdrawn = false;
                TapeState {
                    replay: true,
                    entropy,
                    at: 0,
                }
            }
        };
        TapeRng(Arc::new(Mutex::new(state)))
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, TapeState> {
        self.0
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    fn seed(&self) -> u128 {
        self.lock().entropy.insecure_seed
    }

    /// What the call drew (recorded), or what was given back (replayed).
    pub(crate) fn entropy(&self) -> windlass_contract::Entropy {
        self.lock().entropy.clone()
    }
}

impl rand::TryRng for TapeRng {
    type Error = std::convert::Infallible;

    fn try_next_u32(&mut self) -> Result<u32, Self::Error> {
        let mut b = [0; 4];
        self.try_fill_bytes(&mut b)?;
        Ok(u32::from_le_bytes(b))
    }

    fn try_next_u64(&mut self) -> Result<u64, Self::Error> {
        let mut b = [0; 8];
        self.try_fill_bytes(&mut b)?;
        Ok(u64::from_le_bytes(b))
    }

    fn try_fill_bytes(&mut self, dst: &mut [u8]) -> Result<(), Self::Error> {
        let mut state = self.lock();
        if state.replay {
            let at = state.at;
            let have = state.entropy.bytes.len().saturating_sub(at).min(dst.len());
            dst[..have].copy_from_slice(&state.entropy.bytes[at..at + have]);
            dst[have..].fill(0);
            if have < dst.len() {
                state.entropy.overdrawn = true;
            }
            state.at += have;
        } else {
            rand::Rng::fill_bytes(&mut rand::rng(), dst);
            state.entropy.bytes.extend_from_slice(dst);
        }
        Ok(())
    }
}

/// The time a guest sees: the wall clock reads the request's `now` (set before each call; the
/// Unix epoch before the first, e.g. in `info`), and the monotonic clock counts from one
/// millisecond when the instance was made, in whole milliseconds (never zero: Go's runtime,
/// for one, refuses to start on a zero reading). Neither reveals the host's clock. On a
/// tape (a recorded or replayed call) the monotonic clock does not run with time: it advances
/// one millisecond per reading, so a replay reads what the recording read.
#[derive(Debug)]
pub(crate) struct GuestClock {
    wall: Mutex<Duration>,
    started: Instant,
    /// Readings so far, for a clock that ticks per reading.
    readings: Option<std::sync::atomic::AtomicU64>,
}

impl GuestClock {
    fn new(per_reading: bool) -> Self {
        GuestClock {
            wall: Mutex::new(Duration::ZERO),
            started: Instant::now(),
            readings: per_reading.then(|| std::sync::atomic::AtomicU64::new(0)),
        }
    }

    /// Sets what the wall clock reads for the next call: `now` as RFC 3339 (the request's).
    /// A `now` that does not parse leaves the clock at the Unix epoch.
    pub(crate) fn set_now(&self, now: &str) {
        let since_epoch = now
            .parse::<jiff::Timestamp>()
            .ok()
            .and_then(|t| {
                let secs = u64::try_from(t.as_second()).ok()?;
                let nanos = u32::try_from(t.subsec_nanosecond()).ok()?;
                Some(Duration::new(secs, nanos))
            })
            .unwrap_or(Duration::ZERO);
        *self.wall.lock().unwrap_or_else(|e| e.into_inner()) = since_epoch;
    }
}

struct WallClock(Arc<GuestClock>);

impl HostWallClock for WallClock {
    fn resolution(&self) -> Duration {
        Duration::from_secs(1)
    }

    fn now(&self) -> Duration {
        *self.0.wall.lock().unwrap_or_else(|e| e.into_inner())
    }
}

struct MonotonicClock(Arc<GuestClock>);

impl HostMonotonicClock for MonotonicClock {
    fn resolution(&self) -> u64 {
        1_000_000
    }

    fn now(&self) -> u64 {
        let ms = match &self.0.readings {
            Some(n) => u128::from(n.fetch_add(1, std::sync::atomic::Ordering::Relaxed)) + 1,
            None => self.0.started.elapsed().as_millis().saturating_add(1),
        };
        u64::try_from(ms).unwrap_or(u64::MAX / 1_000_000) * 1_000_000
    }
}

/// Caps the total linear memory of all of an instance's memories, and remembers that the cap
/// was hit so that the resulting trap can be reported as a memory limit rather than a crash.
#[derive(Debug)]
pub(crate) struct MemoryLimiter {
    limit: usize,
    total: usize,
    peak: usize,
    pub(crate) hit: bool,
}

impl MemoryLimiter {
    fn new(limit: usize) -> Self {
        MemoryLimiter {
            limit,
            total: 0,
            peak: 0,
            hit: false,
        }
    }

    /// The most linear memory the instance has held, in bytes.
    pub(crate) fn peak(&self) -> usize {
        self.peak
    }
}

impl ResourceLimiter for MemoryLimiter {
    fn memory_growing(
        &mut self,
        current: usize,
        desired: usize,
        _maximum: Option<usize>,
    ) -> wasmtime::Result<bool> {
        let total = self.total - current.min(self.total) + desired;
        if total > self.limit {
            self.hit = true;
            // An error (not `Ok(false)`) traps at once: a guest allocator that ignores a failed
            // grow would otherwise go on and crash somewhere less clear.
            wasmtime::bail!("memory limit of {} bytes exceeded", self.limit);
        }
        self.total = total;
        self.peak = self.peak.max(total);
        Ok(true)
    }

    fn table_growing(
        &mut self,
        _current: usize,
        desired: usize,
        _maximum: Option<usize>,
    ) -> wasmtime::Result<bool> {
        if desired > MAX_TABLE_ELEMENTS {
            self.hit = true;
            wasmtime::bail!("table limit of {MAX_TABLE_ELEMENTS} elements exceeded");
        }
        Ok(true)
    }
}

/// The `types` interface has only types; its host trait has nothing to implement.
impl bindings::windlass::plugin::types::Host for Sandbox {}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    #[allow(clippy::unwrap_used)]
    fn a_tape_gives_back_what_it_recorded_in_order_then_zeros_and_says_so() {
        use rand::TryRng as _;
        let mut recording = TapeRng::new(windlass_contract::Tape::Record);
        let mut a = [0u8; 5];
        recording.try_fill_bytes(&mut a).unwrap();
        let b = recording.try_next_u64().unwrap();
        let c = recording.try_next_u32().unwrap();
        let drawn = recording.entropy();
        assert_eq!(drawn.bytes.len(), 5 + 8 + 4);
        let mut replay = TapeRng::new(windlass_contract::Tape::Replay(drawn.clone()));
        assert_eq!(replay.seed(), drawn.insecure_seed);
        let mut again = [0u8; 5];
        replay.try_fill_bytes(&mut again).unwrap();
        let (b2, c2) = (
            replay.try_next_u64().unwrap(),
            replay.try_next_u32().unwrap(),
        );
        assert_eq!((again, b2, c2), (a, b, c));
        assert!(!replay.entropy().overdrawn);
        assert_eq!(replay.try_next_u32().unwrap(), 0);
        assert!(replay.entropy().overdrawn);
    }

    #[test]
    fn control_characters_in_guest_text_are_escaped_onto_one_line() {
        assert_eq!(escape_controls("plain text"), "plain text");
        assert!(matches!(
            escape_controls("plain"),
            std::borrow::Cow::Borrowed(_)
        ));
        assert_eq!(
            escape_controls("ok\nINFO windlass: forged\r\u{1b}[2Kx\tü"),
            "ok\\nINFO windlass: forged\\r\\u{1b}[2Kx\\tü"
        );
    }
}
