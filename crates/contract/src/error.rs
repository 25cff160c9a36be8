//! Why loading or calling a plugin failed.

use std::{path::PathBuf, time::Duration};

/// Why loading or calling a plugin failed. Every variant names the plugin.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// The bytes are not a WebAssembly component this engine can compile.
    #[error("plugin {plugin}: not a loadable WebAssembly component: {message}")]
    Compile { plugin: String, message: String },

    /// The component does not export a contract version this host supports.
    #[error("plugin {plugin}: incompatible contract: {found}; this host supports {supported}")]
    IncompatibleContract {
        plugin: String,
        found: String,
        supported: &'static str,
    },

    /// The component imports something the sandbox does not provide, or the instance pool is
    /// exhausted.
    #[error("plugin {plugin}: cannot instantiate: {message}")]
    Instantiate { plugin: String, message: String },

    /// The call ran past its time limit and was interrupted.
    #[error("plugin {plugin}: timed out after {limit:?}")]
    Timeout { plugin: String, limit: Duration },

    /// The guest tried to grow its memory beyond its limit.
    #[error("plugin {plugin}: memory limit of {limit} bytes exceeded")]
    MemoryLimit { plugin: String, limit: usize },

    /// The guest used up its fuel (instruction budget).
    #[error("plugin {plugin}: fuel limit of {limit} exhausted")]
    FuelExhausted { plugin: String, limit: u64 },

    /// The guest trapped: a panic, an `unreachable`, an out-of-bounds access. The message
    /// carries the trap and what the guest last wrote to stderr (a Rust panic message).
    #[error("plugin {plugin}: trapped: {message}")]
    Trap { plugin: String, message: String },

    /// The plugin itself reported an error.
    #[error("plugin {plugin}: {kind}: {message}")]
    Plugin {
        plugin: String,
        kind: PluginErrorKind,
        message: String,
    },

    /// The plugin's `info` is not usable (bad name, no parent kinds, …).
    #[error("plugin {plugin}: invalid info: {why}")]
    InvalidInfo { plugin: String, why: String },

    /// Reading or writing the precompiled cache failed.
    #[error("precompiled cache {path}: {source}")]
    Cache {
        path: PathBuf,
        source: std::io::Error,
    },

    /// The engine could not be configured (bad limits, platform without virtual memory).
    #[error("cannot configure the WebAssembly engine: {0}")]
    Engine(String),
}

/// The kind of error a plugin reported, as in the WIT `plugin-error` variant.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PluginErrorKind {
    /// The parent's spec cannot be acted on.
    InvalidParent,
    /// The plugin's config cannot be used.
    InvalidConfig,
    /// Anything else.
    Failed,
}

impl std::fmt::Display for PluginErrorKind {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            PluginErrorKind::InvalidParent => "invalid parent",
            PluginErrorKind::InvalidConfig => "invalid config",
            PluginErrorKind::Failed => "failed",
        })
    }
}

impl Error {
    /// A stable, one-word reason for metrics labels and condition reasons.
    pub fn reason(&self) -> &'static str {
        match self {
            Error::Compile { .. } => "CompileFailed",
            Error::IncompatibleContract { .. } => "IncompatibleContract",
            Error::Instantiate { .. } => "InstantiateFailed",
            Error::Timeout { .. } => "Timeout",
            Error::MemoryLimit { .. } => "MemoryLimit",
            Error::FuelExhausted { .. } => "FuelExhausted",
            Error::Trap { .. } => "Trap",
            Error::Plugin {
                kind: PluginErrorKind::InvalidParent,
                ..
            } => "InvalidParent",
            Error::Plugin {
                kind: PluginErrorKind::InvalidConfig,
                ..
            } => "InvalidConfig",
            Error::Plugin {
                kind: PluginErrorKind::Failed,
                ..
            } => "PluginFailed",
            Error::InvalidInfo { .. } => "InvalidInfo",
            Error::Cache { .. } => "CacheFailed",
            Error::Engine(_) => "EngineFailed",
        }
    }
}

/// Result of runtime operations.
pub type Result<T, E = Error> = std::result::Result<T, E>;

impl Error {
    /// The plugin the error is about, when it is about one.
    pub fn plugin(&self) -> Option<&str> {
        match self {
            Error::Compile { plugin, .. }
            | Error::IncompatibleContract { plugin, .. }
            | Error::Instantiate { plugin, .. }
            | Error::Timeout { plugin, .. }
            | Error::MemoryLimit { plugin, .. }
            | Error::FuelExhausted { plugin, .. }
            | Error::Trap { plugin, .. }
            | Error::Plugin { plugin, .. }
            | Error::InvalidInfo { plugin, .. } => Some(plugin),
            Error::Cache { .. } | Error::Engine(_) => None,
        }
    }
}
