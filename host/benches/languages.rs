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
//!
//! Every variant must give the same answer — each language's component, fresh and reused, and
//! each native run — or the run fails: the templates share their cases, so one plugin in four
//! languages answers one request alike. `WINDLASS_BENCH_QUICK` (CI) makes every count small,
//! so that the benchmark and that check run on every commit; its timings mean nothing.

use std::{
    path::{Path, PathBuf},
    process::Command,
    sync::Arc,
    time::{Duration, Instant},
};

use serde_json::{Value, json};
use windlass::{
    contract::Response,
    runtime::{InstanceMode, LoadOptions, Phase, Plugin, Request, Runtime, RuntimeConfig},
    scaffold::{self, Lang},
};

/// How many of each measurement a run makes.
struct Counts {
    /// Loads compiling the component, and loads from the precompiled cache. With no compiling
    /// load, the load that fills the cache (compiling, then writing it) is timed instead.
    compiles: usize,
    cached_loads: usize,
    /// Calls of each component, timed in turns of `turn` per language (a multiple of it); the
    /// native runs make as many.
    calls: usize,
    turn: usize,
    /// Native runs of each language, one after the other.
    native_rounds: usize,
}

const FULL: Counts = Counts {
    compiles: 3,
    cached_loads: 5,
    calls: 200,
    turn: 20,
    native_rounds: 5,
};

/// `WINDLASS_BENCH_QUICK`: every path once or a few times, for CI.
const QUICK: Counts = Counts {
    compiles: 0,
    cached_loads: 1,
    calls: 4,
    turn: 2,
    native_rounds: 1,
};

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

/// Times the calls of the component's export in CPython, in the generated directory: the
/// template's module (`plugin.py`, class `Greeter`) through the SDK's `run_json`. Prints the
/// median call in nanoseconds, then the answer as `python -m windlass.serve` writes it.
const PYTHON_TIMER: &str = r#"
import json, statistics, sys, time
from windlass.plugin import run_json
from windlass.serve import answer
from plugin import Greeter
req, calls = json.loads(sys.argv[1]), int(sys.argv[2])
args = (Greeter, req["phase"], req["parent"], req["observed"], req["desired"], req["config"], req["now"])
for _ in range(5):
    run_json(*args)
times = []
for _ in range(calls):
    t = time.perf_counter_ns()
    run_json(*args)
    times.append(time.perf_counter_ns() - t)
print(statistics.median(times))
print(answer(Greeter, sys.argv[1]))
"#;

/// The same in Node: the template's `reconciler.reconcile`, as the component exports it; the
/// answer as `serve.js` writes it.
const JS_TIMER: &str = r#"
import { reconciler } from "./plugin.js";
import { answer } from "./windlass/serve.js";
const req = JSON.parse(process.argv[1]), calls = Number(process.argv[2]);
for (let i = 0; i < 5; i++) reconciler.reconcile(req);
const times = [];
for (let i = 0; i < calls; i++) {
  const t = process.hrtime.bigint();
  reconciler.reconcile(req);
  times.push(Number(process.hrtime.bigint() - t));
}
times.sort((a, b) => a - b);
console.log(times[times.length >> 1]);
console.log(answer(reconciler, process.argv[1]));
"#;

/// The same in Rust: the template's crate built for the machine (its own release profile, as
/// the component's) through the SDK's `run_parts`, which parses, runs and serialises as the
/// component's export does. An example added to the generated crate; the answer in the serving
/// processes' form.
const RUST_TIMER: &str = r#"
use std::time::Instant;
use windlass_sdk::{Phase, Value, serde_json::json, testing::run_parts};
fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let req: Value = windlass_sdk::serde_json::from_str(&args[0]).expect("request");
    let calls: usize = args[1].parse().expect("calls");
    let text = |k: &str| req[k].as_str().expect("a text").to_string();
    let (parent, config, now) = (text("parent"), text("config"), text("now"));
    let call = || {
        run_parts::<bench_rust::Greeter>(Phase::Reconcile, &parent, &[], &[], &config, &now)
            .expect("call")
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
    let parts = call();
    let answer = json!({"ok": {
        "desired": parts.desired,
        "status": parts.status,
        "conditions": parts.conditions.iter().map(|c| json!({
            "kind": c.kind, "status": c.status, "reason": c.reason, "message": c.message,
        })).collect::<Vec<_>>(),
        "events": parts.events.iter().map(|e| json!({
            "warning": e.warning, "reason": e.reason, "message": e.message,
        })).collect::<Vec<_>>(),
        "requeueAfterSecs": parts.requeue_after_secs,
        "finalized": parts.finalized,
    }});
    println!("{answer}");
}
"#;

/// Writes the Rust timer into the generated crate and builds it for the machine, once; returns
/// the binary.
fn build_rust_timer() -> PathBuf {
    let dir = root().join("target/bench-languages/rust");
    std::fs::create_dir_all(dir.join("examples")).expect("examples dir");
    std::fs::write(dir.join("examples/native_timer.rs"), RUST_TIMER).expect("timer");
    let target = root().join("target/template-rust");
    let status = Command::new(std::env::var("CARGO").unwrap_or_else(|_| "cargo".into()))
        .args(["build", "--quiet", "--release", "--example", "native_timer"])
        .env("CARGO_TARGET_DIR", &target)
        .current_dir(&dir)
        .status()
        .expect("cargo starts");
    assert!(status.success(), "rust: the native timer did not build");
    target.join("release/examples/native_timer")
}

/// One native run of the plugin in its own runtime — Rust built for the machine (`rust_timer`),
/// CPython, Node — making `calls` calls: the median call and the answer (`None` for Go, whose
/// template is a `wasip1` reactor).
fn native(lang: Lang, req: &Request, calls: usize, rust_timer: &Path) -> Option<(Duration, Value)> {
    let dir = root().join("target/bench-languages").join(lang.as_str());
    let mut cmd = match lang {
        Lang::Rust => Command::new(rust_timer),
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
        .arg(calls.to_string())
        .current_dir(&dir)
        .output()
        .expect("the native runtime starts");
    assert!(
        out.status.success(),
        "{}: the native timing failed: {}",
        lang.as_str(),
        String::from_utf8_lossy(&out.stderr)
    );
    let stdout = String::from_utf8_lossy(&out.stdout);
    let mut lines = stdout.lines();
    let nanos: f64 = lines
        .next()
        .and_then(|l| l.trim().parse().ok())
        .unwrap_or_else(|| panic!("{}: no time in {stdout:?}", lang.as_str()));
    let answer: Value = lines
        .next()
        .and_then(|l| serde_json::from_str(l).ok())
        .unwrap_or_else(|| panic!("{}: no answer in {stdout:?}", lang.as_str()));
    let ok = answer
        .get("ok")
        .cloned()
        .unwrap_or_else(|| panic!("{}: the native call failed: {answer}", lang.as_str()));
    Some((Duration::from_nanos(nanos as u64), objects_parsed(ok)))
}

/// An answer in the serving processes' form (`desired`, `status`, `conditions`, `events`,
/// `requeueAfterSecs`, `finalized`) with its JSON texts parsed, so that answers compare as
/// objects, whatever key order or spacing each language's serialiser chose.
fn objects_parsed(mut ok: Value) -> Value {
    let parse = |v: &mut Value| {
        if let Value::String(text) = v {
            *v = serde_json::from_str(text).expect("the plugin's JSON text");
        }
    };
    if let Some(desired) = ok.get_mut("desired").and_then(Value::as_array_mut) {
        desired.iter_mut().for_each(parse);
    }
    if let Some(status) = ok.get_mut("status") {
        parse(status);
    }
    ok
}

/// A component's response in the same form.
fn answer_of(resp: &Response) -> Value {
    objects_parsed(json!({
        "desired": resp.desired,
        "status": resp.status,
        "conditions": resp.conditions.iter().map(|c| json!({
            "kind": c.kind, "status": c.status, "reason": c.reason, "message": c.message,
        })).collect::<Vec<_>>(),
        "events": resp.events.iter().map(|e| json!({
            "warning": e.warning, "reason": e.reason, "message": e.message,
        })).collect::<Vec<_>>(),
        "requeueAfterSecs": resp.requeue_after_secs,
        "finalized": resp.finalized,
    }))
}

fn median(mut v: Vec<Duration>) -> Duration {
    v.sort();
    v[v.len() / 2]
}

/// The median call of each plugin, timed in turns — `turn` calls of one, then of the next, until
/// each made `calls` — so that a change in the machine's speed during the run reaches every
/// language alike and leaves their ratios alone. (A turn of one call each let the Python
/// instance evict the Rust one from the caches between its calls: the Rust fresh call took 3×.)
/// With each plugin's answer, from its first call.
fn calls_in_turn(
    plugins: &[Arc<Plugin>],
    req: &Request,
    counts: &Counts,
) -> Vec<(Duration, Value)> {
    let answers: Vec<Value> = plugins
        .iter()
        .map(|plugin| {
            let answer = answer_of(&plugin.call(req).expect("first call"));
            for _ in 0..4 {
                plugin.call(req).expect("warm-up call");
            }
            answer
        })
        .collect();
    let mut times = vec![Vec::with_capacity(counts.calls); plugins.len()];
    for _ in 0..counts.calls / counts.turn {
        for (plugin, times) in plugins.iter().zip(&mut times) {
            for _ in 0..counts.turn {
                let t = Instant::now();
                plugin.call(req).expect("call");
                times.push(t.elapsed());
            }
        }
    }
    times.into_iter().map(median).zip(answers).collect()
}

/// One language's component: its size and load times, and the component loaded with a fresh
/// instance per call and with one reused.
struct Loaded {
    size: usize,
    compile: Duration,
    cached: Duration,
    fresh: Arc<Plugin>,
    reused: Arc<Plugin>,
}

fn load(lang: Lang, bytes: &[u8], counts: &Counts) -> Loaded {
    let label = lang.as_str();
    let mut compiles: Vec<Duration> = (0..counts.compiles)
        .map(|_| {
            let runtime = Runtime::new(RuntimeConfig::default()).expect("runtime");
            let t = Instant::now();
            runtime
                .load(label, bytes, LoadOptions::default())
                .expect("load");
            t.elapsed()
        })
        .collect();
    let cache = tempfile::tempdir().expect("cache dir");
    let cached_config = RuntimeConfig {
        cache_dir: Some(cache.path().to_path_buf()),
        ..RuntimeConfig::default()
    };
    let runtime = Runtime::new(cached_config.clone()).expect("runtime");
    let t = Instant::now();
    runtime
        .load(label, bytes, LoadOptions::default())
        .expect("load that fills the cache");
    if compiles.is_empty() {
        compiles.push(t.elapsed());
    }
    let compile = median(compiles);
    let cached = median(
        (0..counts.cached_loads)
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
    Loaded {
        size: bytes.len(),
        compile,
        cached,
        fresh: load(InstanceMode::Fresh),
        reused: load(InstanceMode::Reuse),
    }
}

/// Fails the run unless `answer`, a variant's, is Rust's component's.
fn same_answer(variant: &str, answer: &Value, rust: &Value) {
    assert_eq!(
        answer, rust,
        "{variant} answered otherwise than the Rust component:\n{answer:#}\nRust:\n{rust:#}"
    );
}

fn ms(d: Duration) -> String {
    format!("{:.2} ms", d.as_secs_f64() * 1e3)
}

/// A call's time: microseconds, as the calls of the smaller plugins take tens of them.
fn us(d: Duration) -> String {
    format!("{:.1} µs", d.as_secs_f64() * 1e6)
}

fn main() {
    let quick = std::env::var_os("WINDLASS_BENCH_QUICK").is_some();
    let counts = if quick { &QUICK } else { &FULL };
    // `WINDLASS_BENCH_LANGS=python` measures Rust (every ratio's base) and the languages named.
    let only = std::env::var("WINDLASS_BENCH_LANGS").ok();
    let langs: Vec<Lang> = Lang::ALL
        .iter()
        .copied()
        .filter(|l| {
            *l == Lang::Rust
                || only
                    .as_deref()
                    .is_none_or(|o| o.split(',').any(|n| n.trim() == l.as_str()))
        })
        .collect();
    let loaded: Vec<Loaded> = langs.iter().map(|&l| load(l, &build(l), counts)).collect();
    let req = request();
    let fresh = calls_in_turn(
        &loaded.iter().map(|l| l.fresh.clone()).collect::<Vec<_>>(),
        &req,
        counts,
    );
    let reused = calls_in_turn(
        &loaded.iter().map(|l| l.reused.clone()).collect::<Vec<_>>(),
        &req,
        counts,
    );
    // The native runs are processes of their own, one after the other: `native_rounds` rounds
    // of every language in turn, the median of each language's medians.
    let rust_timer = build_rust_timer();
    let mut natives = vec![Vec::new(); langs.len()];
    for _ in 0..counts.native_rounds {
        for (&lang, runs) in langs.iter().zip(&mut natives) {
            runs.extend(native(lang, &req, counts.calls, &rust_timer));
        }
    }
    // Every variant answers as the Rust component did.
    let rust_answer = &fresh[0].1;
    let mut variants = 0;
    for (i, &lang) in langs.iter().enumerate() {
        let name = lang.as_str();
        same_answer(
            &format!("{name}'s component, fresh"),
            &fresh[i].1,
            rust_answer,
        );
        same_answer(
            &format!("{name}'s component, reused"),
            &reused[i].1,
            rust_answer,
        );
        for (_, answer) in &natives[i] {
            same_answer(&format!("{name}, run natively"), answer, rust_answer);
        }
        variants += 2 + natives[i].len();
    }
    let native: Vec<Option<Duration>> = natives
        .into_iter()
        .map(|runs| (!runs.is_empty()).then(|| median(runs.into_iter().map(|(t, _)| t).collect())))
        .collect();
    let ratio = |a: f64, b: f64| format!("{:.1}×", a / b);
    let (rust, rust_native) = (&loaded[0], native[0]);
    let (rust_fresh, rust_reused) = (fresh[0].0, reused[0].0);
    println!(
        "\n| language | size | load, compiling | load, from cache | call, fresh instance | call, reused instance | call, native runtime |"
    );
    println!("| --- | ---: | ---: | ---: | ---: | ---: | ---: |");
    for (i, (lang, l)) in langs.iter().zip(&loaded).enumerate() {
        let native = native[i].map_or("—".to_string(), |n| {
            let base = rust_native.unwrap_or(n);
            format!("{} ({})", us(n), ratio(n.as_secs_f64(), base.as_secs_f64()))
        });
        let (f, r) = (fresh[i].0, reused[i].0);
        println!(
            "| {} | {:.2} MB ({}) | {} ({}) | {} ({}) | {} ({}) | {} ({}) | {native} |",
            lang.as_str(),
            l.size as f64 / 1e6,
            ratio(l.size as f64, rust.size as f64),
            ms(l.compile),
            ratio(l.compile.as_secs_f64(), rust.compile.as_secs_f64()),
            ms(l.cached),
            ratio(l.cached.as_secs_f64(), rust.cached.as_secs_f64()),
            us(f),
            ratio(f.as_secs_f64(), rust_fresh.as_secs_f64()),
            us(r),
            ratio(r.as_secs_f64(), rust_reused.as_secs_f64()),
        );
    }
    let Counts {
        compiles,
        cached_loads,
        calls,
        turn,
        native_rounds,
    } = counts;
    let compiles = match compiles {
        0 => "the load that filled the cache".to_string(),
        n => format!("{n} loads"),
    };
    println!(
        "\nmedians: compile of {compiles}, cache of {cached_loads}, calls of {calls} (the \
         languages in turns of {turn}), native calls of {calls} in each of {native_rounds} rounds \
         (the median of their medians); \
         ratios to Rust in parentheses (a native runtime's to Rust's native call); \
         {variants} variants, each answering as the Rust component"
    );
    if quick {
        println!("WINDLASS_BENCH_QUICK: a few calls each; the timings mean nothing");
    }
    for (i, lang) in langs.iter().enumerate() {
        let (Some(n), Some(rust_native)) = (native[i], rust_native) else {
            continue;
        };
        let n = n.as_secs_f64();
        println!(
            "{}: the component's reused call is {:.1}× the same export run natively; natively \
             it is {:.1}× Rust's native call and {:.1}× Rust's reused component call",
            lang.as_str(),
            reused[i].0.as_secs_f64() / n,
            n / rust_native.as_secs_f64(),
            n / rust_reused.as_secs_f64(),
        );
    }
}
