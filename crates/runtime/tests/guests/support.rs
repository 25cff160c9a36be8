//! What the sandbox and hostile-guest tests share: one runtime, loading a guest by its path,
//! a parent and a request, and the check that the runtime still serves the storage plugin
//! after a misbehaving guest.

use std::{
    io::Write,
    sync::{Arc, Mutex, OnceLock},
    time::Duration,
};

use serde_json::{Value, json};
use windlass_runtime::{Limits, LoadOptions, Phase, Plugin, Request, Runtime, RuntimeConfig};
use windlass_test_guests as guests;

/// The time every request is made at.
pub const NOW: &str = "2026-01-01T00:00:00Z";

/// The runtime every test loads its guests on, so that a misbehaving guest is shown not to
/// harm the others.
pub fn runtime() -> &'static Runtime {
    static RUNTIME: OnceLock<Runtime> = OnceLock::new();
    RUNTIME.get_or_init(|| Runtime::new(RuntimeConfig::default()).expect("runtime"))
}

/// The guest at `path`, loaded with `options` and labelled with its file name.
pub fn load_with(path: &str, options: LoadOptions) -> Plugin {
    let label = std::path::Path::new(path)
        .file_stem()
        .unwrap()
        .to_str()
        .unwrap();
    runtime()
        .load(label, &guests::bytes(path), options)
        .expect("guest loads")
}

/// The guest at `path` with the default limits.
pub fn load(path: &str) -> Plugin {
    load_with(path, LoadOptions::default())
}

/// The default limits with another time limit.
pub fn with_timeout(timeout: Duration) -> LoadOptions {
    LoadOptions {
        limits: Limits {
            timeout,
            ..Limits::default()
        },
        ..LoadOptions::default()
    }
}

/// A Thing in namespace `shop`.
pub fn thing() -> Value {
    thing_in("shop")
}

/// A Thing in `namespace`.
pub fn thing_in(namespace: &str) -> Value {
    json!({
        "apiVersion": "example.com/v1", "kind": "Thing",
        "metadata": {"name": "t1", "namespace": namespace, "uid": "u1"},
    })
}

/// A reconcile of [`thing`] with `config`.
pub fn request(config: Value) -> Request {
    Request {
        phase: Phase::Reconcile,
        parent: thing().to_string(),
        observed: vec![],
        desired: vec![],
        config: config.to_string(),
        now: NOW.into(),
    }
}

/// A SampleDB the storage plugin reconciles.
pub fn sampledb() -> Value {
    json!({
        "apiVersion": "samples.windlass.dev/v1alpha1", "kind": "SampleDB",
        "metadata": {"name": "orders", "namespace": "shop", "uid": "u2"},
        "spec": {"version": "16.4", "replicas": 2, "storage": {"size": "1Gi"}},
    })
}

/// The storage plugin still produces its five children (two Services, ConfigMap, Secret,
/// StatefulSet) on the same runtime.
pub fn assert_still_serving() {
    let storage = load(guests::STORAGE);
    let req = Request {
        parent: sampledb().to_string(),
        ..request(json!({}))
    };
    let resp = storage
        .call(&req)
        .expect("storage still works after a misbehaving guest");
    assert_eq!(resp.desired.len(), 5);
}

/// What the subscriber on this thread logged while `f` ran (plugin calls run on the caller's
/// thread).
pub fn capture_log<R>(f: impl FnOnce() -> R) -> (R, String) {
    #[derive(Clone, Default)]
    struct Sink(Arc<Mutex<Vec<u8>>>);
    impl Write for Sink {
        fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
            self.0.lock().unwrap().extend_from_slice(buf);
            Ok(buf.len())
        }
        fn flush(&mut self) -> std::io::Result<()> {
            Ok(())
        }
    }
    let sink = Sink::default();
    let writer = sink.clone();
    let subscriber = tracing_subscriber::fmt()
        .with_writer(move || writer.clone())
        .with_ansi(false)
        .finish();
    // tracing caches a callsite's interest process-wide when the callsite is first reached,
    // asking the subscriber of the thread that reaches it: a test on another thread, with none,
    // could cache "never" for what `f` logs. With a global subscriber that takes everything no
    // thread is without one; the interest is asked again once this subscriber is current.
    let _ = tracing::subscriber::set_global_default(tracing_subscriber::registry());
    let result = tracing::subscriber::with_default(subscriber, || {
        tracing::callsite::rebuild_interest_cache();
        f()
    });
    let log = String::from_utf8(sink.0.lock().unwrap().clone()).unwrap();
    (result, log)
}
