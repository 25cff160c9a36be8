//! The same plugin in every language Windlass has a template for, measured side by side in one
//! run: the `windlass plugin new` template (a Greeting → a ConfigMap, a status field and a
//! condition), generated and built for Rust, Python, JavaScript and Go. For each: component
//! size, load time compiling the component and loading it from the precompiled cache, and the
//! time of one reconcile with a fresh instance per call and with a reused instance. Prints a
//! Markdown table with each figure's ratio to Rust's. Run with `cargo xtask bench languages`
//! (the toolchains come from `.ci/tools-plugins`).
//!
//! For Rust, Python and JavaScript it also times the same plugin outside the sandbox, natively
//! on the machine (Rust built for it, CPython, Node), in process: what the component's export
//! runs (`run_parts`, `run_json`, `reconciler.reconcile`) on the same request, so that the
//! table says how much of an interpreted plugin's cost is the interpreter's own and how much
//! the sandbox's. `WINDLASS_BENCH_LANGS=python,js` measures the languages named and Rust.

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
const TURN: usize = 20;
const NATIVE_ROUNDS: usize = 5;

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

/// The request as the native servers read it (`windlass.serve`, `serve.js`): the WIT `request`
/// as a JSON object, the objects as JSON texts.
fn request_json(req: &Request) -> String {
    json!({
        "phase": "reconcile", "parent": req.parent, "observed": req.observed,
        "desired": req.desired, "config": req.config, "now": req.now,
    })
    .to_string()
}

/// Times `CALLS` calls of the component's export in CPython, in the generated directory: the
/// template's module (`plugin.py`, class `Greeter`) through the SDK's `run_json`.
const PYTHON_TIMER: &str = r#"
import json, statistics, sys, time
from windlass.plugin import run_json
from plugin import Greeter
req, calls = json.loads(sys.argv[1]), int(sys.argv[2])
args = (Greeter, req["phase"], req["parent"], req["observed"], req["desired"], req["config"], req["now"])
for _ in range(5):
    assert len(run_json(*args).desired) == 1
times = []
for _ in range(calls):
    t = time.perf_counter_ns()
    parts = run_json(*args)
    times.append(time.perf_counter_ns() - t)
    assert len(parts.desired) == 1
print(statistics.median(times))
"#;

/// The same in Node: the template's `reconciler.reconcile`, as the component exports it.
const JS_TIMER: &str = r#"
import { reconciler } from "./plugin.js";
const req = JSON.parse(process.argv[1]), calls = Number(process.argv[2]);
for (let i = 0; i < 5; i++) reconciler.reconcile(req);
const times = [];
for (let i = 0; i < calls; i++) {
  const t = process.hrtime.bigint();
  const resp = reconciler.reconcile(req);
  times.push(Number(process.hrtime.bigint() - t));
  if (resp.desired.length !== 1) throw new Error("the ConfigMap");
}
times.sort((a, b) => a - b);
console.log(times[times.length >> 1]);
"#;

/// The same in Rust: the template's crate built for the machine (its own release profile, as
/// the component's) through the SDK's `run_parts`, which parses, runs and serialises as the
/// component's export does. An example added to the generated crate.
const RUST_TIMER: &str = r#"
use std::time::Instant;
use windlass_sdk::{Phase, Value, testing::run_parts};
fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let req: Value = windlass_sdk::serde_json::from_str(&args[0]).expect("request");
    let calls: usize = args[1].parse().expect("calls");
    let text = |k: &str| req[k].as_str().expect("a text").to_string();
    let (parent, config, now) = (text("parent"), text("config"), text("now"));
    let call = || {
        let parts = run_parts::<bench_rust::Greeter>(Phase::Reconcile, &parent, &[], &[], &config, &now)
            .expect("call");
        assert_eq!(parts.desired.len(), 1, "the ConfigMap");
    };
    for _ in 0..5 {
        call();
    }
    let mut times: Vec<u128> = (0..calls)
        .map(|_| {
            let t = Instant::now();
            call();
            t.elapsed().as_nanos()
        })
        .collect();
    times.sort();
    println!("{}", times[times.len() / 2]);
}
"#;

/// The median native call of the plugin in its own runtime: Rust built for the machine,
/// CPython, Node (`None` for Go, whose template is a `wasip1` reactor).
fn native(lang: Lang, req: &Request) -> Option<Duration> {
    let dir = root().join("target/bench-languages").join(lang.as_str());
    let mut cmd = match lang {
        Lang::Rust => {
            std::fs::create_dir_all(dir.join("examples")).expect("examples dir");
            std::fs::write(dir.join("examples/native_timer.rs"), RUST_TIMER).expect("timer");
            let mut c = Command::new(std::env::var("CARGO").unwrap_or_else(|_| "cargo".into()));
            c.args([
                "run",
                "--quiet",
                "--release",
                "--example",
                "native_timer",
                "--",
            ])
            .env("CARGO_TARGET_DIR", root().join("target/template-rust"));
            c
        }
        Lang::Python => {
            let mut c = Command::new("python3");
            c.args(["-c", PYTHON_TIMER]);
            c
        }
        Lang::Js => {
            let mut c = Command::new("node");
            c.args(["--input-type=module", "-e", JS_TIMER]);
            c
        }
        _ => return None,
    };
    let out = cmd
        .arg(request_json(req))
        .arg(CALLS.to_string())
        .current_dir(&dir)
        .output()
        .expect("the native runtime starts");
    assert!(
        out.status.success(),
        "{}: the native timing failed: {}",
        lang.as_str(),
        String::from_utf8_lossy(&out.stderr)
    );
    let nanos: f64 = String::from_utf8_lossy(&out.stdout)
        .trim()
        .parse()
        .expect("nanoseconds");
    Some(Duration::from_nanos(nanos as u64))
}

fn median(mut v: Vec<Duration>) -> Duration {
    v.sort();
    v[v.len() / 2]
}

/// The median call of each plugin, timed in turns — `TURN` calls of one, then of the next, until
/// each made `CALLS` — so that a change in the machine's speed during the run reaches every
/// language alike and leaves their ratios alone. (A turn of one call each let the Python
/// instance evict the Rust one from the caches between its calls: the Rust fresh call took 3×.)
fn calls_in_turn(plugins: &[Arc<Plugin>], req: &Request) -> Vec<Duration> {
    for plugin in plugins {
        for _ in 0..5 {
            plugin.call(req).expect("warm-up call");
        }
    }
    let mut times = vec![Vec::with_capacity(CALLS); plugins.len()];
    for _ in 0..CALLS / TURN {
        for (plugin, times) in plugins.iter().zip(&mut times) {
            for _ in 0..TURN {
                let t = Instant::now();
                let resp = plugin.call(req).expect("call");
                times.push(t.elapsed());
                assert_eq!(resp.desired.len(), 1, "the ConfigMap");
            }
        }
    }
    times.into_iter().map(median).collect()
}

struct Row {
    lang: Lang,
    size: usize,
    compile: Duration,
    cached: Duration,
    fresh: Duration,
    reused: Duration,
    native: Option<Duration>,
}

/// A language's plugin loaded for the calls: a fresh instance per call, and one reused.
struct Loaded {
    fresh: Arc<Plugin>,
    reused: Arc<Plugin>,
}

/// Size and load times of one language's component, and the component loaded in both modes.
fn load_times(lang: Lang, bytes: &[u8]) -> (Row, Loaded) {
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
    let loaded = Loaded {
        fresh: load(InstanceMode::Fresh),
        reused: load(InstanceMode::Reuse),
    };
    let row = Row {
        lang,
        size: bytes.len(),
        compile,
        cached,
        fresh: Duration::ZERO,
        reused: Duration::ZERO,
        native: None,
    };
    (row, loaded)
}

fn ms(d: Duration) -> String {
    format!("{:.2} ms", d.as_secs_f64() * 1e3)
}

/// A call's time: microseconds, as the calls of the smaller plugins take tens of them.
fn us(d: Duration) -> String {
    format!("{:.1} µs", d.as_secs_f64() * 1e6)
}

fn main() {
    // `WINDLASS_BENCH_LANGS=python` measures Rust (every ratio's base) and the languages named.
    let only = std::env::var("WINDLASS_BENCH_LANGS").ok();
    let built: Vec<(Lang, Vec<u8>)> = Lang::ALL
        .iter()
        .filter(|l| {
            **l == Lang::Rust
                || only
                    .as_deref()
                    .is_none_or(|o| o.split(',').any(|n| n.trim() == l.as_str()))
        })
        .map(|&l| (l, build(l)))
        .collect();
    let (mut rows, loaded): (Vec<Row>, Vec<Loaded>) =
        built.iter().map(|(l, b)| load_times(*l, b)).unzip();
    let req = request();
    let fresh = calls_in_turn(
        &loaded.iter().map(|l| l.fresh.clone()).collect::<Vec<_>>(),
        &req,
    );
    let reused = calls_in_turn(
        &loaded.iter().map(|l| l.reused.clone()).collect::<Vec<_>>(),
        &req,
    );
    for ((row, fresh), reused) in rows.iter_mut().zip(fresh).zip(reused) {
        row.fresh = fresh;
        row.reused = reused;
    }
    // The native runs are processes of their own, one after the other: `NATIVE_ROUNDS` rounds
    // of every language in turn, the median of each language's medians.
    let mut natives = vec![Vec::new(); rows.len()];
    for _ in 0..NATIVE_ROUNDS {
        for (row, runs) in rows.iter().zip(&mut natives) {
            runs.extend(native(row.lang, &req));
        }
    }
    for (row, runs) in rows.iter_mut().zip(natives) {
        row.native = (!runs.is_empty()).then(|| median(runs));
    }
    let rust = &rows[0];
    let ratio = |a: f64, b: f64| format!("{:.1}×", a / b);
    println!(
        "\n| language | size | load, compiling | load, from cache | call, fresh instance | call, reused instance | call, native runtime |"
    );
    println!("| --- | ---: | ---: | ---: | ---: | ---: | ---: |");
    for r in &rows {
        let native = r.native.map_or("—".to_string(), |n| {
            let base = rust.native.unwrap_or(n);
            format!("{} ({})", us(n), ratio(n.as_secs_f64(), base.as_secs_f64()))
        });
        println!(
            "| {} | {:.2} MB ({}) | {} ({}) | {} ({}) | {} ({}) | {} ({}) | {native} |",
            r.lang.as_str(),
            r.size as f64 / 1e6,
            ratio(r.size as f64, rust.size as f64),
            ms(r.compile),
            ratio(r.compile.as_secs_f64(), rust.compile.as_secs_f64()),
            ms(r.cached),
            ratio(r.cached.as_secs_f64(), rust.cached.as_secs_f64()),
            us(r.fresh),
            ratio(r.fresh.as_secs_f64(), rust.fresh.as_secs_f64()),
            us(r.reused),
            ratio(r.reused.as_secs_f64(), rust.reused.as_secs_f64()),
        );
    }
    println!(
        "\nmedians: compile of {COMPILES} loads, cache of {CACHED_LOADS}, calls of {CALLS} (the \
         languages in turns of {TURN}), native calls of {CALLS} in each of {NATIVE_ROUNDS} rounds \
         (the median of their medians); \
         ratios to Rust in parentheses (a native runtime's to Rust's native call)"
    );
    for r in &rows {
        let (Some(n), Some(rust_native)) = (r.native, rust.native) else {
            continue;
        };
        let n = n.as_secs_f64();
        println!(
            "{}: the component's reused call is {:.1}× the same export run natively; natively \
             it is {:.1}× Rust's native call and {:.1}× Rust's reused component call",
            r.lang.as_str(),
            r.reused.as_secs_f64() / n,
            n / rust_native.as_secs_f64(),
            n / rust.reused.as_secs_f64(),
        );
    }
}
