//! `cargo xtask <task>`: the project's build, test and benchmark entry points.
//!
//! - `ci`: what CI runs: installs what the tests need (`.ci/tools`: the wasm target, rustfmt,
//!   docker-registry, skopeo, helm), checks formatting, builds the plugins (`plugins`) and the
//!   real control plane (`kube`), builds the production binary as the image has it (`image`,
//!   twice: a second checkout must give the same bytes), runs every test (which builds the
//!   misbehaving test guests to wasm32-wasip2) on the devcluster, then the end-to-end tests
//!   again on real control planes, then tests the image and cosign interoperability. A
//!   pass fails when one of its module filters ran no test (`run_counting`), so a renamed
//!   module cannot turn the real pass into one that passes by skipping.
//! - `image [--push REF | --reproducible]`: the host's container image: a static (musl) release
//!   `windlass` without the `dev` feature (built in a target directory outside the checkout),
//!   made into a one-layer OCI image by tools/image, written to `target/windlass-image/layout`
//!   and pushed to REF with the project's registry client; `--reproducible` then builds the
//!   commit again in a second checkout and fails unless binary and image are the same bytes
//!   (`ci` does too).
//! - `layers`: checks with `cargo tree` that each layer crate links only what its layer may
//!   (the runtime no Kubernetes client, the operator no wasmtime, the production binary no
//!   devcluster), and that no crate's modules import each other in a circle (`circles.rs`);
//!   `ci` runs it first.
//! - `kube`: builds etcd, kube-apiserver and kube-controller-manager from source at the pinned
//!   versions (`tools/kube/build.sh`, cached outside the repository) and prints their directory.
//! - `plugins`: builds the Rust plugins to `target/wasm/wasm32-wasip2/wasm/` and the Python
//!   and JavaScript ones (installing their toolchains first; their `build.sh` runs their own
//!   unit tests first) to `target/wasm/plugins/`; the list is `plugins/sampledb_plugins.rs`.
//! - `dev`: builds the plugins and runs `windlass dev`: the operator on the embedded devcluster.
//! - `render`: builds the plugins and renders `examples/sampledb.yaml` with the storage plugin.
//! - `bench runtime [--callgrind]`: native vs wasm (fresh, reused) vs HTTP webhook, printing
//!   ratios; `--callgrind` counts instructions per call instead of timing.
//! - `chaos`: the full chaos suite (host/tests/host/chaos.rs; `WINDLASS_CHAOS_PARENTS`, default
//!   200) on the devcluster, the same on the real control plane behind the fault proxy (50
//!   parents), and the restarts of etcd and kube-apiserver there (20;
//!   `WINDLASS_CHAOS_REAL_PARENTS` sets both), with release hosts, printing their figures; CI
//!   runs the short version on both planes and the restarts with 6 parents with the other tests.
//! - `bench languages`: the plugin template in Rust, Python, JavaScript and Go: size, load
//!   (compiling, from cache) and call (fresh, reused, native) times, printing ratios to Rust;
//!   every variant must answer alike.
//! - `bench host [--parents N]`: `windlass run` vs a native kube-runtime controller vs the
//!   same host with a native Engine on N SampleDBs (default 1,000): convergence time, peak RSS,
//!   the same children from each, hot swap vs restart; with
//!   `--callgrind`, instructions to converge under valgrind instead (machine-independent);
//!   with `--real`, against the pinned real control plane instead of the devcluster; with
//!   `--churn RATE`, how long a changed parent waits under RATE spec changes per second; with
//!   `--kinds K`, the memory each additional parent kind costs; with `--pipeline full`, the
//!   whole SampleDB pipeline (six plugins, four languages) in `windlass run` against the
//!   native controller and the same host with each plugin run natively; with `--record CSV`,
//!   each variant's figures appended to CSV.
//! - `plot [CSV [SVG]]`: draws what `bench host --record` wrote against N, one panel per figure
//!   and a line per variant (default `docs/scaling.csv` into `docs/scaling.svg`).

use std::{
    path::{Path, PathBuf},
    process::Command,
};

use anyhow::{Context, Result, bail};

mod circles;
mod plot;

// The SampleDB plugins: `SAMPLEDB_PLUGINS`, `is_cargo_package`, `sampledb_component`.
include!("../../plugins/sampledb_plugins.rs");

fn main() -> Result<()> {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    match args.as_slice() {
        ["ci"] => ci(),
        ["layers"] => layers(),
        ["plugins"] => plugins().map(|_| ()),
        ["kube"] => kube().map(|dir| println!("{}", dir.display())),
        ["render", rest @ ..] => render(rest),
        ["dev", rest @ ..] => dev(rest),
        ["bench", "runtime"] => cargo(&["bench", "-p", "windlass", "--bench", "runtime"]),
        ["bench", "runtime", "--callgrind"] => run(Command::new(
            std::env::var("CARGO").unwrap_or_else(|_| "cargo".into()),
        )
        .args(["bench", "-p", "windlass", "--bench", "runtime"])
        .env("WINDLASS_BENCH_CALLGRIND", "1")),
        ["chaos"] => chaos(),
        ["image", "--reproducible"] => {
            let tool = image_tool(IMAGE_TOOL_ALONE)?;
            image(&[], &tool).and_then(|binary| image_reproducible(&binary, &tool))
        }
        ["image", rest @ ..] => image(rest, &image_tool(IMAGE_TOOL_ALONE)?).map(|_| ()),
        ["bench", "languages"] => {
            run(Command::new("bash").arg(root().join(".ci").join("tools-plugins")))?;
            cargo(&["bench", "-p", "windlass", "--bench", "languages"])
        }
        ["bench", "host", rest @ ..] => bench_host(rest),
        ["plot"] => plot::plot(
            &root().join("docs").join("scaling.csv"),
            &root().join("docs").join("scaling.svg"),
        ),
        ["plot", csv] => plot::plot(Path::new(csv), &Path::new(csv).with_extension("svg")),
        ["plot", csv, svg] => plot::plot(Path::new(csv), Path::new(svg)),
        _ => {
            eprintln!(
                "usage: cargo xtask <ci | layers | plugins | kube | dev [ARGS…] | render [ARGS…] | chaos | \
                 image [--push REF [--insecure-registry HOST] | --reproducible] | \
                 bench runtime [--callgrind] | bench languages | bench host [--parents N] [--callgrind [--window SECS]] [--real] [--churn RATE [--churn-secs SECS]] [--kinds K] [--pipeline storage|full] [--record CSV] | plot [CSV [SVG]]>"
            );
            bail!("unknown task {args:?}")
        }
    }
}

/// The checkout this run works in, found when it runs: `cargo run` names xtask's directory in
/// `CARGO_MANIFEST_DIR` (whatever checkout it was built in), or else the workspace above the
/// current directory. Never the path baked in at compile time alone: a checkout copied with its
/// target directory reuses the binary, which would build and run in the original checkout.
fn root() -> PathBuf {
    static ROOT: std::sync::OnceLock<PathBuf> = std::sync::OnceLock::new();
    ROOT.get_or_init(|| {
        let from_cargo = std::env::var_os("CARGO_MANIFEST_DIR")
            .map(PathBuf::from)
            .and_then(|xtask| xtask.parent().map(Path::to_path_buf));
        from_cargo
            .filter(|dir| is_checkout(dir))
            .or_else(|| {
                let here = std::env::current_dir().ok()?;
                workspace_above(&here)
            })
            .unwrap_or_else(|| {
                Path::new(env!("CARGO_MANIFEST_DIR"))
                    .parent()
                    .expect("xtask lives in the workspace root")
                    .to_path_buf()
            })
    })
    .clone()
}

/// A Windlass checkout: a workspace manifest with xtask beside it.
fn is_checkout(dir: &Path) -> bool {
    dir.join("xtask/Cargo.toml").is_file()
        && std::fs::read_to_string(dir.join("Cargo.toml")).is_ok_and(|m| m.contains("[workspace]"))
}

/// The nearest checkout at or above `dir`.
fn workspace_above(dir: &Path) -> Option<PathBuf> {
    dir.ancestors()
        .find(|d| is_checkout(d))
        .map(Path::to_path_buf)
}

fn run(cmd: &mut Command) -> Result<()> {
    run_in(cmd, &root())
}

/// [`run`] in the directory `dir`.
fn run_in(cmd: &mut Command, dir: &Path) -> Result<()> {
    eprintln!("+ (in {}) {cmd:?}", dir.display());
    let started = std::time::Instant::now();
    let status = cmd
        .current_dir(dir)
        .status()
        .with_context(|| format!("running {cmd:?}"))?;
    took(started, cmd);
    if !status.success() {
        bail!("{cmd:?} failed: {status}");
    }
    Ok(())
}

/// [`run`] for `cargo test`: its output passed through, and then an error unless every filter
/// in `must_run` is the start of the name of at least one test that ran (passed or failed;
/// ignored and filtered-out tests do not count). `""` asks for any test at all.
fn run_counting(cmd: &mut Command, must_run: &[&str]) -> Result<()> {
    use std::io::BufRead as _;
    eprintln!("+ {cmd:?}");
    let started = std::time::Instant::now();
    let mut child = cmd
        .current_dir(root())
        .stdout(std::process::Stdio::piped())
        .spawn()
        .with_context(|| format!("running {cmd:?}"))?;
    let mut ran: Vec<String> = Vec::new();
    let stdout = child.stdout.take().context("the tests' stdout")?;
    for line in std::io::BufReader::new(stdout).lines() {
        let line = line.context("reading the tests' output")?;
        println!("{line}");
        if let Some(name) = ran_test(&line) {
            ran.push(name.to_string());
        }
    }
    let status = child.wait()?;
    took(started, cmd);
    if !status.success() {
        bail!("{cmd:?} failed: {status}");
    }
    let none: Vec<&str> = must_run
        .iter()
        .copied()
        .filter(|filter| !ran.iter().any(|name| name.starts_with(filter)))
        .collect();
    if !none.is_empty() {
        bail!(
            "{cmd:?} ran {} tests, none of them under {none:?}: a filter that selects nothing passes by skipping",
            ran.len()
        );
    }
    eprintln!("{} tests ran", ran.len());
    Ok(())
}

/// Says how long a command took, so that a CI log shows where its time goes (`grep '^+ took'`).
fn took(started: std::time::Instant, cmd: &Command) {
    let program = cmd.get_program().to_string_lossy();
    let program = program.rsplit('/').next().unwrap_or_default();
    let args: Vec<_> = cmd.get_args().map(|a| a.to_string_lossy()).collect();
    let args = args.join(" ");
    // Long enough to tell the test passes apart (`--test host -- --ignored --exact …`).
    let args = match args.char_indices().nth(200) {
        Some((end, _)) => format!("{}…", &args[..end]),
        None => args,
    };
    eprintln!(
        "+ took {:.0} s: {program} {args}",
        started.elapsed().as_secs_f64()
    );
}

/// The name of the test a libtest result line reports as run (`test NAME ... ok` or
/// `... FAILED`), or None (ignored, benchmarks, anything else).
fn ran_test(line: &str) -> Option<&str> {
    let rest = line.strip_prefix("test ")?;
    rest.strip_suffix(" ... ok")
        .or_else(|| rest.strip_suffix(" ... FAILED"))
}

fn cargo(args: &[&str]) -> Result<()> {
    run(Command::new(std::env::var("CARGO").unwrap_or_else(|_| "cargo".into())).args(args))
}

fn ensure_wasm_target() -> Result<()> {
    run(Command::new("rustup").args(["target", "add", "wasm32-wasip2"]))
}

fn plugins() -> Result<Vec<PathBuf>> {
    ensure_wasm_target()?;
    let target_dir = root().join("target").join("wasm");
    let mut args = vec![
        "build",
        // The workspace's `wasm` profile (built for size), shared with test-guests/build.rs.
        "--profile",
        "wasm",
        "--target",
        "wasm32-wasip2",
        "--target-dir",
    ];
    let dir = target_dir.to_str().context("target dir is not UTF-8")?;
    args.push(dir);
    for (_, package) in SAMPLEDB_PLUGINS.iter().filter(|(_, s)| is_cargo_package(s)) {
        args.extend(["-p", package]);
    }
    cargo(&args)?;
    // Plugins in other languages: each directory's `build.sh OUT` builds it with its own
    // toolchain (installed by `.ci/tools-plugins`).
    run(Command::new("bash").arg(root().join(".ci").join("tools-plugins")))?;
    let out_dir = target_dir.join("plugins");
    std::fs::create_dir_all(&out_dir).with_context(|| format!("creating {}", out_dir.display()))?;
    let mut built = Vec::new();
    for (name, source) in SAMPLEDB_PLUGINS {
        let out = target_dir.join(sampledb_component(name, source));
        if !is_cargo_package(source) {
            run(Command::new("bash")
                .arg(root().join(source).join("build.sh"))
                .arg(&out))?;
        }
        built.push(out);
    }
    Ok(built)
}

fn render(extra: &[&str]) -> Result<()> {
    let plugins = plugins()?;
    let mut args = vec![
        "run",
        "--quiet",
        "-p",
        "windlass",
        "--",
        "render",
        "-f",
        "examples/sampledb.yaml",
    ];
    let paths: Vec<String> = plugins.iter().map(|p| p.display().to_string()).collect();
    for p in &paths {
        args.extend(["--plugin", p]);
    }
    args.extend(extra);
    cargo(&args)
}

fn dev(extra: &[&str]) -> Result<()> {
    eprintln!(
        "building the plugins, then the host: the first build takes minutes (cargo shows its progress)"
    );
    plugins()?;
    // Not --quiet: on a first run the host compiles for minutes, and cargo's progress bar is
    // the only sign that something happens.
    let mut args = vec!["run", "-p", "windlass", "--", "dev"];
    args.extend(extra);
    cargo(&args)
}

/// Builds what the host benchmark spawns — the release `windlass` binary, the native
/// controller and native Engine examples and the storage plugin — then runs it. `--parents N` overrides
/// `WINDLASS_BENCH_PARENTS` (default 1,000); `--callgrind` counts instructions per reconcile
/// over `--window SECS` (default 300); `--churn RATE [--churn-secs SECS]` measures how long a
/// changed parent waits under that many spec changes per second (default 60 s); `--kinds K`
/// measures the memory each additional parent kind costs (a host with 1 kind against one with K);
/// `--record CSV` appends each variant's figures to CSV (`WINDLASS_BENCH_RECORD`) for `plot`.
fn bench_host(args: &[&str]) -> Result<()> {
    let mut parents = None;
    let mut callgrind = false;
    let mut real = false;
    let mut window = None;
    let mut churn = None;
    let mut churn_secs = None;
    let mut kinds = None;
    let mut pipeline = None;
    let mut record = None;
    let mut rest = args.iter();
    while let Some(arg) = rest.next() {
        match *arg {
            "--parents" => parents = Some(*rest.next().context("--parents needs a number")?),
            "--callgrind" => callgrind = true,
            "--real" => real = true,
            "--window" => window = Some(*rest.next().context("--window needs seconds")?),
            "--churn" => {
                churn = Some(*rest.next().context("--churn needs changes per second")?);
            }
            "--churn-secs" => {
                churn_secs = Some(*rest.next().context("--churn-secs needs seconds")?);
            }
            "--kinds" => kinds = Some(*rest.next().context("--kinds needs a number")?),
            "--pipeline" => {
                pipeline = Some(*rest.next().context("--pipeline needs storage or full")?);
            }
            "--record" => record = Some(*rest.next().context("--record needs a CSV file")?),
            other => bail!(
                "bench host: unknown argument {other:?} (--parents N, --callgrind, --window SECS, \
                 --real, --churn RATE, --churn-secs SECS, --kinds K, --pipeline storage|full, \
                 --record CSV)"
            ),
        }
    }
    let kube_bin = real.then(kube).transpose()?;
    let plugins = plugins()?;
    let storage = plugins
        .iter()
        .find(|p| p.ends_with("sampledb_storage.wasm"))
        .context("the storage plugin is not among the built plugins")?;
    cargo(&[
        "build",
        "--release",
        "-p",
        "windlass",
        "--bin",
        "windlass",
        "--example",
        "native_sampledb",
        "--example",
        "native_engine",
    ])?;
    let mut cmd = Command::new(std::env::var("CARGO").unwrap_or_else(|_| "cargo".into()));
    cmd.args(["bench", "-p", "windlass", "--bench", "host"])
        .env("WINDLASS_BENCH_PLUGIN", storage);
    if let Some(n) = parents {
        n.parse::<usize>()
            .with_context(|| format!("--parents {n:?}: not a number"))?;
        cmd.env("WINDLASS_BENCH_PARENTS", n);
    }
    if callgrind {
        cmd.env("WINDLASS_BENCH_CALLGRIND", "1");
    }
    if let Some(secs) = window {
        secs.parse::<u64>()
            .with_context(|| format!("--window {secs:?}: not a number of seconds"))?;
        cmd.env("WINDLASS_BENCH_WINDOW", secs);
    }
    if let Some(rate) = churn {
        rate.parse::<f64>()
            .with_context(|| format!("--churn {rate:?}: not a number of changes per second"))?;
        cmd.env("WINDLASS_BENCH_CHURN", rate);
    }
    if let Some(secs) = churn_secs {
        secs.parse::<u64>()
            .with_context(|| format!("--churn-secs {secs:?}: not a number of seconds"))?;
        cmd.env("WINDLASS_BENCH_CHURN_SECS", secs);
    }
    if let Some(k) = kinds {
        k.parse::<usize>()
            .with_context(|| format!("--kinds {k:?}: not a number"))?;
        cmd.env("WINDLASS_BENCH_KINDS", k);
    }
    if let Some(p) = pipeline {
        if !matches!(p, "storage" | "full") {
            bail!("--pipeline {p:?}: storage or full");
        }
        cmd.env("WINDLASS_BENCH_PIPELINE", p);
    }
    if let Some(csv) = record {
        // The benchmark runs in the package's directory: a relative path is the caller's.
        let csv = std::env::current_dir()?.join(csv);
        cmd.env("WINDLASS_BENCH_RECORD", csv);
    }
    if let Some(bin) = kube_bin {
        cmd.env("WINDLASS_BENCH_CLUSTER", "real")
            .env("WINDLASS_KUBE_BIN", bin);
    }
    run(&mut cmd)
}

/// Builds the control plane (seconds once cached) and returns the directory of its binaries.
fn kube() -> Result<PathBuf> {
    kube_dir(start_kube_build()?)
}

/// Starts `tools/kube/build.sh` (Go) in the background: it overlaps the Rust builds, which
/// leave a core idle in their long single-threaded steps (LTO, linking).
fn start_kube_build() -> Result<std::process::Child> {
    start_build("tools/kube/build.sh")
}

/// Starts a build script of tools/ (`tools/kube/build.sh`, `tools/cosign/build.sh`) that prints
/// what it built, or found in its cache, as its last line of stdout.
fn start_build(script: &str) -> Result<std::process::Child> {
    Command::new("bash")
        .arg(root().join(script))
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::inherit())
        .spawn()
        .with_context(|| format!("running {script}"))
}

/// Waits for a build from [`start_kube_build`] and returns the directory it printed.
fn kube_dir(build: std::process::Child) -> Result<PathBuf> {
    built(build, "tools/kube/build.sh")
}

/// Waits for a build from [`start_build`] and returns the path it printed last.
fn built(build: std::process::Child, script: &str) -> Result<PathBuf> {
    let out = build
        .wait_with_output()
        .with_context(|| format!("waiting for {script}"))?;
    if !out.status.success() {
        bail!("{script} failed: {}", out.status);
    }
    let stdout = String::from_utf8(out.stdout)?;
    let path = stdout
        .lines()
        .last()
        .with_context(|| format!("{script} printed no path"))?;
    Ok(PathBuf::from(path.trim()))
}

/// The host's test modules that run on real control planes too (filters for the one `host`
/// test binary): the end-to-end tests, and, real only, the chaos suite's short version behind
/// the fault proxy, its restarts of etcd and kube-apiserver, and the test that its etcd
/// observer counts what breaks an invariant.
const REAL_CLUSTER_HOST_MODULES: &[&str] = &[
    "accounts::",
    "admission::",
    "operator::",
    "containment::",
    "controllers::",
    "finalize::",
    "oci::",
    "sampledb::",
    "chaos::etcd_and_kube_apiserver_restart_under_sampledbs",
    "chaos::the_etcd_observer_counts_each_broken_invariant",
    "chaos::the_short_chaos_suite_meets_every_target_on_the_real_control_plane",
];

/// The devcluster's own scenario suites, which run on real control planes too (they measure
/// its fidelity).
const REAL_CLUSTER_DEVCLUSTER_TESTS: &[&str] = &["kube_rs", "kubectl"];

/// Tests in the modules and suites above that need what only the devcluster has (injected API
/// faults and latency, a server that runs no containers): the real pass leaves them out by
/// name (`--skip`), and each fails, rather than passing having checked nothing, if run there.
/// `--skip` matches a substring of a test's name: a new test whose name contains one of these
/// would be left out of the real pass too, so keep them whole names.
const DEVCLUSTER_ONLY_TESTS: &[&str] = &[
    "operator::a_leader_whose_renewals_hang_stops_leading_on_time",
    "operator::a_host_started_during_an_api_outage_loads_its_plugins_once_the_api_is_back",
    "operator::a_prune_leaves_alone_an_object_made_again_under_the_childs_name",
    "operator::every_parent_converges_through_api_faults",
    "logs_say_the_devcluster_runs_no_containers",
    "a_reflector_relists_after_410_gone",
    "a_watch_from_a_compacted_resource_version_gets_410_gone",
    "bookmarks_come_at_the_devclusters_interval",
];

/// The full chaos suite, with its figures: the plugins first (the suite loads them by path),
/// then the devcluster suite at full size, the same suite on the real control plane behind the
/// fault proxy, and the restarts of etcd and kube-apiserver there, all with release hosts.
fn chaos() -> Result<()> {
    let kube_build = start_kube_build()?;
    plugins()?;
    // The hosts under test are release builds, as users run them.
    cargo(&["build", "--release", "-p", "windlass", "--bin", "windlass"])?;
    let host = root().join("target").join("release").join("windlass");
    let suite = |filter: &str| {
        let mut cmd = Command::new(std::env::var("CARGO").unwrap_or_else(|_| "cargo".into()));
        cmd.args(["test", "-p", "windlass", "--test", "host", "--", filter])
            .args(["--exact", "--nocapture"])
            .env("WINDLASS_CHAOS_HOST", &host);
        cmd
    };
    let devcluster = run(suite("chaos::the_full_chaos_suite").arg("--ignored"));
    let kube_bin = kube_dir(kube_build)?;
    // The same suite on the real control plane behind the fault proxy (50 parents unless
    // WINDLASS_CHAOS_REAL_PARENTS says), then the restarts of etcd and kube-apiserver (20).
    let real_parents = |default: &str| {
        std::env::var("WINDLASS_CHAOS_REAL_PARENTS").unwrap_or_else(|_| default.to_string())
    };
    let mut faults = suite("chaos::the_full_chaos_suite_on_the_real_control_plane");
    faults
        .arg("--ignored")
        .env("WINDLASS_TEST_CLUSTER", "real")
        .env("WINDLASS_KUBE_BIN", &kube_bin)
        .env("WINDLASS_CHAOS_PARENTS", real_parents("50"));
    let mut restarts = suite("chaos::etcd_and_kube_apiserver_restart_under_sampledbs");
    restarts
        .arg("--ignored")
        .env("WINDLASS_TEST_CLUSTER", "real")
        .env("WINDLASS_KUBE_BIN", &kube_bin)
        .env("WINDLASS_CHAOS_REAL_PARENTS", real_parents("20"));
    devcluster.and(run(&mut faults)).and(run(&mut restarts))
}

fn ci() -> Result<()> {
    // The wasm target, rustfmt, the test registry, skopeo and helm, each only when missing.
    run(Command::new("bash").arg(root().join(".ci").join("tools")))?;
    let kube_build = start_kube_build()?;
    cargo(&["fmt", "--all", "--check"])?;
    layers()?;
    // The Python and JavaScript plugins, which the conformance and end-to-end tests load (the
    // Rust ones are built again by the tests' own build script; cargo finds them fresh).
    plugins()?;
    // The Python, JavaScript and Go SDKs' own tests, with each language's runner (the Rust
    // SDK's run with the workspace; every template is built and tested by the host's tests).
    for sdk in ["python", "js", "go"] {
        run(Command::new("bash").arg(root().join("guest-sdk").join(sdk).join("test.sh")))?;
    }
    // The tests' build overlaps it too; they need it only once they run.
    let workspace = ["--workspace", "--exclude", "guest-*"];
    cargo(&[&["test", "--no-run"][..], &workspace[..]].concat())?;
    benches_quick(&workspace)?;
    let kube_bin = kube_dir(kube_build)?;
    // The real cosign, for the signature interoperability test at the end; built (once per
    // machine, cached like the control plane) while the tests run.
    let cosign_build = start_build("tools/cosign/build.sh")?;
    disk_report();
    // The production binary as users get it: the image's static build, without `dev` (the
    // layers check shows it links no devcluster; this shows it builds without it). The install
    // test (host/tests/host/install.rs) runs the chart's Pods from an image of it.
    // The image tool in the tests' feature set, so that the test build's dependencies serve it
    // (built alone, some of its dependencies' features differ: about 1.5 min in a cold run).
    let tool = image_tool(&[&workspace[..], &["--tests"]].concat());
    let image_binary = match &tool {
        Ok(tool) => image(&[], tool),
        Err(e) => Err(anyhow::anyhow!("no image tool: {e}")),
    };
    // Two builds, one digest: the commit built again in a second checkout.
    let reproducible = match (&image_binary, &tool) {
        (Ok(binary), Ok(tool)) => image_reproducible(binary, tool),
        (Err(e), _) | (_, Err(e)) => Err(anyhow::anyhow!("no image to build twice: {e}")),
    };
    // Both passes run even when the first fails, so one failure does not hide the other's.
    // Each pass names the test filters each of which must run at least one test.
    let test = |extra: &[&str], real: bool, must_run: &[&str]| {
        let mut cmd = Command::new(std::env::var("CARGO").unwrap_or_else(|_| "cargo".into()));
        cmd.arg("test")
            .args(extra)
            .env("WINDLASS_KUBE_BIN", &kube_bin);
        if let Ok(binary) = &image_binary {
            cmd.env("WINDLASS_IMAGE_BINARY", binary);
        }
        if real {
            cmd.env("WINDLASS_TEST_CLUSTER", "real");
        }
        run_counting(&mut cmd, must_run)
    };
    let on_dev = test(
        &[&workspace[..], &["--no-fail-fast"]].concat(),
        false,
        &[""],
    );
    // The same package selection as the first pass, narrowed by test target and module:
    // selecting fewer packages changes feature unification (guest-sdk's `default`), which would
    // build the SDK, the plugins and every host test a second time and double the target dir.
    // `--include-ignored`: the tests that only mean something on a real control plane
    // (`admission::`) are ignored in the devcluster pass and run here; no ignored test outside
    // these filters is selected.
    let mut real_host = [
        &workspace[..],
        &[
            "--no-fail-fast",
            "--test",
            "host",
            "--",
            "--include-ignored",
        ],
    ]
    .concat();
    real_host.extend(REAL_CLUSTER_HOST_MODULES);
    let mut real = [&workspace[..], &["--no-fail-fast"]].concat();
    for file in REAL_CLUSTER_DEVCLUSTER_TESTS {
        real.extend(["--test", file]);
    }
    real.push("--");
    for name in DEVCLUSTER_ONLY_TESTS {
        real_host.extend(["--skip", name]);
        real.extend(["--skip", name]);
    }
    // A renamed module or a filter that matches nothing would otherwise make the real pass
    // run fewer tests, or none, and still pass.
    let on_real = test(&real_host, true, REAL_CLUSTER_HOST_MODULES).and(test(&real, true, &[""]));
    // The image pushed, inspected with skopeo and its binary run from the layer.
    let image = image_binary.and_then(|binary| {
        let mut args = workspace.to_vec();
        args.extend(["--test", "host", "--", "--ignored", "--exact", IMAGE_TEST]);
        let mut cmd = Command::new(std::env::var("CARGO").unwrap_or_else(|_| "cargo".into()));
        cmd.arg("test")
            .args(args)
            .env("WINDLASS_IMAGE_BINARY", binary);
        run(&mut cmd)
    });
    // Signatures made by the real cosign verify in Windlass and the other way round.
    let cosign = built(cosign_build, "tools/cosign/build.sh").and_then(|cosign| {
        let mut args = workspace.to_vec();
        args.extend(["--test", "host", "--", "--ignored", "--exact", COSIGN_TEST]);
        let mut cmd = Command::new(std::env::var("CARGO").unwrap_or_else(|_| "cargo".into()));
        cmd.arg("test").args(args).env("WINDLASS_COSIGN", cosign);
        run(&mut cmd)
    });
    disk_report();
    on_dev.and(on_real).and(image).and(reproducible).and(cosign)
}

/// Every benchmark built (the test profile, so on the tests' build), and each run short:
/// `runtime` checks that the native, wasm and webhook variants agree, `devcluster` that every
/// create, patch and watch succeeds, `languages` that the template in all four languages,
/// fresh and reused, and its Rust, Python and JavaScript native runs answer alike (the
/// templates are built with the toolchains CI installs for the plugins), `host` (20 parents,
/// on the test build's host and examples, which `cargo test --no-run` built) that `windlass
/// run`, the native controller and the host with a native Engine make the same children — with
/// the storage plugin, then with the whole SampleDB pipeline (its Python, JavaScript and Go
/// plugins run natively by python3, node and go). Their timings mean nothing here; `cargo
/// xtask bench` measures.
fn benches_quick(workspace: &[&str]) -> Result<()> {
    cargo(&[&["test", "--no-run", "--benches"][..], workspace].concat())?;
    for (bench, vars) in [
        ("runtime", &[("WINDLASS_BENCH_QUICK", "1")][..]),
        ("devcluster", &[("DEVCLUSTER_BENCH_OBJECTS", "200")][..]),
        ("languages", &[("WINDLASS_BENCH_QUICK", "1")][..]),
        ("host", &[("WINDLASS_BENCH_QUICK", "1")][..]),
        (
            "host",
            &[
                ("WINDLASS_BENCH_QUICK", "1"),
                ("WINDLASS_BENCH_PIPELINE", "full"),
            ][..],
        ),
    ] {
        let mut cmd = Command::new(std::env::var("CARGO").unwrap_or_else(|_| "cargo".into()));
        cmd.arg("test")
            .args(workspace)
            .args(["--bench", bench])
            .envs(vars.iter().copied());
        run(&mut cmd)?;
    }
    Ok(())
}

/// The interoperability test with the real cosign (host/tests/host/signature.rs).
const COSIGN_TEST: &str = "signature::cosign_and_windlass_each_verify_what_the_other_signed";

/// The test of the image made from the static binary (host/tests/host/image.rs).
const IMAGE_TEST: &str =
    "image::the_host_image_holds_a_static_binary_that_runs_from_the_registrys_layer";

/// The target of the image's binary: Rust's musl target links it statically, so the image needs
/// no libc, and musl's resolver reads /etc/resolv.conf itself where a static glibc would need
/// its NSS libraries at run time to look up a registry's name.
const IMAGE_TARGET: &str = "x86_64-unknown-linux-musl";

/// `image`: the static `windlass` (the `image` profile, no `dev` feature, built by
/// [`static_binary`]) and the image made of it (tools/image), written as an OCI layout to
/// target/windlass-image/layout (its layer alone, for deploy/Dockerfile, to
/// target/windlass-image/rootfs.tar.gz) and, with `--push REF`, pushed. The time of every file is
/// the commit's (or `SOURCE_DATE_EPOCH`), so two builds of one commit give one digest
/// ([`image_reproducible`] checks it). Returns the binary's path.
fn image(args: &[&str], tool: &Path) -> Result<PathBuf> {
    let root = root();
    let binary = static_binary(&root)?;
    assemble(
        &root,
        &binary,
        &root.join("target").join("windlass-image"),
        args,
        tool,
    )?;
    Ok(binary)
}

/// How `cargo xtask image` builds the image tool: its package alone.
const IMAGE_TOOL_ALONE: &[&str] = &["-p", "windlass-image"];

/// The image tool (tools/image) built in the debug profile with the package selection
/// `selection`, and its path. In this checkout's target directory whichever checkout it
/// assembles: the tool's output does not depend on where it was built.
fn image_tool(selection: &[&str]) -> Result<PathBuf> {
    cargo(&[&["build", "--bin", "windlass-image"][..], selection].concat())?;
    let target = std::env::var_os("CARGO_TARGET_DIR")
        .map_or_else(|| root().join("target"), |dir| root().join(dir));
    Ok(target.join("debug").join("windlass-image"))
}

/// The image of `binary` (tools/image, run from this checkout), labelled with the commit of
/// `checkout`, written under `out` as `layout` and `rootfs.tar.gz`; `args` go to the tool
/// (`--push REF`).
fn assemble(checkout: &Path, binary: &Path, out: &Path, args: &[&str], tool: &Path) -> Result<()> {
    let git = |args: &[&str]| -> Result<String> {
        let out = Command::new("git")
            .args(args)
            .current_dir(checkout)
            .output()?;
        if !out.status.success() {
            bail!("git {args:?}: {}", String::from_utf8_lossy(&out.stderr));
        }
        Ok(String::from_utf8(out.stdout)?.trim().to_string())
    };
    let revision = git(&["rev-parse", "HEAD"])?;
    let created = match std::env::var("SOURCE_DATE_EPOCH") {
        Ok(epoch) => epoch,
        Err(_) => git(&["log", "-1", "--format=%ct"])?,
    };
    std::fs::create_dir_all(out).with_context(|| format!("creating {}", out.display()))?;
    let (layout, rootfs) = (out.join("layout"), out.join("rootfs.tar.gz"));
    let (binary_arg, layout_arg, rootfs_arg) = (utf8(binary)?, utf8(&layout)?, utf8(&rootfs)?);
    let mut tool_args = vec![
        "--binary",
        &binary_arg,
        "--layout",
        &layout_arg,
        "--rootfs",
        &rootfs_arg,
        "--version",
        env!("CARGO_PKG_VERSION"),
        "--revision",
        &revision,
        "--source",
        env!("CARGO_PKG_REPOSITORY"),
        "--created",
        &created,
    ];
    tool_args.extend(args);
    run(Command::new(tool).args(tool_args))
}

fn utf8(path: &Path) -> Result<String> {
    path.to_str()
        .with_context(|| format!("{} is not UTF-8", path.display()))
        .map(str::to_string)
}

/// Where the image's binary is built: one directory per machine, outside every checkout
/// (`WINDLASS_IMAGE_TARGET_DIR`, else the user's cache). Its path and the cargo home's are
/// mapped to fixed names in the binary, so the compiler's flags name no checkout: a second
/// checkout of the commit reuses the dependencies and compiles only the workspace's crates.
fn image_target_dir() -> Result<PathBuf> {
    if let Some(dir) = std::env::var_os("WINDLASS_IMAGE_TARGET_DIR") {
        return Ok(PathBuf::from(dir));
    }
    let cache = match std::env::var_os("XDG_CACHE_HOME") {
        Some(cache) => PathBuf::from(cache),
        None => PathBuf::from(std::env::var_os("HOME").context("neither XDG_CACHE_HOME nor HOME")?)
            .join(".cache"),
    };
    Ok(cache.join("windlass").join("image-target"))
}

/// The static `windlass` of the image, built from `checkout` (the `image` profile: one codegen
/// unit per crate, so no ThinLTO pass gives local symbols names hashed from the build), copied
/// to `<checkout>/target/windlass-image/windlass`. Fails when the binary holds the path of the
/// checkout, of the target directory or of the cargo home.
fn static_binary(checkout: &Path) -> Result<PathBuf> {
    run(Command::new("rustup").args(["target", "add", IMAGE_TARGET]))?;
    let cargo_home = match std::env::var_os("CARGO_HOME") {
        Some(home) => PathBuf::from(home),
        None => PathBuf::from(std::env::var_os("HOME").context("neither CARGO_HOME nor HOME")?)
            .join(".cargo"),
    };
    let target_dir = image_target_dir()?;
    let remap = format!(
        "--remap-path-prefix={}=/target --remap-path-prefix={}=/cargo",
        target_dir.display(),
        cargo_home.display()
    );
    let mut build = Command::new(std::env::var("CARGO").unwrap_or_else(|_| "cargo".into()));
    build
        .args([
            "build",
            "--locked",
            "--profile",
            "image",
            "--target",
            IMAGE_TARGET,
        ])
        .arg("--manifest-path")
        .arg(checkout.join("Cargo.toml"))
        .arg("--target-dir")
        .arg(&target_dir)
        .args([
            "-p",
            "windlass",
            "--no-default-features",
            "--bin",
            "windlass",
        ])
        .env("CARGO_TARGET_X86_64_UNKNOWN_LINUX_MUSL_RUSTFLAGS", remap);
    run_in(&mut build, checkout)?;
    let built = target_dir.join(IMAGE_TARGET).join("image").join("windlass");
    let bytes = std::fs::read(&built).with_context(|| format!("reading {}", built.display()))?;
    for path in [checkout, &target_dir, &cargo_home] {
        let path = utf8(path)?;
        if bytes.windows(path.len()).any(|w| w == path.as_bytes()) {
            bail!(
                "{} holds the path {path}: it would differ in another checkout",
                built.display()
            );
        }
    }
    let out = checkout.join("target").join("windlass-image");
    std::fs::create_dir_all(&out).with_context(|| format!("creating {}", out.display()))?;
    let binary = out.join("windlass");
    std::fs::write(&binary, &bytes).with_context(|| format!("writing {}", binary.display()))?;
    use std::os::unix::fs::PermissionsExt as _;
    std::fs::set_permissions(&binary, std::fs::Permissions::from_mode(0o755))?;
    Ok(binary)
}

/// Two builds, one digest: the commit cloned to a second directory, its binary built there (the
/// dependencies reused from the shared target directory, the workspace's crates compiled again
/// at the other path) and made into an image beside this checkout's; the two binaries and the
/// two image manifests must be the same bytes. `first` is this checkout's binary.
fn image_reproducible(first: &Path, tool: &Path) -> Result<()> {
    let root = root();
    let dirty = Command::new("git")
        .args(["status", "--porcelain", "--untracked-files=no"])
        .current_dir(&root)
        .output()?;
    if !dirty.stdout.is_empty() {
        bail!(
            "the checkout has uncommitted changes; the second build is of the commit, so commit first"
        );
    }
    let second = std::env::temp_dir().join(format!("windlass-image-second-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&second);
    run(Command::new("git")
        .args(["clone", "--quiet", "--no-hardlinks"])
        .arg(&root)
        .arg(&second))?;
    let result = (|| {
        let binary = static_binary(&second)?;
        let out = second.join("target").join("windlass-image");
        assemble(&second, &binary, &out, &[], tool)?;
        let (a, b) = (std::fs::read(first)?, std::fs::read(&binary)?);
        if a != b {
            bail!(
                "the binary differs between two checkouts of the commit: {} ({} bytes) and {} ({} bytes)",
                first.display(),
                a.len(),
                binary.display(),
                b.len()
            );
        }
        let index = |dir: &Path| std::fs::read_to_string(dir.join("layout").join("index.json"));
        let (ours, theirs) = (
            index(&root.join("target").join("windlass-image"))?,
            index(&out)?,
        );
        if ours != theirs {
            bail!("the image differs between two checkouts of the commit:\n{ours}\n{theirs}");
        }
        eprintln!(
            "image reproducible: two checkouts, one binary ({} bytes), one index:\n{ours}",
            a.len()
        );
        Ok(())
    })();
    let _ = std::fs::remove_dir_all(&second);
    result
}

/// What each layer must not link, as (package and its `cargo tree` options, forbidden crates by
/// name prefix). The layering of docs/ARCHITECTURE.md, held by the crates' dependencies.
const LAYERS: &[(&[&str], &[&str])] = &[
    (
        &["-p", "windlass-contract"],
        &["wasmtime", "kube", "k8s-openapi", "oci-client", "tokio"],
    ),
    (
        &["-p", "windlass-runtime"],
        &["kube", "k8s-openapi", "oci-client"],
    ),
    (
        &["-p", "windlass-policy"],
        &["wasmtime", "kube", "k8s-openapi", "oci-client", "tokio"],
    ),
    (
        &["-p", "windlass-source"],
        &["wasmtime", "kube", "k8s-openapi"],
    ),
    (
        &["-p", "windlass-operator"],
        &[
            "wasmtime",
            "windlass-runtime",
            "windlass-devcluster",
            "sampledb-api",
        ],
    ),
    (
        &["-p", "windlass", "--no-default-features"],
        &["windlass-devcluster", "windlass-kubeplane", "sampledb-api"],
    ),
];

/// The workspace's own crates with sources (`src/`): the layers, the host, the devcluster, the
/// control plane, the SDK, the SampleDB plugins, the test guests, the image tool and xtask.
fn crate_dirs() -> Result<Vec<PathBuf>> {
    let mut dirs = Vec::new();
    for parent in ["crates", "plugins", "test-guests/guests"] {
        for entry in std::fs::read_dir(root().join(parent))? {
            dirs.push(entry?.path());
        }
    }
    for dir in [
        "host",
        "devcluster",
        "kubeplane",
        "guest-sdk",
        "test-guests",
        "tools/image",
        "xtask",
    ] {
        dirs.push(root().join(dir));
    }
    dirs.retain(|d| d.join("src").is_dir());
    dirs.sort();
    Ok(dirs)
}

fn layers() -> Result<()> {
    let mut broken = Vec::new();
    for (selection, forbidden) in LAYERS {
        let output = Command::new(std::env::var("CARGO").unwrap_or_else(|_| "cargo".into()))
            .args([
                "tree",
                "--edges",
                "normal,build",
                "--prefix",
                "none",
                "--format",
                "{p}",
            ])
            .args(*selection)
            .current_dir(root())
            .output()
            .context("running cargo tree")?;
        if !output.status.success() {
            bail!(
                "cargo tree {}: {}",
                selection.join(" "),
                String::from_utf8_lossy(&output.stderr)
            );
        }
        let tree = String::from_utf8_lossy(&output.stdout);
        let linked = |name: &str| {
            tree.lines().any(|line| {
                line.split_whitespace()
                    .next()
                    .is_some_and(|krate| krate == name || krate.starts_with(&format!("{name}-")))
            })
        };
        for name in forbidden.iter().filter(|name| linked(name)) {
            broken.push(format!("{} links {name}", selection.join(" ")));
        }
    }
    // No import circle among the modules of any crate.
    for krate in crate_dirs()? {
        for circle in circles::circles(&krate.join("src"))? {
            let name = krate.strip_prefix(root()).unwrap_or(&krate).display();
            broken.push(format!("{name}: an import circle: {}", circle.join(" ⇄ ")));
        }
    }
    if broken.is_empty() {
        println!("layers: every crate links only what its layer may, and no module imports back");
        Ok(())
    } else {
        bail!("layering broken: {}", broken.join("; "))
    }
}

/// Prints the target dir's size and the free space left, so a CI log shows how close a run
/// came to filling the disk (one did). A report only: a failure to measure is not a failure.
fn disk_report() {
    let target = root().join("target");
    for cmd in [
        Command::new("du").arg("-sh").arg(&target),
        Command::new("df").arg("-h").arg(&target),
    ] {
        if let Err(err) = cmd.status() {
            eprintln!("disk report: {err}");
        }
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn the_checkout_is_found_where_the_run_is_not_where_xtask_was_built() {
        let dir = std::env::temp_dir().join(format!("xtask-root-{}", std::process::id()));
        let copy = Copy(dir);
        let sub = copy.path().join("plugins/sampledb-storage");
        std::fs::create_dir_all(&sub).expect("dirs");
        std::fs::create_dir_all(copy.path().join("xtask")).expect("xtask dir");
        std::fs::write(copy.path().join("xtask/Cargo.toml"), "[package]\n").expect("write");
        std::fs::write(
            copy.path().join("plugins/sampledb-storage/Cargo.toml"),
            "[package]\n",
        )
        .expect("write");
        assert_eq!(
            super::workspace_above(&sub),
            None,
            "no workspace manifest yet"
        );
        std::fs::write(copy.path().join("Cargo.toml"), "[workspace]\n").expect("write");
        assert_eq!(
            super::workspace_above(&sub).as_deref(),
            Some(copy.path()),
            "the copy, from a directory inside it"
        );
        // This run's own checkout, as `cargo test` names it (not a compile-time path).
        assert!(super::is_checkout(&super::root()));
    }

    /// A directory removed when the test ends.
    struct Copy(std::path::PathBuf);
    impl Copy {
        fn path(&self) -> &std::path::Path {
            &self.0
        }
    }
    impl Drop for Copy {
        fn drop(&mut self) {
            let _ = std::fs::remove_dir_all(&self.0);
        }
    }

    use super::{ran_test, run_counting};
    use std::process::Command;

    #[test]
    fn a_filter_under_which_no_test_ran_fails_the_pass() {
        let out = "test a::x ... ok\ntest b::y ... ignored, elsewhere\n";
        let tests = || {
            let mut cmd = Command::new("printf");
            cmd.arg(out);
            cmd
        };
        run_counting(&mut tests(), &["a::", ""]).expect("a::x ran");
        let refused = run_counting(&mut tests(), &["a::", "b::", "c::"]).unwrap_err();
        let said = refused.to_string();
        assert!(said.contains(r#"["b::", "c::"]"#), "{said}");
        assert!(run_counting(&mut Command::new("false"), &[]).is_err());
    }

    #[test]
    fn only_tests_that_ran_are_counted() {
        assert_eq!(ran_test("test operator::a ... ok"), Some("operator::a"));
        assert_eq!(ran_test("test oci::b ... FAILED"), Some("oci::b"));
        assert_eq!(
            ran_test("test chaos::c ... ignored, real control plane only"),
            None
        );
        assert_eq!(
            ran_test("test chaos::c has been running for over 60 seconds"),
            None
        );
        assert_eq!(ran_test("test result: ok. 3 passed; 0 failed"), None);
    }
}
