//! The records, enums and variants of `wit/plugin.wit`, field for field. Documentation of each
//! field is in the WIT; only what Rust adds is said here.

/// Which phase a call is for.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Phase {
    /// The parent exists: converge its children.
    Reconcile,
    /// The parent is being deleted: clean up, then say `finalized`.
    Finalize,
}

/// One call's input; objects are JSON text.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Request {
    pub phase: Phase,
    pub parent: String,
    pub observed: Vec<String>,
    pub desired: Vec<String>,
    pub config: String,
    pub now: String,
}

/// A status condition a plugin reports. `kind` is the condition's *type* (`Ready`,
/// `BackupSucceeded`); WIT has no field named `type`.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Condition {
    pub kind: String,
    pub status: bool,
    pub reason: String,
    pub message: String,
}

/// An event a plugin asks the host to record on the parent.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Event {
    pub warning: bool,
    pub reason: String,
    pub message: String,
}

/// One call's output; objects are JSON text.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Response {
    pub desired: Vec<String>,
    pub status: Option<String>,
    pub conditions: Vec<Condition>,
    pub events: Vec<Event>,
    pub requeue_after_secs: Option<u32>,
    pub finalized: bool,
}

/// What a plugin says of itself.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct PluginInfo {
    pub name: String,
    pub version: String,
    pub parent_kinds: Vec<String>,
    pub child_kinds: Vec<String>,
    pub reads_kinds: Vec<String>,
    pub finalizes: bool,
}

/// The error a plugin returns.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum PluginError {
    InvalidParent(String),
    InvalidConfig(String),
    Failed(String),
}

/// The level of a plugin's log line.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Level {
    Debug,
    Info,
    Warn,
    Error,
}
