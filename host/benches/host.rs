//! The operator host at scale, side by side in one run: N SampleDBs (default 1,000) created at
//! once against the devcluster, reconciled by
//!
//! - (a) `windlass run`, the release binary, with the storage plugin loaded from a ConfigMap
//!   through a WasmPlugin, and
//! - (b) `native_sampledb` (host/examples), the same storage logic compiled into a plain
//!   kube-runtime controller with the same watches, concurrency (16), apply and status writes,
//!   and the host's skipping of writes that would change nothing, and
//! - (c) `native_engine` (host/examples), the host of (a) — the same operator, settings and
//!   WasmPlugin — with a native `Engine` that answers each call with the storage logic compiled
//!   in: a/c is what the sandbox costs inside the host, like for like.
//!
//! After converging, each variant's children are read and compared (uids, server-set fields and
//! generated secret values taken out): the benchmark fails if the variants did not make the same
//! objects, so a ratio never compares different work. Each variant's row also shows the writes
//! the API server took until its children settled or the Ready wait gave up (the growth of the
//! server's revision), so that a ratio is read next to the work each variant made the server do.
//!
//! Each variant gets a fresh in-process devcluster (simulator on) and runs as its own process,
//! so that its peak RSS is its own: `VmHWM` from /proc/<pid>/status, read after convergence
//! (for Windlass this includes compiling the plugin at start). *Converged* means every SampleDB
//! has `status.observedGeneration == 1` and `Reconciled=True` — every parent reconciled once,
//! its children applied and its status written; the clock runs from the first create, and a
//! watch of the SampleDBs decides (the API server's record of it, the creationTimestamp of the
//! last StatefulSet, is printed too). *Ready* (reported, no goal) is every SampleDB in
//! phase Ready: the simulator made the pod ready and the parent was reconciled again. Over
//! converge, and every 5 s of the hot swap below, it prints the CPU time of the host's process,
//! of its own process (the devcluster, the watches, the churn) and the machine's idle time: on
//! two cores, whose work bounds a phase.
//!
//! Then, for Windlass only, with N converged parents: (i) hot swap — the WasmPlugin's
//! `spec.config` changes to `{"image": "mirror/sampledb"}`: the same component (same digest)
//! is built into a new pipeline, canaried, swapped in, and every parent is re-reconciled; the
//! clock runs from the patch until every StatefulSet's image is `mirror/sampledb:<version>`.
//! It also prints when the API server recorded the host's last StatefulSet write (the newest
//! time on the host's managedFields entries, to the second): the benchmark's watch shares its
//! process and the two cores with the devcluster, and at 10,000 lagged the server by seconds.
//! (ii) full restart — the process is killed, the config is set back to
//! `{"image": "sampledb"}`, and a new process starts (compiling the plugin, no precompiled
//! cache); the clock runs from the kill until every StatefulSet's image is `sampledb:<version>`.
//! Both clocks start once the benchmark's own watch of the StatefulSets has listed them: at
//! 10,000 that list takes seconds, which were counted as the host's before.
//!
//! Run with `cargo xtask bench host`; `WINDLASS_BENCH_PARENTS` sets N. The xtask builds the
//! binaries and the plugin and passes the plugin's path in `WINDLASS_BENCH_PLUGIN`; the
//! binaries are found next to the bench (the profile's `examples/`), or where
//! `WINDLASS_BENCH_WINDLASS`, `WINDLASS_BENCH_NATIVE` and `WINDLASS_BENCH_ENGINE` say.
//! `WINDLASS_BENCH_QUICK=1` (what CI runs, on the test build) makes it short: 20 parents, no
//! hot swap or restart — the three variants and the children check, so that it cannot rot.
//!
//! `cargo xtask bench host --churn RATE` (`WINDLASS_BENCH_CHURN`, changes per second, and
//! `WINDLASS_BENCH_CHURN_SECS`, default 60) measures how long a changed parent waits: after (a)
//! has converged, one parent's `spec.config` is patched every 1/RATE s (a seeded pseudo-random
//! choice among the N, so a parent may change again before it was reconciled) for the given
//! time, and a watch times each change from just before its patch is sent until the parent's
//! `status.observedGeneration` reaches the generation the patch made — the queue wait, the
//! reconcile and the status write, as a user sees them. Then the host's own
//! `windlass_queue_wait_seconds` histogram (lane `changed`, the time from being queued to the
//! reconcile's start) gives its p99 by interpolation within the bucket, as Prometheus's
//! `histogram_quantile` does. A change not reconciled 60 s after the churn stops is *starved*:
//! the benchmark names the parent and fails. The native variants are skipped; the hot swap and
//! restart follow, at N. The quick mode runs a short churn too (20 changes/s for 3 s).
//!
//! `cargo xtask bench host --pipeline full` (`WINDLASS_BENCH_PIPELINE=full`) runs the whole
//! SampleDB pipeline instead of the storage plugin alone: the six plugins of
//! `plugins/sampledb_plugins.rs` (storage, backup and upgrade in Rust, primary election in
//! Python, conventions in JavaScript, chaos in Go), installed as `windlass dev` installs them.
//! (b) and (c) run the Rust plugins compiled in and the others natively in their own
//! language's processes (`common/sampledb_native.rs`), whose peak RSS and CPU time are added
//! to theirs; (b) composes them in pipeline order as the host's pipeline does, and the
//! benchmark waits until it has started them, as it waits for (a)'s and (c)'s WasmPlugins to
//! be Ready. The children compared include PodDisruptionBudgets and the role labels of Pods.
//! No hot swap, restart or churn. The quick mode runs it too, in CI.
//!
//! `cargo xtask bench host --real` (`WINDLASS_BENCH_CLUSTER=real`) runs the variants against a
//! real control plane instead (`windlass_kubeplane`: etcd, kube-apiserver and
//! kube-controller-manager built from source, one per variant, with the workload simulator
//! playing the kubelet over the API).
//!
//! `cargo xtask bench host --callgrind` (`WINDLASS_BENCH_CALLGRIND=1`) counts instructions per
//! reconcile instead of seconds, so that two commits can be compared whatever else the machine
//! does: windlass runs under `valgrind --tool=callgrind` with instrumentation off, switched on
//! just before the first create and off after a fixed window (`WINDLASS_BENCH_WINDOW` seconds,
//! default 300); the instructions are divided by the reconciles the host counted in that window
//! (its `controller_runtime_reconcile_total`). A fixed window, not convergence: under valgrind's slowdown
//! the requeues of waiting parents fill every reconcile slot and some parents are not reconciled
//! for minutes. The simulator is off (no pod becomes ready: nearly every reconcile is a requeued
//! parent whose children and status are already as desired, the steady state of a host), the
//! native variant, Ready wait, hot swap and restart are skipped. To compare two commits, run it
//! once per commit, with `WINDLASS_BENCH_WINDLASS` naming the other commit's binary;
//! `WINDLASS_BENCH_CALLGRIND_OUT=DIR` keeps the dumps for `callgrind_annotate`.
//!
//! `cargo xtask bench host --record CSV` (`WINDLASS_BENCH_RECORD`) appends a row per variant to
//! CSV — pipeline, cluster, N, converge, peak RSS, CPU time and reconciles until converged,
//! writes, instructions per reconcile — for `cargo xtask plot`, which draws them against N
//! (docs/scaling.svg). The quick mode records into its scratch directory.

use std::{
    path::{Path, PathBuf},
    process::{Child, Command, Stdio},
    time::{Duration, Instant},
};

use anyhow::{Context as _, Result, bail};
use futures::{StreamExt, TryStreamExt};
use k8s_openapi::{
    ByteString,
    api::{
        apps::v1::StatefulSet,
        core::v1::{ConfigMap, Namespace},
    },
    apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition,
};
use kube::{
    Api, Client,
    api::{DynamicObject, Patch, PatchParams, PostParams},
    core::{ApiResource, GroupVersionKind},
};
use sampledb_api::ROLE_LABEL;
use serde_json::json;
use windlass::{controller::plan, crd::WasmPlugin};
use windlass_devcluster::{DevCluster, Options};
use windlass_kubeplane::ControlPlane;
use windlass_test_guests::SAMPLEDB;

/// Where the SampleDBs live.
const NAMESPACE: &str = "bench";
/// Where the plugin's ConfigMap lives.
const SYSTEM: &str = "windlass-system";
/// The WasmPlugin (and its ConfigMap).
const PLUGIN: &str = "sampledb-storage";
/// The SampleDB version, hence the image tag.
const VERSION: &str = "16.4";
/// Creates in flight at once.
const IN_FLIGHT: usize = 32;
/// Every wait gives up after this long.
const TIMEOUT: Duration = Duration::from_secs(900);
/// How long to wait for every parent to be Ready after convergence before reporting n/a, at
/// least ([`ready_timeout`]: the whole pipeline at 10,000 took longer on two cores).
const READY_TIMEOUT: Duration = Duration::from_secs(120);
/// How long the hot swap and the restart may take before they are reported as not done.
const SWAP_TIMEOUT: Duration = Duration::from_secs(300);
/// Between two polls of the cluster.
const POLL: Duration = Duration::from_millis(100);

/// What the benchmark runs.
struct Setup {
    parents: usize,
    windlass: PathBuf,
    native: PathBuf,
    /// The host with a native `Engine` (host/examples/native_engine.rs), variant (c).
    engine: PathBuf,
    plugin: PathBuf,
    /// The short run CI makes so that the benchmark cannot rot (`WINDLASS_BENCH_QUICK`):
    /// 20 parents by default, no hot swap or restart; the children check is the point.
    quick: bool,
    /// More `windlass run` flags, from `WINDLASS_BENCH_RUN_ARGS` (split on whitespace), to try
    /// a setting such as `--debounce-ms 100`.
    windlass_args: Vec<String>,
    /// More `native_sampledb` flags, from `WINDLASS_BENCH_NATIVE_ARGS`, such as
    /// `--debounce-ms 500`.
    native_args: Vec<String>,
    /// Count instructions with callgrind instead of timing (`WINDLASS_BENCH_CALLGRIND`).
    callgrind: bool,
    /// A real control plane instead of the devcluster (`WINDLASS_BENCH_CLUSTER=real`).
    real: bool,
    /// How long instructions are counted in callgrind mode (`WINDLASS_BENCH_WINDOW`, seconds).
    window: Duration,
    /// Spec changes per second and for how long, after (a) converged (`WINDLASS_BENCH_CHURN`,
    /// `WINDLASS_BENCH_CHURN_SECS`); in quick mode 20/s for 3 s.
    churn: Option<(f64, Duration)>,
    /// Parent kinds for the memory-per-kind measure (`WINDLASS_BENCH_KINDS`); 3 in quick mode.
    kinds: Option<usize>,
    /// The whole SampleDB pipeline (`WINDLASS_BENCH_PIPELINE=full`).
    full: bool,
    /// A CSV file each variant's figures are appended to (`WINDLASS_BENCH_RECORD`), for
    /// `cargo xtask plot`.
    record: Option<PathBuf>,
    scratch: tempfile::TempDir,
}

/// One variant's figures.
struct Run {
    converge: Duration,
    /// Converge as the API server recorded it: from the first create to the creation time of
    /// the last StatefulSet (to the second, [`last_created`]).
    created_sets: Option<Duration>,
    ready: Option<Duration>,
    peak_rss: u64,
    rss: u64,
    /// Instructions and reconciles counted in the window, in callgrind mode.
    instructions: Option<(u64, Reconciles)>,
    /// The children once every parent is Ready and they have settled, as [`children`] reads
    /// them; None when not every parent was Ready in time (and in callgrind mode).
    children: Option<Children>,
    /// What the churn measured, when there was one.
    churn: Option<Churn>,
    /// What the host counted from its start until converged (Windlass only).
    tally: Option<Tally>,
    /// Writes the API server took from the first create until every parent was Ready and its
    /// children settled, or the Ready wait gave up: the growth of its revision (the parents'
    /// creates, the operator's applies and status patches, the simulator's and controllers'
    /// writes). None in callgrind mode.
    writes: Option<u64>,
    /// CPU time from the first create until converged. None in callgrind mode.
    cpu: Option<Cpu>,
    /// Reconciles until converged as the operator counted them: the host's metrics for (a),
    /// the native controller's log (at most a second old) for (b); None for (c), and in
    /// callgrind mode.
    reconciles: Option<u64>,
}

/// What the host counted: reconciles, and reconciles started per lane (changed, swapped,
/// resync), from its `/metrics`.
#[derive(Debug, Clone, Copy, Default)]
struct Tally {
    reconciles: Reconciles,
    lanes: [u64; 3],
}

impl Tally {
    const LANES: [&str; 3] = ["changed", "swapped", "resync"];

    /// The host's counts now, from its admin port.
    fn read(port: u16) -> Result<Tally> {
        let text = metrics(port)?;
        let mut lanes = [0; 3];
        for (count, lane) in lanes.iter_mut().zip(Self::LANES) {
            *count = queue_wait_buckets(&text, lane)?
                .last()
                .map_or(0, |(_, c)| *c);
        }
        Ok(Tally {
            reconciles: reconciles_in(&text)?,
            lanes,
        })
    }

    /// What was counted since `before`.
    fn since(self, before: Tally) -> Tally {
        let mut lanes = self.lanes;
        for (l, b) in lanes.iter_mut().zip(before.lanes) {
            *l -= b;
        }
        Tally {
            reconciles: Reconciles {
                success: self.reconciles.success - before.reconciles.success,
                all: self.reconciles.all - before.reconciles.all,
            },
            lanes,
        }
    }
}

impl std::fmt::Display for Tally {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "{} reconciles ({} failed; lanes",
            self.reconciles.all,
            self.reconciles.all - self.reconciles.success
        )?;
        for (lane, count) in Self::LANES.iter().zip(self.lanes) {
            write!(f, " {lane} {count}")?;
        }
        write!(f, ")")
    }
}

/// What a churn measured.
struct Churn {
    rate: f64,
    secs: Duration,
    /// Patches sent, and how long sending them took (the rate achieved is their quotient).
    changes: usize,
    sent_in: Duration,
    /// Change → `status.observedGeneration` reached, one per change, sorted.
    latencies: Vec<Duration>,
    /// The host's queue-wait histogram, lane `changed`, over the churn: (count, p50, p99).
    queue_wait: (u64, f64, f64),
    /// Parents changed during the churn: how many distinct.
    parents_changed: usize,
}

/// What the host's `controller_runtime_reconcile_total` says, summed over kinds.
#[derive(Debug, Clone, Copy, Default)]
struct Reconciles {
    success: u64,
    all: u64,
}

fn main() -> Result<()> {
    // This process serves the devcluster, as `windlass dev` does: glibc tuned the same way. The
    // operators it starts get the environment back (`Operator::spawn`).
    windlass_devcluster::malloc::tune();
    windlass::source::install_crypto_provider();
    let quick = std::env::var_os("WINDLASS_BENCH_QUICK").is_some_and(|v| v != "0");
    let parents = match std::env::var("WINDLASS_BENCH_PARENTS") {
        Ok(n) => n.parse().context("WINDLASS_BENCH_PARENTS: not a number")?,
        Err(_) if quick => 20,
        Err(_) => 1_000,
    };
    let exe = std::env::current_exe()?;
    // target/<profile>/deps/host-<hash> → target/<profile>/examples/native_sampledb
    let profile_dir = exe
        .parent()
        .and_then(Path::parent)
        .context("the bench runs from target/<profile>/deps")?;
    let path = |var: &str, default: PathBuf| std::env::var_os(var).map_or(default, PathBuf::from);
    let setup = Setup {
        parents,
        windlass: path(
            "WINDLASS_BENCH_WINDLASS",
            env!("CARGO_BIN_EXE_windlass").into(),
        ),
        native: path(
            "WINDLASS_BENCH_NATIVE",
            profile_dir.join("examples").join("native_sampledb"),
        ),
        engine: path(
            "WINDLASS_BENCH_ENGINE",
            profile_dir.join("examples").join("native_engine"),
        ),
        plugin: path(
            "WINDLASS_BENCH_PLUGIN",
            windlass_test_guests::STORAGE.into(),
        ),
        quick,
        windlass_args: std::env::var("WINDLASS_BENCH_RUN_ARGS")
            .unwrap_or_default()
            .split_whitespace()
            .map(String::from)
            .collect(),
        native_args: std::env::var("WINDLASS_BENCH_NATIVE_ARGS")
            .unwrap_or_default()
            .split_whitespace()
            .map(String::from)
            .collect(),
        callgrind: std::env::var_os("WINDLASS_BENCH_CALLGRIND").is_some_and(|v| v != "0"),
        real: std::env::var("WINDLASS_BENCH_CLUSTER").is_ok_and(|v| v == "real"),
        window: Duration::from_secs(match std::env::var("WINDLASS_BENCH_WINDOW") {
            Ok(s) => s
                .parse()
                .context("WINDLASS_BENCH_WINDOW: not a number of seconds")?,
            Err(_) => 300,
        }),
        churn: match std::env::var("WINDLASS_BENCH_CHURN") {
            Ok(rate) => Some((
                rate.parse()
                    .context("WINDLASS_BENCH_CHURN: not a number of changes per second")?,
                Duration::from_secs(match std::env::var("WINDLASS_BENCH_CHURN_SECS") {
                    Ok(s) => s
                        .parse()
                        .context("WINDLASS_BENCH_CHURN_SECS: not a number of seconds")?,
                    Err(_) => 60,
                }),
            )),
            Err(_) if quick => Some((20.0, Duration::from_secs(3))),
            Err(_) => None,
        },
        kinds: match std::env::var("WINDLASS_BENCH_KINDS") {
            Ok(k) => Some(k.parse().context("WINDLASS_BENCH_KINDS: not a number")?),
            Err(_) if quick => Some(3),
            Err(_) => None,
        },
        full: match std::env::var("WINDLASS_BENCH_PIPELINE").as_deref() {
            Ok("full") => true,
            Ok("storage") | Err(_) => false,
            Ok(other) => bail!("WINDLASS_BENCH_PIPELINE={other:?}: storage or full"),
        },
        record: std::env::var_os("WINDLASS_BENCH_RECORD").map(PathBuf::from),
        scratch: tempfile::tempdir()?,
    };
    tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()?
        .block_on(bench(&setup))
}

async fn bench(setup: &Setup) -> Result<()> {
    if setup.callgrind {
        return bench_instructions(setup).await;
    }
    if let Some(kinds) = setup.kinds
        && !setup.quick
    {
        return bench_kinds(setup, kinds).await;
    }
    if setup.full {
        return bench_full(setup).await;
    }
    let n = setup.parents;
    eprintln!("(a) windlass run, {n} SampleDBs …");
    let (wasm, swap, restart) = windlass_variant(setup).await?;
    if let Some(churn) = &wasm.churn {
        print_churn(n, churn);
    }
    if setup.churn.is_some() && !setup.quick {
        println!(
            "(a) converge {:.2} s, ready {}, peak RSS {:.1} MiB",
            wasm.converge.as_secs_f64(),
            wasm.ready.map_or_else(
                || "n/a".to_string(),
                |d| format!("{:.2} s", d.as_secs_f64())
            ),
            mib(wasm.peak_rss)
        );
        print_swap(n, &wasm, &swap, &restart);
        return Ok(());
    }
    eprintln!("(b) native kube-runtime controller, {n} SampleDBs …");
    let native = native_variant(setup).await?;
    eprintln!("(c) the host with a native Engine, {n} SampleDBs …");
    let engine = engine_variant(setup).await?;

    print_table(
        setup,
        &format!(
            "host benchmark: {n} SampleDBs (replicas 1) created at once ({IN_FLIGHT} in flight)"
        ),
        &[
            ("(a) windlass run, storage plugin (wasm)", &wasm),
            ("(b) native kube-runtime controller", &native),
            ("(c) the same host, native Engine", &engine),
        ],
    );
    print_ratios(&wasm, &native, &engine);
    record(setup, &[("a", &wasm), ("b", &native), ("c", &engine)])?;
    match (&wasm.children, &native.children, &engine.children) {
        (Some(wasm), Some(native), Some(engine)) => {
            same_children(n, wasm, native, engine)?;
        }
        _ if setup.quick => {
            bail!("not every variant's parents were all Ready: no children to compare")
        }
        _ => println!("children: not compared, not every variant's parents were all Ready"),
    }
    if setup.quick {
        if let Some(kinds) = setup.kinds {
            bench_kinds(setup, kinds).await?;
        }
        return Ok(());
    }
    print_swap(n, &wasm, &swap, &restart);
    Ok(())
}

/// The whole SampleDB pipeline, (a) against (b) and (c): converge, memory and the same
/// children.
async fn bench_full(setup: &Setup) -> Result<()> {
    let n = setup.parents;
    eprintln!("(a) windlass run, the whole SampleDB pipeline, {n} SampleDBs …");
    let (wasm, _, _) = windlass_variant(setup).await?;
    eprintln!("(b) native kube-runtime controller, the six plugins' logic, {n} SampleDBs …");
    let native = native_variant(setup).await?;
    eprintln!("(c) the same host, native Engine and native processes, {n} SampleDBs …");
    let engine = engine_variant(setup).await?;
    let names: Vec<&str> = SAMPLEDB.iter().map(|(name, _)| *name).collect();
    print_table(
        setup,
        &format!(
            "host benchmark, the whole SampleDB pipeline ({}): {n} SampleDBs (replicas 1) \
             created at once ({IN_FLIGHT} in flight)",
            names.join(", ")
        ),
        &[
            ("(a) windlass run, six plugins (wasm)", &wasm),
            (
                "(b) native kube-runtime controller (+ its processes)",
                &native,
            ),
            (
                "(c) the same host, native Engine (+ its processes)",
                &engine,
            ),
        ],
    );
    if let Some(tally) = wasm.tally {
        println!("(a) counted until converged: {tally}");
    }
    print_ratios(&wasm, &native, &engine);
    record(setup, &[("a", &wasm), ("b", &native), ("c", &engine)])?;
    match (&wasm.children, &native.children, &engine.children) {
        (Some(a), Some(b), Some(c)) => {
            let sets = a.keys().filter(|k| k.starts_with("StatefulSet/")).count();
            if sets != n {
                bail!("(a) made {sets} StatefulSets for {n} parents");
            }
            let budgets = a
                .keys()
                .filter(|k| k.starts_with("PodDisruptionBudget/"))
                .count();
            if budgets != n {
                bail!(
                    "(a) made {budgets} PodDisruptionBudgets for {n} parents: the conventions did not run"
                );
            }
            let primaries = a
                .values()
                .filter(|o| o["metadata"]["labels"][ROLE_LABEL] == "primary")
                .count();
            if primaries != n {
                bail!(
                    "(a) labelled {primaries} Pods primary for {n} parents: the election did not run"
                );
            }
            same_children(n, a, b, c)?;
            println!("  ({n} PodDisruptionBudgets and {n} primaries among them)");
        }
        _ if setup.quick => {
            bail!("not every variant's parents were all Ready: no children to compare")
        }
        _ => println!("children: not compared, not every variant's parents were all Ready"),
    }
    Ok(())
}

/// The ratios of (a) to (b) and to (c): converge time and peak RSS, with their goals.
fn print_ratios(wasm: &Run, native: &Run, engine: &Run) {
    let ratio = |a: Duration, b: Duration| a.as_secs_f64() / b.as_secs_f64();
    println!(
        "ratio time a/b (converge)      {:>6.2}  (goal <= 1.0)",
        ratio(wasm.converge, native.converge)
    );
    println!(
        "ratio memory a/b (peak RSS)    {:>6.2}  (goal <= 1.3)",
        wasm.peak_rss as f64 / native.peak_rss as f64
    );
    println!(
        "ratio time a/c (converge)      {:>6.2}  (goal <= 1.15: the sandbox inside the host)",
        ratio(wasm.converge, engine.converge)
    );
    println!(
        "ratio memory a/c (peak RSS)    {:>6.2}",
        wasm.peak_rss as f64 / engine.peak_rss as f64
    );
}

/// The heading and one row per variant: converge, ready, peak and final RSS.
fn print_table(setup: &Setup, heading: &str, rows: &[(&str, &Run)]) {
    println!(
        "{heading}, a fresh {} per variant{}",
        if setup.real {
            "real control plane (etcd, kube-apiserver, kube-controller-manager; simulated kubelet)"
        } else {
            "devcluster"
        },
        if setup.quick {
            " (quick: the children check; timings mean nothing)"
        } else {
            ""
        }
    );
    println!(
        "{:<52} {:>11} {:>9} {:>14} {:>14} {:>10}",
        "variant", "converge s", "ready s", "peak RSS MiB", "RSS end MiB", "writes"
    );
    for (name, r) in rows {
        let ready = r
            .ready
            .map_or_else(|| "n/a".to_string(), |d| format!("{:.2}", d.as_secs_f64()));
        let writes = r
            .writes
            .map_or_else(|| "n/a".to_string(), |w| w.to_string());
        println!(
            "{name:<52} {:>11.2} {ready:>9} {:>14.1} {:>14.1} {writes:>10}",
            r.converge.as_secs_f64(),
            mib(r.peak_rss),
            mib(r.rss)
        );
    }
    println!(
        "(writes: what the API server took from the first create until every parent was Ready \
         and its children settled, or the Ready wait gave up; the growth of its revision)"
    );
}

/// Memory per parent kind: one host with one kind, then one with `kinds`, each kind served by
/// its own copy of the `guest-kinds` plugin (a distinct component: its own digest, compile and
/// instances) with one parent reconciled, then idle; (RSS of the second − the first) / (kinds − 1).
async fn bench_kinds(setup: &Setup, kinds: usize) -> Result<()> {
    if !(2..=KINDS_DECLARED).contains(&kinds) {
        bail!(
            "WINDLASS_BENCH_KINDS: between 2 and {KINDS_DECLARED} (the kinds guest-kinds declares)"
        );
    }
    eprintln!("kinds: one host with 1 parent kind, one with {kinds} …");
    let (one_peak, one) = kinds_variant(setup, 1).await?;
    let (many_peak, many) = kinds_variant(setup, kinds).await?;
    println!(
        "memory per parent kind: a host with 1 and one with {kinds} parent kinds, each kind its own \
         Rust plugin (guest-kinds, a distinct component per kind) and one reconciled parent, idle \
         {} s",
        KINDS_IDLE.as_secs()
    );
    println!("{:<28} {:>14} {:>14}", "host", "RSS MiB", "peak RSS MiB");
    println!(
        "{:<28} {:>14.1} {:>14.1}",
        "1 kind",
        mib(one),
        mib(one_peak)
    );
    println!(
        "{:<28} {:>14.1} {:>14.1}",
        format!("{kinds} kinds"),
        mib(many),
        mib(many_peak)
    );
    let per = |a: u64, b: u64| (b as f64 - a as f64) / (kinds - 1) as f64;
    println!(
        "RSS per additional kind        {:>6.2} MiB  (peak {:.2} MiB; goal <= 2 MiB)",
        per(one, many) / (1024.0 * 1024.0),
        per(one_peak, many_peak) / (1024.0 * 1024.0)
    );
    Ok(())
}

/// How many parent kinds guest-kinds declares.
const KINDS_DECLARED: usize = 50;
/// How long the kinds' hosts sit idle before their memory is read (1 s in quick mode).
const KINDS_IDLE: Duration = Duration::from_secs(10);

/// A host serving `kinds` parent kinds, one plugin and one parent each: (VmHWM, VmRSS) once
/// every parent is reconciled and the host has been idle for `KINDS_IDLE`.
async fn kinds_variant(setup: &Setup, kinds: usize) -> Result<(u64, u64)> {
    let (cluster, client, kubeconfig) = fresh_cluster(setup, &format!("kinds-{kinds}")).await?;
    let component = std::fs::read(windlass_test_guests::KINDS)
        .with_context(|| format!("reading {}", windlass_test_guests::KINDS))?;
    let crds: Api<CustomResourceDefinition> = Api::all(client.clone());
    let wasm_plugins: Api<WasmPlugin> = Api::all(client.clone());
    for i in 0..kinds {
        let kind = format!("Kind{i:02}");
        let plural = format!("kind{i:02}s");
        let crd: CustomResourceDefinition = serde_json::from_value(json!({
            "metadata": {"name": format!("{plural}.bench.windlass.dev")},
            "spec": {
                "group": "bench.windlass.dev",
                "names": {"kind": kind, "plural": plural, "singular": format!("kind{i:02}")},
                "scope": "Namespaced",
                "versions": [{
                    "name": "v1", "served": true, "storage": true,
                    "subresources": {"status": {}},
                    "schema": {"openAPIV3Schema": {
                        "type": "object", "x-kubernetes-preserve-unknown-fields": true,
                    }},
                }],
            },
        }))?;
        crds.create(&PostParams::default(), &crd).await?;
        windlass_devcluster::crd::wait_established(
            &crds,
            &format!("{plural}.bench.windlass.dev"),
            Duration::from_secs(60),
        )
        .await
        .map_err(anyhow::Error::msg)?;
        // A custom section (id 0: name, then payload) at the end makes each copy its own
        // component without changing what it does.
        let name = b"windlass-bench-kind";
        let payload = format!("{i}");
        let mut bytes = component.clone();
        let mut section = vec![name.len() as u8];
        section.extend_from_slice(name);
        section.extend_from_slice(payload.as_bytes());
        bytes.push(0);
        bytes.push(u8::try_from(section.len()).context("a custom section over 127 bytes")?);
        bytes.extend_from_slice(&section);
        put_plugin(
            &client,
            &format!("kind{i:02}"),
            bytes,
            json!({"parent": {"apiVersion": "bench.windlass.dev/v1", "kind": kind}}),
        )
        .await?;
    }
    let log = format!("kinds-{kinds}.log");
    let mut cmd = operator_command(setup, &setup.windlass, &log);
    cmd.arg("--no-cache")
        .arg("run")
        .arg("--kubeconfig")
        .arg(&kubeconfig)
        .args(["--leader-elect", "false", "--admin-addr", "127.0.0.1:0"]);
    redirect(&mut cmd, &setup.scratch.path().join(&log))?;
    let mut process = Operator::spawn(cmd, &log, setup)?;
    for i in 0..kinds {
        plugin_ready(&wasm_plugins, &format!("kind{i:02}"), &mut process).await?;
    }
    for i in 0..kinds {
        let resource = ApiResource::from_gvk_with_plural(
            &GroupVersionKind::gvk("bench.windlass.dev", "v1", &format!("Kind{i:02}")),
            &format!("kind{i:02}s"),
        );
        let api: Api<DynamicObject> = Api::namespaced_with(client.clone(), NAMESPACE, &resource);
        let parent: DynamicObject = serde_json::from_value(json!({
            "apiVersion": "bench.windlass.dev/v1", "kind": format!("Kind{i:02}"),
            "metadata": {"name": format!("one-{i:02}"), "namespace": NAMESPACE},
            "spec": {"value": format!("{i}")},
        }))?;
        api.create(&PostParams::default(), &parent).await?;
        let name = format!("one-{i:02}");
        wait_for(
            &format!("Kind{i:02} {name} to be reconciled"),
            &mut process,
            || async {
                let o = api.get(&name).await.ok()?;
                (o.data.pointer("/status/observedGeneration") == Some(&json!(1))).then_some(())
            },
        )
        .await?;
    }
    // Every kind's child made, as the plugin wanted.
    let config_maps: Api<ConfigMap> = Api::namespaced(client.clone(), NAMESPACE);
    let made = config_maps
        .list(&Default::default())
        .await?
        .items
        .iter()
        .filter(|c| {
            c.metadata
                .name
                .as_deref()
                .is_some_and(|n| n.starts_with("one-"))
        })
        .count();
    if made != kinds {
        bail!("guest-kinds made {made} ConfigMaps for {kinds} parents");
    }
    tokio::time::sleep(if setup.quick {
        Duration::from_secs(1)
    } else {
        KINDS_IDLE
    })
    .await;
    process.check_alive()?;
    let memory = process.memory()?;
    process.kill();
    cluster.shutdown().await;
    Ok(memory)
}

/// The hot swap's and the restart's figures.
fn print_swap(n: usize, wasm: &Run, swap: &Swap, restart: &Progress) {
    let secs = |d: Option<Duration>| {
        d.map_or_else(
            || format!("not done in {} s", SWAP_TIMEOUT.as_secs()),
            |d| format!("{:.2} s", d.as_secs_f64()),
        )
    };
    println!(
        "hot swap, all {n} parents: {}, the first after {}  (WasmPlugin spec.config image -> \
         mirror/sampledb: same component digest, new pipeline, every parent re-reconciled)",
        secs(swap.progress.all),
        secs(swap.progress.first)
    );
    if let Some(tally) = wasm.tally {
        println!("  until converged the host counted {tally}");
    }
    println!("  during the swap the host counted {}", swap.tally);
    let tenths: Vec<String> = swap
        .progress
        .tenths
        .iter()
        .map(|t| t.map_or_else(|| "-".to_string(), |t| format!("{:.1}", t.as_secs_f64())))
        .collect();
    println!(
        "  a tenth, two tenths … nine tenths of the StatefulSets on the new image after (s): {}",
        tenths.join(" ")
    );
    if let Some(written) = swap.written {
        println!(
            "  the last StatefulSet written by the host {:.0} s after the patch, as the API \
             server recorded it (managedFields time, to the second; {:.2} of converge)",
            written.as_secs_f64(),
            written.as_secs_f64() / wasm.converge.as_secs_f64()
        );
    }
    // Every fifth sample: when each lane's reconciles were handed their permits.
    // With the CPU time spent in those 5 s: whether the host had the cores to itself.
    let mut cpu = Cpu::default();
    for (at, tally, now) in swap.timeline.iter().skip(4).step_by(5) {
        println!(
            "  after {:>5.1} s: {}; in 5 s {}",
            at.as_secs_f64(),
            tally,
            now.since(cpu)
        );
        cpu = *now;
    }
    println!(
        "full restart, all {n} parents: {}, the first after {}  (kill, config back, new \
         process: compile the plugin without cache, list, reconcile every parent)",
        secs(restart.all),
        secs(restart.first)
    );
    match (swap.progress.all, restart.all) {
        (Some(swap), Some(restart)) => println!(
            "ratio swap/restart             {:>6.2}  (goal <= 0.1)",
            swap.as_secs_f64() / restart.as_secs_f64()
        ),
        _ => println!("ratio swap/restart             n/a  (goal <= 0.1)"),
    }
    match swap.progress.all {
        Some(all) => println!(
            "ratio swap all/converge        {:>6.2}  (goal <= 1.0; by this benchmark's watches)",
            all.as_secs_f64() / wasm.converge.as_secs_f64()
        ),
        None => println!("ratio swap all/converge        n/a  (goal <= 1.0)"),
    }
    // The same ratio from the API server's records alone: the host's last StatefulSet write of
    // the swap against its last StatefulSet create of converge, both to the second.
    match (swap.written, wasm.created_sets) {
        (Some(written), Some(created)) if !created.is_zero() => println!(
            "ratio swap all/converge        {:>6.2}  (goal <= 1.0; by the API server's records: \
             the last StatefulSet written {:.0} s after the patch, the last created {:.0} s \
             after the first parent)",
            written.as_secs_f64() / created.as_secs_f64(),
            written.as_secs_f64(),
            created.as_secs_f64()
        ),
        _ => println!("ratio swap all/converge        n/a  (by the API server's records)"),
    }
}

/// The churn's figures; `n` parents.
fn print_churn(n: usize, churn: &Churn) {
    let at = |q: f64| {
        let l = &churn.latencies;
        let i = ((l.len() as f64 * q).ceil() as usize).clamp(1, l.len()) - 1;
        l[i].as_secs_f64()
    };
    println!(
        "churn: {} spec changes to {} of {n} parents in {:.2} s ({:.1}/s, asked {:.0}/s for {} s)",
        churn.changes,
        churn.parents_changed,
        churn.sent_in.as_secs_f64(),
        churn.changes as f64 / churn.sent_in.as_secs_f64(),
        churn.rate,
        churn.secs.as_secs()
    );
    println!(
        "change -> observedGeneration   p50 {:.3} s  p90 {:.3} s  p99 {:.3} s  max {:.3} s  \
         (every change reconciled: none starved)",
        at(0.5),
        at(0.9),
        at(0.99),
        at(1.0)
    );
    let (count, p50, p99) = churn.queue_wait;
    println!(
        "queue wait, lane changed       p50 {:.1} ms  p99 {:.1} ms  over {count} waits  \
         (the host's histogram, interpolated in its bucket; goal p99 <= 1 s)",
        p50 * 1000.0,
        p99 * 1000.0
    );
}

/// The children of the bench namespace by `Kind/name`, with what differs from one cluster or
/// run to the next taken out: what the API server sets (uid, resourceVersion, timestamps,
/// managedFields, generation, status, a Service's allocated IPs), the parents' uids (in labels
/// and owner references) replaced by their names, and Secrets' values (the storage plugin
/// generates a random password).
type Children = std::collections::BTreeMap<String, serde_json::Value>;

async fn children(client: &Client, full: bool) -> Result<Children> {
    let mut uids = std::collections::HashMap::new();
    for parent in sampledbs(client).list(&Default::default()).await? {
        if let (Some(uid), Some(name)) = (parent.metadata.uid, parent.metadata.name) {
            uids.insert(uid, format!("<uid of {name}>"));
        }
    }
    let mut out = Children::new();
    let mut kinds = vec![
        ("apps/v1", "StatefulSet", "statefulsets"),
        ("v1", "Service", "services"),
        ("v1", "ConfigMap", "configmaps"),
        ("v1", "Secret", "secrets"),
        ("batch/v1", "Job", "jobs"),
    ];
    if full {
        // The conventions' budgets and the backup's and chaos's CronJobs (none by default).
        kinds.push(("policy/v1", "PodDisruptionBudget", "poddisruptionbudgets"));
        kinds.push(("batch/v1", "CronJob", "cronjobs"));
        // The election's role label on each database Pod (the Pods are the StatefulSets').
        let pods: Api<k8s_openapi::api::core::v1::Pod> = Api::namespaced(client.clone(), NAMESPACE);
        for pod in pods
            .list(&kube::api::ListParams::default().labels(ROLE_LABEL))
            .await?
        {
            let role = kube::ResourceExt::labels(&pod).get(ROLE_LABEL).cloned();
            out.insert(
                format!("Pod/{}", kube::ResourceExt::name_any(&pod)),
                json!({"metadata": {"labels": {ROLE_LABEL: role}}}),
            );
        }
    }
    for (api_version, kind, plural) in kinds {
        let (group, version) = api_version.split_once('/').unwrap_or(("", api_version));
        let resource =
            ApiResource::from_gvk_with_plural(&GroupVersionKind::gvk(group, version, kind), plural);
        let api: Api<DynamicObject> = Api::namespaced_with(client.clone(), NAMESPACE, &resource);
        let params =
            kube::api::ListParams::default().labels(windlass::controller::plan::PARENT_UID_LABEL);
        for object in api.list(&params).await? {
            let name = format!(
                "{kind}/{}",
                object.metadata.name.clone().unwrap_or_default()
            );
            let mut value = serde_json::to_value(&object)?;
            if let Some(meta) = value.get_mut("metadata").and_then(|m| m.as_object_mut()) {
                for key in [
                    "uid",
                    "resourceVersion",
                    "creationTimestamp",
                    "managedFields",
                    "generation",
                ] {
                    meta.remove(key);
                }
            }
            if let Some(object) = value.as_object_mut() {
                object.remove("status");
                if kind == "Secret" {
                    for key in ["data", "stringData"] {
                        if let Some(data) = object.get_mut(key).and_then(|d| d.as_object_mut()) {
                            data.values_mut().for_each(|v| *v = json!("<secret>"));
                        }
                    }
                }
            }
            if let Some(spec) = value.get_mut("spec").and_then(|s| s.as_object_mut())
                && kind == "Service"
            {
                spec.remove("clusterIP");
                spec.remove("clusterIPs");
            }
            replace_uids(&mut value, &uids);
            out.insert(name, value);
        }
    }
    Ok(out)
}

/// The children once two reads a second apart agree and, where the operator prunes, no init
/// Job is left (the storage plugin stops wanting a parent's init Job a reconcile after it
/// completed); fails after a minute of change.
async fn settled_children(
    client: &Client,
    prunes: bool,
    full: bool,
    process: &mut Operator,
) -> Result<Children> {
    let init_job = |key: &String| key.starts_with("Job/") && key.ends_with("-init");
    let mut last = children(client, full).await?;
    for _ in 0..60 {
        tokio::time::sleep(Duration::from_secs(1)).await;
        process.check_alive()?;
        let now = children(client, full).await?;
        let pruned = !prunes || !now.keys().any(init_job);
        if pruned && now == last {
            return Ok(now);
        }
        last = now;
    }
    let jobs = last.keys().filter(|k| init_job(k)).count();
    bail!("the children were still changing after a minute ({jobs} init Jobs left)")
}

fn replace_uids(value: &mut serde_json::Value, uids: &std::collections::HashMap<String, String>) {
    match value {
        serde_json::Value::String(s) => {
            if let Some(name) = uids.get(s.as_str()) {
                *s = name.clone();
            }
        }
        serde_json::Value::Array(items) => items.iter_mut().for_each(|v| replace_uids(v, uids)),
        serde_json::Value::Object(map) => map.values_mut().for_each(|v| replace_uids(v, uids)),
        _ => {}
    }
}

/// The hash of what the host applied, by which its no-op skipping knows an apply would change
/// nothing: a hash of the object with its parent's uid in it, so it differs between clusters.
const APPLIED: &str = "windlass.dev/applied";
/// The provenance: which plugin of which digest produced the object; (b) has no digest.
const PRODUCED_BY: &str = "windlass.dev/produced-by";

/// Fails unless the variants produced the same children, naming the first that differs: (a)
/// and (c), one host with two engines, but for the hash of what was applied; (a) and (b) but
/// for the two annotations only the host writes, and for the Jobs (b) keeps: the storage
/// plugin stops wanting a parent's init Job once it has completed, and the host prunes it,
/// while (b) does not prune.
fn same_children(
    parents: usize,
    wasm: &Children,
    native: &Children,
    engine: &Children,
) -> Result<()> {
    let sets = wasm
        .keys()
        .filter(|k| k.starts_with("StatefulSet/"))
        .count();
    if sets != parents {
        bail!("(a) made {sets} StatefulSets for {parents} parents");
    }
    differ(
        "(a)",
        &without_annotations(wasm, &[APPLIED]),
        "(c)",
        &without_annotations(engine, &[APPLIED]),
    )?;
    let mut native = without_annotations(native, &[APPLIED, PRODUCED_BY]);
    let kept: Vec<String> = native
        .keys()
        .filter(|key| key.starts_with("Job/") && key.ends_with("-init") && !wasm.contains_key(*key))
        .cloned()
        .collect();
    for key in &kept {
        native.remove(key);
    }
    differ(
        "(a)",
        &without_annotations(wasm, &[APPLIED, PRODUCED_BY]),
        "(b)",
        &native,
    )?;
    println!(
        "children: the same {} objects from (a), (b) and (c); (b) also keeps {} completed Jobs \
         the host pruned",
        wasm.len(),
        kept.len()
    );
    Ok(())
}

fn differ(a_name: &str, a: &Children, b_name: &str, b: &Children) -> Result<()> {
    for key in a.keys().chain(b.keys()) {
        let (x, y) = (a.get(key), b.get(key));
        if x != y {
            bail!(
                "the variants produced different children: {key} in {a_name}: {}\n\
                 in {b_name}: {}",
                x.map_or_else(|| "absent".into(), |v| v.to_string()),
                y.map_or_else(|| "absent".into(), |v| v.to_string()),
            );
        }
    }
    Ok(())
}

fn without_annotations(children: &Children, keys: &[&str]) -> Children {
    let mut children = children.clone();
    for object in children.values_mut() {
        let Some(meta) = object.get_mut("metadata").and_then(|m| m.as_object_mut()) else {
            continue;
        };
        if let Some(annotations) = meta.get_mut("annotations").and_then(|a| a.as_object_mut()) {
            for key in keys {
                annotations.remove(*key);
            }
            if annotations.is_empty() {
                meta.remove("annotations");
            }
        }
    }
    children
}

/// Callgrind mode: instructions per reconcile of (a) over a fixed window.
async fn bench_instructions(setup: &Setup) -> Result<()> {
    let n = setup.parents;
    eprintln!("(a) windlass run under callgrind, {n} SampleDBs …");
    let (wasm, _, _) = windlass_variant(setup).await?;
    let (instructions, reconciles) = wasm.instructions.context("no instruction count")?;
    println!(
        "host benchmark, instructions: {n} SampleDBs (replicas 1) created at once ({IN_FLIGHT} \
         in flight), simulator off, counted for {} s from the first create",
        setup.window.as_secs()
    );
    println!(
        "binary                           {}",
        setup.windlass.display()
    );
    println!("instructions                     {instructions:>16}");
    println!(
        "reconciles (successful / all)    {:>7} / {}",
        reconciles.success, reconciles.all
    );
    if reconciles.all == 0 {
        bail!("no reconcile in the window: nothing to divide by");
    }
    println!(
        "instructions per reconcile       {:>16.0}",
        instructions as f64 / reconciles.all as f64
    );
    record(setup, &[("a", &wasm)])
}

/// The columns [`record`] writes; `cargo xtask plot` reads files that begin with this line.
const RECORD_HEADER: &str = "pipeline,cluster,parents,variant,converge_s,peak_rss_mib,cpu_s,\
                             reconciles,writes,instructions_per_reconcile";

/// Appends a CSV row per variant to `setup.record`, if set (the header first into a new or
/// empty file): what the run measured, an empty field for what it did not (a timed run has no
/// instruction count, a callgrind run no times). CPU time is the operator's process and its
/// serving processes from the first create until converged.
fn record(setup: &Setup, rows: &[(&str, &Run)]) -> Result<()> {
    use std::io::Write as _;
    // The quick mode records into its scratch directory, so that this cannot rot either.
    let path = match (&setup.record, setup.quick) {
        (Some(path), _) => path.clone(),
        (None, true) => setup.scratch.path().join("record.csv"),
        (None, false) => return Ok(()),
    };
    let path = &path;
    let mut file = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(path)
        .with_context(|| format!("opening {}", path.display()))?;
    let mut text = String::new();
    if file.metadata()?.len() == 0 {
        text.push_str(RECORD_HEADER);
        text.push('\n');
    }
    let opt = |v: Option<String>| v.unwrap_or_default();
    for (variant, run) in rows {
        let timed = run.instructions.is_none();
        text.push_str(&format!(
            "{},{},{},{variant},{},{},{},{},{},{}\n",
            if setup.full { "full" } else { "storage" },
            if setup.real { "real" } else { "devcluster" },
            setup.parents,
            opt(timed.then(|| format!("{:.2}", run.converge.as_secs_f64()))),
            opt(timed.then(|| format!("{:.1}", mib(run.peak_rss)))),
            opt(run.cpu.map(|c| format!("{:.1}", c.host + c.served))),
            opt(run.reconciles.map(|n| n.to_string())),
            opt(run.writes.map(|n| n.to_string())),
            opt(run
                .instructions
                .filter(|(_, r)| r.all > 0)
                .map(|(i, r)| format!("{:.0}", i as f64 / r.all as f64))),
        ));
    }
    file.write_all(text.as_bytes())
        .with_context(|| format!("writing {}", path.display()))?;
    eprintln!("  recorded in {}", path.display());
    Ok(())
}

/// The host's `/metrics` on `127.0.0.1:port`, as text.
fn metrics(port: u16) -> Result<String> {
    use std::io::{Read as _, Write as _};
    let mut stream = std::net::TcpStream::connect(("127.0.0.1", port))
        .with_context(|| format!("connecting to the host's admin port {port}"))?;
    stream.write_all(b"GET /metrics HTTP/1.0\r\nHost: 127.0.0.1\r\n\r\n")?;
    let mut text = String::new();
    stream.read_to_string(&mut text)?;
    Ok(text)
}

/// The host's reconcile count, read from its `/metrics` on `127.0.0.1:port`.
fn reconciles(port: u16) -> Result<Reconciles> {
    reconciles_in(&metrics(port)?)
}

/// The reconcile count in a `/metrics` text.
fn reconciles_in(text: &str) -> Result<Reconciles> {
    let mut out = Reconciles::default();
    for line in text
        .lines()
        .filter(|l| l.starts_with("controller_runtime_reconcile_total{"))
    {
        let value: u64 = line
            .rsplit(' ')
            .next()
            .and_then(|v| v.parse().ok())
            .with_context(|| format!("a reconcile series without a count: {line}"))?;
        out.all += value;
        if !line.contains(r#"result="error""#) {
            out.success += value;
        }
    }
    Ok(out)
}

/// The cumulative buckets `(le, count)` of the host's `windlass_queue_wait_seconds` for the
/// SampleDB kind and `lane`, `+Inf` last.
fn queue_wait_buckets(text: &str, lane: &str) -> Result<Vec<(f64, u64)>> {
    // prometheus-client writes `le` first: `…_bucket{le="0.5",kind="…",lane="…"} 7`.
    let labels = format!(r#"",kind="{}",lane="{lane}"}} "#, sampledb_api::KIND_KEY);
    let mut buckets = Vec::new();
    for line in text.lines() {
        let Some(rest) = line.strip_prefix(r#"windlass_queue_wait_seconds_bucket{le=""#) else {
            continue;
        };
        let Some((le, count)) = rest.split_once(labels.as_str()) else {
            continue;
        };
        let le = if le == "+Inf" {
            f64::INFINITY
        } else {
            le.parse()
                .with_context(|| format!("a bucket bound not a number: {line}"))?
        };
        buckets.push((le, count.trim().parse()?));
    }
    buckets.sort_by(|a, b| a.0.total_cmp(&b.0));
    Ok(buckets)
}

/// The `q` quantile of the observations between two reads of a cumulative histogram, by linear
/// interpolation within its bucket (as Prometheus's `histogram_quantile`; the highest finite
/// bound when it falls in `+Inf`). `(count, quantile)`.
fn quantile(before: &[(f64, u64)], after: &[(f64, u64)], q: f64) -> (u64, f64) {
    let counted = |le: f64| {
        let of = |b: &[(f64, u64)]| b.iter().find(|(l, _)| *l == le).map_or(0, |(_, c)| *c);
        of(after).saturating_sub(of(before))
    };
    let total = after.last().map_or(0, |(le, _)| counted(*le));
    if total == 0 {
        return (0, 0.0);
    }
    let rank = q * total as f64;
    let (mut lower, mut below) = (0.0, 0);
    for (le, _) in after {
        let count = counted(*le);
        if count as f64 >= rank {
            if le.is_infinite() {
                return (total, lower);
            }
            let within = (count - below) as f64;
            let share = if within == 0.0 {
                1.0
            } else {
                (rank - below as f64) / within
            };
            return (total, lower + (le - lower) * share);
        }
        (lower, below) = (*le, count);
    }
    (total, lower)
}

/// After convergence: one spec change every 1/`rate` s for `secs` to a pseudo-random parent,
/// each timed from just before its patch until the parent's observedGeneration reaches the
/// generation it made; fails, naming the parent, when a change is not reconciled within a
/// minute of the end.
async fn churn(
    setup: &Setup,
    client: &Client,
    process: &mut Operator,
    admin: u16,
    rate: f64,
    secs: Duration,
) -> Result<Churn> {
    use kube::{
        ResourceExt,
        runtime::{WatchStreamExt, watcher},
    };
    use std::collections::HashMap;
    const DRAIN: Duration = Duration::from_secs(60);
    let api = sampledbs(client);
    let wait_before = queue_wait_buckets(&metrics(admin)?, "changed")?;
    // The watch is listed and running before the first patch, so no change is missed.
    let mut events =
        std::pin::pin!(watcher(api.clone(), watcher::Config::default()).default_backoff());
    loop {
        match events.next().await.context("the watch ended")?? {
            watcher::Event::InitDone => break,
            _ => continue,
        }
    }
    let (sent_tx, mut sent_rx) = tokio::sync::mpsc::unbounded_channel::<(String, i64, Instant)>();
    let changes = (rate * secs.as_secs_f64()).round() as usize;
    let parents = setup.parents;
    let driver = {
        let api = api.clone();
        tokio::spawn(async move {
            let mut tick = tokio::time::interval(Duration::from_secs_f64(1.0 / rate));
            let mut patches = tokio::task::JoinSet::new();
            // xorshift64, seeded: the same parents in every run.
            let mut state: u64 = 0x9E37_79B9_7F4A_7C15;
            let started = Instant::now();
            for i in 0..changes {
                tick.tick().await;
                state ^= state << 13;
                state ^= state >> 7;
                state ^= state << 17;
                let name = format!("db-{:05}", state % parents as u64);
                let (api, sent_tx) = (api.clone(), sent_tx.clone());
                patches.spawn(async move {
                    let sent = Instant::now();
                    let patched = api
                        .patch(
                            &name,
                            &PatchParams::default(),
                            &Patch::Merge(json!({"spec": {"config": {"churn": i.to_string()}}})),
                        )
                        .await
                        .with_context(|| format!("patching SampleDB {name}"))?;
                    let generation = patched.metadata.generation.context("no generation")?;
                    let _ = sent_tx.send((name, generation, sent));
                    anyhow::Ok(())
                });
            }
            while let Some(done) = patches.join_next().await {
                done??;
            }
            anyhow::Ok(started.elapsed())
        })
    };
    // Name → the instants its observedGeneration first reached each value seen.
    let mut reached: HashMap<String, Vec<(i64, Instant)>> = HashMap::new();
    // Name → changes sent and not yet reconciled: (generation, sent).
    let mut pending: HashMap<String, Vec<(i64, Instant)>> = HashMap::new();
    let mut latencies = Vec::with_capacity(changes);
    let mut changed = std::collections::HashSet::new();
    let mut all_sent = false;
    let mut drain_from: Option<Instant> = None;
    let mut tick = tokio::time::interval(POLL);
    loop {
        tokio::select! {
            event = events.next() => {
                let o = match event.context("the watch ended")?? {
                    watcher::Event::Apply(o) | watcher::Event::InitApply(o) => o,
                    _ => continue,
                };
                let Some(observed) = o.data.pointer("/status/observedGeneration").and_then(|g| g.as_i64()) else {
                    continue;
                };
                let now = Instant::now();
                let name = o.name_any();
                let seen = reached.entry(name.clone()).or_default();
                if seen.last().is_none_or(|(g, _)| *g < observed) {
                    seen.push((observed, now));
                }
                if let Some(waiting) = pending.get_mut(&name) {
                    waiting.retain(|(generation, sent)| {
                        let done = *generation <= observed;
                        if done {
                            latencies.push(now - *sent);
                        }
                        !done
                    });
                    if waiting.is_empty() {
                        pending.remove(&name);
                    }
                }
            }
            sent = sent_rx.recv(), if !all_sent => {
                let Some((name, generation, sent)) = sent else {
                    all_sent = true;
                    drain_from = Some(Instant::now());
                    continue;
                };
                changed.insert(name.clone());
                // The watch may have seen the reconcile before the patch's answer came back.
                match reached.get(&name).and_then(|seen| seen.iter().find(|(g, _)| *g >= generation)) {
                    Some((_, at)) => latencies.push(at.saturating_duration_since(sent)),
                    None => pending.entry(name).or_default().push((generation, sent)),
                }
            }
            _ = tick.tick() => {
                process.check_alive()?;
                if let Some(from) = drain_from {
                    if pending.is_empty() {
                        break;
                    }
                    if from.elapsed() > DRAIN {
                        let mut starved: Vec<&String> = pending.keys().collect();
                        starved.sort();
                        // What the cluster and the host say of the first few, for the reader.
                        let mut seen = String::new();
                        for name in starved.iter().take(3) {
                            if let Ok(o) = api.get(name).await {
                                seen.push_str(&format!(
                                    "\n  {name}: generation {:?}, status {}",
                                    o.metadata.generation,
                                    o.data.get("status").map_or_else(String::new, ToString::to_string)
                                ));
                            }
                        }
                        let host = metrics(admin)
                            .map(|t| {
                                t.lines()
                                    .filter(|l| {
                                        l.starts_with("controller_runtime_reconcile_total")
                                            || l.starts_with("workqueue_depth")
                                            || l.starts_with("windlass_queue_wait_seconds_count")
                                    })
                                    .collect::<Vec<_>>()
                                    .join("\n")
                            })
                            .unwrap_or_else(|e| e.to_string());
                        bail!(
                            "{} changes to {} parents not reconciled {} s after the churn \
                             stopped (starved), among them {}{seen}\nthe host's metrics:\n{host}\n{}",
                            pending.values().map(Vec::len).sum::<usize>(),
                            pending.len(),
                            DRAIN.as_secs(),
                            starved.iter().take(5).map(|s| s.as_str()).collect::<Vec<_>>().join(", "),
                            process.log_tail()
                        );
                    }
                }
            }
        }
    }
    let sent_in = driver.await??;
    if latencies.len() != changes {
        bail!("{changes} changes sent, {} timed", latencies.len());
    }
    latencies.sort();
    let text = metrics(admin)?;
    let wait_after = queue_wait_buckets(&text, "changed")?;
    let (count, p50) = quantile(&wait_before, &wait_after, 0.5);
    let (_, p99) = quantile(&wait_before, &wait_after, 0.99);
    if count == 0 {
        bail!(
            "the host's queue-wait histogram (lane changed) counted nothing during the churn:\n{}",
            text.lines()
                .filter(|l| l.contains("queue_wait"))
                .collect::<Vec<_>>()
                .join("\n")
        );
    }
    Ok(Churn {
        rate,
        secs,
        changes,
        sent_in,
        latencies,
        queue_wait: (count, p50, p99),
        parents_changed: changed.len(),
    })
}

/// A free TCP port on loopback (free when this returns).
fn free_port() -> Result<u16> {
    Ok(std::net::TcpListener::bind("127.0.0.1:0")?
        .local_addr()?
        .port())
}

/// Runs `callgrind_control ARGS PID`.
fn callgrind_control(args: &[&str], pid: u32) -> Result<()> {
    let status = Command::new("callgrind_control")
        .args(args)
        .arg(pid.to_string())
        .stdout(Stdio::null())
        .status()
        .context("running callgrind_control (Debian package valgrind)")?;
    if !status.success() {
        bail!("callgrind_control {args:?} {pid}: {status}");
    }
    Ok(())
}

/// The `totals:` (or `summary:`) instruction count of every callgrind dump whose name starts
/// with `prefix`.
fn callgrind_totals(dir: &Path, prefix: &str) -> Result<u64> {
    // `callgrind_control --dump` returns before the dump is written (the tool writes it when
    // the process next reaches a check), and the main output file gets its totals only at
    // exit: wait for a complete dump, and count only files that have one.
    let deadline = Instant::now() + Duration::from_secs(300);
    loop {
        let mut total = 0;
        let mut dumps = 0;
        for entry in std::fs::read_dir(dir)? {
            let path = entry?.path();
            let name = path.file_name().and_then(|n| n.to_str()).unwrap_or("");
            if !name.starts_with(prefix) {
                continue;
            }
            let text = std::fs::read_to_string(&path)?;
            let Some(line) = text
                .lines()
                .find(|l| l.starts_with("totals:"))
                .or_else(|| text.lines().find(|l| l.starts_with("summary:")))
            else {
                continue;
            };
            let ir: u64 = line
                .split_whitespace()
                .nth(1)
                .context("an empty totals line")?
                .parse()?;
            total += ir;
            dumps += 1;
        }
        if dumps > 0 {
            return Ok(total);
        }
        if Instant::now() > deadline {
            bail!("no complete callgrind dump {prefix}* in {}", dir.display());
        }
        std::thread::sleep(Duration::from_secs(1));
    }
}

/// A command for an operator binary: the binary itself, or valgrind running it in callgrind
/// mode with instrumentation off (`converge` turns it on).
fn operator_command(setup: &Setup, binary: &Path, log: &str) -> Command {
    if !setup.callgrind {
        return Command::new(binary);
    }
    let mut cmd = Command::new("valgrind");
    cmd.args(["--tool=callgrind", "--instr-atstart=no"])
        .arg(format!(
            "--callgrind-out-file={}",
            setup
                .scratch
                .path()
                .join(format!("{log}.callgrind"))
                .display()
        ))
        .arg(binary);
    cmd
}

fn mib(bytes: u64) -> f64 {
    bytes as f64 / (1024.0 * 1024.0)
}

/// (a): converge and memory, then hot swap against a full restart.
async fn windlass_variant(setup: &Setup) -> Result<(Run, Swap, Progress)> {
    let (cluster, client, kubeconfig) = fresh_cluster(setup, "windlass").await?;
    let wasm_plugins = install_plugins(setup, &client, &kubeconfig).await?;
    // Callgrind mode reads the host's reconcile count from its admin port, churn its queue wait.
    let admin = free_port()?;
    let windlass_args = |log: &str| -> Result<Command> {
        let mut cmd = operator_command(setup, &setup.windlass, log);
        cmd.arg("--no-cache")
            .arg("run")
            .arg("--kubeconfig")
            .arg(&kubeconfig)
            .args(["--leader-elect", "false", "--admin-addr"])
            .arg(format!("127.0.0.1:{admin}"))
            // The pooling allocator reserves address space per instance slot (2 TiB at the
            // default 256), more than valgrind can map: four slots, four reconciles at once.
            .args(
                if setup.callgrind && !setup.windlass_args.iter().any(|a| a == "--max-instances") {
                    &["--max-instances", "4", "--concurrency", "4"][..]
                } else {
                    &[][..]
                },
            )
            .args(&setup.windlass_args);
        redirect(&mut cmd, &setup.scratch.path().join(log))?;
        Ok(cmd)
    };
    let mut process = Operator::spawn(windlass_args("windlass-1.log")?, "windlass-1.log", setup)?;
    plugins_ready(setup, &wasm_plugins, &mut process).await?;
    if setup.callgrind {
        let run = count_instructions(setup, &client, &mut process, "windlass-1.log", admin).await?;
        process.kill();
        cluster.shutdown().await;
        let skipped = Progress::default();
        let swap = Swap {
            progress: skipped,
            tally: Tally::default(),
            timeline: Vec::new(),
            written: None,
        };
        return Ok((run, swap, skipped));
    }
    let mut run = converge(setup, &client, &mut process, true, Some(admin)).await?;
    if let Some((rate, secs)) = setup.churn.filter(|_| !setup.full) {
        eprintln!("  churn: {rate} spec changes/s for {} s …", secs.as_secs());
        run.churn = Some(churn(setup, &client, &mut process, admin, rate, secs).await?);
    }
    if setup.quick || setup.full {
        process.kill();
        cluster.shutdown().await;
        let skipped = Progress::default();
        let swap = Swap {
            progress: skipped,
            tally: Tally::default(),
            timeline: Vec::new(),
            written: None,
        };
        return Ok((run, swap, skipped));
    }

    let set_image = |image: &'static str| {
        let wasm_plugins = wasm_plugins.clone();
        async move {
            wasm_plugins
                .patch(
                    PLUGIN,
                    &PatchParams::default(),
                    &Patch::Merge(json!({"spec": {"config": {"image": image}}})),
                )
                .await
        }
    };
    eprintln!("  hot swap …");
    // Each clock starts once the benchmark's own watch has listed the StatefulSets.
    let watch = images(&client, "mirror/sampledb").listed().await?;
    let before = Tally::read(admin)?;
    let started = Instant::now();
    let started_at = jiff::Timestamp::now();
    let sampler = Sampler::start(admin, process.child.id(), started, before);
    set_image("mirror/sampledb").await?;
    let swap = images_until(
        watch,
        "mirror/sampledb",
        setup.parents,
        started,
        &mut process,
    )
    .await?;
    let swap = Swap {
        progress: swap,
        tally: Tally::read(admin)?.since(before),
        timeline: sampler.stop()?,
        written: last_written(&client, started_at).await?,
    };

    eprintln!("  full restart …");
    let watch = images(&client, "sampledb").listed().await?;
    let started = Instant::now();
    process.kill();
    set_image("sampledb").await?;
    let mut process = Operator::spawn(windlass_args("windlass-2.log")?, "windlass-2.log", setup)?;
    let restart = images_until(watch, "sampledb", setup.parents, started, &mut process).await?;
    process.kill();
    cluster.shutdown().await;
    Ok((run, swap, restart))
}

/// The plugins the run loads: the storage plugin, or with `full` the six SampleDB plugins as
/// `windlass dev` installs them (a component too big for a ConfigMap compressed, or from its
/// file).
async fn install_plugins(
    setup: &Setup,
    client: &Client,
    kubeconfig: &Path,
) -> Result<Api<WasmPlugin>> {
    if !setup.full {
        return install_plugin(setup, client).await;
    }
    let config = windlass::dev::DevConfig {
        port: 0,
        kubeconfig: kubeconfig.to_path_buf(),
        plugins: SAMPLEDB
            .iter()
            .map(|(name, file)| {
                (
                    name.to_string(),
                    "samples.windlass.dev/v1alpha1".to_string(),
                    "SampleDB".to_string(),
                    PathBuf::from(file),
                )
            })
            .collect(),
        crds: vec![],
        manifests: vec![],
        operator: windlass::operator::Config {
            admin_addr: "127.0.0.1:0".parse()?,
            election: None,
            settings: Default::default(),
            identity: "bench".into(),
        },
        runtime: Default::default(),
        cron_speedup: 1.0,
    };
    windlass::dev::prepare(client, &config).await?;
    Ok(Api::all(client.clone()))
}

/// Waits until every plugin the run loads is Ready.
async fn plugins_ready(
    setup: &Setup,
    wasm_plugins: &Api<WasmPlugin>,
    process: &mut Operator,
) -> Result<()> {
    if !setup.full {
        return plugin_ready(wasm_plugins, PLUGIN, process).await;
    }
    for (name, _) in SAMPLEDB {
        plugin_ready(wasm_plugins, name, process).await?;
    }
    Ok(())
}

/// The storage plugin's ConfigMap and its WasmPlugin, as `windlass dev` makes them.
async fn install_plugin(setup: &Setup, client: &Client) -> Result<Api<WasmPlugin>> {
    let bytes = std::fs::read(&setup.plugin).with_context(|| {
        format!(
            "reading the storage plugin {} (cargo xtask plugins)",
            setup.plugin.display()
        )
    })?;
    put_plugin(
        client,
        PLUGIN,
        bytes,
        json!({
            "parent": {"apiVersion": "samples.windlass.dev/v1alpha1", "kind": "SampleDB"},
            "config": {"image": "sampledb"},
            // As `windlass dev` grants it: Secrets reach a plugin only by grant, and
            // the storage plugin must see the credentials Secret it generated.
            "grants": windlass::dev::sampledb_spec("sampledb-storage", "/grants"),
        }),
    )
    .await?;
    let wasm_plugins: Api<WasmPlugin> = Api::all(client.clone());
    Ok(wasm_plugins)
}

/// A component in ConfigMap `name` of `SYSTEM` and WasmPlugin `name` loading it, with `spec`
/// (its `source` set here), both by server-side apply.
async fn put_plugin(
    client: &Client,
    name: &str,
    bytes: Vec<u8>,
    mut spec: serde_json::Value,
) -> Result<()> {
    let apply = PatchParams::apply("bench").force();
    let mut cm: ConfigMap =
        serde_json::from_value(json!({"metadata": {"name": name, "namespace": SYSTEM}}))?;
    cm.binary_data = Some([("plugin.wasm".to_string(), ByteString(bytes))].into());
    Api::<ConfigMap>::namespaced(client.clone(), SYSTEM)
        .patch(name, &apply, &Patch::Apply(&cm))
        .await?;
    spec["source"] = json!({"configMap": {"namespace": SYSTEM, "name": name}});
    Api::<WasmPlugin>::all(client.clone())
        .patch(
            name,
            &apply,
            &Patch::Apply(json!({
                "apiVersion": "windlass.dev/v1alpha1", "kind": "WasmPlugin",
                "metadata": {"name": name}, "spec": spec,
            })),
        )
        .await?;
    Ok(())
}

/// Waits until the host says the WasmPlugin is Ready (loaded, its pipeline serving).
async fn plugin_ready(
    wasm_plugins: &Api<WasmPlugin>,
    name: &str,
    process: &mut Operator,
) -> Result<()> {
    wait_for(
        &format!("the WasmPlugin {name} to be Ready"),
        process,
        || async {
            let wp = serde_json::to_value(wasm_plugins.get(name).await.ok()?).ok()?;
            let ready = wp
                .pointer("/status/conditions")?
                .as_array()?
                .iter()
                .any(|c| c["type"] == "Ready" && c["status"] == "True");
            ready.then_some(())
        },
    )
    .await
}

/// (c): the host with a native `Engine` standing in for the storage component; converge and
/// memory.
async fn engine_variant(setup: &Setup) -> Result<Run> {
    let (cluster, client, kubeconfig) = fresh_cluster(setup, "engine").await?;
    let wasm_plugins = install_plugins(setup, &client, &kubeconfig).await?;
    let mut cmd = operator_command(setup, &setup.engine, "engine.log");
    cmd.arg("--kubeconfig").arg(&kubeconfig);
    if setup.full {
        for (name, file) in SAMPLEDB {
            let short = name.strip_prefix("sampledb-").unwrap_or(name);
            cmd.arg("--plugin").arg(format!("{short}={file}"));
        }
    } else {
        cmd.arg("--plugin")
            .arg(format!("storage={}", setup.plugin.display()));
    }
    // The one `windlass run` setting that shapes a converge, when `WINDLASS_BENCH_RUN_ARGS`
    // sets it for (a): the same for (c).
    if let Some(at) = setup
        .windlass_args
        .iter()
        .position(|a| a == "--concurrency")
        && let Some(value) = setup.windlass_args.get(at + 1)
    {
        cmd.args(["--concurrency", value]);
    }
    redirect(&mut cmd, &setup.scratch.path().join("engine.log"))?;
    let mut process = Operator::spawn(cmd, "engine.log", setup)?;
    plugins_ready(setup, &wasm_plugins, &mut process).await?;
    let run = converge(setup, &client, &mut process, true, None).await?;
    process.kill();
    cluster.shutdown().await;
    Ok(run)
}

/// (b): converge and memory.
async fn native_variant(setup: &Setup) -> Result<Run> {
    let (cluster, client, kubeconfig) = fresh_cluster(setup, "native").await?;
    let mut cmd = operator_command(setup, &setup.native, "native.log");
    cmd.arg("--kubeconfig").arg(&kubeconfig);
    if setup.full {
        for (name, _) in SAMPLEDB {
            cmd.arg("--plugin")
                .arg(name.strip_prefix("sampledb-").unwrap_or(name));
        }
    }
    cmd.args(&setup.native_args);
    let log = setup.scratch.path().join("native.log");
    redirect(&mut cmd, &log)?;
    let mut process = Operator::spawn(cmd, "native.log", setup)?;
    // Started: its plugins' processes serving and its kinds found, as (a) and (c) are once
    // their WasmPlugins are Ready.
    wait_for("the native controller to start", &mut process, || async {
        let text = std::fs::read_to_string(&log).unwrap_or_default();
        text.contains("native_sampledb: running").then_some(())
    })
    .await?;
    let run = converge(setup, &client, &mut process, false, None).await?;
    process.kill();
    cluster.shutdown().await;
    Ok(run)
}

/// What a variant runs against.
enum Cluster {
    Dev(DevCluster),
    /// A real control plane and the simulator playing the kubelet over its API (if on).
    Real(ControlPlane, Option<tokio::task::JoinHandle<()>>),
}

impl Cluster {
    async fn shutdown(self) {
        match self {
            Cluster::Dev(dev) => dev.shutdown().await,
            Cluster::Real(plane, simulator) => {
                if let Some(s) = simulator {
                    s.abort();
                }
                plane.stop();
            }
        }
    }
}

/// A devcluster (or a real control plane) with the CRDs and namespaces, and a kubeconfig.
async fn fresh_cluster(setup: &Setup, name: &str) -> Result<(Cluster, Client, PathBuf)> {
    let kubeconfig = setup.scratch.path().join(format!("{name}.kubeconfig"));
    let simulator = !setup.callgrind;
    let (cluster, client) = if setup.real {
        let plane = ControlPlane::start().await?;
        std::fs::copy(plane.kubeconfig(), &kubeconfig)?;
        let client = plane.client().await?;
        // The backup plugin makes VolumeSnapshots: the CSI snapshot API, which a cluster gets
        // with its snapshot controller (the simulator plays it), as the real-plane tests do.
        if setup.full {
            windlass_devcluster::simulator::remote::install_snapshot_api(&client)
                .await
                .map_err(anyhow::Error::msg)?;
        }
        let kube_config = plane.config().await?;
        let sim = simulator.then(|| {
            tokio::spawn(windlass_devcluster::simulator::remote::run(
                kube_config.clone(),
                windlass_devcluster::simulator::Config::from(&Options::default()),
            ))
        });
        (Cluster::Real(plane, sim), client)
    } else {
        let dev = DevCluster::start(Options {
            simulator,
            ..Options::default()
        })
        .await?;
        dev.write_kubeconfig(&kubeconfig)?;
        let client = dev.client();
        (Cluster::Dev(dev), client)
    };
    let crds: Api<CustomResourceDefinition> = Api::all(client.clone());
    for crd in windlass::crds() {
        let name = crd.metadata.name.clone().unwrap_or_default();
        crds.create(&PostParams::default(), &crd).await?;
        // A real API server serves a new kind only once its CRD is Established.
        windlass_devcluster::crd::wait_established(&crds, &name, Duration::from_secs(60))
            .await
            .map_err(anyhow::Error::msg)?;
    }
    let namespaces: Api<Namespace> = Api::all(client.clone());
    for ns in [SYSTEM, NAMESPACE] {
        let ns: Namespace = serde_json::from_value(json!({"metadata": {"name": ns}}))?;
        namespaces.create(&PostParams::default(), &ns).await?;
    }
    Ok((cluster, client, kubeconfig))
}

fn sampledbs(client: &Client) -> Api<DynamicObject> {
    let resource = ApiResource::from_gvk_with_plural(
        &GroupVersionKind::gvk("samples.windlass.dev", "v1alpha1", "SampleDB"),
        "sampledbs",
    );
    Api::namespaced_with(client.clone(), NAMESPACE, &resource)
}

/// Creates the parents at once, `IN_FLIGHT` creates at a time.
async fn create_parents(setup: &Setup, api: &Api<DynamicObject>) -> Result<()> {
    futures::stream::iter(0..setup.parents)
        .map(|i| {
            let api = api.clone();
            async move {
                let sdb: DynamicObject = serde_json::from_value(json!({
                    "apiVersion": "samples.windlass.dev/v1alpha1", "kind": "SampleDB",
                    "metadata": {"name": format!("db-{i:05}"), "namespace": NAMESPACE},
                    "spec": {"version": VERSION, "replicas": 1, "storage": {"size": "1Gi"}},
                }))?;
                api.create(&PostParams::default(), &sdb).await?;
                anyhow::Ok(())
            }
        })
        .buffer_unordered(IN_FLIGHT)
        .try_collect::<()>()
        .await
}

/// Callgrind mode: creates the parents with instrumentation on, counts for the window, and
/// reads the host's reconcile count at the same moment as the dump.
async fn count_instructions(
    setup: &Setup,
    client: &Client,
    process: &mut Operator,
    log: &str,
    admin: u16,
) -> Result<Run> {
    let api = sampledbs(client);
    // The operator has listed and watched (its caches are the first thing it waits for);
    // give it a moment to settle so that start-up work is not counted.
    tokio::time::sleep(Duration::from_secs(5)).await;
    let pid = process.child.id();
    let before = reconciles(admin)?;
    callgrind_control(&["--instr=on"], pid)?;
    let started = Instant::now();
    create_parents(setup, &api).await?;
    eprintln!(
        "  created in {:.2} s; counting for {} s",
        started.elapsed().as_secs_f64(),
        setup.window.as_secs()
    );
    tokio::time::sleep(setup.window.saturating_sub(started.elapsed())).await;
    if let Some(status) = process.child.try_wait()? {
        bail!("the host exited ({status})\n{}", process.log_tail());
    }
    callgrind_control(&["--instr=off"], pid)?;
    let after = reconciles(admin)?;
    callgrind_control(&["--dump"], pid)?;
    let instructions = callgrind_totals(setup.scratch.path(), &format!("{log}.callgrind"))?;
    // For `callgrind_annotate`: the dumps outlive the scratch directory when asked.
    if let Some(out) = std::env::var_os("WINDLASS_BENCH_CALLGRIND_OUT") {
        let out = PathBuf::from(out);
        std::fs::create_dir_all(&out)?;
        for entry in std::fs::read_dir(setup.scratch.path())? {
            let path = entry?.path();
            if let Some(name) = path.file_name().and_then(|n| n.to_str())
                && name.starts_with(&format!("{log}.callgrind"))
            {
                std::fs::copy(&path, out.join(name))?;
            }
        }
        eprintln!("  dumps copied to {}", out.display());
    }
    let counted = Reconciles {
        success: after.success - before.success.min(after.success),
        all: after.all - before.all.min(after.all),
    };
    eprintln!("  {instructions} instructions, {} reconciles", counted.all);
    Ok(Run {
        converge: started.elapsed(),
        created_sets: None,
        ready: None,
        peak_rss: 0,
        rss: 0,
        instructions: Some((instructions, counted)),
        children: None,
        churn: None,
        tally: None,
        writes: None,
        cpu: None,
        reconciles: None,
    })
}

/// Creates the parents at once and times convergence (then readiness); reads the process's
/// memory after.
/// `prunes`: the operator prunes what its plugins stop wanting (the host does, (b) does not), so
/// its children have settled only once the completed init Jobs are gone. `admin`: the host's
/// admin port, to read what it counted until converged.
async fn converge(
    setup: &Setup,
    client: &Client,
    process: &mut Operator,
    prunes: bool,
    admin: Option<u16>,
) -> Result<Run> {
    let api = sampledbs(client);
    let revision_before = revision(client).await?;
    let cpu = Cpu::read(process.child.id())?;
    let started = Instant::now();
    let started_at = jiff::Timestamp::now();
    create_parents(setup, &api).await?;
    let created = started.elapsed();
    let Some(converge) = watch_until(
        api.clone(),
        setup.parents,
        started,
        TIMEOUT,
        process,
        reconciled,
    )
    .await?
    .all
    else {
        bail!(
            "timed out waiting for every SampleDB to be reconciled\n{}",
            process.log_tail()
        );
    };
    let tally = admin.map(Tally::read).transpose()?;
    let cpu = Cpu::read(process.child.id())?.since(cpu);
    eprintln!(
        "  created in {:.2} s, converged in {:.2} s; {cpu}",
        created.as_secs_f64(),
        converge.as_secs_f64(),
    );
    // Read now, not once the children settle: the count until converged.
    let said = process.said_reconciles_count();
    if let Some(count) = process.said_reconciles() {
        eprintln!("  the native controller had started {count} (said within 1 s)");
    }
    let ready = watch_until(
        api,
        setup.parents,
        started,
        converge + ready_timeout(setup.parents, setup.real),
        process,
        |o: &DynamicObject| o.data.pointer("/status/phase") == Some(&json!("Ready")),
    )
    .await?
    .all;
    if ready.is_none() {
        eprintln!(
            "  not every SampleDB Ready {:?} after converging",
            ready_timeout(setup.parents, setup.real)
        );
    }
    // Read once the Ready watch is done, so that its list does not delay that watch.
    let created_sets = last_created(client, started_at).await?;
    eprintln!(
        "  the API server's record: the last StatefulSet created {} s after the creates began",
        created_sets.map_or_else(|| "n/a".to_string(), |d| format!("{:.0}", d.as_secs_f64()))
    );
    let (peak_rss, rss) = process.memory()?;
    let children = match ready {
        Some(_) => Some(settled_children(client, prunes, setup.full, process).await?),
        None => None,
    };
    let writes = revision(client).await? - revision_before;
    eprintln!(
        "  the API server took {writes} writes from the first create until {}",
        if ready.is_some() {
            "the children settled"
        } else {
            "the Ready wait gave up"
        }
    );
    Ok(Run {
        converge,
        created_sets,
        ready,
        peak_rss,
        rss,
        instructions: None,
        children,
        churn: None,
        reconciles: tally.map(|t| t.reconciles.all).or(said),
        tally,
        writes: Some(writes),
        cpu: Some(cpu),
    })
}

/// The API server's revision now: the resourceVersion of a list, which both the devcluster
/// and etcd count up by one per write of any object.
async fn revision(client: &Client) -> Result<u64> {
    let list = Api::<k8s_openapi::api::core::v1::Namespace>::all(client.clone())
        .list_metadata(&kube::api::ListParams::default().limit(1))
        .await?;
    list.metadata
        .resource_version
        .as_deref()
        .and_then(|v| v.parse().ok())
        .context("a list without a numeric resourceVersion")
}

/// How long to wait for every parent to be Ready after convergence: [`READY_TIMEOUT`], or
/// 30 ms a parent when that is more; on a real control plane a second a parent.
///
/// # Why longer on a real control plane
/// There Kubernetes' own controllers make what Ready waits for, and kube-controller-manager
/// runs with its default client rate limit (`--kube-api-qps` 20): its StatefulSet controller
/// created about 3.5 Pods a second (each with its claim, status updates and events), then its
/// Job controller about 4 of the init Jobs' Pods a second, whatever the operator did. At 1,000
/// parents every one was Ready about 585 s after the creates, the operator's converge long
/// over; its metrics show the wait (`rest_client_rate_limiter_duration_seconds`).
fn ready_timeout(parents: usize, real: bool) -> Duration {
    let per_parent = if real { 1_000 } else { 30 };
    READY_TIMEOUT.max(Duration::from_millis(per_parent * parents as u64))
}

/// observedGeneration 1 and `Reconciled=True`.
fn reconciled(o: &DynamicObject) -> bool {
    let status = &o.data["status"];
    status["observedGeneration"] == 1
        && status["conditions"].as_array().is_some_and(|c| {
            c.iter()
                .any(|c| c["type"] == "Reconciled" && c["status"] == "True")
        })
}

/// A watch of whether each StatefulSet runs `<repository>:<VERSION>`.
fn images(client: &Client, repository: &str) -> Watching<StatefulSet> {
    let want = format!("{repository}:{VERSION}");
    let api = Api::<StatefulSet>::namespaced(client.clone(), NAMESPACE);
    Watching::new(api, move |s: &StatefulSet| {
        s.spec.as_ref().is_some_and(|spec| {
            spec.template
                .spec
                .as_ref()
                .and_then(|p| p.containers.first())
                .is_some_and(|c| c.image.as_deref() == Some(want.as_str()))
        })
    })
}

/// The time from `started` until the first and until all `n` StatefulSets run
/// `<repository>:<VERSION>` (`all` is None, after saying so, when `SWAP_TIMEOUT` passes first).
async fn images_until(
    watch: Watching<StatefulSet>,
    repository: &str,
    n: usize,
    started: Instant,
    process: &mut Operator,
) -> Result<Progress> {
    let done = watch.until(n, started, SWAP_TIMEOUT, process).await?;
    if done.all.is_none() {
        eprintln!("  not every StatefulSet on {repository} after {SWAP_TIMEOUT:?}");
    }
    Ok(done)
}

/// The hot swap: how far it got, and what the host did meanwhile.
#[derive(Debug, Clone)]
struct Swap {
    progress: Progress,
    tally: Tally,
    /// What the host had counted since the swap began, every [`SAMPLE_EVERY`].
    timeline: Vec<(Duration, Tally, Cpu)>,
    /// The swap as the API server recorded it: from the second the patch was sent to the last
    /// second in which the host wrote one of the StatefulSets ([`last_written`]).
    written: Option<Duration>,
}

/// How long after `since` the last StatefulSet of the benchmark was created, by the
/// creationTimestamps the API server set (to the second): the converge's counterpart of
/// [`last_written`], the same step of a reconcile read from the same record, so that the two
/// can be divided. No watch delays it; the watch that times converge may lag the server.
async fn last_created(client: &Client, since: jiff::Timestamp) -> Result<Option<Duration>> {
    last_recorded(client, since, |s| {
        s.metadata.creation_timestamp.iter().map(|t| t.0).collect()
    })
    .await
}

/// How long after `since` the host last wrote a StatefulSet of the benchmark, by the times
/// the API server put on the host's managedFields entries (to the second): when the last
/// parent's new logic reached the server, whatever the benchmark's own watch saw later.
async fn last_written(client: &Client, since: jiff::Timestamp) -> Result<Option<Duration>> {
    last_recorded(client, since, |s| {
        s.metadata
            .managed_fields
            .iter()
            .flatten()
            .filter(|e| e.manager.as_deref().is_some_and(plan::is_host_manager))
            .filter_map(|e| e.time.as_ref().map(|t| t.0))
            .collect()
    })
    .await
}

/// How long after `since` the latest of the times `times` reads from each StatefulSet of the
/// benchmark, as the API server lists them now.
async fn last_recorded(
    client: &Client,
    since: jiff::Timestamp,
    times: impl Fn(&StatefulSet) -> Vec<jiff::Timestamp>,
) -> Result<Option<Duration>> {
    let sets = Api::<StatefulSet>::namespaced(client.clone(), NAMESPACE)
        .list(&Default::default())
        .await?;
    let last = sets.items.iter().flat_map(times).max();
    Ok(after(last, since))
}

/// `at − since`, when `at` is not before `since`. The API server records times to the second,
/// so `since` is taken to its second too: a record in the second the phase began is 0, not
/// before it.
fn after(at: Option<jiff::Timestamp>, since: jiff::Timestamp) -> Option<Duration> {
    let since = jiff::Timestamp::from_second(since.as_second()).ok()?;
    at.filter(|t| *t >= since)
        .and_then(|t| Duration::try_from(t.duration_since(since)).ok())
}

/// How often [`Sampler`] reads the host's counts.
const SAMPLE_EVERY: Duration = Duration::from_secs(1);

/// CPU time, in seconds: the host process's (not its child processes', which only a native
/// Engine has), this process's (the devcluster, the watches and the churn), and the machine's
/// idle time (all cores), from /proc, whose counts are in
/// USER_HZ (100 a second on x86_64 and arm64 Linux).
#[derive(Debug, Clone, Copy, Default)]
struct Cpu {
    host: f64,
    /// The host's child processes' (a native variant's serving processes), alive now.
    served: f64,
    bench: f64,
    idle: f64,
}

impl Cpu {
    const USER_HZ: f64 = 100.0;

    /// The counts now, with `host` the host's process id.
    fn read(host: u32) -> Result<Cpu> {
        // utime and stime: fields 14 and 15, the 12th and 13th after the command's `)`.
        let process = |pid: &str| -> Result<f64> {
            let stat = std::fs::read_to_string(format!("/proc/{pid}/stat"))?;
            let after = stat.rsplit_once(')').context("no ) in /proc/<pid>/stat")?.1;
            let fields: Vec<&str> = after.split_whitespace().collect();
            let ticks: u64 = fields[11].parse::<u64>()? + fields[12].parse::<u64>()?;
            Ok(ticks as f64 / Self::USER_HZ)
        };
        // The first line of /proc/stat: cpu user nice system idle iowait …
        let stat = std::fs::read_to_string("/proc/stat")?;
        let all: Vec<u64> = stat
            .lines()
            .next()
            .context("an empty /proc/stat")?
            .split_whitespace()
            .skip(1)
            .map(str::parse)
            .collect::<Result<_, _>>()?;
        let mut served = 0.0;
        for child in child_processes(host)? {
            served += process(&child.to_string())?;
        }
        Ok(Cpu {
            host: process(&host.to_string())?,
            served,
            bench: process("self")?,
            idle: (all[3] + all[4]) as f64 / Self::USER_HZ,
        })
    }

    fn since(self, before: Cpu) -> Cpu {
        Cpu {
            host: self.host - before.host,
            served: self.served - before.served,
            bench: self.bench - before.bench,
            idle: self.idle - before.idle,
        }
    }
}

/// The child processes of `pid` (a native variant's serving processes), from each of its
/// threads' `children` in /proc.
fn child_processes(pid: u32) -> Result<Vec<u32>> {
    let mut out = Vec::new();
    for task in std::fs::read_dir(format!("/proc/{pid}/task"))? {
        let children = std::fs::read_to_string(task?.path().join("children"))?;
        for child in children.split_whitespace() {
            out.push(child.parse()?);
        }
    }
    Ok(out)
}

impl std::fmt::Display for Cpu {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "cpu s: host {:.1}", self.host)?;
        if self.served > 0.0 {
            write!(f, " (+ its serving processes {:.1})", self.served)?;
        }
        write!(
            f,
            ", benchmark and devcluster {:.1}, idle {:.1}",
            self.bench, self.idle
        )
    }
}

/// Reads the host's counts from its admin port every [`SAMPLE_EVERY`] on a thread of its own,
/// so that a phase's figures show when each lane's reconciles ran, not only how many.
struct Sampler {
    stop: std::sync::Arc<std::sync::atomic::AtomicBool>,
    thread: std::thread::JoinHandle<Result<Vec<(Duration, Tally, Cpu)>>>,
}

impl Sampler {
    /// Samples counts since `before`, and the CPU time of the host (`pid`) and this process,
    /// timed from `started`.
    fn start(port: u16, pid: u32, started: Instant, before: Tally) -> Sampler {
        use std::sync::atomic::Ordering;
        let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
        let stopped = stop.clone();
        let thread = std::thread::spawn(move || {
            let cpu = Cpu::read(pid)?;
            let mut samples = Vec::new();
            let mut next = started + SAMPLE_EVERY;
            while !stopped.load(Ordering::Relaxed) {
                std::thread::sleep(next.saturating_duration_since(Instant::now()));
                next += SAMPLE_EVERY;
                samples.push((
                    started.elapsed(),
                    Tally::read(port)?.since(before),
                    Cpu::read(pid)?.since(cpu),
                ));
            }
            Ok(samples)
        });
        Sampler { stop, thread }
    }

    /// The samples taken.
    fn stop(self) -> Result<Vec<(Duration, Tally, Cpu)>> {
        self.stop.store(true, std::sync::atomic::Ordering::Relaxed);
        self.thread
            .join()
            .map_err(|_| anyhow::anyhow!("the sampler thread panicked"))?
    }
}

/// How far a wait got, in time since its start.
#[derive(Debug, Clone, Copy, Default)]
struct Progress {
    /// When `holds` was first true of one object.
    first: Option<Duration>,
    /// When it was first true of a tenth, two tenths … nine tenths of the `n` at once.
    tenths: [Option<Duration>; 9],
    /// When it was true of all `n` at once (None: not within the limit).
    all: Option<Duration>,
}

/// Watches `api` until `holds` is true of `n` objects at once, or until `limit` has passed
/// since `started`. Fails when the operator exits.
///
/// A watch, not a list every 100 ms: listing 1,000 objects ten times a second cost the
/// devcluster and this driver more CPU than the operators under test, on the same two cores.
/// Each object is now decoded once per change.
async fn watch_until<K>(
    api: Api<K>,
    n: usize,
    started: Instant,
    limit: Duration,
    process: &mut Operator,
    holds: impl Fn(&K) -> bool + Send + 'static,
) -> Result<Progress>
where
    K: kube::Resource + Clone + serde::de::DeserializeOwned + std::fmt::Debug + Send + 'static,
{
    Watching::new(api, holds)
        .until(n, started, limit, process)
        .await
}

/// A watch of whether `holds` is true of each object of a resource.
struct Watching<K> {
    events: futures::stream::BoxStream<'static, Result<kube::runtime::watcher::Event<K>>>,
    holds: Box<dyn Fn(&K) -> bool + Send>,
    /// Name → whether `holds`; `count` is how many are true.
    state: std::collections::HashMap<String, bool>,
    count: usize,
}

impl<K> Watching<K>
where
    K: kube::Resource + Clone + serde::de::DeserializeOwned + std::fmt::Debug + Send + 'static,
{
    fn new(api: Api<K>, holds: impl Fn(&K) -> bool + Send + 'static) -> Self {
        use kube::runtime::{WatchStreamExt, watcher};
        let events = watcher(api, watcher::Config::default())
            .default_backoff()
            .map_err(anyhow::Error::from)
            .boxed();
        Watching {
            events,
            holds: Box::new(holds),
            state: std::collections::HashMap::new(),
            count: 0,
        }
    }

    /// Waits until the watch has listed every object once, so that a clock started now does
    /// not count this driver's own list (at 10,000 StatefulSets, seconds).
    async fn listed(mut self) -> Result<Self> {
        use kube::runtime::watcher::Event;
        loop {
            let Some(event) = self.events.next().await else {
                bail!("the watch ended")
            };
            let event = event?;
            let done = matches!(event, Event::InitDone);
            self.take(event);
            if done {
                return Ok(self);
            }
        }
    }

    /// Takes in one event; whether the object's state counted.
    fn take(&mut self, event: kube::runtime::watcher::Event<K>) {
        use kube::{ResourceExt, runtime::watcher::Event};
        let (name, now) = match event {
            Event::Apply(o) | Event::InitApply(o) => (o.name_any(), Some((self.holds)(&o))),
            Event::Delete(o) => (o.name_any(), None),
            Event::Init | Event::InitDone => return,
        };
        let before = match now {
            Some(now) => self.state.insert(name, now),
            None => self.state.remove(&name),
        };
        self.count =
            self.count + usize::from(now == Some(true)) - usize::from(before == Some(true));
    }

    /// Follows the watch until `holds` is true of `n` objects at once, or until `limit` has
    /// passed since `started`. Fails when the operator exits.
    async fn until(
        mut self,
        n: usize,
        started: Instant,
        limit: Duration,
        process: &mut Operator,
    ) -> Result<Progress> {
        let mut progress = Progress::default();
        let mark = |count: usize, progress: &mut Progress| {
            let now = Some(started.elapsed());
            if count > 0 {
                progress.first = progress.first.or(now);
            }
            for (tenth, at) in progress.tenths.iter_mut().enumerate() {
                if count * 10 >= n * (tenth + 1) {
                    *at = at.or(now);
                }
            }
            if count == n {
                progress.all = now;
            }
        };
        mark(self.count, &mut progress);
        if self.count == n {
            return Ok(progress);
        }
        let mut tick = tokio::time::interval(POLL);
        loop {
            tokio::select! {
                event = self.events.next() => {
                    let Some(event) = event else { bail!("the watch ended") };
                    self.take(event?);
                    mark(self.count, &mut progress);
                    if self.count == n {
                        return Ok(progress);
                    }
                }
                _ = tick.tick() => {
                    process.check_alive()?;
                    if started.elapsed() > limit {
                        return Ok(progress);
                    }
                }
            }
        }
    }
}

/// Polls `check` every 100 ms until it answers, failing after `TIMEOUT` or when the operator
/// process exits (showing the end of its log).
async fn wait_for<T, F: Future<Output = Option<T>>>(
    what: &str,
    process: &mut Operator,
    mut check: impl FnMut() -> F,
) -> Result<T> {
    let deadline = Instant::now() + TIMEOUT;
    loop {
        if let Some(v) = check().await {
            return Ok(v);
        }
        process.check_alive()?;
        if Instant::now() > deadline {
            bail!("timed out waiting for {what}\n{}", process.log_tail());
        }
        tokio::time::sleep(POLL).await;
    }
}

fn redirect(cmd: &mut Command, log: &Path) -> Result<()> {
    let file = std::fs::File::create(log)?;
    cmd.stdin(Stdio::null())
        .stdout(file.try_clone()?)
        .stderr(file);
    Ok(())
}

/// An operator process, killed when dropped.
struct Operator {
    child: Child,
    log: PathBuf,
}

impl Operator {
    fn spawn(mut cmd: Command, log: &str, setup: &Setup) -> Result<Operator> {
        // As users run it: without the allocator tuning of this process (the devcluster's).
        windlass_devcluster::malloc::untuned(&mut cmd);
        let child = cmd
            .spawn()
            .with_context(|| format!("starting {cmd:?} (cargo xtask bench host builds it)"))?;
        Ok(Operator {
            child,
            log: setup.scratch.path().join(log),
        })
    }

    /// (VmHWM, VmRSS) in bytes, the process's and its child processes' added up (a native
    /// Engine's serving processes; the peaks of several processes need not coincide, so their
    /// sum is an upper bound).
    fn memory(&self) -> Result<(u64, u64)> {
        let pid = self.child.id();
        let (mut peak, mut rss) = Self::memory_of(pid)?;
        for child in child_processes(pid)? {
            let (p, r) = Self::memory_of(child)?;
            peak += p;
            rss += r;
        }
        Ok((peak, rss))
    }

    /// (VmHWM, VmRSS) of one process, in bytes.
    fn memory_of(pid: u32) -> Result<(u64, u64)> {
        let status = std::fs::read_to_string(format!("/proc/{pid}/status"))?;
        let field = |name: &str| -> Result<u64> {
            let line = status
                .lines()
                .find(|l| l.starts_with(name))
                .with_context(|| format!("{name} not in /proc/<pid>/status"))?;
            let kib: u64 = line
                .split_whitespace()
                .nth(1)
                .context("no value")?
                .parse()?;
            Ok(kib * 1024)
        };
        Ok((field("VmHWM:")?, field("VmRSS:")?))
    }

    fn check_alive(&mut self) -> Result<()> {
        if let Some(status) = self.child.try_wait()? {
            bail!("the operator exited: {status}\n{}", self.log_tail());
        }
        Ok(())
    }

    /// The last count of reconciles the native controller wrote to its log
    /// (`native_sampledb: N reconciles (M failed)`, once a second while it grows), as
    /// `N reconciles (M failed)`; None for the others.
    fn said_reconciles(&self) -> Option<String> {
        let text = std::fs::read_to_string(&self.log).ok()?;
        text.lines().rev().find_map(|line| {
            let said = line.strip_prefix("native_sampledb: ")?;
            let (count, rest) = said.split_once(' ')?;
            count.parse::<u64>().ok()?;
            rest.starts_with("reconciles (").then(|| said.to_string())
        })
    }

    /// The count of [`Operator::said_reconciles`].
    fn said_reconciles_count(&self) -> Option<u64> {
        self.said_reconciles()?.split(' ').next()?.parse().ok()
    }

    fn log_tail(&self) -> String {
        let text = std::fs::read_to_string(&self.log).unwrap_or_default();
        let lines: Vec<&str> = text.lines().collect();
        lines[lines.len().saturating_sub(20)..].join("\n")
    }

    fn kill(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl Drop for Operator {
    fn drop(&mut self) {
        self.kill();
    }
}
