//! The same plugin in every language Windlass has a template for, measured side by side in one
//! run: the `windlass plugin new` template (a Greeting → a ConfigMap, a status field and a
//! condition), generated and built for Rust, Python, JavaScript and Go. For each: component
//! size, load time compiling the component and loading it from the precompiled cache, and the
//! time of one reconcile with a fresh instance per call and with a reused instance. Prints a
//! Markdown table with each figure's ratio to Rust's. Run with `cargo xtask bench languages`
//! (the toolchains come from `.ci/tools-plugins`).

use std::{
    path::{Path, PathBuf},
    process::Command,
    sync::Arc,
    time::{Duration, Instant},
};

use serde_json::json;
use windlass::{
    runtime::{InstanceMode, LoadOptions, Phase, Plugin, Request, Runtime, RuntimeConfig},
    scaffold::{self, Lang},
};

const COMPILES: usize = 3;
const CACHED_LOADS: usize = 5;
const CALLS: usize = 200;

fn root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .unwrap()
        .to_path_buf()
}

/// Generates the template into `target/bench-languages/<lang>` and builds it (again each run,
/// so that the figures are of the current templates and SDKs).
fn build(lang: Lang) -> Vec<u8> {
    let dir = root().join("target/bench-languages").join(lang.as_str());
    let _ = std::fs::remove_dir_all(&dir);
    let name = format!("bench-{}", lang.as_str());
    scaffold::generate(lang, &name, &dir).expect("template generated");
    let status = Command::new(dir.join("build.sh"))
        .current_dir(&dir)
        .env("CARGO_TARGET_DIR", root().join("target/template-rust"))
        .status()
        .expect("build.sh runs");
    assert!(status.success(), "{}: build.sh failed", lang.as_str());
    std::fs::read(dir.join(format!("{name}.wasm"))).expect("component built")
}

fn request() -> Request {
    Request {
        phase: Phase::Reconcile,
        parent: json!({
            "apiVersion": "example.windlass.dev/v1alpha1", "kind": "Greeting",
            "metadata": {"name": "hello", "namespace": "default", "uid": "3e1f0c9a-5b7d-4c2e-9f1a-000000000001", "generation": 1},
            "spec": {"message": "Hello, world"},
        })
        .to_string(),
        observed: vec![],
        desired: vec![],
        config: "{}".into(),
        now: "2026-11-30T00:00:00Z".into(),
    }
}

fn median(mut v: Vec<Duration>) -> Duration {
    v.sort();
    v[v.len() / 2]
}

fn calls(plugin: &Plugin, req: &Request) -> Duration {
    for _ in 0..5 {
        plugin.call(req).expect("warm-up call");
    }
    median(
        (0..CALLS)
            .map(|_| {
                let t = Instant::now();
                let resp = plugin.call(req).expect("call");
                let elapsed = t.elapsed();
                assert_eq!(resp.desired.len(), 1, "the ConfigMap");
                elapsed
            })
            .collect(),
    )
}

struct Row {
    lang: Lang,
    size: usize,
    compile: Duration,
    cached: Duration,
    fresh: Duration,
    reused: Duration,
}

fn measure(lang: Lang, bytes: &[u8]) -> Row {
    let label = lang.as_str();
    let compile = median(
        (0..COMPILES)
            .map(|_| {
                let runtime = Runtime::new(RuntimeConfig::default()).expect("runtime");
                let t = Instant::now();
                runtime
                    .load(label, bytes, LoadOptions::default())
                    .expect("load");
                t.elapsed()
            })
            .collect(),
    );
    let cache = tempfile::tempdir().expect("cache dir");
    let cached_config = RuntimeConfig {
        cache_dir: Some(cache.path().to_path_buf()),
        ..RuntimeConfig::default()
    };
    Runtime::new(cached_config.clone())
        .expect("runtime")
        .load(label, bytes, LoadOptions::default())
        .expect("load that fills the cache");
    let cached = median(
        (0..CACHED_LOADS)
            .map(|_| {
                let runtime = Runtime::new(cached_config.clone()).expect("runtime");
                let t = Instant::now();
                runtime
                    .load(label, bytes, LoadOptions::default())
                    .expect("load from the cache");
                t.elapsed()
            })
            .collect(),
    );
    let runtime = Runtime::new(cached_config).expect("runtime");
    let req = request();
    let load = |mode| {
        Arc::new(
            runtime
                .load(
                    label,
                    bytes,
                    LoadOptions {
                        mode,
                        ..LoadOptions::default()
                    },
                )
                .expect("load"),
        )
    };
    let fresh = calls(&load(InstanceMode::Fresh), &req);
    let reused = calls(&load(InstanceMode::Reuse), &req);
    Row {
        lang,
        size: bytes.len(),
        compile,
        cached,
        fresh,
        reused,
    }
}

fn ms(d: Duration) -> String {
    format!("{:.2} ms", d.as_secs_f64() * 1e3)
}

fn main() {
    let built: Vec<(Lang, Vec<u8>)> = Lang::ALL.iter().map(|&l| (l, build(l))).collect();
    let rows: Vec<Row> = built.iter().map(|(l, b)| measure(*l, b)).collect();
    let rust = &rows[0];
    let ratio = |a: f64, b: f64| format!("{:.1}×", a / b);
    println!(
        "\n| language | size | load, compiling | load, from cache | call, fresh instance | call, reused instance |"
    );
    println!("| --- | ---: | ---: | ---: | ---: | ---: |");
    for r in &rows {
        println!(
            "| {} | {:.2} MB ({}) | {} ({}) | {} ({}) | {} ({}) | {} ({}) |",
            r.lang.as_str(),
            r.size as f64 / 1e6,
            ratio(r.size as f64, rust.size as f64),
            ms(r.compile),
            ratio(r.compile.as_secs_f64(), rust.compile.as_secs_f64()),
            ms(r.cached),
            ratio(r.cached.as_secs_f64(), rust.cached.as_secs_f64()),
            ms(r.fresh),
            ratio(r.fresh.as_secs_f64(), rust.fresh.as_secs_f64()),
            ms(r.reused),
            ratio(r.reused.as_secs_f64(), rust.reused.as_secs_f64()),
        );
    }
    println!(
        "\nmedians: compile of {COMPILES} loads, cache of {CACHED_LOADS}, calls of {CALLS}; \
         ratios to Rust in parentheses"
    );
}
