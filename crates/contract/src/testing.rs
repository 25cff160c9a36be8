//! Plugins written in Rust and linked into a test, behind the same [`Engine`] and
//! [`Reconciler`] traits as components (feature `testing`): the pipeline and the operator can
//! be tested without building a component, and a test says in a few lines what the plugin
//! does.
//!
//! A [`NativeEngine`] knows its plugins by the bytes that stand for them: a test adds a plugin
//! under some bytes ([`NativeEngine::add`]), then puts the same bytes where a component would
//! go (a ConfigMap's `binaryData`, a file). Loading any other bytes fails as a component that
//! does not compile would.
//!
//! # Guarantees
//! - A native plugin answers `info` with what it was made with and every call with what its
//!   function returns; its digest is the digest of the bytes it was added under, as a
//!   component's is of its bytes.
//! - Calls are counted ([`Native::calls`]), so a test can tell that a plugin was not called.

use std::{
    collections::HashMap,
    sync::{
        Arc, Mutex,
        atomic::{AtomicUsize, Ordering},
    },
    time::Instant,
};

use crate::{
    CallStats, Engine, Error, LoadOptions, PluginErrorKind, PluginInfo, Reconciler, Request,
    Response, Result, digest,
};

/// What a native plugin does with one call.
pub type ReconcileFn = dyn Fn(&Request) -> Result<Response> + Send + Sync;

/// How a native plugin checks its config: ok, or the message naming the key.
pub type ValidateFn = dyn Fn(&str) -> std::result::Result<(), String> + Send + Sync;

/// A plugin compiled into the test.
pub struct Native {
    info: PluginInfo,
    digest: String,
    imports: Vec<String>,
    reconcile: Box<ReconcileFn>,
    validate: Option<Box<ValidateFn>>,
    calls: AtomicUsize,
}

impl std::fmt::Debug for Native {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Native")
            .field("info", &self.info)
            .field("digest", &self.digest)
            .finish_non_exhaustive()
    }
}

impl Native {
    /// A plugin that says `info` of itself and answers each call with `reconcile`; its digest
    /// is that of its name and version until it is added to an engine.
    pub fn new(
        info: PluginInfo,
        reconcile: impl Fn(&Request) -> Result<Response> + Send + Sync + 'static,
    ) -> Self {
        let digest = digest(format!("native:{}@{}", info.name, info.version).as_bytes());
        Native {
            info,
            digest,
            imports: Vec::new(),
            reconcile: Box::new(reconcile),
            validate: None,
            calls: AtomicUsize::new(0),
        }
    }

    /// The plugin checks its config with `validate`, as a component exporting the contract's
    /// `config` interface does.
    #[must_use]
    pub fn validating(
        mut self,
        validate: impl Fn(&str) -> std::result::Result<(), String> + Send + Sync + 'static,
    ) -> Self {
        self.validate = Some(Box::new(validate));
        self
    }

    /// How many calls the plugin has answered.
    pub fn calls(&self) -> usize {
        self.calls.load(Ordering::SeqCst)
    }
}

impl Reconciler for Native {
    fn info(&self) -> &PluginInfo {
        &self.info
    }

    fn digest(&self) -> &str {
        &self.digest
    }

    fn imports(&self) -> &[String] {
        &self.imports
    }

    fn call_for(&self, _tenant: &str, req: &Request) -> (Result<Response>, CallStats) {
        let started = Instant::now();
        self.calls.fetch_add(1, Ordering::SeqCst);
        let result = (self.reconcile)(req);
        let stats = CallStats {
            duration: started.elapsed(),
            ..CallStats::default()
        };
        (result, stats)
    }

    fn checks_config(&self) -> bool {
        self.validate.is_some()
    }

    fn validate_config(&self, config: &str) -> Result<()> {
        match &self.validate {
            Some(validate) => validate(config).map_err(|message| Error::Plugin {
                plugin: self.info.name.clone(),
                kind: PluginErrorKind::InvalidConfig,
                message,
            }),
            None => Ok(()),
        }
    }
}

/// An engine whose "components" are native plugins, each known by the bytes it was added under.
#[derive(Debug, Default)]
pub struct NativeEngine {
    plugins: Mutex<HashMap<Vec<u8>, Arc<Native>>>,
    forgotten: Mutex<Vec<String>>,
}

impl NativeEngine {
    /// An engine with no plugins.
    pub fn new() -> Self {
        Self::default()
    }

    /// Adds `plugin` under `bytes`: loading those bytes gives it, with their digest. Returns
    /// the plugin, to count its calls.
    pub fn add(&self, bytes: impl Into<Vec<u8>>, mut plugin: Native) -> Arc<Native> {
        let bytes = bytes.into();
        plugin.digest = digest(&bytes);
        let plugin = Arc::new(plugin);
        self.lock().insert(bytes, plugin.clone());
        plugin
    }

    /// The digests the engine was told to forget, in order.
    pub fn forgotten(&self) -> Vec<String> {
        self.forgotten
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .clone()
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<Vec<u8>, Arc<Native>>> {
        self.plugins.lock().unwrap_or_else(|e| e.into_inner())
    }
}

impl Engine for NativeEngine {
    fn load(
        &self,
        label: &str,
        bytes: &[u8],
        _options: LoadOptions,
    ) -> Result<Arc<dyn Reconciler>> {
        match self.lock().get(bytes) {
            Some(plugin) => Ok(plugin.clone()),
            None => Err(Error::Compile {
                plugin: label.to_string(),
                message: format!(
                    "no native plugin was added under these {} bytes",
                    bytes.len()
                ),
            }),
        }
    }

    fn forget(&self, digest: &str) {
        self.forgotten
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .push(digest.to_string());
    }
}

/// The `info` of a plugin of `name` reconciling `parent`, producing `children`.
pub fn info(name: &str, parent: &str, children: &[&str]) -> PluginInfo {
    PluginInfo {
        name: name.to_string(),
        version: "0.1.0".to_string(),
        parent_kinds: vec![parent.to_string()],
        child_kinds: children.iter().map(|k| k.to_string()).collect(),
        reads_kinds: Vec::new(),
        finalizes: false,
    }
}

/// The error a plugin returns when it fails (`plugin-error::failed`).
pub fn failed(plugin: &str, message: &str) -> Error {
    Error::Plugin {
        plugin: plugin.to_string(),
        kind: PluginErrorKind::Failed,
        message: message.to_string(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::Phase;

    fn request() -> Request {
        Request {
            phase: Phase::Reconcile,
            parent: "{}".into(),
            observed: Vec::new(),
            desired: Vec::new(),
            config: "{}".into(),
            now: "2026-01-01T00:00:00Z".into(),
        }
    }

    #[test]
    fn a_native_plugin_loads_by_its_bytes_and_answers_with_its_function() {
        let engine = NativeEngine::new();
        let added = engine.add(
            b"hello".to_vec(),
            Native::new(info("hello", "x.dev/v1/P", &["v1/ConfigMap"]), |req| {
                Ok(Response {
                    desired: vec![req.parent.clone()],
                    ..Response::default()
                })
            }),
        );
        let plugin = engine
            .load("hello", b"hello", LoadOptions::default())
            .expect("the added bytes load");
        assert_eq!(plugin.digest(), digest(b"hello"));
        assert_eq!(plugin.name(), "hello");
        let (result, _) = plugin.call_for("ns", &request());
        assert_eq!(result.expect("the call succeeds").desired, vec!["{}"]);
        assert_eq!(added.calls(), 1);
        engine.forget(plugin.digest());
        assert_eq!(engine.forgotten(), vec![digest(b"hello")]);
    }

    #[test]
    fn other_bytes_fail_as_a_component_that_does_not_compile_naming_the_plugin() {
        let engine = NativeEngine::new();
        let Err(e) = engine.load("stranger", b"\0asm", LoadOptions::default()) else {
            panic!("unknown bytes loaded");
        };
        assert_eq!(e.reason(), "CompileFailed");
        assert_eq!(e.plugin(), Some("stranger"));
    }
}
