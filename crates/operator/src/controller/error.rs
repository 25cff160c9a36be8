//! Why loading a plugin ([`LoadError`]) or reconciling a parent ([`ReconcileError`]) failed,
//! with the stable one-word reasons that conditions and metrics carry. A cause both can meet
//! (the API, discovery, an aborted plugin call, an object that cannot be encoded) has one
//! [`reason`] word in both, and keeps the error it came from as its `source()`.

use windlass_policy::pipeline;

/// The reason words the two errors share, so that one cause reads the same on a parent, a
/// WasmPlugin and in the metrics.
pub mod reason {
    /// Any API call that failed.
    pub const API_ERROR: &str = "ApiError";
    /// A kind the API server does not serve (or whose scope does not fit).
    pub const KIND_NOT_SERVED: &str = "KindNotServed";
    /// A plugin call whose task panicked or was cancelled.
    pub const PLUGIN_CALL_ABORTED: &str = "PluginCallAborted";
    /// An object read from the API that cannot be turned into JSON.
    pub const ENCODE_FAILED: &str = "EncodeFailed";
}

/// A kind the API server does not serve, or an object that does not fit its kind's scope.
#[derive(Debug, thiserror::Error)]
pub enum DiscoveryError {
    /// Asking the API server for the kind failed (not found, or not reachable).
    #[error("kind {kind} is not served by the API server: {source}")]
    Api {
        kind: String,
        #[source]
        source: kube::Error,
    },
    /// The kind is malformed, or an object's namespace does not fit the kind's scope.
    #[error("kind {kind} is not served by the API server: {why}")]
    Unfit { kind: String, why: String },
}

/// Why loading (or retiring) a WasmPlugin's version failed: it is refused, and the version
/// serving before, if any, goes on serving.
#[derive(Debug, thiserror::Error)]
pub enum LoadError {
    /// The plugin's source could not be read.
    #[error("plugin {plugin}: source {why}")]
    Source { plugin: String, why: String },
    /// The source could not be used: a registry pull failed (unreachable, auth, not found,
    /// wrong layout), a gzip-compressed component is corrupt or inflates past the limit, or
    /// the pin is malformed or does not match what was fetched, from any source.
    #[error("plugin {plugin}: {source}")]
    Fetch {
        plugin: String,
        source: windlass_source::Error,
    },
    /// The component failed to load or to answer `info`.
    #[error(transparent)]
    Runtime(#[from] windlass_contract::Error),
    /// The plugin does not reconcile the kind its WasmPlugin names.
    #[error("plugin {plugin}: reconciles {declared:?}, not {wanted}")]
    WrongParentKind {
        plugin: String,
        wanted: String,
        declared: Vec<String>,
    },
    /// The diff gate (`rollout.diffGate`): the new version would be refused or fail on live
    /// parents.
    #[error(
        "diff gate: the new version would be refused on {refused} and fail on {failing} of {parents} parents; {first}"
    )]
    DiffGate {
        parents: usize,
        refused: usize,
        failing: usize,
        /// The first such parent and why.
        first: String,
    },
    /// The diff gate could not judge the new version on some parents (an API read failed):
    /// tried again later.
    #[error("diff gate: {parents} parents could not be judged yet; {first}")]
    DiffGateUnjudged {
        parents: usize,
        /// The first such parent and why.
        first: String,
    },
    /// A new plugin version failed on an existing parent before it was swapped in.
    #[error("canary reconcile of {parent} failed: {source}")]
    Canary {
        parent: String,
        source: pipeline::Error,
    },
    /// A plugin declares a kind the API server does not serve (or whose scope cannot be
    /// discovered): it is refused at load.
    #[error("plugin {plugin}: declares kind {kind}, which the API server does not serve: {source}")]
    KindNotServed {
        plugin: String,
        kind: String,
        #[source]
        source: DiscoveryError,
    },
    /// A plugin declares a kind its WasmPlugin does not grant.
    #[error("plugin {plugin}: {why}")]
    NotGranted { plugin: String, why: String },
    /// A kind is not served by the API server.
    #[error(transparent)]
    Discovery(#[from] DiscoveryError),
    /// Any other API call failed.
    #[error("kubernetes API: {0}")]
    Kube(#[from] kube::Error),
    /// A plugin call could not be run (its task panicked or was cancelled).
    #[error("plugin call did not complete: {0}")]
    Join(#[source] tokio::task::JoinError),
    /// An object read from the API could not be turned into the JSON a plugin is given.
    #[error("encoding {object} as JSON: {source}")]
    Encode {
        object: String,
        source: serde_json::Error,
    },
}

impl LoadError {
    /// Whether trying the same thing again later may succeed: the API or a source was not
    /// available, a kind is not served yet. A broken or refused plugin version is not retried;
    /// a new spec, ConfigMap or tag is.
    pub fn is_transient(&self) -> bool {
        matches!(
            self,
            LoadError::Source { .. }
                | LoadError::Kube(_)
                | LoadError::DiffGateUnjudged { .. }
                | LoadError::Discovery(_)
                | LoadError::KindNotServed { .. }
                | LoadError::Join(_)
        )
    }

    /// A stable, one-word reason for conditions and metrics.
    pub fn reason(&self) -> &'static str {
        match self {
            LoadError::Source { .. } => "SourceUnavailable",
            LoadError::Fetch { source, .. } => source.reason(),
            LoadError::Runtime(e) => e.reason(),
            LoadError::WrongParentKind { .. } => "WrongParentKind",
            LoadError::Canary { source, .. } => source.reason(),
            LoadError::DiffGate { .. } => "DiffGateRefused",
            LoadError::DiffGateUnjudged { .. } => "DiffGateUnjudged",
            LoadError::Discovery(_) | LoadError::KindNotServed { .. } => reason::KIND_NOT_SERVED,
            LoadError::NotGranted { .. } => "KindNotGranted",
            LoadError::Kube(_) => reason::API_ERROR,
            LoadError::Join(_) => reason::PLUGIN_CALL_ABORTED,
            LoadError::Encode { .. } => reason::ENCODE_FAILED,
        }
    }
}

/// Why one reconcile of a parent failed: nothing is applied, pruned or finalized, the parent's
/// `Reconciled` condition says why, and it is retried with backoff.
#[derive(Debug, thiserror::Error)]
pub enum ReconcileError {
    /// A plugin of the pipeline failed or broke the policy.
    #[error(transparent)]
    Pipeline(#[from] pipeline::Error),
    /// A kind is not served by the API server, or an object does not fit its scope.
    #[error(transparent)]
    Discovery(#[from] DiscoveryError),
    /// A desired object exists but is not this parent's child (or may only be labelled).
    #[error("plugin {plugin}: invalid output (ObjectNotOwned): {object}: {why}")]
    NotOwned {
        plugin: String,
        object: String,
        why: String,
    },
    /// Applying a desired object failed.
    #[error("applying {object}: {source}")]
    Apply { object: String, source: kube::Error },
    /// Deleting a child failed.
    #[error("pruning {object}: {source}")]
    Prune { object: String, source: kube::Error },
    /// A WasmPlugin of the parent's kind has no serving version (loading, or refused with no
    /// earlier version): the pipeline without it would apply, prune and finalize as if its
    /// concern did not exist, so nothing runs until it serves.
    #[error("waiting for WasmPlugins to serve before reconciling: {}", plugins.join(", "))]
    NotServing { plugins: Vec<String> },
    /// A deleting parent's release annotation is not one the host knows.
    #[error("parent {parent}: {why}")]
    Release { parent: String, why: String },

    /// The Services and NetworkPolicies the traffic check reads could not be read.
    #[error("the traffic check cannot read the cluster's Services and NetworkPolicies: {why}")]
    Traffic { why: String },
    /// Any other API call failed.
    #[error("kubernetes API: {0}")]
    Kube(#[from] kube::Error),
    /// A plugin call could not be run (its task panicked or was cancelled).
    #[error("plugin call did not complete: {0}")]
    Join(#[source] tokio::task::JoinError),
    /// An object read from the API could not be turned into the JSON a plugin is given.
    #[error("encoding {object} as JSON: {source}")]
    Encode {
        object: String,
        source: serde_json::Error,
    },
}

impl ReconcileError {
    /// A stable, one-word reason for conditions and metrics.
    pub fn reason(&self) -> &'static str {
        match self {
            ReconcileError::Pipeline(e) => e.reason(),
            ReconcileError::Discovery(_) => reason::KIND_NOT_SERVED,
            ReconcileError::NotOwned { .. } => "ObjectNotOwned",
            ReconcileError::Apply { .. } => "ApplyFailed",
            ReconcileError::Prune { .. } => "PruneFailed",
            ReconcileError::NotServing { .. } => "PluginsNotServing",
            ReconcileError::Release { .. } => "ReleaseRefused",
            ReconcileError::Traffic { .. } => "TrafficUnreadable",
            ReconcileError::Kube(_) => reason::API_ERROR,
            ReconcileError::Join(_) => reason::PLUGIN_CALL_ABORTED,
            ReconcileError::Encode { .. } => reason::ENCODE_FAILED,
        }
    }
}

#[cfg(test)]
mod tests {
    use std::error::Error as _;

    use super::*;

    #[test]
    fn an_object_that_cannot_be_encoded_is_not_reported_as_an_aborted_plugin_call() {
        let Err(source) = serde_json::from_str::<serde_json::Value>("{") else {
            panic!("an unterminated object parsed");
        };
        let e = ReconcileError::Encode {
            object: "db-1".into(),
            source,
        };
        assert_eq!(e.reason(), "EncodeFailed");
        let message = e.to_string();
        assert!(message.starts_with("encoding db-1 as JSON: "), "{message}");
        assert!(!message.contains("plugin call"), "{message}");
    }

    #[tokio::test]
    async fn a_shared_cause_has_one_reason_word_and_keeps_its_source() {
        let aborted = || async {
            let task = tokio::spawn(std::future::pending::<()>());
            task.abort();
            task.await.expect_err("an aborted task completed")
        };
        let load = LoadError::Join(aborted().await);
        let reconcile = ReconcileError::Join(aborted().await);
        assert_eq!(load.reason(), reconcile.reason());
        assert_eq!(load.reason(), reason::PLUGIN_CALL_ABORTED);
        assert!(
            load.source()
                .is_some_and(|s| s.is::<tokio::task::JoinError>())
        );
        assert!(
            reconcile
                .source()
                .is_some_and(|s| s.is::<tokio::task::JoinError>())
        );
        let unfit = || DiscoveryError::Unfit {
            kind: "x/v1/Y".into(),
            why: "not of the form group/version/Kind".into(),
        };
        assert_eq!(
            LoadError::from(unfit()).reason(),
            ReconcileError::from(unfit()).reason()
        );
        assert_eq!(
            ReconcileError::from(unfit()).to_string(),
            "kind x/v1/Y is not served by the API server: not of the form group/version/Kind"
        );
    }
}
