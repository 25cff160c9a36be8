//! A loaded plugin: compiled, linked, described by its own `info`, ready to call.

use std::{
    sync::{Arc, Mutex},
    time::{Duration, Instant},
};

use wasmtime::{Store, Trap};

use windlass_contract::{
    CONFIG_EXPORT, CONFIG_VALIDATE, CallStats, Error, InstanceMode, LoadOptions, PluginError,
    PluginErrorKind, PluginInfo, Reconciler, Request, Response, Result,
};

use super::{
    Runtime, bindings, lock,
    sandbox::{Sandbox, TapeRng},
};

/// How many warm instances a plugin in [`InstanceMode::Reuse`] keeps idle, across tenants.
const MAX_IDLE: usize = 4;
/// How much of a guest's stderr a trap message carries.
const STDERR_TAIL: usize = 2_000;

/// A compiled and linked plugin that has answered `info` (the `*Pre` of kubewarden's naming,
/// plus what the plugin said of itself). Calls from several threads at once are fine.
pub struct Plugin {
    runtime: Runtime,
    name: Arc<str>,
    digest: String,
    size: usize,
    imports: Vec<String>,
    info: PluginInfo,
    pre: bindings::PluginPre<Sandbox>,
    options: LoadOptions,
    /// Whether the component exports [`CONFIG_EXPORT`] (contract 0.2.0).
    checks_config: bool,
    /// Idle instances with the tenant whose calls they served; oldest first.
    idle: Mutex<Vec<(String, Warm)>>,
}

/// An instance with its store, ready for a call.
struct Warm {
    store: Store<Sandbox>,
    bindings: bindings::Plugin,
}

impl std::fmt::Debug for Plugin {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Plugin")
            .field("name", &self.name)
            .field("version", &self.info.version)
            .field("digest", &self.digest)
            .field("options", &self.options)
            .finish_non_exhaustive()
    }
}

impl Plugin {
    pub(super) fn new(
        runtime: Runtime,
        label: &str,
        digest: String,
        size: usize,
        imports: Vec<String>,
        pre: bindings::PluginPre<Sandbox>,
        options: LoadOptions,
        checks_config: bool,
    ) -> Result<Self> {
        let mut plugin = Plugin {
            runtime,
            name: Arc::from(label),
            digest,
            size,
            imports,
            info: PluginInfo::default(),
            pre,
            options,
            checks_config,
            idle: Mutex::new(Vec::new()),
        };
        // The smoke call: a component that cannot even describe itself never gets loaded.
        // It runs under the same deadline as any call: a guest that sleeps in `info` is stopped.
        let info = plugin.run_once(async {
            let mut warm = plugin.instantiate(None).await?;
            let info = warm
                .bindings
                .windlass_plugin_reconciler()
                .call_info(&mut warm.store)
                .await;
            let stderr = warm.store.data().flush_output();
            info.map(PluginInfo::from)
                .map_err(|e| plugin.classify(&warm.store, e, &stderr))
        })?;
        if info.name.is_empty() {
            return Err(Error::InvalidInfo {
                plugin: label.to_string(),
                why: "name is empty".into(),
            });
        }
        plugin.name = Arc::from(info.name.as_str());
        plugin.info = info;
        Ok(plugin)
    }

    /// The plugin's name, from its `info`.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// What the plugin declared about itself.
    pub fn info(&self) -> &PluginInfo {
        &self.info
    }

    /// The component's sha256 digest, `sha256:<hex>`.
    pub fn digest(&self) -> &str {
        &self.digest
    }

    /// The component's size in bytes.
    pub fn size(&self) -> usize {
        self.size
    }

    /// The imports the component needs, as `namespace:package/interface@version`.
    pub fn imports(&self) -> &[String] {
        &self.imports
    }

    /// The options the plugin was loaded with.
    pub fn options(&self) -> &LoadOptions {
        &self.options
    }

    /// Runs one phase for one parent.
    ///
    /// # Errors
    /// [`Error::Timeout`], [`Error::MemoryLimit`], [`Error::FuelExhausted`], [`Error::Trap`]
    /// (with the guest's panic message), [`Error::Plugin`] for an error the plugin returned,
    /// [`Error::Instantiate`] when the instance pool is exhausted.
    pub fn call(&self, req: &Request) -> Result<Response> {
        self.call_measured(req).0
    }

    /// [`Plugin::call`], with what the call cost.
    pub fn call_measured(&self, req: &Request) -> (Result<Response>, CallStats) {
        self.call_for("", req)
    }

    /// [`Plugin::call_measured`] on behalf of `tenant`: in [`InstanceMode::Reuse`] an instance
    /// that served one tenant never serves another, so no guest state crosses between them.
    pub fn call_for(&self, tenant: &str, req: &Request) -> (Result<Response>, CallStats) {
        self.call_taped(tenant, req, None)
    }

    /// [`Plugin::call_for`]; with a `tape`, in a fresh instance of its own (never kept warm)
    /// whose randomness the tape records or gives back.
    fn call_taped(
        &self,
        tenant: &str,
        req: &Request,
        tape: Option<&TapeRng>,
    ) -> (Result<Response>, CallStats) {
        let started = Instant::now();
        let reused = self.options.mode == InstanceMode::Reuse && tape.is_none();
        let timeout = self.options.limits.timeout;
        let warm = if reused { self.take_idle(tenant) } else { None };
        let was_warm = warm.is_some();
        let failed = |e| {
            let stats = CallStats {
                duration: started.elapsed(),
                ..CallStats::default()
            };
            (Err(e), stats)
        };
        let call = async {
            let mut warm = match warm {
                Some(warm) => warm,
                None => self.instantiate(tape).await?,
            };
            if was_warm {
                self.arm(&mut warm.store);
                warm.store.data_mut().reset_call();
            }
            warm.store.data().clock.set_now(&req.now);
            let fuel_before = warm.store.get_fuel().ok();
            let outcome = warm
                .bindings
                .windlass_plugin_reconciler()
                .call_reconcile(&mut warm.store, &bindings::wit_request(req))
                .await;
            Ok::<_, Error>((warm, fuel_before, outcome))
        };
        let (mut warm, fuel_before, outcome) =
            match self.runtime.run_until(hard_deadline(timeout), call) {
                Some(Ok(done)) => done,
                Some(Err(e)) => return failed(e),
                // Abandoned inside a host call: the store went with the call.
                None => {
                    return failed(Error::Timeout {
                        plugin: self.name.to_string(),
                        limit: timeout,
                    });
                }
            };
        let stderr = warm.store.data().flush_output();
        let stats = CallStats {
            duration: started.elapsed(),
            memory_peak_bytes: warm.store.data().limiter.peak(),
            fuel_consumed: fuel_before
                .zip(warm.store.get_fuel().ok())
                .map(|(before, after)| before.saturating_sub(after)),
            reused: was_warm,
        };
        let result = match outcome {
            Ok(Ok(response)) => Ok(response.into()),
            Ok(Err(e)) => Err(self.plugin_error(e.into())),
            // A trapped instance cannot be entered again: its store is dropped here.
            Err(e) => return (Err(self.classify(&warm.store, e, &stderr)), stats),
        };
        if reused {
            warm.store.data_mut().reset_call();
            let mut idle = lock(&self.idle);
            idle.push((tenant.to_string(), warm));
            if idle.len() > MAX_IDLE {
                idle.remove(0);
            }
        }
        (result, stats)
    }

    /// Whether the plugin checks its config itself (contract 0.2.0).
    pub fn checks_config(&self) -> bool {
        self.checks_config
    }

    /// Asks the plugin whether `config` (JSON text) is usable, through its `config.validate`
    /// export, in a fresh instance under the plugin's limits (time, memory, fuel), as any call.
    /// A plugin without the export accepts any config here.
    ///
    /// # Errors
    /// [`Error::Plugin`] ([`PluginErrorKind::InvalidConfig`]) with the plugin's message; a
    /// limit, a trap; [`Error::IncompatibleContract`] when the export is not the contract's
    /// function.
    pub fn validate_config(&self, config: &str) -> Result<()> {
        if !self.checks_config {
            return Ok(());
        }
        self.run_once(async {
            let mut store = self.new_store(None);
            let instance = match self.pre.instance_pre().instantiate_async(&mut store).await {
                Ok(instance) => instance,
                Err(e) => return Err(self.instantiate_error(&store, e)),
            };
            let incompatible = |why: String| Error::IncompatibleContract {
                plugin: self.name.to_string(),
                found: format!("its {CONFIG_EXPORT} {why}"),
                supported: "validate: func(config: string) -> result<_, string>",
            };
            let index = instance
                .get_export_index(&mut store, None, CONFIG_EXPORT)
                .and_then(|config| {
                    instance.get_export_index(&mut store, Some(&config), CONFIG_VALIDATE)
                })
                .ok_or_else(|| incompatible(format!("has no function {CONFIG_VALIDATE}")))?;
            let validate = instance
                .get_typed_func::<(&str,), (std::result::Result<(), String>,)>(&mut store, &index)
                .map_err(|e| {
                    incompatible(format!("{CONFIG_VALIDATE} is not the contract's: {e}"))
                })?;
            let outcome = validate.call_async(&mut store, (config,)).await;
            let stderr = store.data().flush_output();
            match outcome {
                Ok((Ok(()),)) => Ok(()),
                Ok((Err(message),)) => Err(Error::Plugin {
                    plugin: self.name.to_string(),
                    kind: PluginErrorKind::InvalidConfig,
                    message,
                }),
                Err(e) => Err(self.classify(&store, e, &stderr)),
            }
        })
    }

    /// Runs `call` — one call outside a reconcile (`info` at load, the config check) in a
    /// store of its own — under the hard deadline of the plugin's time limit: abandoned there
    /// (a guest waiting in a host call, where epochs never fire), it is a timeout.
    fn run_once<T>(&self, call: impl Future<Output = Result<T>>) -> Result<T> {
        let timeout = self.options.limits.timeout;
        self.runtime
            .run_until(hard_deadline(timeout), call)
            .unwrap_or_else(|| {
                Err(Error::Timeout {
                    plugin: self.name.to_string(),
                    limit: timeout,
                })
            })
    }

    /// The most recently idle instance that served `tenant`, if any.
    fn take_idle(&self, tenant: &str) -> Option<Warm> {
        let mut idle = lock(&self.idle);
        let at = idle.iter().rposition(|(t, _)| t == tenant)?;
        Some(idle.remove(at).1)
    }

    /// A new store with the plugin's limits, and an instance in it.
    async fn instantiate(&self, tape: Option<&TapeRng>) -> Result<Warm> {
        let mut store = self.new_store(tape);
        match self.pre.instantiate_async(&mut store).await {
            Ok(bindings) => Ok(Warm { store, bindings }),
            Err(e) => Err(self.instantiate_error(&store, e)),
        }
    }

    /// A new store with the plugin's limits, armed for one call.
    fn new_store(&self, tape: Option<&TapeRng>) -> Store<Sandbox> {
        let mut store = Store::new(
            &self.runtime.inner.engine,
            Sandbox::new(self.name.clone(), self.options.limits.memory_bytes, tape),
        );
        store.limiter(|s| &mut s.limiter);
        self.arm(&mut store);
        store
    }

    /// What instantiating failed with: a trap in a start function is an instantiation error.
    fn instantiate_error(&self, store: &Store<Sandbox>, e: wasmtime::Error) -> Error {
        let stderr = store.data().flush_output();
        match self.classify(store, e, &stderr) {
            Error::Trap { plugin, message } => Error::Instantiate { plugin, message },
            other => other,
        }
    }

    /// Sets the time and fuel budget for the next call.
    fn arm(&self, store: &mut Store<Sandbox>) {
        store.set_epoch_deadline(self.runtime.deadline_ticks(self.options.limits.timeout));
        if let Some(fuel) = self.options.limits.fuel {
            // Cannot fail: fuel limits are refused at load unless the engine counts fuel.
            let _ = store.set_fuel(fuel);
        } else if self.runtime.inner.config.fuel {
            let _ = store.set_fuel(u64::MAX);
        }
    }

    fn plugin_error(&self, e: PluginError) -> Error {
        let (kind, message) = match e {
            PluginError::InvalidParent(m) => (PluginErrorKind::InvalidParent, m),
            PluginError::InvalidConfig(m) => (PluginErrorKind::InvalidConfig, m),
            PluginError::Failed(m) => (PluginErrorKind::Failed, m),
        };
        Error::Plugin {
            plugin: self.name.to_string(),
            kind,
            message,
        }
    }

    /// Turns a wasmtime error from a call into the error a user can act on.
    fn classify(&self, store: &Store<Sandbox>, e: wasmtime::Error, stderr: &str) -> Error {
        let plugin = self.name.to_string();
        let limits = self.options.limits;
        if store.data().limiter.hit {
            return Error::MemoryLimit {
                plugin,
                limit: limits.memory_bytes,
            };
        }
        if let Some(wasmtime_wasi::ResourceTableError::Full) =
            e.downcast_ref::<wasmtime_wasi::ResourceTableError>()
        {
            return Error::Trap {
                plugin,
                message: format!(
                    "the guest holds more than {} WASI resources (streams, pollables, …) at once",
                    super::sandbox::MAX_RESOURCES
                ),
            };
        }
        match e.downcast_ref::<Trap>() {
            Some(Trap::Interrupt) => Error::Timeout {
                plugin,
                limit: limits.timeout,
            },
            Some(Trap::OutOfFuel) => Error::FuelExhausted {
                plugin,
                limit: limits.fuel.unwrap_or(u64::MAX),
            },
            Some(trap) => Error::Trap {
                plugin,
                message: with_guest_stderr(trap.to_string(), stderr),
            },
            None => Error::Trap {
                plugin,
                message: with_guest_stderr(format!("{e:#}"), stderr),
            },
        }
    }
}

/// The wall-clock bound of a whole call with time limit `limit`: one and a half times the limit.
///
/// # Why not the limit itself
/// Epoch interruption stops wasm code at the limit; this bound is for what epochs cannot see —
/// a guest waiting in a host call, and the host lifting a large result out of guest memory —
/// and it must not pre-empt the epoch trap, which reports a compute-bound guest precisely. The
/// issue's bound is 2× the limit; 1.5× leaves room for scheduling.
fn hard_deadline(limit: Duration) -> Duration {
    limit + limit / 2
}

/// Appends the end of what the guest wrote to stderr (for a Rust guest, its panic message),
/// without the hint about RUST_BACKTRACE, which means nothing to a user of the host.
fn with_guest_stderr(trap: String, stderr: &str) -> String {
    let text: Vec<&str> = stderr
        .lines()
        .filter(|l| !l.trim().is_empty() && !l.starts_with("note: run with `RUST_BACKTRACE"))
        .collect();
    if text.is_empty() {
        return trap;
    }
    let text = text.join("\n");
    let start = text.len().saturating_sub(STDERR_TAIL);
    let start = (start..text.len())
        .find(|&i| text.is_char_boundary(i))
        .unwrap_or(text.len());
    format!("{trap}; guest stderr: {}", &text[start..])
}

impl Reconciler for Plugin {
    fn info(&self) -> &PluginInfo {
        &self.info
    }

    fn digest(&self) -> &str {
        &self.digest
    }

    fn imports(&self) -> &[String] {
        &self.imports
    }

    fn call_for(&self, tenant: &str, req: &Request) -> (Result<Response>, CallStats) {
        Plugin::call_for(self, tenant, req)
    }

    fn call_recorded(
        &self,
        tenant: &str,
        req: &Request,
        entropy: windlass_contract::Tape,
    ) -> (
        Result<Response>,
        CallStats,
        Option<windlass_contract::Entropy>,
    ) {
        let tape = TapeRng::new(entropy);
        let (result, stats) = self.call_taped(tenant, req, Some(&tape));
        (result, stats, Some(tape.entropy()))
    }

    fn checks_config(&self) -> bool {
        self.checks_config
    }

    fn validate_config(&self, config: &str) -> Result<()> {
        Plugin::validate_config(self, config)
    }

    fn name(&self) -> &str {
        &self.name
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn trap_message_carries_the_panic_but_not_the_backtrace_hint() {
        let stderr = "\nthread '<unnamed>' panicked at src/lib.rs:3:5:\nboom\nnote: run with `RUST_BACKTRACE=1` environment variable to display a backtrace\n";
        assert_eq!(
            with_guest_stderr("unreachable".into(), stderr),
            "unreachable; guest stderr: thread '<unnamed>' panicked at src/lib.rs:3:5:\nboom"
        );
        assert_eq!(with_guest_stderr("unreachable".into(), ""), "unreachable");
    }
}
