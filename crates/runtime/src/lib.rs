//! The plugin runtime: one wasmtime engine per process and the sandbox every plugin call runs
//! in. This crate knows nothing of Kubernetes: plugins take and return JSON text. It implements
//! the contract's [`Engine`] and [`Reconciler`], through which the operator calls plugins.
//!
//! # Guarantees
//! - A guest cannot read files, the environment or arguments, and cannot open sockets: WASI is
//!   linked with an empty context.
//! - A call is interrupted after its time limit whatever the guest does: epoch interruption
//!   (checked every tick) stops wasm code, and a wall-clock deadline on the asynchronous call
//!   abandons a guest that waits inside a host call (a WASI sleep or poll), where epochs do not
//!   fire. The same holds for the `info` smoke call at load.
//! - A call is trapped when it grows memory beyond its limit, or its WASI resource table beyond
//!   a fixed size; fuel, when enabled, bounds instructions.
//! - A guest has no clock of the host's: its wall clock reads the request's `now` and its
//!   monotonic clock starts at one millisecond with each instance. Random numbers come from the host.
//! - By default every call gets a fresh instance, so a guest cannot carry state from one parent
//!   to the next. [`InstanceMode::Reuse`] keeps instances warm for heavy guests (Python,
//!   JavaScript), never hands an instance to a call of another tenant (the caller's word: the
//!   host uses the parent's namespace), and discards any instance that trapped or timed out.
//! - A plugin that traps, times out or runs out of memory leaves the runtime serving every other
//!   plugin.

mod bindings;
mod cache;
mod output;
mod plugin;
mod sandbox;

use std::{
    collections::HashMap,
    path::PathBuf,
    sync::{
        Arc, Mutex,
        atomic::{AtomicBool, Ordering},
    },
    thread::JoinHandle,
    time::Duration,
};

use wasmtime::{
    Config, Enabled, InstanceAllocationStrategy, OptLevel, PoolingAllocationConfig,
    component::{Component, HasSelf, Linker},
};

pub use cache::Cache;
pub use plugin::Plugin;
pub use windlass_contract::{
    CallStats, Condition, Engine, Error, Event, InstanceMode, Level, Limits, LoadOptions, Phase,
    PluginError, PluginErrorKind, PluginInfo, RECONCILER_EXPORT, Reconciler, Request, Response,
    Result, digest,
};

use sandbox::Sandbox;
use windlass_contract::{CONFIG_EXPORT, RECONCILER_EXPORT_PREFIX};

/// Process-wide settings of the runtime.
#[derive(Debug, Clone)]
pub struct RuntimeConfig {
    /// Where precompiled components are kept across restarts; none keeps them in memory only.
    pub cache_dir: Option<PathBuf>,
    /// Count fuel (instructions) so that plugins may be given a fuel limit. Off by default: it
    /// costs a few percent on every call.
    pub fuel: bool,
    /// How many instances may exist at once across all plugins (pool slots). Default 256.
    pub max_instances: u32,
    /// The largest memory limit any plugin may be given, in bytes. Default 512 MiB.
    pub max_memory_bytes: usize,
    /// How often the time limit is checked. Default 10 ms.
    pub epoch_tick: Duration,
    /// Bytes of each pool slot's linear memory kept mapped (zeroed with memset rather than
    /// unmapped) between instances, so a fresh instance per call does not page-fault its heap
    /// in again. Default 16 MiB (only what a guest touched is kept: its memset costs grow
    /// with the heap it used, up to this much).
    pub keep_resident_bytes: usize,
}

impl Default for RuntimeConfig {
    fn default() -> Self {
        RuntimeConfig {
            cache_dir: None,
            fuel: false,
            max_instances: 256,
            max_memory_bytes: 512 << 20,
            epoch_tick: Duration::from_millis(10),
            keep_resident_bytes: 16 << 20,
        }
    }
}

/// How components were obtained since the runtime started.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct RuntimeStats {
    /// Components compiled from wasm.
    pub compiled: u64,
    /// Components loaded from the precompiled cache on disk.
    pub cache_hits: u64,
    /// Components found already compiled in memory.
    pub memory_hits: u64,
}

/// The engine, the linker and the compiled-component caches. Cheap to clone.
#[derive(Clone)]
pub struct Runtime {
    inner: Arc<Inner>,
}

struct Inner {
    engine: wasmtime::Engine,
    linker: Linker<Sandbox>,
    cache: Option<Cache>,
    compiled: Mutex<HashMap<String, Component>>,
    stats: Mutex<RuntimeStats>,
    config: RuntimeConfig,
    stop: Arc<AtomicBool>,
    ticker: Option<JoinHandle<()>>,
    /// Drives the timers of WASI host calls (sleep, poll) and of call deadlines. Calls
    /// themselves run on the caller's thread.
    /// `None` only while being dropped.
    timers: Option<tokio::runtime::Runtime>,
}

impl std::fmt::Debug for Runtime {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Runtime")
            .field("config", &self.inner.config)
            .finish_non_exhaustive()
    }
}

impl Drop for Inner {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        if let Some(ticker) = self.ticker.take() {
            let _ = ticker.join();
        }
        // The runtime may be dropped on an async task (the operator stopping): a blocking
        // shutdown would panic there.
        if let Some(timers) = self.timers.take() {
            timers.shutdown_background();
        }
    }
}

impl Runtime {
    /// Builds the engine (pooling allocator, epoch interruption), links WASI with an empty
    /// context and the `log` import, opens the precompiled cache and starts the epoch ticker.
    pub fn new(config: RuntimeConfig) -> Result<Self> {
        let engine = wasmtime::Engine::new(&engine_config(&config))
            .map_err(|e| Error::Engine(format!("{e:#}")))?;
        if PoolingAllocationConfig::is_pagemap_scan_available() {
            tracing::debug!("a fresh instance's teardown resets only the pages it wrote");
        } else {
            tracing::info!(
                keep_resident_bytes = config.keep_resident_bytes,
                "the kernel cannot say which pages an instance wrote (PAGEMAP_SCAN, Linux 6.7): \
                 a fresh instance's teardown resets every page it kept resident"
            );
        }
        let mut linker = Linker::<Sandbox>::new(&engine);
        wasmtime_wasi::p2::add_to_linker_async(&mut linker)
            .map_err(|e| Error::Engine(format!("linking WASI: {e:#}")))?;
        bindings::Plugin::add_to_linker::<Sandbox, HasSelf<Sandbox>>(&mut linker, |s| s)
            .map_err(|e| Error::Engine(format!("linking windlass:plugin/log: {e:#}")))?;
        let cache = match &config.cache_dir {
            Some(dir) => Some(Cache::open(dir.clone(), &engine)?),
            None => None,
        };
        let stop = Arc::new(AtomicBool::new(false));
        let ticker = {
            let engine = engine.clone();
            let stop = stop.clone();
            let tick = config.epoch_tick;
            std::thread::Builder::new()
                .name("windlass-epoch".into())
                .spawn(move || {
                    while !stop.load(Ordering::Relaxed) {
                        std::thread::sleep(tick);
                        engine.increment_epoch();
                    }
                })
                .map_err(|e| Error::Engine(format!("starting the epoch ticker: {e}")))?
        };
        let timers = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(1)
            .thread_name("windlass-wasi")
            .enable_all()
            .build()
            .map_err(|e| Error::Engine(format!("starting the timer thread: {e}")))?;
        Ok(Runtime {
            inner: Arc::new(Inner {
                timers: Some(timers),
                engine,
                linker,
                cache,
                compiled: Mutex::new(HashMap::new()),
                stats: Mutex::new(RuntimeStats::default()),
                config,
                stop,
                ticker: Some(ticker),
            }),
        })
    }

    /// How components were obtained so far.
    pub fn stats(&self) -> RuntimeStats {
        *lock(&self.inner.stats)
    }

    /// The runtime's configuration.
    pub fn config(&self) -> &RuntimeConfig {
        &self.inner.config
    }

    /// Compiles (or loads from the cache) a component, checks that it speaks this host's
    /// contract, links it, and smoke-calls `info`. `label` names the plugin in errors until its
    /// own name is known (a file name, a WasmPlugin name).
    ///
    /// # Errors
    /// [`Error::Compile`], [`Error::IncompatibleContract`], [`Error::Instantiate`] (an import the
    /// sandbox does not provide), or any error of the `info` call.
    pub fn load(&self, label: &str, bytes: &[u8], options: LoadOptions) -> Result<Plugin> {
        if options.limits.memory_bytes > self.inner.config.max_memory_bytes {
            return Err(Error::Instantiate {
                plugin: label.to_string(),
                message: format!(
                    "memory limit {} bytes is above the runtime's maximum of {} bytes",
                    options.limits.memory_bytes, self.inner.config.max_memory_bytes
                ),
            });
        }
        if options.limits.fuel.is_some() && !self.inner.config.fuel {
            return Err(Error::Instantiate {
                plugin: label.to_string(),
                message: "a fuel limit needs a runtime with fuel enabled".into(),
            });
        }
        let digest = digest(bytes);
        let component = self.compile(label, &digest, bytes)?;
        let ty = component.component_type();
        let engine = &self.inner.engine;
        let exports: Vec<String> = ty
            .exports(engine)
            .map(|(name, _)| name.to_string())
            .collect();
        if !exports.iter().any(|e| e == RECONCILER_EXPORT) {
            let found = match exports
                .iter()
                .find(|e| e.starts_with(RECONCILER_EXPORT_PREFIX))
            {
                Some(other) => format!("it exports {other}"),
                None if exports.is_empty() => "it exports nothing".to_string(),
                None => format!("it exports only {}", exports.join(", ")),
            };
            return Err(Error::IncompatibleContract {
                plugin: label.to_string(),
                found,
                supported: RECONCILER_EXPORT,
            });
        }
        let imports = ty
            .imports(engine)
            .map(|(name, _)| name.to_string())
            .collect();
        let pre = self
            .inner
            .linker
            .instantiate_pre(&component)
            .and_then(bindings::PluginPre::new)
            .map_err(|e| Error::Instantiate {
                plugin: label.to_string(),
                message: format!("{e:#}"),
            })?;
        Plugin::new(
            self.clone(),
            label,
            digest,
            bytes.len(),
            imports,
            pre,
            options,
            exports.iter().any(|e| e == CONFIG_EXPORT),
        )
    }

    fn compile(&self, label: &str, digest: &str, bytes: &[u8]) -> Result<Component> {
        let inner = &self.inner;
        if let Some(hit) = lock(&inner.compiled).get(digest).cloned() {
            lock(&inner.stats).memory_hits += 1;
            return Ok(hit);
        }
        // On one line: wasmparser's messages can hold pretty-printed byte arrays (a bad magic
        // number), which would spread over a condition, an event and a log line.
        let compile_error = |e: wasmtime::Error| Error::Compile {
            plugin: label.to_string(),
            message: one_line(&format!("{e:#}")),
        };
        let component = match &inner.cache {
            Some(cache) => match cache.load(&inner.engine, digest) {
                Some(component) => {
                    lock(&inner.stats).cache_hits += 1;
                    component
                }
                None => {
                    lock(&inner.stats).compiled += 1;
                    let artifact = inner
                        .engine
                        .precompile_component(bytes)
                        .map_err(compile_error)?;
                    if let Err(e) = cache.store(digest, &artifact) {
                        tracing::warn!(plugin = label, error = %e, "cannot write the precompiled cache; going on without it");
                    }
                    // SAFETY: `artifact` was produced just now by this engine.
                    #[allow(unsafe_code)]
                    let component = unsafe { Component::deserialize(&inner.engine, &artifact) };
                    component.map_err(compile_error)?
                }
            },
            None => {
                lock(&inner.stats).compiled += 1;
                Component::new(&inner.engine, bytes).map_err(compile_error)?
            }
        };
        lock(&inner.compiled).insert(digest.to_string(), component.clone());
        Ok(component)
    }

    /// Forgets the in-memory compiled copy of a digest (the disk cache keeps it). Used when a
    /// plugin version is replaced, so memory does not grow with every swap.
    pub fn forget(&self, digest: &str) {
        lock(&self.inner.compiled).remove(digest);
    }

    /// Runs a guest call on this thread until it finishes or `limit` has passed, whichever
    /// comes first; `None` when the deadline came first (the call is then abandoned: its store
    /// must be dropped).
    ///
    /// # Why a wall-clock deadline beside epochs
    /// Epoch interruption is checked only while wasm code runs. A guest blocked in a host call
    /// (a WASI sleep or poll) never reaches a check; the asynchronous call yields there instead,
    /// so this deadline can drop it.
    fn run_until<F: std::future::Future>(&self, limit: Duration, call: F) -> Option<F::Output> {
        let _context = self.inner.timers.as_ref().map(|t| t.enter());
        futures::executor::block_on(async { tokio::time::timeout(limit, call).await.ok() })
    }

    /// Epoch ticks a call of `timeout` may run for (one more than the quotient: the current
    /// tick may be nearly over when the call starts).
    fn deadline_ticks(&self, timeout: Duration) -> u64 {
        let tick = self.inner.config.epoch_tick.as_nanos().max(1);
        (timeout.as_nanos().div_ceil(tick) as u64).max(1) + 1
    }
}

impl Engine for Runtime {
    fn load(&self, label: &str, bytes: &[u8], options: LoadOptions) -> Result<Arc<dyn Reconciler>> {
        Ok(Arc::new(Runtime::load(self, label, bytes, options)?))
    }

    fn forget(&self, digest: &str) {
        Runtime::forget(self, digest);
    }
}

fn engine_config(config: &RuntimeConfig) -> Config {
    let n = config.max_instances.max(1);
    let mut pool = PoolingAllocationConfig::default();
    pool.total_component_instances(n)
        .total_core_instances(n.saturating_mul(8))
        .total_memories(n.saturating_mul(2))
        .total_tables(n.saturating_mul(4))
        .max_core_instances_per_component(64)
        .max_memories_per_component(8)
        .max_tables_per_component(16)
        .max_memory_size(config.max_memory_bytes)
        .max_core_instance_size(4 << 20)
        .table_elements(100_000)
        // Keep a little of each slot's memory mapped so that a fresh instance per call does not
        // pay for page faults on every call.
        .linear_memory_keep_resident(config.keep_resident_bytes)
        .table_keep_resident(64 << 10)
        // Where the kernel can say which pages an instance wrote (Linux 6.7's PAGEMAP_SCAN),
        // only those are reset for the next instance, rather than every page kept resident.
        .pagemap_scan(Enabled::Auto);
    let mut c = Config::new();
    pool.total_stacks(n);
    c.wasm_component_model(true)
        .epoch_interruption(true)
        .consume_fuel(config.fuel)
        .cranelift_opt_level(OptLevel::Speed)
        .parallel_compilation(true)
        .allocation_strategy(InstanceAllocationStrategy::Pooling(pool));
    c
}

/// Locks a mutex, going on with the data if another thread panicked while holding it: every
/// structure guarded here stays consistent between statements.
fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

/// `text` with its lines trimmed and joined by single spaces.
fn one_line(text: &str) -> String {
    text.lines()
        .map(str::trim)
        .filter(|l| !l.is_empty())
        .collect::<Vec<_>>()
        .join(" ")
}
