//! The plugin contract (`wit/plugin.wit`) as every layer of the host sees it, without an
//! engine: the WIT types in plain Rust, how a plugin is loaded, why a load or call failed, and
//! the two traits the operator calls plugins through ([`Engine`], [`Reconciler`]).
//!
//! The runtime (`windlass-runtime`) implements the traits with wasmtime and converts these
//! types to and from its generated bindings; the policy, the sources and the operator depend on
//! this crate only, so none of them links an engine. With the `testing` feature, [`testing`]
//! implements them with plugins written in Rust, for tests that need no component.

mod error;
#[cfg(feature = "testing")]
pub mod testing;
mod types;

use std::{sync::Arc, time::Duration};

use sha2::{Digest as _, Sha256};

pub use error::{Error, PluginErrorKind, Result};
pub use types::{Condition, Event, Level, Phase, PluginError, PluginInfo, Request, Response};

/// The export the host calls, with the one contract version this host speaks.
pub const RECONCILER_EXPORT: &str = "windlass:plugin/reconciler@0.1.0";
/// The prefix every version of the reconciler export shares.
pub const RECONCILER_EXPORT_PREFIX: &str = "windlass:plugin/reconciler@";
/// The export through which a plugin checks its config (contract 0.2.0, `wit/0.2.0`): a
/// plugin of 0.2.0 exports it beside [`RECONCILER_EXPORT`], one of 0.1.0 does not.
pub const CONFIG_EXPORT: &str = "windlass:plugin/config@0.2.0";
/// The function of [`CONFIG_EXPORT`]: `validate(config: string) -> result<_, string>`.
pub const CONFIG_VALIDATE: &str = "validate";

/// Limits for one plugin's calls.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Limits {
    /// Wall-clock time one call may take. Default 2 s.
    pub timeout: Duration,
    /// Linear memory one instance may hold, in bytes. Default 128 MiB.
    pub memory_bytes: usize,
    /// Instructions (fuel units) one call may use; the engine must count fuel. Default none.
    pub fuel: Option<u64>,
}

impl Default for Limits {
    fn default() -> Self {
        Limits {
            timeout: Duration::from_secs(2),
            memory_bytes: 128 << 20,
            fuel: None,
        }
    }
}

/// Whether a plugin gets a fresh instance per call or keeps instances warm.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum InstanceMode {
    /// A fresh instance per call: no state survives from one call to the next.
    #[default]
    Fresh,
    /// Reuse instances between calls; an instance that trapped is dropped. For guests whose
    /// start-up dominates (Python, JavaScript).
    Reuse,
}

/// How to load one plugin.
#[derive(Debug, Clone, Default)]
pub struct LoadOptions {
    /// Limits applied to every call.
    pub limits: Limits,
    /// Fresh or reused instances.
    pub mode: InstanceMode,
}

/// What one call cost.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct CallStats {
    /// Wall time, including instantiation when the instance was fresh.
    pub duration: Duration,
    /// The most linear memory the instance held, in bytes.
    pub memory_peak_bytes: usize,
    /// Fuel used, when fuel is enabled.
    pub fuel_consumed: Option<u64>,
    /// Whether a warm instance served the call.
    pub reused: bool,
}

/// A loaded plugin that has answered `info`, ready to call from several threads at once.
pub trait Reconciler: Send + Sync + std::fmt::Debug {
    /// What the plugin said of itself at load.
    fn info(&self) -> &PluginInfo;
    /// The sha256 digest of the component, as `sha256:<hex>`.
    fn digest(&self) -> &str;
    /// The interfaces the component imports (`wasi:…`, `windlass:plugin/log@…`).
    fn imports(&self) -> &[String];
    /// Runs one phase for one parent on behalf of `tenant`: in [`InstanceMode::Reuse`] an
    /// instance that served one tenant never serves another.
    ///
    /// # Errors
    /// Any [`Error`] of a call: a time, memory or fuel limit, a trap, or the plugin's own error.
    fn call_for(&self, tenant: &str, req: &Request) -> (Result<Response>, CallStats);

    /// Whether the plugin checks its config itself (it exports [`CONFIG_EXPORT`]).
    fn checks_config(&self) -> bool;

    /// Asks the plugin whether `config` (its WasmPlugin's, as JSON text) is usable, under the
    /// same limits as any call. A plugin that does not check its config accepts any here (it
    /// may still refuse it in a call).
    ///
    /// # Errors
    /// [`Error::Plugin`] with [`PluginErrorKind::InvalidConfig`] and the plugin's message, or
    /// any error of a call (a limit, a trap).
    fn validate_config(&self, config: &str) -> Result<()>;

    /// The plugin's name, from its `info`.
    fn name(&self) -> &str {
        &self.info().name
    }

    /// Runs one call in an instance of its own whose randomness (`wasi:random`) is recorded, or
    /// given back from a recording, and whose monotonic clock ticks per reading, so that the
    /// call can be reproduced byte for byte: with the same request, the same component and the
    /// same entropy, a guest computes the same response. Returns the entropy the call drew (all of it, from the instance's start on).
    /// An engine that cannot record runs the call as [`Reconciler::call_for`] on behalf of
    /// `tenant` and returns none.
    fn call_recorded(
        &self,
        tenant: &str,
        req: &Request,
        entropy: Tape,
    ) -> (Result<Response>, CallStats, Option<Entropy>) {
        let _ = entropy;
        let (result, stats) = self.call_for(tenant, req);
        (result, stats, None)
    }
}

/// The randomness one recorded call drew, in the order it drew it.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Entropy {
    /// Every byte `wasi:random` (and `wasi:random/insecure`) gave the guest.
    pub bytes: Vec<u8>,
    /// What `wasi:random/insecure-seed` answered.
    pub insecure_seed: u128,
    /// On a replay: the guest asked for more than was recorded (it was given zeros), so the
    /// call did not run as recorded.
    pub overdrawn: bool,
}

/// Where a recorded call's randomness comes from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Tape {
    /// From the system, recorded.
    Record,
    /// From a recording, given back in order.
    Replay(Entropy),
}

/// Loads plugins: compiles (or finds compiled) a component, checks that it speaks this
/// contract, and smoke-calls `info`.
pub trait Engine: Send + Sync + std::fmt::Debug {
    /// Loads `bytes`; `label` names the plugin in errors until its own name is known.
    ///
    /// # Errors
    /// The component cannot be compiled or instantiated, speaks another contract version, or
    /// its `info` fails or is not usable.
    fn load(&self, label: &str, bytes: &[u8], options: LoadOptions) -> Result<Arc<dyn Reconciler>>;
    /// Drops what the engine keeps in memory for a digest no plugin serves any more.
    fn forget(&self, digest: &str);
}

/// The sha256 digest of bytes, as `sha256:<hex>`: how components and manifests are pinned.
pub fn digest(bytes: &[u8]) -> String {
    format!("sha256:{}", hex::encode(Sha256::digest(bytes)))
}

/// The current time as the contract writes it (a request's `now`, condition and event times):
/// RFC 3339 in UTC, whole seconds.
pub fn now_rfc3339() -> String {
    jiff::Timestamp::now()
        .round(jiff::Unit::Second)
        .map(|t| t.to_string())
        .unwrap_or_default()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn digests_are_sha256_hex_with_the_algorithm_named() {
        assert_eq!(
            digest(b""),
            "sha256:e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855"
        );
    }

    #[test]
    fn now_is_utc_in_whole_seconds() {
        let now = now_rfc3339();
        assert!(now.ends_with('Z') && !now.contains('.'), "{now}");
    }
}
