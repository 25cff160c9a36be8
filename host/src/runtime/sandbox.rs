//! The per-instance state a guest runs against: an empty WASI context, a memory limiter, output
//! capture and the `log` import.

use std::sync::Arc;

use wasmtime::ResourceLimiter;
use wasmtime_wasi::{ResourceTable, WasiCtx, WasiCtxBuilder, WasiCtxView, WasiView};

use super::{bindings, output::GuestOutput};

/// How much of each of stdout and stderr is kept per call.
const OUTPUT_CAPACITY: usize = 64 * 1024;
/// How many `log` lines a guest may write per call before the rest are dropped.
const MAX_LOG_LINES: u32 = 1_000;
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
}

impl Sandbox {
    /// A sandbox with no files, no environment, no arguments and no network: a WASI context
    /// built from defaults grants none of them.
    pub(crate) fn new(plugin: Arc<str>, memory_limit: usize) -> Self {
        let stdout = GuestOutput::new(OUTPUT_CAPACITY);
        let stderr = GuestOutput::new(OUTPUT_CAPACITY);
        let wasi = WasiCtxBuilder::new()
            .stdout(stdout.clone())
            .stderr(stderr.clone())
            .build();
        Sandbox {
            plugin,
            wasi,
            table: ResourceTable::new(),
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
            tracing::info!(plugin = %self.plugin, stream = "stdout", "{line}");
        }
        let (err, err_dropped) = self.stderr.drain();
        for line in err.lines().filter(|l| !l.trim().is_empty()) {
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
