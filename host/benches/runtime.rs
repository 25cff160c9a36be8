//! The same reconcile logic (the SampleDB storage decision) measured side by side in one run:
//! (a) a native Rust function, (b) the wasm plugin with a fresh sandbox per call, (c) the wasm
//! plugin with a reused instance, (d) the native function behind an HTTP JSON webhook on
//! loopback (how Metacontroller calls its hooks). Prints medians, p99 and the ratios b/a, c/a
//! and d/b. Run with `cargo xtask bench runtime`. With `WINDLASS_BENCH_QUICK=1` (what CI runs) it
//! does the agreement checks and one short round: it shows the bench builds and its variants
//! still agree, and its timings mean nothing.
//!
//! With `WINDLASS_BENCH_CALLGRIND=1` (`cargo xtask bench runtime --callgrind`) it counts
//! instructions instead, which the machine's load does not change (user-space ones only: page
//! faults and the kernel's part of resetting memory are not counted): it runs itself under
//! `valgrind --tool=callgrind` once per variant (a)–(c) and number of calls, 20 and 220, and
//! prints the instructions per call — the difference of the two runs' totals over 200 calls, so
//! that start-up and loading cancel out — and their ratios. `WINDLASS_BENCH_PLUGIN` names
//! another build of the storage component to measure (its logic must be this checkout's).
//!
//! It also measures (e), the floor under (b) and (c): the same decision run as wasm inside an
//! instance, with no call crossing into it (in instructions under callgrind, otherwise as the
//! difference of two medians; always the workspace's build, whatever `WINDLASS_BENCH_PLUGIN`
//! says). The `guest-storage-loop` test guest makes the decision `repeat` times a call exactly
//! as the plugin's export does (parse, decide, serialise); a reused instance's call with
//! `repeat: 2` less one with `repeat: 1` is one decision. e/a is what the logic costs as
//! Cranelift compiles it against LLVM's native code — nothing on the host's side can take a call
//! below it — and c/e and b/e what the sandbox adds to it: the crossing, and for (b) the
//! instance.

use std::{
    sync::Arc,
    time::{Duration, Instant},
};

use http_body_util::{BodyExt, Full};
use hyper_util::{client::legacy::Client, rt::TokioExecutor};
use serde_json::{Value, json};
use windlass::runtime::{InstanceMode, LoadOptions, Phase, Request, Runtime, RuntimeConfig};
use windlass_sdk::testing::run_json;

type Storage = sampledb_storage::Storage;

/// Warm-up calls, rounds, and calls per round: the full run's, or `WINDLASS_BENCH_QUICK`'s.
fn sizes() -> (usize, usize, usize) {
    if std::env::var_os("WINDLASS_BENCH_QUICK").is_some() {
        (2, 1, 5)
    } else {
        (300, 5, 600)
    }
}

fn parent() -> String {
    json!({
        "apiVersion": "samples.windlass.dev/v1alpha1", "kind": "SampleDB",
        "metadata": {"name": "example-database", "namespace": "default", "uid": "0b4f6f7e-1c1e-4c1a-9a57-2a3e5c9d0f11", "generation": 3},
        "spec": {"version": "16.4", "replicas": 3, "storage": {"size": "10Gi"},
                 "config": {"max_connections": "100"}, "backup": {"schedule": "0 3 * * *", "retain": 7}},
        "status": {"phase": "Provisioning", "readyReplicas": 2},
    })
    .to_string()
}

fn observed() -> Vec<String> {
    vec![
        json!({"apiVersion": "apps/v1", "kind": "StatefulSet",
               "metadata": {"name": "example-database", "namespace": "default", "resourceVersion": "812"},
               "spec": {"replicas": 3, "serviceName": "example-database-headless"},
               "status": {"replicas": 3, "readyReplicas": 3, "currentRevision": "example-database-5d8f"}})
        .to_string(),
        // The generated credentials, as every reconcile after the first observes them: the
        // plugin re-emits them, so (a)–(d) agree instead of each generating its own password.
        json!({"apiVersion": "v1", "kind": "Secret", "type": "Opaque", "immutable": true,
               "metadata": {"name": "example-database-credentials", "namespace": "default"},
               "data": {"username": "c2FtcGxlZGI=", "password": "c2VjcmV0LWZvci10aGUtYmVuY2g="}})
        .to_string(),
    ]
}

fn request() -> Request {
    Request {
        phase: Phase::Reconcile,
        parent: parent(),
        observed: observed(),
        desired: vec![],
        config: "{}".into(),
        now: "2026-11-30T00:00:00Z".into(),
    }
}

/// The request with the loop guest's config: the decision made `repeat` times in one call.
fn looped_request(repeat: u32) -> Request {
    Request {
        config: json!({ "repeat": repeat }).to_string(),
        ..request()
    }
}

fn native(req: &Request) -> (Vec<String>, Option<String>) {
    run_json::<Storage>(
        windlass_sdk::Phase::Reconcile,
        &req.parent,
        &req.observed,
        &req.desired,
        &req.config,
        &req.now,
    )
    .expect("native storage decision")
}

/// Per-call latencies of `f`, interleaved in rounds with the other variants by the caller.
fn sample(out: &mut Vec<Duration>, n: usize, mut f: impl FnMut()) {
    for _ in 0..n {
        let t = Instant::now();
        f();
        out.push(t.elapsed());
    }
}

struct Stats {
    median: Duration,
    p99: Duration,
}

fn stats(mut v: Vec<Duration>) -> Stats {
    v.sort();
    Stats {
        median: v[v.len() / 2],
        p99: v[(v.len() * 99 / 100).min(v.len() - 1)],
    }
}

/// The variants counted under callgrind, as `WINDLASS_BENCH_VARIANT` names them.
const COUNTED: [(&str, &str); 3] = [
    ("native", "(a) native Rust fn"),
    ("fresh", "(b) wasm, fresh sandbox per call"),
    ("reused", "(c) wasm, reused instance"),
];
/// The loop guest's calls, with `repeat` 1 and 2: their difference is the floor (e).
const LOOPED: [(&str, &str); 2] = [
    ("loop-1", "(e1) wasm, reused, 1 decision"),
    ("loop-2", "(e2) wasm, reused, 2 decisions"),
];
/// The calls of the two runs per variant whose difference is counted.
const CALLS: (u64, u64) = (20, 220);

/// The `summary:` (or `totals:`) instruction count of a finished callgrind run's output.
fn callgrind_total(out: &std::path::Path) -> u64 {
    let text = std::fs::read_to_string(out).expect("callgrind output");
    let line = text
        .lines()
        .find(|l| l.starts_with("summary:"))
        .or_else(|| text.lines().find(|l| l.starts_with("totals:")))
        .expect("a summary line in the callgrind output");
    line.split_whitespace()
        .nth(1)
        .and_then(|n| n.parse().ok())
        .expect("an instruction count")
}

/// `WINDLASS_BENCH_CALLGRIND=1`: this bench under callgrind, per variant and number of calls.
fn count_instructions() {
    let exe = std::env::current_exe().expect("the bench's path");
    let scratch =
        std::env::temp_dir().join(format!("windlass-bench-runtime-{}", std::process::id()));
    std::fs::create_dir_all(&scratch).expect("scratch directory");
    let mut per_call = Vec::new();
    // A first run with no calls fills the cache, so that no counted run compiles.
    for (variant, name) in [("native", "")].into_iter().chain(COUNTED).chain(LOOPED) {
        let mut totals = Vec::new();
        let runs = if name.is_empty() {
            &[0][..]
        } else {
            &[CALLS.0, CALLS.1][..]
        };
        for &calls in runs {
            let out = scratch.join(format!("{variant}-{calls}.callgrind"));
            let status = std::process::Command::new("valgrind")
                .args(["--tool=callgrind", "--quiet"])
                .arg(format!("--callgrind-out-file={}", out.display()))
                .arg(&exe)
                .env("WINDLASS_BENCH_CALLGRIND", "child")
                .env("WINDLASS_BENCH_VARIANT", variant)
                .env("WINDLASS_BENCH_CALLS", calls.to_string())
                // The component is compiled once (under valgrind, minutes) and then read back.
                .env("WINDLASS_BENCH_CACHE_DIR", scratch.join("cache"))
                .status()
                .expect("running valgrind (Debian package valgrind)");
            assert!(
                status.success(),
                "{variant} × {calls} under callgrind: {status}"
            );
            totals.push(callgrind_total(&out));
        }
        if name.is_empty() {
            continue;
        }
        let n = totals[1].checked_sub(totals[0]).unwrap_or_else(|| {
            panic!("{variant}: {CALLS:?} calls counted {totals:?}: fewer with more calls")
        }) / (CALLS.1 - CALLS.0);
        eprintln!("{name}: {n} instructions per call");
        per_call.push((variant, name, n));
    }
    let _ = std::fs::remove_dir_all(&scratch);
    println!(
        "runtime benchmark under callgrind: SampleDB storage decision, instructions per call ({} − {} calls)",
        CALLS.1, CALLS.0
    );
    for (_, name, n) in &per_call {
        println!("{name:<34} {:>12.3} M", *n as f64 / 1e6);
    }
    // By the variant's name, not its place in the list.
    let count = |variant: &str| {
        per_call
            .iter()
            .find(|(v, _, _)| *v == variant)
            .map(|(_, _, n)| *n)
            .unwrap_or_else(|| panic!("no count for the variant {variant}: {per_call:?}"))
    };
    let floor = count("loop-2")
        .checked_sub(count("loop-1"))
        .unwrap_or_else(|| {
            panic!("the loop guest: two decisions counted fewer than one: {per_call:?}")
        });
    println!(
        "{:<34} {:>12.3} M",
        "(e) the decision as wasm (e2 − e1)",
        floor as f64 / 1e6
    );
    let ratio = |x: u64, y: u64| x as f64 / y as f64;
    let (a, b, c) = (count("native"), count("fresh"), count("reused"));
    println!(
        "ratio b/a (fresh sandbox / native)  {:>6.2}  (target <= 1.5)",
        ratio(b, a)
    );
    println!(
        "ratio c/a (reused instance / native) {:>6.2}  (target <= 1.2)",
        ratio(c, a)
    );
    println!(
        "ratio e/a (the logic as wasm / native: the floor) {:>6.2}",
        ratio(floor, a)
    );
    println!(
        "ratio b/e (fresh sandbox / the floor) {:>6.2}",
        ratio(b, floor)
    );
    println!(
        "ratio c/e (reused instance / the floor) {:>6.2}",
        ratio(c, floor)
    );
}

fn main() {
    if std::env::var("WINDLASS_BENCH_CALLGRIND").as_deref() == Ok("1") {
        return count_instructions();
    }
    // Another build of the same plugin (another profile, say) with `WINDLASS_BENCH_PLUGIN`.
    let path = std::env::var("WINDLASS_BENCH_PLUGIN")
        .unwrap_or_else(|_| windlass_test_guests::STORAGE.to_string());
    let bytes = std::fs::read(&path).expect("storage component");
    let mut config = RuntimeConfig::default();
    config.cache_dir = std::env::var_os("WINDLASS_BENCH_CACHE_DIR").map(Into::into);
    if std::env::var("WINDLASS_BENCH_CALLGRIND").as_deref() == Ok("child") {
        // The pool reserves address space per slot (2 TiB at the default 256 slots), more
        // than valgrind can map; the bench needs two.
        config.max_instances = 4;
    }
    if let Some(bytes) = std::env::var("WINDLASS_BENCH_KEEP_RESIDENT")
        .ok()
        .and_then(|v| v.parse().ok())
    {
        config.keep_resident_bytes = bytes;
    }
    println!(
        "keep-resident bytes per slot: {}",
        config.keep_resident_bytes
    );
    let runtime = Runtime::new(config).expect("runtime");
    let fresh = runtime
        .load("storage", &bytes, LoadOptions::default())
        .expect("load");
    let reused = runtime
        .load(
            "storage",
            &bytes,
            LoadOptions {
                mode: InstanceMode::Reuse,
                ..LoadOptions::default()
            },
        )
        .expect("load");
    let looped = runtime
        .load(
            "storage-loop",
            &std::fs::read(windlass_test_guests::STORAGE_LOOP).expect("loop guest"),
            LoadOptions {
                mode: InstanceMode::Reuse,
                ..LoadOptions::default()
            },
        )
        .expect("load the loop guest");
    let req = request();
    let (once, twice) = (looped_request(1), looped_request(2));
    let (warmup, rounds, per_round) = sizes();

    // The three must agree before their speed means anything.
    let expected = native(&req);
    for plugin in [&fresh, &reused] {
        let resp = plugin.call(&req).expect("wasm call");
        assert_eq!(
            (resp.desired, resp.status),
            expected,
            "wasm and native disagree"
        );
    }
    for req in [&once, &twice] {
        let resp = looped.call(req).expect("loop guest call");
        assert_eq!(
            (resp.desired, resp.status),
            expected,
            "the loop guest ({}) and native disagree",
            req.config
        );
    }

    // Under callgrind: one variant, so many calls, and nothing else.
    if std::env::var("WINDLASS_BENCH_CALLGRIND").as_deref() == Ok("child") {
        let calls: u64 = std::env::var("WINDLASS_BENCH_CALLS")
            .ok()
            .and_then(|n| n.parse().ok())
            .expect("WINDLASS_BENCH_CALLS");
        let variant = std::env::var("WINDLASS_BENCH_VARIANT").expect("WINDLASS_BENCH_VARIANT");
        for _ in 0..calls {
            match variant.as_str() {
                "native" => drop(std::hint::black_box(native(&req))),
                "fresh" => drop(std::hint::black_box(fresh.call(&req).expect("fresh"))),
                "reused" => drop(std::hint::black_box(reused.call(&req).expect("reused"))),
                "loop-1" => drop(std::hint::black_box(looped.call(&once).expect("loop-1"))),
                "loop-2" => drop(std::hint::black_box(looped.call(&twice).expect("loop-2"))),
                other => panic!(
                    "WINDLASS_BENCH_VARIANT={other}: native, fresh, reused, loop-1 or loop-2"
                ),
            }
        }
        return;
    }

    // (d) the webhook: an axum server on loopback, a keep-alive hyper client.
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(1)
        .enable_all()
        .build()
        .expect("tokio");
    let addr = rt.block_on(async {
        let app = axum::Router::new().route(
            "/reconcile",
            axum::routing::post(|axum::Json(body): axum::Json<Value>| async move {
                let s = |k: &str| body[k].as_str().unwrap_or_default().to_string();
                let list = |k: &str| -> Vec<String> {
                    body[k]
                        .as_array()
                        .map(|a| {
                            a.iter()
                                .filter_map(|v| v.as_str().map(String::from))
                                .collect()
                        })
                        .unwrap_or_default()
                };
                let (desired, status) = run_json::<Storage>(
                    windlass_sdk::Phase::Reconcile,
                    &s("parent"),
                    &list("observed"),
                    &list("desired"),
                    &s("config"),
                    &s("now"),
                )
                .expect("webhook decision");
                axum::Json(json!({"desired": desired, "status": status}))
            }),
        );
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
            .await
            .expect("bind");
        let addr = listener.local_addr().expect("addr");
        tokio::spawn(async move { axum::serve(listener, app).await.expect("serve") });
        addr
    });
    let client: Client<_, Full<bytes::Bytes>> = Client::builder(TokioExecutor::new()).build_http();
    let client = Arc::new(client);
    let uri: hyper::Uri = format!("http://{addr}/reconcile").parse().expect("uri");
    let webhook = |req: &Request| {
        let body = json!({"parent": req.parent, "observed": req.observed, "desired": req.desired, "config": req.config, "now": req.now}).to_string();
        let http = hyper::Request::post(uri.clone())
            .header("content-type", "application/json")
            .body(Full::new(bytes::Bytes::from(body)))
            .expect("request");
        let client = client.clone();
        rt.block_on(async move {
            let resp = client.request(http).await.expect("webhook call");
            let body = resp.into_body().collect().await.expect("body").to_bytes();
            let v: Value = serde_json::from_slice(&body).expect("json");
            let desired: Vec<String> =
                serde_json::from_value(v["desired"].clone()).expect("desired");
            (desired, v["status"].as_str().map(String::from))
        })
    };
    assert_eq!(webhook(&req), expected, "webhook and native disagree");

    let (mut a, mut b, mut c, mut d) = (vec![], vec![], vec![], vec![]);
    let (mut e1, mut e2) = (vec![], vec![]);
    for _ in 0..warmup {
        std::hint::black_box(native(&req));
        std::hint::black_box(fresh.call(&req).expect("fresh"));
        std::hint::black_box(reused.call(&req).expect("reused"));
        std::hint::black_box(webhook(&req));
        std::hint::black_box(looped.call(&once).expect("loop-1"));
        std::hint::black_box(looped.call(&twice).expect("loop-2"));
    }
    // Rounds interleave the variants so that machine noise falls on all of them alike.
    for _ in 0..rounds {
        sample(&mut a, per_round, || {
            drop(std::hint::black_box(native(&req)))
        });
        sample(&mut b, per_round, || {
            drop(std::hint::black_box(fresh.call(&req).expect("fresh")))
        });
        sample(&mut c, per_round, || {
            drop(std::hint::black_box(reused.call(&req).expect("reused")))
        });
        sample(&mut d, per_round, || {
            drop(std::hint::black_box(webhook(&req)))
        });
        sample(&mut e1, per_round, || {
            drop(std::hint::black_box(looped.call(&once).expect("loop-1")))
        });
        sample(&mut e2, per_round, || {
            drop(std::hint::black_box(looped.call(&twice).expect("loop-2")))
        });
    }
    let (a, b, c, d) = (stats(a), stats(b), stats(c), stats(d));
    // The floor: one more decision inside the loop guest's call (medians' difference).
    let e = stats(e2).median.saturating_sub(stats(e1).median);
    let (_, fresh_stats) = fresh.call_measured(&req);
    println!(
        "guest linear memory peak per call: {} KiB",
        fresh_stats.memory_peak_bytes / 1024
    );
    let us = |d: Duration| d.as_secs_f64() * 1e6;
    println!(
        "runtime benchmark: SampleDB storage decision, {} calls each, {} rounds interleaved",
        rounds * per_round,
        rounds
    );
    println!("{:<34} {:>12} {:>12}", "variant", "median µs", "p99 µs");
    for (name, s) in [
        ("(a) native Rust fn", &a),
        ("(b) wasm, fresh sandbox per call", &b),
        ("(c) wasm, reused instance", &c),
        ("(d) HTTP JSON webhook, loopback", &d),
    ] {
        println!("{name:<34} {:>12.1} {:>12.1}", us(s.median), us(s.p99));
    }
    println!(
        "{:<34} {:>12.1}",
        "(e) the decision as wasm (e2 − e1)",
        us(e)
    );
    let ratio = |x: &Stats, y: &Stats| x.median.as_secs_f64() / y.median.as_secs_f64();
    println!(
        "ratio b/a (fresh sandbox / native)  {:>6.2}  (target <= 1.5)",
        ratio(&b, &a)
    );
    println!(
        "ratio c/a (reused instance / native) {:>6.2}  (target <= 1.2)",
        ratio(&c, &a)
    );
    println!(
        "ratio d/b (webhook / fresh sandbox) {:>6.2}  (target >= 5)",
        ratio(&d, &b)
    );
    let per = |x: Duration, y: Duration| x.as_secs_f64() / y.as_secs_f64();
    println!(
        "ratio e/a (the logic as wasm / native: the floor) {:>6.2}",
        per(e, a.median)
    );
    println!(
        "ratio c/e (reused instance / the floor) {:>6.2}",
        per(c.median, e)
    );
}
