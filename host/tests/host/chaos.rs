//! Reliability under faults, measured. SampleDBs go through create, scale, upgrade, backup and
//! delete, one step per phase, each under its own fault and the last under several at once:
//!
//! 1. create — the API answers 500, 409 and 429 (with `Retry-After`) on 10% of requests, times
//!    out on 2% (504 after a second), cuts every watch every 3 s and drops its watch history
//!    every 4 s (a resumed watch gets 410 Gone);
//! 2. scale, a slice of the parents per slot — the leading host is killed with SIGKILL and
//!    restarted in each slot: at a random moment, mid-apply, mid-status, in turn (the
//!    devcluster, or the fault proxy, holds such a request in flight while the test kills);
//! 3. upgrade — the leader is killed, then the API is unavailable for twice the lease, so
//!    that the Lease lapses under both hosts;
//! 4. backup — the storage plugin is swapped to a version that traps on a third of the
//!    parents, then to one that hangs there until the time limit, then back;
//! 5. delete — the API faults of 1, kills mid-finalize, the outage of 3 and the swap of 4
//!    together.
//!
//! Two `windlass run` processes share the work by leader election (a 5 s Lease), with the six
//! SampleDB plugins, on an in-process devcluster with its simulator, or on a real control plane
//! behind the fault proxy (`windlass_devcluster::proxy`) with the simulator playing the kubelet
//! over the API ([`Plane`]); one host's wall clock runs 30 s ahead of the other's
//! (libfaketime). An observer reads every change below the faults — from the devcluster's
//! store, or from etcd's own watch ([`EtcdObserver`]) — and the figures come from that record: parents converged to their spec after each phase (target 100%), durable
//! children deleted while their parent still wanted them (0), PVCs deleted without a ready
//! snapshot under `deletionPolicy: Snapshot` (0), upgrade Jobs run twice or before their
//! backup completed (0), `currentVersion` going back (0), the Lease taken from a holder that
//! still renewed it (0), the time to converge once the faults stop, and the hosts' memory and
//! task count across the last two phases (flat).
//!
//! CI runs the short version (`Scale::short`) on both planes. `cargo xtask chaos` runs the full
//! one (`WINDLASS_CHAOS_PARENTS`, 200 on the devcluster and 50 on the real plane, 20 kills,
//! release hosts) and prints the figures (docs/RELIABILITY.md). On the real control plane,
//! `etcd_and_kube_apiserver_restart_under_sampledbs` also restarts etcd and kube-apiserver
//! under the same workload.

use std::{
    collections::{BTreeMap, HashMap, HashSet},
    path::{Path, PathBuf},
    process::{Child, Command, Stdio},
    sync::{Arc, Mutex},
    time::{Duration, Instant},
};

use kube::{
    Api, Client,
    api::{DeleteParams, DynamicObject, ListParams, Patch, PatchParams, PostParams},
    core::{ApiResource, GroupVersionKind},
};
use serde_json::{Value, json};
use windlass::dev::{self, DevConfig};
use windlass_devcluster::{
    DevCluster, ErrorRate, FaultConfig, Options, RequestInfo, Timeouts,
    faults::Faults,
    store::{Event, EventType},
};
use windlass_test_guests as guests;

use crate::support::{etcd, free_port, sampledb_resource};

const NS: &str = "default";
const LEASE_SECONDS: u64 = 5;
/// The hosts' Lease (`windlass run`'s default name); other Leases (kube-apiserver's identity
/// Leases on the real control plane) are not the hosts'.
const LEASE_NAME: &str = "windlass-leader";
/// The host whose wall clock runs ahead of the other's, by six leases: as a standby, every
/// `renewTime` the other writes looks expired to it.
const SKEWED: &str = "host-b";
const CLOCK_SKEW_SECONDS: u64 = 30;
const LIBFAKETIME: &str = "/usr/lib/x86_64-linux-gnu/faketime/libfaketime.so.1";
const OLD: &str = "16.4";
const NEW: &str = "17.0";

/// How big a run is.
#[derive(Debug, Clone)]
struct Scale {
    parents: usize,
    /// SIGKILLs of the leader in the scale phase.
    kills: usize,
    /// How long each phase's faults last.
    window: Duration,
    /// How long the parents may take to converge once the faults stop.
    converge: Duration,
}

impl Scale {
    fn short() -> Self {
        Scale {
            parents: 6,
            kills: 3,
            window: Duration::from_secs(12),
            converge: Duration::from_secs(240),
        }
    }

    fn full() -> Self {
        Scale {
            parents: std::env::var("WINDLASS_CHAOS_PARENTS")
                .ok()
                .and_then(|v| v.parse().ok())
                .unwrap_or(200),
            kills: 20,
            window: Duration::from_secs(60),
            converge: Duration::from_secs(900),
        }
    }
}

/// The short version: every target met, in CI.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn the_short_chaos_suite_meets_every_target() {
    let report = run(Scale::short(), Where::Dev).await;
    println!("{report}");
    report.assert_targets();
}

/// The full version, with figures: `cargo xtask chaos`.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
#[ignore = "minutes long: cargo xtask chaos"]
async fn the_full_chaos_suite() {
    let report = run(Scale::full(), Where::Dev).await;
    println!("{report}");
    report.assert_targets();
}

/// The short version on a real control plane, its faults injected by the fault proxy in front
/// of kube-apiserver and its invariants counted from etcd's watch.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
#[ignore = "real control plane only: cargo xtask ci runs it in the real pass"]
async fn the_short_chaos_suite_meets_every_target_on_the_real_control_plane() {
    assert!(
        crate::support::real_cluster(),
        "this runs on the real control plane: run with WINDLASS_TEST_CLUSTER=real"
    );
    let report = run(Scale::short(), Where::Real).await;
    println!("{report}");
    report.assert_targets();
}

/// The full version on a real control plane (`WINDLASS_CHAOS_PARENTS`, which `cargo xtask
/// chaos` sets to 50 here), with figures.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
#[ignore = "minutes long, real control plane only: cargo xtask chaos"]
async fn the_full_chaos_suite_on_the_real_control_plane() {
    assert!(
        crate::support::real_cluster(),
        "this runs on the real control plane: run with WINDLASS_TEST_CLUSTER=real"
    );
    let report = run(Scale::full(), Where::Real).await;
    println!("{report}");
    report.assert_targets();
}

// ---------------------------------------------------------------------------------------------
// What the observer records.

#[derive(Debug, Default)]
struct ParentState {
    name: String,
    deleting: bool,
    policy: String,
}

#[derive(Debug, Default)]
struct Record {
    /// By uid.
    parents: HashMap<String, ParentState>,
    /// Each parent's deletionPolicy by name, kept after it is gone (its volumes may go later).
    policies: HashMap<String, String>,
    /// Durable children deleted while their parent existed and was not being deleted.
    children_lost: Vec<String>,
    /// Data volumes deleted while their parent existed and was not being deleted.
    volumes_lost: Vec<String>,
    /// Data volumes of a `Snapshot` parent deleted without a ready snapshot of them.
    volumes_without_snapshot: Vec<String>,
    /// PVC names with a ready VolumeSnapshot.
    snapshotted: HashSet<String>,
    /// Job name → how many times it was created.
    jobs_created: HashMap<String, u32>,
    /// Jobs seen complete.
    jobs_complete: HashSet<String>,
    /// Upgrade Jobs created before their pre-upgrade backup completed.
    out_of_order: Vec<String>,
    /// Parent name → the highest `currentVersion` seen.
    versions: HashMap<String, (u32, u32)>,
    /// `currentVersion` going back.
    regressions: Vec<String>,
    /// The Lease's last holder and when its last renewal was observed.
    lease: Option<(String, Option<String>, Instant)>,
    /// The Lease taken from a holder whose last renewal came less than a lease before.
    steals: Vec<String>,
    /// Events the observer missed (it fell behind the store's broadcast).
    missed: u64,
    events: u64,
    /// Changes seen per resource (`group/plural`).
    by_resource: BTreeMap<String, u64>,
}

/// Kinds that, once made, a SampleDB keeps for its whole life (Jobs come and go by design).
const DURABLE: &[&str] = &[
    "/services",
    "/configmaps",
    "/secrets",
    "apps/statefulsets",
    "policy/poddisruptionbudgets",
    "batch/cronjobs",
];

/// Notes a parent's `status.currentVersion`, and a regression when it is below the highest
/// seen for that parent.
fn note_version(
    highest: &mut HashMap<String, (u32, u32)>,
    regressions: &mut Vec<String>,
    name: &str,
    status: &Value,
) {
    let Some(v) = status["currentVersion"].as_str().and_then(version) else {
        return;
    };
    let top = highest.entry(name.to_string()).or_insert(v);
    if v < *top {
        regressions.push(format!("{name}: currentVersion {v:?} after {top:?}"));
    } else {
        *top = v;
    }
}

fn version(text: &str) -> Option<(u32, u32)> {
    let (major, minor) = text.split_once('.')?;
    Some((major.parse().ok()?, minor.split('.').next()?.parse().ok()?))
}

impl Record {
    fn observe(&mut self, event: &Event) {
        self.observe_change(&event.key, event.kind, &event.object);
    }

    /// One stored change: `resource` as `group/plural`, the object after it (its last state
    /// for a deletion). The devcluster's store and etcd's watch both feed this.
    fn observe_change(&mut self, resource: &str, kind: EventType, o: &Value) {
        self.events += 1;
        *self.by_resource.entry(resource.to_string()).or_default() += 1;
        let meta = &o["metadata"];
        let name = meta["name"].as_str().unwrap_or_default().to_string();
        let deleted = matches!(kind, EventType::Deleted);
        match resource {
            "samples.windlass.dev/sampledbs" => {
                let uid = meta["uid"].as_str().unwrap_or_default().to_string();
                if deleted {
                    self.parents.remove(&uid);
                    return;
                }
                let state = self.parents.entry(uid).or_default();
                state.name = name.clone();
                state.deleting = meta.get("deletionTimestamp").is_some();
                state.policy = o["spec"]["deletionPolicy"]
                    .as_str()
                    .unwrap_or("Snapshot")
                    .to_string();
                self.policies.insert(name.clone(), state.policy.clone());
                note_version(
                    &mut self.versions,
                    &mut self.regressions,
                    &name,
                    &o["status"],
                );
            }
            key if deleted && DURABLE.contains(&key) => {
                let Some(parent) = meta["labels"]["windlass.dev/parent-uid"].as_str() else {
                    return;
                };
                if self.parents.get(parent).is_some_and(|p| !p.deleting) {
                    self.children_lost.push(format!("{key} {name}"));
                }
            }
            "/persistentvolumeclaims" if deleted => {
                let Some(instance) = meta["labels"]["app.kubernetes.io/instance"].as_str() else {
                    return;
                };
                if self
                    .parents
                    .values()
                    .any(|p| p.name == instance && !p.deleting)
                {
                    self.volumes_lost.push(name.clone());
                }
                let policy = self
                    .policies
                    .get(instance)
                    .map_or("Snapshot", String::as_str);
                if policy == "Snapshot" && !self.snapshotted.contains(&name) {
                    self.volumes_without_snapshot.push(name);
                }
            }
            "coordination.k8s.io/leases" if !deleted && name == LEASE_NAME => {
                // A release clears the holder: an empty holder keeps the last one's renewal.
                let holder = o["spec"]["holderIdentity"].as_str().unwrap_or_default();
                if holder.is_empty() {
                    return;
                }
                let renewed = o["spec"]["renewTime"].as_str().map(str::to_string);
                if let Some((last, last_renewed, at)) = &self.lease {
                    if last == holder && *last_renewed == renewed {
                        return;
                    }
                    let since = at.elapsed();
                    if last != holder && since < Duration::from_secs(LEASE_SECONDS) {
                        self.steals.push(format!(
                            "{holder} took the Lease {:.1} s after {last} renewed it",
                            since.as_secs_f64()
                        ));
                    }
                }
                self.lease = Some((holder.to_string(), renewed, Instant::now()));
            }
            "snapshot.storage.k8s.io/volumesnapshots" if !deleted => {
                if o["status"]["readyToUse"] == true
                    && let Some(pvc) = o["spec"]["source"]["persistentVolumeClaimName"].as_str()
                {
                    self.snapshotted.insert(pvc.to_string());
                }
            }
            "batch/jobs" if !deleted => {
                if matches!(kind, EventType::Added) {
                    *self.jobs_created.entry(name.clone()).or_default() += 1;
                    if let Some((db, v)) = name.split_once("-upgrade-")
                        && !db.ends_with("-pre")
                    {
                        let backup = format!("{db}-pre-upgrade-{v}");
                        if !self.jobs_complete.contains(&backup) {
                            self.out_of_order
                                .push(format!("{name} created before {backup} completed"));
                        }
                    }
                }
                let complete = o["status"]["conditions"]
                    .as_array()
                    .into_iter()
                    .flatten()
                    .any(|c| c["type"] == "Complete" && c["status"] == "True");
                if complete {
                    self.jobs_complete.insert(name);
                }
            }
            _ => {}
        }
    }

    /// Each invariant, named, with what broke it (each must stay empty).
    fn invariants(&self) -> Vec<(&'static str, Vec<String>)> {
        vec![
            (
                "durable children deleted while their parent wanted them",
                self.children_lost.clone(),
            ),
            (
                "data volumes deleted while their parent wanted them",
                self.volumes_lost.clone(),
            ),
            (
                "PVCs deleted without a ready snapshot under deletionPolicy Snapshot",
                self.volumes_without_snapshot.clone(),
            ),
            ("upgrade Jobs run twice", self.jobs_twice()),
            (
                "upgrade Jobs created before their backup completed",
                self.out_of_order.clone(),
            ),
            ("currentVersion going back", self.regressions.clone()),
            (
                "the Lease taken less than a lease after its holder renewed it",
                self.steals.clone(),
            ),
        ]
    }

    /// The resources an invariant reads that no change was seen of: an observer that names
    /// them wrongly would count nothing and find nothing broken.
    fn unseen(&self) -> Vec<&'static str> {
        let mut unseen: Vec<&'static str> = ["samples.windlass.dev/sampledbs"]
            .into_iter()
            .chain(DURABLE.iter().copied())
            .chain([
                "/persistentvolumeclaims",
                "snapshot.storage.k8s.io/volumesnapshots",
                "batch/jobs",
            ])
            .filter(|r| !self.by_resource.contains_key(*r))
            .collect();
        // Other Leases change all the time on the real plane: the hosts' own must be seen.
        if self.lease.is_none() {
            unseen.push("the hosts' Lease");
        }
        unseen
    }

    /// Upgrade and pre-upgrade Jobs created more than once.
    fn jobs_twice(&self) -> Vec<String> {
        let mut twice: Vec<String> = self
            .jobs_created
            .iter()
            .filter(|(name, n)| name.contains("-upgrade-") && **n > 1)
            .map(|(name, n)| format!("{name} ×{n}"))
            .collect();
        twice.sort();
        twice
    }
}

// ---------------------------------------------------------------------------------------------
// The hosts.

fn root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .unwrap()
        .to_path_buf()
}

/// A `windlass run` process.
struct Host {
    identity: String,
    kubeconfig: PathBuf,
    logs: PathBuf,
    admin: u16,
    child: Child,
    starts: u32,
}

impl Host {
    fn spawn(identity: &str, kubeconfig: &Path, logs: &Path) -> Host {
        let (child, admin) = launch(identity, kubeconfig, logs, 1);
        Host {
            identity: identity.into(),
            kubeconfig: kubeconfig.into(),
            logs: logs.into(),
            admin,
            child,
            starts: 1,
        }
    }

    /// SIGKILL, then a new process with the same identity.
    fn kill_and_restart(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
        self.starts += 1;
        (self.child, self.admin) =
            launch(&self.identity, &self.kubeconfig, &self.logs, self.starts);
    }

    /// A metric's value from /metrics, if the host answers.
    async fn metric(&self, name: &str) -> Option<f64> {
        let text = http_get(self.admin, "/metrics").await?;
        text.lines()
            .find(|l| l.split_whitespace().next() == Some(name))
            .and_then(|l| l.split_whitespace().nth(1)?.parse().ok())
    }

    /// Resident memory in bytes.
    fn rss(&self) -> u64 {
        std::fs::read_to_string(format!("/proc/{}/status", self.child.id()))
            .ok()
            .and_then(|s| {
                let line = s.lines().find(|l| l.starts_with("VmRSS:"))?.to_string();
                line.split_whitespace().nth(1)?.parse::<u64>().ok()
            })
            .map_or(0, |kib| kib * 1024)
    }
}

/// The `windlass` the suite runs: `WINDLASS_CHAOS_HOST` (`cargo xtask chaos` sets the release
/// build), else this test build's.
fn host_binary() -> PathBuf {
    std::env::var_os("WINDLASS_CHAOS_HOST")
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from(env!("CARGO_BIN_EXE_windlass")))
}

/// Starts `windlass run` as `identity` (its `start`-th process), logging into `logs`; returns
/// the process and its admin port.
fn launch(identity: &str, kubeconfig: &Path, logs: &Path, start: u32) -> (Child, u16) {
    let admin = free_port();
    let log =
        std::fs::File::create(logs.join(format!("{identity}-{start}.log"))).expect("a log file");
    let mut command = Command::new(host_binary());
    if identity == SKEWED {
        // Its wall clock only: tokio's timers and the guard's ages run on the monotonic clock.
        assert!(
            Path::new(LIBFAKETIME).exists(),
            "{LIBFAKETIME} is missing: install Debian's faketime (.ci/tools does)"
        );
        command
            .env("LD_PRELOAD", LIBFAKETIME)
            .env("FAKETIME", format!("+{CLOCK_SKEW_SECONDS}s"))
            .env("FAKETIME_DONT_FAKE_MONOTONIC", "1");
    }
    let child = command
        .arg("--cache-dir")
        .arg(root().join("target").join("e2e-plugin-cache"))
        .arg("run")
        .arg("--kubeconfig")
        .arg(kubeconfig)
        .args(["--leader-elect", "true", "--identity", identity])
        .args(["--lease-seconds", &LEASE_SECONDS.to_string()])
        .arg("--admin-addr")
        .arg(format!("127.0.0.1:{admin}"))
        .stdin(Stdio::null())
        .stdout(log.try_clone().expect("log"))
        .stderr(log)
        .spawn()
        .expect("windlass run starts");
    (child, admin)
}

impl Drop for Host {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// A plain HTTP GET on loopback (the admin port), without another client library.
async fn http_get(port: u16, path: &str) -> Option<String> {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let mut stream = tokio::time::timeout(
        Duration::from_secs(2),
        tokio::net::TcpStream::connect(("127.0.0.1", port)),
    )
    .await
    .ok()?
    .ok()?;
    let request = format!("GET {path} HTTP/1.0\r\nHost: 127.0.0.1\r\n\r\n");
    stream.write_all(request.as_bytes()).await.ok()?;
    let mut body = String::new();
    tokio::time::timeout(Duration::from_secs(5), stream.read_to_string(&mut body))
        .await
        .ok()?
        .ok()?;
    let (head, rest) = body.split_once("\r\n\r\n")?;
    head.starts_with("HTTP/1.1 200")
        .then(|| rest.to_string())
        .or_else(|| head.starts_with("HTTP/1.0 200").then(|| rest.to_string()))
}

/// Samples both hosts' `windlass_leader` every 250 ms for `how_long`; returns how many samples
/// found both leading.
async fn two_leaders(hosts: &[Host], how_long: Duration) -> usize {
    let until = Instant::now() + how_long;
    let mut both = 0;
    while Instant::now() < until {
        let mut leading = 0;
        for h in hosts {
            if h.metric("windlass_leader").await == Some(1.0) {
                leading += 1;
            }
        }
        if leading > 1 {
            both += 1;
        }
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
    both
}

/// The host that leads now, if one does.
async fn leader(hosts: &[Host]) -> Option<usize> {
    for (i, h) in hosts.iter().enumerate() {
        if h.metric("windlass_leader").await == Some(1.0) {
            return Some(i);
        }
    }
    None
}

// ---------------------------------------------------------------------------------------------
// The workload.

fn name(i: usize) -> String {
    format!("db-{i:03}")
}

const POLICIES: [&str; 3] = ["Snapshot", "Retain", "Delete"];

/// Creates the `i`-th SampleDB (already there is fine: an earlier try landed).
async fn create_parent(dbs: &Api<DynamicObject>, i: usize, at: Where) {
    let db = sampledb(i, at);
    let params = PostParams::default();
    retry(
        "creating a SampleDB",
        |e| matches!(e, kube::Error::Api(s) if s.code == 409 && s.reason == "AlreadyExists"),
        || dbs.create(&params, &db),
    )
    .await;
}

/// Merge-patches the SampleDBs among the first `parents` that `which` picks.
async fn patch_parents(
    dbs: &Api<DynamicObject>,
    parents: usize,
    which: impl Fn(usize) -> bool,
    patch: Value,
) {
    let params = PatchParams::default();
    let patch = Patch::Merge(patch);
    for i in (0..parents).filter(|i| which(*i)) {
        let name = name(i);
        retry(
            "patching a SampleDB",
            |_| false,
            || dbs.patch(&name, &params, &patch),
        )
        .await;
    }
}

/// Deletes the `i`-th SampleDB (already gone is fine).
async fn delete_parent(dbs: &Api<DynamicObject>, i: usize) {
    let name = name(i);
    let params = DeleteParams::default();
    retry(
        "deleting a SampleDB",
        |e| status_code(e, 404),
        || dbs.delete(&name, &params),
    )
    .await;
}

/// The `i`-th SampleDB as created: one replica of the old version, a backup a minute of wall
/// time, the deletion policies in turn. The devcluster's CronJobs run 60 times faster than the
/// clock here (hourly is a minute); kube-controller-manager's run on the clock.
fn sampledb(i: usize, at: Where) -> DynamicObject {
    let schedule = match at {
        Where::Dev => "0 * * * *",
        Where::Real => "* * * * *",
    };
    serde_json::from_value(json!({
        "apiVersion": "samples.windlass.dev/v1alpha1", "kind": "SampleDB",
        "metadata": {"name": name(i)},
        "spec": {"version": OLD, "replicas": 1, "storage": {"size": "1Gi"},
                 "backup": {"schedule": schedule},
                 "deletionPolicy": POLICIES[i % POLICIES.len()]},
    }))
    .unwrap()
}

/// Retries a request the faults may fail, until it succeeds or `ok_error` says its error is
/// an answer (e.g. 404 on a delete).
async fn retry<T, F, Fut>(what: &str, ok_error: impl Fn(&kube::Error) -> bool, f: F) -> Option<T>
where
    F: Fn() -> Fut,
    Fut: std::future::Future<Output = kube::Result<T>>,
{
    let deadline = Instant::now() + Duration::from_secs(120);
    loop {
        match f().await {
            Ok(v) => return Some(v),
            Err(e) if ok_error(&e) => return None,
            Err(e) => {
                assert!(Instant::now() < deadline, "{what}: still failing: {e}");
                tokio::time::sleep(Duration::from_millis(200)).await;
            }
        }
    }
}

fn status_code(e: &kube::Error, code: u16) -> bool {
    matches!(e, kube::Error::Api(s) if s.code == code)
}

/// Whether a parent has reached what its spec says; with `backed_up_after`, also that its newest
/// completed backup finished after that moment. `status.lastBackupTime` has whole seconds, so it
/// must fall in a later second than the moment: a backup of the same second may have been before.
fn at_spec(
    db: &Value,
    replicas: i64,
    version: &str,
    backed_up_after: Option<jiff::Timestamp>,
) -> bool {
    let s = &db["status"];
    let backed_up = backed_up_after.is_none_or(|after| {
        s["lastBackup"].is_string()
            && s["lastBackupTime"]
                .as_str()
                .and_then(|t| t.parse::<jiff::Timestamp>().ok())
                .is_some_and(|t| t.as_second() > after.as_second())
    });
    s["phase"] == "Ready"
        && s["readyReplicas"] == replicas
        && s["currentVersion"] == version
        && backed_up
}

/// One phase's outcome.
#[derive(Debug, Clone)]
struct Phase {
    name: &'static str,
    converged: usize,
    /// From the faults' end to the last parent at its spec.
    converge_time: Option<Duration>,
    /// From the phase's start to the last parent at its spec (or to giving up).
    took: Duration,
    waiting: Vec<String>,
}

impl Phase {
    /// Its row of the phases' table (of `n` parents), and what still waited.
    fn rows(&self, n: usize) -> String {
        let mut out = format!(
            "| {} | {}/{n} ({:.0}%) | {} | {:.1} s |\n",
            self.name,
            self.converged,
            100.0 * self.converged as f64 / n as f64,
            self.converge_time
                .map_or("not converged".into(), |d| format!(
                    "{:.1} s",
                    d.as_secs_f64()
                )),
            self.took.as_secs_f64()
        );
        for w in &self.waiting {
            out.push_str(&format!("  waiting: {w}\n"));
        }
        out
    }
}

struct Run {
    scale: Scale,
    client: Client,
    dbs: Api<DynamicObject>,
    cluster: Arc<Plane>,
}

/// Which plane a run is on.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Where {
    Dev,
    Real,
}

/// Where the suite runs: the devcluster, with its own faults and its store's broadcast to
/// observe; or a real control plane (storing JSON, so that etcd's watch decodes) behind the
/// fault proxy, with the simulator playing the kubelet over the API.
enum Plane {
    Dev(DevCluster),
    Real {
        proxy: windlass_devcluster::proxy::FaultProxy,
        simulator: tokio::task::JoinHandle<()>,
        plane: windlass_kubeplane::ControlPlane,
    },
}

impl Plane {
    /// Starts it, and writes a kubeconfig for its faulted API (the devcluster, or the proxy).
    async fn start(at: Where, kubeconfig: &Path) -> Plane {
        match at {
            Where::Dev => {
                let cluster = DevCluster::start(Options {
                    cron_speedup: 60.0,
                    ..Options::default()
                })
                .await
                .expect("the devcluster starts");
                cluster.write_kubeconfig(kubeconfig).expect("kubeconfig");
                Plane::Dev(cluster)
            }
            Where::Real => {
                use windlass_devcluster::simulator;
                let plane =
                    windlass_kubeplane::ControlPlane::start_with(windlass_kubeplane::Options {
                        storage_json: true,
                    })
                    .await
                    .expect("the real control plane starts");
                let admin = plane.config().await.expect("the admin's configuration");
                simulator::remote::install_snapshot_api(&plane.client().await.expect("a client"))
                    .await
                    .expect("the snapshot API");
                let simulator = tokio::spawn(simulator::remote::run(
                    admin.clone(),
                    simulator::Config::from(&Options {
                        cron_speedup: 60.0,
                        ..Options::default()
                    }),
                ));
                let proxy = windlass_devcluster::proxy::FaultProxy::start(admin)
                    .await
                    .expect("the fault proxy starts");
                windlass_devcluster::kubeconfig::write(kubeconfig, proxy.url())
                    .expect("kubeconfig");
                Plane::Real {
                    proxy,
                    simulator,
                    plane,
                }
            }
        }
    }

    fn faults(&self) -> &Faults {
        match self {
            Plane::Dev(cluster) => cluster.faults(),
            Plane::Real { proxy, .. } => proxy.faults(),
        }
    }

    /// Drops the watch history: a watch resumed from before now gets 410 Gone.
    async fn compact(&self) {
        match self {
            Plane::Dev(cluster) => cluster.compact(),
            Plane::Real { proxy, .. } => {
                // The upstream may be briefly unreachable; the next round tries again.
                let _ = proxy.expire_watch_history().await;
            }
        }
    }

    async fn shutdown(self) {
        match self {
            Plane::Dev(cluster) => cluster.shutdown().await,
            Plane::Real {
                proxy,
                simulator,
                plane,
            } => {
                drop(proxy);
                simulator.abort();
                drop(plane);
            }
        }
    }
}

impl Run {
    async fn patch_all(&self, patch: Value) {
        self.patch_some(|_| true, patch).await;
    }

    /// Patches the parents whose index `which` picks.
    async fn patch_some(&self, which: impl Fn(usize) -> bool, patch: Value) {
        patch_parents(&self.dbs, self.scale.parents, which, patch).await;
    }

    /// Waits until `ok` holds for every parent (listed with faults off), or the bound.
    async fn converge(
        &self,
        began: Instant,
        phase: &'static str,
        stopped: Instant,
        ok: impl Fn(Option<&Value>) -> bool,
    ) -> Phase {
        converge(
            &self.dbs,
            self.scale.parents,
            self.scale.converge,
            (began, stopped),
            phase,
            ok,
        )
        .await
    }

    /// The API faults of phase 1, with watch history dropped every 4 s while `until` is ahead.
    fn api_faults(&self, until: Instant) -> tokio::task::JoinHandle<()> {
        self.cluster.faults().set(FaultConfig {
            mix: [(500, 0.034), (409, 0.033), (429, 0.033)]
                .into_iter()
                .map(|(code, rate)| ErrorRate {
                    code,
                    rate,
                    retry_after_secs: Some(1),
                })
                .collect(),
            timeouts: Some(Timeouts {
                rate: 0.02,
                after_ms: 1000,
            }),
            watch_cut_secs: Some(3),
            ..FaultConfig::default()
        });
        let cluster = self.cluster.clone();
        tokio::spawn(async move {
            while Instant::now() < until {
                tokio::time::sleep(Duration::from_secs(4)).await;
                cluster.compact().await;
            }
        })
    }

    /// The API unavailable (503 on everything) for twice the lease.
    async fn outage(&self) {
        self.cluster.faults().set(FaultConfig {
            errors: [(
                "*".to_string(),
                ErrorRate {
                    code: 503,
                    rate: 1.0,
                    retry_after_secs: None,
                },
            )]
            .into(),
            ..FaultConfig::default()
        });
        tokio::time::sleep(Duration::from_secs(2 * LEASE_SECONDS)).await;
        self.cluster.faults().clear();
    }

    fn wasm_plugins(&self) -> Api<DynamicObject> {
        Api::all_with(
            self.client.clone(),
            &ApiResource::from_gvk(&GroupVersionKind::gvk(
                "windlass.dev",
                "v1alpha1",
                "WasmPlugin",
            )),
        )
    }

    /// The storage WasmPlugin's source and config, as they are now.
    async fn storage_plugin(&self) -> (Value, Value) {
        let plugins = self.wasm_plugins();
        let wp = retry(
            "reading the storage plugin",
            |_| false,
            || plugins.get("sampledb-storage"),
        )
        .await
        .expect("the storage WasmPlugin");
        let wp = serde_json::to_value(wp).expect("JSON");
        (wp["spec"]["source"].clone(), wp["spec"]["config"].clone())
    }

    /// Serves the flaky storage plugin with `config`.
    async fn break_storage(&self, config: Value) {
        self.swap_storage(
            json!({"configMap": null, "oci": null, "file": {"path": guests::FLAKY_STORAGE}}),
            config,
        )
        .await;
    }

    /// Sets the storage WasmPlugin's source and config (a merge patch: `null` removes a key).
    async fn swap_storage(&self, source: Value, config: Value) {
        let plugins = self.wasm_plugins();
        let patch = Patch::Merge(json!({"spec": {"source": source, "config": config}}));
        let params = PatchParams::default();
        retry(
            "swapping the storage plugin",
            |_| false,
            || plugins.patch("sampledb-storage", &params, &patch),
        )
        .await;
    }
}

/// Waits until `ok` holds for each of the first `parents` SampleDBs, or `bound` after the
/// faults `stopped`; the phase `began` earlier.
async fn converge(
    dbs: &Api<DynamicObject>,
    parents: usize,
    bound: Duration,
    (began, stopped): (Instant, Instant),
    phase: &'static str,
    ok: impl Fn(Option<&Value>) -> bool,
) -> Phase {
    let deadline = stopped + bound;
    loop {
        let list = dbs.list(&ListParams::default()).await;
        if let Ok(list) = list {
            let by_name: BTreeMap<String, Value> = list
                .items
                .into_iter()
                .map(|o| {
                    let v = serde_json::to_value(o).expect("JSON");
                    (v["metadata"]["name"].as_str().unwrap_or("").to_string(), v)
                })
                .collect();
            let waiting: Vec<String> = (0..parents)
                .map(name)
                .filter(|n| !ok(by_name.get(n)))
                .collect();
            if waiting.is_empty() || Instant::now() > deadline {
                let waiting_status = waiting
                    .iter()
                    .take(5)
                    .map(|n| {
                        format!(
                            "{n}: {}",
                            by_name
                                .get(n)
                                .map_or("gone".into(), |v| v["status"].to_string())
                        )
                    })
                    .collect();
                return Phase {
                    name: phase,
                    converged: parents - waiting.len(),
                    converge_time: waiting.is_empty().then(|| stopped.elapsed()),
                    took: began.elapsed(),
                    waiting: waiting_status,
                };
            }
        }
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
}

/// What `windlass dev` installs for the SampleDB plugins (the hosts run apart).
fn dev_config(kubeconfig: &Path) -> DevConfig {
    DevConfig {
        port: 0,
        kubeconfig: kubeconfig.to_path_buf(),
        plugins: crate::support::sampledb_plugins(),
        crds: vec![],
        manifests: vec![],
        operator: windlass::operator::Config {
            admin_addr: "127.0.0.1:0".parse().unwrap(),
            election: None,
            settings: Default::default(),
            identity: "chaos".into(),
        },
        runtime: Default::default(),
        cron_speedup: 60.0,
    }
}

async fn run(scale: Scale, at: Where) -> Report {
    let scratch = tempfile::tempdir().expect("scratch");
    let kubeconfig = scratch.path().join("kubeconfig");
    let cluster = Arc::new(Plane::start(at, &kubeconfig).await);
    let client = windlass_kubeplane::client_for(&kubeconfig)
        .await
        .expect("a client of the faulted API");

    // The observer: every change, from the store or etcd (below the faults either way).
    let record = Arc::new(Mutex::new(Record::default()));
    let observer = match &*cluster {
        Plane::Dev(dev) => {
            let mut events = dev.events();
            let record = record.clone();
            Observer::Store(tokio::spawn(async move {
                loop {
                    match events.recv().await {
                        Ok(event) => record.lock().unwrap().observe(&event),
                        Err(tokio::sync::broadcast::error::RecvError::Lagged(n)) => {
                            record.lock().unwrap().missed += n;
                        }
                        Err(tokio::sync::broadcast::error::RecvError::Closed) => return,
                    }
                }
            }))
        }
        Plane::Real { plane, .. } => {
            Observer::Etcd(EtcdObserver::start(plane, record.clone()).await)
        }
    };

    // CRDs, plugins (as `windlass dev` grants them) and the backup volume; the hosts run apart.
    let config = dev_config(&kubeconfig);
    dev::prepare(&client, &config).await.expect("installed");
    crate::support::create_backup_volume(&client, NS).await;
    let mut hosts = vec![
        Host::spawn("host-a", &kubeconfig, scratch.path()),
        Host::spawn("host-b", &kubeconfig, scratch.path()),
    ];
    dev::wait_plugins_ready(
        &client,
        &guests::SAMPLEDB.iter().map(|(n, _)| *n).collect::<Vec<_>>(),
        Duration::from_secs(300),
    )
    .await
    .expect("the plugins serve");

    let run = Run {
        scale: scale.clone(),
        dbs: Api::namespaced_with(client.clone(), NS, &sampledb_resource()),
        client: client.clone(),
        cluster: cluster.clone(),
    };
    let mut phases = Vec::new();

    let began = Instant::now();
    // 1. Create, under API faults.
    let stop = Instant::now() + scale.window;
    let compacting = run.api_faults(stop);
    for i in 0..scale.parents {
        create_parent(&run.dbs, i, at).await;
    }
    tokio::time::sleep_until(stop.into()).await;
    cluster.faults().clear();
    compacting.await.ok();
    let stopped = Instant::now();
    phases.push(
        run.converge(began, "create, under API faults", stopped, |db| {
            db.is_some_and(|db| at_spec(db, 1, OLD, None))
        })
        .await,
    );

    let began = Instant::now();
    // 2. Scale to 2, a slice of the parents in each slot, while the leader is killed in each
    // slot: at a random moment, with a child's apply in flight, with a status write in flight,
    // in turn.
    let mut kills: BTreeMap<Moment, usize> = BTreeMap::new();
    let slot = scale.window / scale.kills as u32;
    for k in 0..scale.kills {
        let started = Instant::now();
        run.patch_some(|i| i % scale.kills == k, json!({"spec": {"replicas": 2}}))
            .await;
        let moment = [Moment::Random, Moment::MidApply, Moment::MidStatus][k % 3];
        let wait = match moment {
            Moment::Random => slot.mul_f64(pseudo_random(k as u64)),
            _ => slot,
        };
        if let Some(hit) = kill_leader_at(&mut hosts, cluster.faults(), moment, wait).await {
            *kills.entry(hit).or_default() += 1;
        }
        tokio::time::sleep(slot.saturating_sub(started.elapsed())).await;
    }
    let stopped = Instant::now();
    phases.push(
        run.converge(began, "scale, leader SIGKILLed", stopped, |db| {
            db.is_some_and(|db| at_spec(db, 2, OLD, None))
        })
        .await,
    );

    let began = Instant::now();
    // 3. Upgrade, while the leader is killed and then the Lease lapses under an API outage.
    run.patch_all(json!({"spec": {"version": NEW}})).await;
    tokio::time::sleep(Duration::from_secs(2)).await;
    if let Some(hit) =
        kill_leader_at(&mut hosts, cluster.faults(), Moment::Random, Duration::ZERO).await
    {
        *kills.entry(hit).or_default() += 1;
    }
    tokio::time::sleep(Duration::from_secs(3)).await;
    let (_, mut split) = tokio::join!(
        run.outage(),
        two_leaders(&hosts, Duration::from_secs(4 * LEASE_SECONDS))
    );
    let stopped = Instant::now();
    phases.push(
        run.converge(
            began,
            "upgrade, leader killed, Lease lapsed",
            stopped,
            |db| db.is_some_and(|db| at_spec(db, 2, NEW, None)),
        )
        .await,
    );

    // From here no host is killed: their memory and tasks now, and at the end.
    tokio::time::sleep(Duration::from_secs(2)).await;
    let before = usage(&hosts).await;
    let led_before = leaders(&hosts).await;

    let began = Instant::now();
    // 4. Backups, while the storage plugin is swapped to broken versions and back.
    let (source, config) = run.storage_plugin().await;
    // Back: the source as it was (the file key gone) and the config as it was.
    let mut restored = source.clone();
    restored["file"] = Value::Null;
    let restore_config = if config.is_null() {
        json!({"misbehave": null, "every": null})
    } else {
        config.clone()
    };
    let third = scale.window / 3;
    run.break_storage(json!({"misbehave": "trap", "every": 3}))
        .await;
    tokio::time::sleep(third).await;
    run.break_storage(json!({"misbehave": "hang", "every": 3}))
        .await;
    tokio::time::sleep(third).await;
    run.swap_storage(restored.clone(), restore_config.clone())
        .await;
    let stopped = Instant::now();
    // Backups have run since phase 1: each parent must report one that completed after the
    // working version came back, not merely have a `lastBackup`.
    let swapped_back = jiff::Timestamp::now();
    phases.push(
        run.converge(began, "backup, broken plugin versions", stopped, |db| {
            db.is_some_and(|db| at_spec(db, 2, NEW, Some(swapped_back)))
        })
        .await,
    );

    let began = Instant::now();
    // 5. Delete, under API faults, an outage and a broken version together.
    let stop = Instant::now() + scale.window;
    let compacting = run.api_faults(stop);
    // The leader is killed with a finalizing write in flight after each share of the deletes.
    let finalize_kills = (scale.kills / 4).clamp(1, scale.parents);
    let share = scale.parents / finalize_kills;
    for i in 0..scale.parents {
        delete_parent(&run.dbs, i).await;
        if (i + 1) % share == 0 && (i + 1) / share <= finalize_kills {
            let wait = scale.window / (2 * finalize_kills as u32);
            if let Some(hit) =
                kill_leader_at(&mut hosts, cluster.faults(), Moment::MidFinalize, wait).await
            {
                *kills.entry(hit).or_default() += 1;
            }
        }
    }
    run.break_storage(json!({"misbehave": "trap", "every": 3}))
        .await;
    tokio::time::sleep(third).await;
    let (_, more) = tokio::join!(
        run.outage(),
        two_leaders(&hosts, Duration::from_secs(4 * LEASE_SECONDS))
    );
    split += more;
    let compacting_again = run.api_faults(stop);
    tokio::time::sleep_until(stop.into()).await;
    cluster.faults().clear();
    compacting.await.ok();
    compacting_again.await.ok();
    run.swap_storage(restored, restore_config).await;
    let stopped = Instant::now();
    phases.push(
        run.converge(began, "delete, all faults together", stopped, |db| {
            db.is_none()
        })
        .await,
    );
    tokio::time::sleep(Duration::from_secs(2)).await;
    let mut after = usage(&hosts).await;
    // The faults of the last phase can make the Lease lapse, and leadership move: the new
    // leader then holds a controller's tasks the old one held before, and the old one, now
    // standing by, the idle connections its controllers used, until the pool lets them go. Not
    // a leak: measured again once they have gone (a controller left running would not).
    let moved = leaders(&hosts).await != led_before;
    if moved {
        println!(
            "leadership moved in the last phases ({led_before:?} led); tasks now {:?}: measured again after the HTTP pool's idle timeout",
            after.iter().map(|h| (&h.0, h.2)).collect::<Vec<_>>()
        );
        tokio::time::sleep(POOL_IDLE + Duration::from_secs(5)).await;
        after = usage(&hosts).await;
    }

    match observer {
        Observer::Store(task) => task.abort(),
        Observer::Etcd(etcd) => {
            let Plane::Real { plane, .. } = &*cluster else {
                unreachable!("etcd is observed on the real plane")
            };
            let (covered, caught_up) = etcd.finish(plane).await;
            let mut record = record.lock().unwrap();
            record.missed += covered.compacted + covered.undecoded.len() as u64;
            if !caught_up {
                // What it had not read by the end counts as missed.
                record.missed += 1;
            }
        }
    }
    let record = std::mem::take(&mut *record.lock().unwrap());
    for h in &hosts {
        println!(
            "{}: {} starts, logs in {}",
            h.identity,
            h.starts,
            h.logs.display()
        );
    }
    let report = Report {
        scale,
        phases,
        kills,
        before,
        after,
        invariants: record.invariants(),
        unseen: record.unseen(),
        missed: record.missed,
        events: record.events,
        split,
        injected: cluster.faults().injected(),
    };
    drop(hosts);
    drop(run);
    if let Ok(cluster) = Arc::try_unwrap(cluster) {
        cluster.shutdown().await;
    }
    if !report.passed() {
        // Keep the hosts' logs of a failed run.
        let kept = scratch.keep();
        println!("logs kept in {}", kept.display());
    }
    report
}

/// When a host is killed.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
enum Moment {
    Random,
    /// A child's apply in flight.
    MidApply,
    /// A parent's status write in flight.
    MidStatus,
    /// A write for a parent being deleted in flight: a child, a snapshot, a claim, or the
    /// finalizer's removal.
    MidFinalize,
}

/// What a SampleDB's pipeline writes besides the parent.
const CHILD_RESOURCES: &[&str] = &[
    "statefulsets",
    "services",
    "configmaps",
    "secrets",
    "poddisruptionbudgets",
    "cronjobs",
    "jobs",
    "serviceaccounts",
    "roles",
    "rolebindings",
];

impl Moment {
    fn name(self) -> &'static str {
        match self {
            Moment::Random => "at a random moment",
            Moment::MidApply => "mid-apply",
            Moment::MidStatus => "mid-status",
            Moment::MidFinalize => "mid-finalize",
        }
    }

    /// Whether `r` is a request the host has in flight at this moment. (The suite itself only
    /// patches SampleDBs' specs, deletes SampleDBs and patches WasmPlugins: none matches.)
    fn matches(self, r: &RequestInfo) -> bool {
        let child = CHILD_RESOURCES.contains(&r.resource.as_str());
        let parent = r.resource == "sampledbs";
        match self {
            Moment::Random => false,
            Moment::MidApply => r.verb == "patch" && r.subresource.is_none() && child,
            Moment::MidStatus => {
                r.verb == "patch" && parent && r.subresource.as_deref() == Some("status")
            }
            Moment::MidFinalize => match r.verb.as_str() {
                "patch" => child || parent || r.resource == "persistentvolumeclaims",
                "create" => child || r.resource == "volumesnapshots",
                "delete" => child || r.resource == "persistentvolumeclaims",
                _ => false,
            },
        }
    }
}

/// Kills the leader with SIGKILL at `moment` and restarts it: for an aimed moment, once the
/// faults (the devcluster's or the proxy's) hold such a request in flight (waiting up to
/// `wait`; when none comes, the kill is at a random moment after all); for `Random`, after
/// `wait`. The held request goes on after the kill. Returns the moment hit, or None without a
/// leader to kill.
async fn kill_leader_at(
    hosts: &mut [Host],
    faults: &Faults,
    moment: Moment,
    wait: Duration,
) -> Option<Moment> {
    let held = if moment == Moment::Random {
        tokio::time::sleep(wait).await;
        None
    } else {
        let request = faults.hold(move |r| moment.matches(r));
        tokio::time::timeout(wait, request)
            .await
            .ok()
            .and_then(Result::ok)
    };
    let i = leader(hosts).await?;
    hosts[i].kill_and_restart();
    let hit = if held.is_some() {
        moment
    } else {
        Moment::Random
    };
    drop(held);
    Some(hit)
}

/// A deterministic number in [0, 1) for kill moments, so that a run can be repeated.
fn pseudo_random(k: u64) -> f64 {
    let mut x = k.wrapping_mul(0x9E37_79B9_7F4A_7C15) ^ 0xD1B5_4A32_D192_ED03;
    x ^= x >> 31;
    x = x.wrapping_mul(0xBF58_476D_1CE4_E5B9);
    x ^= x >> 29;
    (x >> 11) as f64 / (1u64 << 53) as f64
}

/// Resident memory and tasks of each host.
async fn usage(hosts: &[Host]) -> Vec<(String, u64, f64)> {
    let mut out = Vec::new();
    for h in hosts {
        let tasks = h.metric("windlass_tasks").await.unwrap_or(f64::NAN);
        out.push((h.identity.clone(), h.rss(), tasks));
    }
    out
}

/// Which hosts lead now (by identity).
async fn leaders(hosts: &[Host]) -> Vec<String> {
    let mut out = Vec::new();
    for h in hosts {
        if h.metric("windlass_leader").await == Some(1.0) {
            out.push(h.identity.clone());
        }
    }
    out
}

/// How long the hosts' HTTP client keeps an idle connection (hyper's pool default), each one a
/// task: a host that stopped leading holds the connections its controllers used until then.
const POOL_IDLE: Duration = Duration::from_secs(90);

// ---------------------------------------------------------------------------------------------
// The figures.

struct Report {
    scale: Scale,
    phases: Vec<Phase>,
    kills: BTreeMap<Moment, usize>,
    before: Vec<(String, u64, f64)>,
    after: Vec<(String, u64, f64)>,
    /// [`Record::invariants`].
    invariants: Vec<(&'static str, Vec<String>)>,
    /// [`Record::unseen`].
    unseen: Vec<&'static str>,
    missed: u64,
    events: u64,
    /// Samples (every 250 ms, during and after each Lease lapse) with both hosts leading.
    split: usize,
    /// Answers injected by the faults, by code.
    injected: BTreeMap<u16, u64>,
}

/// The codes the suite's faults inject: 500, 409 and 429 (the mix), 504 (timeouts), 503 (the
/// outages). A run where one never came did not test it.
const INJECTED: [u16; 5] = [409, 429, 500, 503, 504];

/// The larger host's memory may grow by this factor across the last two phases and still
/// count as flat (the heap settles at a size; a leak grows with the work done). The larger,
/// because leadership may move between the two in those phases: the new leader grows to what
/// the old one had, and the old one keeps its compiled plugins.
const FLAT_MEMORY: f64 = 1.5;
/// Tasks of both hosts together may grow by this many: one leads at a time, so a controller
/// left running by a host that stopped leading shows as a whole controller's tasks more.
const FLAT_TASKS: f64 = 20.0;

impl Report {
    fn flat(&self) -> bool {
        let max_rss = |v: &[(String, u64, f64)]| v.iter().map(|h| h.1).max().unwrap_or(0) as f64;
        let tasks = |v: &[(String, u64, f64)]| v.iter().map(|h| h.2).sum::<f64>();
        max_rss(&self.after) <= max_rss(&self.before) * FLAT_MEMORY
            && tasks(&self.after) <= tasks(&self.before) + FLAT_TASKS
    }

    fn passed(&self) -> bool {
        self.phases
            .iter()
            .all(|p| p.converged == self.scale.parents)
            && self.invariants.iter().all(|(_, broken)| broken.is_empty())
            && self.unseen.is_empty()
            && self.missed == 0
            && self.split == 0
            && self.flat()
            && self.aimed()
            && INJECTED
                .iter()
                .all(|c| self.injected.get(c).copied().unwrap_or(0) > 0)
    }

    /// Whether kills hit each aimed moment at least once (else the suite did not test them).
    fn aimed(&self) -> bool {
        [Moment::MidApply, Moment::MidStatus, Moment::MidFinalize]
            .iter()
            .all(|m| self.kills.get(m).copied().unwrap_or(0) > 0)
    }

    fn assert_targets(&self) {
        assert!(self.passed(), "a chaos target was missed:\n{self}");
    }
}

/// The invariants as a Markdown table (its header and a row each), target 0 each.
fn invariant_table(invariants: &[(&'static str, Vec<String>)]) -> String {
    let mut out = String::from("| invariant | count | target |\n| --- | ---: | --- |\n");
    for (what, broken) in invariants {
        if broken.is_empty() {
            out.push_str(&format!("| {what} | 0 | 0 |\n"));
        } else {
            let examples: Vec<&String> = broken.iter().take(5).collect();
            out.push_str(&format!(
                "| {what} | {} | 0 — e.g. {examples:?} |\n",
                broken.len()
            ));
        }
    }
    out
}

impl std::fmt::Display for Report {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let n = self.scale.parents;
        let kills: Vec<String> = self
            .kills
            .iter()
            .map(|(m, k)| format!("{k} {}", m.name()))
            .collect();
        writeln!(
            f,
            "chaos suite: {n} SampleDBs, two hosts, {} SIGKILLs ({}), {} changes observed below the faults",
            self.kills.values().sum::<usize>(),
            kills.join(", "),
            self.events
        )?;
        let injected: Vec<String> = self
            .injected
            .iter()
            .map(|(code, n)| format!("{code} ×{n}"))
            .collect();
        writeln!(
            f,
            "answers injected: {} (each of {INJECTED:?} needed)",
            injected.join(", ")
        )?;
        writeln!(
            f,
            "| phase | converged (target 100%) | converge time after the faults | the phase took |"
        )?;
        writeln!(f, "| --- | ---: | ---: | ---: |")?;
        for p in &self.phases {
            write!(f, "{}", p.rows(n))?;
        }
        write!(f, "\n{}", invariant_table(&self.invariants))?;
        writeln!(f, "| changes the observer missed | {} | 0 |", self.missed)?;
        writeln!(
            f,
            "| resources an invariant reads that the observer saw no change of | {:?} | none |",
            self.unseen
        )?;
        writeln!(
            f,
            "| samples with both hosts leading (4 a second, 20 s from each Lease lapse) | {} | 0 |",
            self.split
        )?;
        writeln!(f, "\n| host | RSS before → after | tasks before → after |")?;
        writeln!(f, "| --- | ---: | ---: |")?;
        for (b, a) in self.before.iter().zip(&self.after) {
            writeln!(
                f,
                "| {} | {:.1} → {:.1} MiB | {} → {} |",
                b.0,
                b.1 as f64 / (1 << 20) as f64,
                a.1 as f64 / (1 << 20) as f64,
                b.2,
                a.2
            )?;
        }
        writeln!(
            f,
            "memory and tasks flat (the larger host ≤ {FLAT_MEMORY}× memory, both ≤ +{FLAT_TASKS} tasks): {}",
            self.flat()
        )
    }
}

// ---------------------------------------------------------------------------------------------
// On a real control plane: etcd and kube-apiserver restart.

/// The real plane's observer: etcd's watch ([`etcd::watch`]) from the revision at its start,
/// feeding a [`Record`] as the devcluster's store broadcast does.
struct EtcdObserver {
    gaps: Arc<Mutex<etcd::Gaps>>,
    seen: Arc<std::sync::atomic::AtomicU64>,
    from: u64,
    task: tokio::task::JoinHandle<()>,
}

/// What the observer read: its gaps, and the revisions it covered.
#[derive(Debug, Clone)]
struct Covered {
    compacted: u64,
    undecoded: Vec<String>,
    from: u64,
    to: u64,
}

impl EtcdObserver {
    /// Watches from the revision after etcd's current one, into `record`. The plane must
    /// store JSON.
    async fn start(plane: &windlass_kubeplane::ControlPlane, record: Arc<Mutex<Record>>) -> Self {
        let gaps = Arc::new(Mutex::new(etcd::Gaps::default()));
        let seen = Arc::new(std::sync::atomic::AtomicU64::new(0));
        let from = etcd::revision(plane.etcd_url())
            .await
            .expect("etcd's revision")
            + 1;
        let task = {
            let (record, gaps, seen) = (record.clone(), gaps.clone(), seen.clone());
            tokio::spawn(etcd::watch(
                plane.etcd_url().to_string(),
                from,
                move |change| {
                    let kind = match change.kind {
                        etcd::Kind::Added => EventType::Added,
                        etcd::Kind::Modified => EventType::Modified,
                        etcd::Kind::Deleted => EventType::Deleted,
                    };
                    record
                        .lock()
                        .unwrap()
                        .observe_change(&change.resource, kind, &change.object);
                    // After it is recorded: `finish` takes the record once this reaches the end.
                    seen.store(change.revision, std::sync::atomic::Ordering::SeqCst);
                },
                move |gap| {
                    let mut gaps = gaps.lock().unwrap();
                    gaps.compacted += gap.compacted;
                    gaps.undecoded.extend(gap.undecoded);
                },
            ))
        };
        EtcdObserver {
            gaps,
            seen,
            from,
            task,
        }
    }

    /// Waits (up to a minute) until it has read up to etcd's revision now, stops, and returns
    /// what it covered and whether it caught up.
    async fn finish(self, plane: &windlass_kubeplane::ControlPlane) -> (Covered, bool) {
        let end = etcd::revision(plane.etcd_url())
            .await
            .expect("etcd's revision");
        let caught_up = tokio::time::timeout(Duration::from_secs(60), async {
            while self.seen.load(std::sync::atomic::Ordering::SeqCst) < end {
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
        })
        .await
        .is_ok();
        self.task.abort();
        let gaps = self.gaps.lock().unwrap().clone();
        let covered = Covered {
            compacted: gaps.compacted,
            undecoded: gaps.undecoded,
            from: self.from,
            to: end,
        };
        (covered, caught_up)
    }
}

/// A run's observer.
enum Observer {
    /// The devcluster's store broadcast.
    Store(tokio::task::JoinHandle<()>),
    Etcd(EtcdObserver),
}

/// The observer can fail: on a real plane with no host, each invariant is broken once by hand
/// (a durable child and a data volume deleted under a live parent, its volume without a
/// snapshot, an upgrade Job made twice and before its backup, `currentVersion` set back, the
/// Lease handed to another holder at once), and each is counted, from etcd's watch.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "real control plane only: cargo xtask ci runs it in the real pass"]
async fn the_etcd_observer_counts_each_broken_invariant() {
    assert!(
        crate::support::real_cluster(),
        "etcd's watch needs the real control plane: run with WINDLASS_TEST_CLUSTER=real"
    );
    let plane = windlass_kubeplane::ControlPlane::start_with(windlass_kubeplane::Options {
        storage_json: true,
    })
    .await
    .expect("the real control plane starts");
    let client = plane.client().await.expect("a client");
    let scratch = tempfile::tempdir().expect("scratch");
    dev::prepare(&client, &dev_config(&plane.kubeconfig()))
        .await
        .expect("installed");
    let record = Arc::new(Mutex::new(Record::default()));
    let observer = EtcdObserver::start(&plane, record.clone()).await;

    let dbs: Api<DynamicObject> = Api::namespaced_with(client.clone(), NS, &sampledb_resource());
    let db = dbs
        .create(&PostParams::default(), &sampledb(0, Where::Real))
        .await
        .expect("a SampleDB");
    let (db_name, uid) = (name(0), db.metadata.uid.clone().expect("uid"));
    let create = |value: Value| {
        let client = client.clone();
        async move {
            let obj: DynamicObject = serde_json::from_value(value).expect("object");
            let types = obj.types.clone().expect("types");
            let (group, version) = types
                .api_version
                .split_once('/')
                .unwrap_or(("", &types.api_version));
            let plural = format!("{}s", types.kind.to_lowercase());
            let ar = ApiResource::from_gvk_with_plural(
                &GroupVersionKind::gvk(group, version, &types.kind),
                &plural,
            );
            let api: Api<DynamicObject> = Api::namespaced_with(client, NS, &ar);
            api.create(&PostParams::default(), &obj)
                .await
                .expect("created");
            api
        }
    };
    // Deleted, and gone (a claim waits for the claim-protection controller).
    let gone = |api: Api<DynamicObject>, name: String| async move {
        api.delete(&name, &DeleteParams::background())
            .await
            .expect("deleted");
        eventually_absent(&api, &name).await;
    };
    // A durable child and a data volume of the live parent, deleted.
    let child = create(json!({"apiVersion": "v1", "kind": "ConfigMap",
        "metadata": {"name": "db-000-config", "labels": {"windlass.dev/parent-uid": uid}}}))
    .await;
    gone(child, "db-000-config".into()).await;
    let claim = format!("data-{db_name}-0");
    let claims = create(json!({"apiVersion": "v1", "kind": "PersistentVolumeClaim",
        "metadata": {"name": claim, "labels": {"app.kubernetes.io/instance": db_name}},
        "spec": {"accessModes": ["ReadWriteOnce"], "resources": {"requests": {"storage": "1Gi"}}}}))
    .await;
    gone(claims, claim.clone()).await;
    // An upgrade Job with no pre-upgrade backup, made twice.
    let job = json!({"apiVersion": "batch/v1", "kind": "Job",
        "metadata": {"name": "db-000-upgrade-17-0"},
        "spec": {"template": {"spec": {"restartPolicy": "Never",
            "containers": [{"name": "c", "image": "busybox"}]}}}});
    let jobs = create(job.clone()).await;
    gone(jobs, "db-000-upgrade-17-0".into()).await;
    create(job).await;
    // currentVersion up, then back.
    for version in [NEW, OLD] {
        dbs.patch_status(
            &db_name,
            &PatchParams::default(),
            &Patch::Merge(json!({"status": {"currentVersion": version}})),
        )
        .await
        .expect("status");
    }
    // The Lease, held by one holder and taken by another at once.
    let leases = create(
        json!({"apiVersion": "coordination.k8s.io/v1", "kind": "Lease",
        "metadata": {"name": LEASE_NAME},
        "spec": {"holderIdentity": "host-a", "leaseDurationSeconds": LEASE_SECONDS}}),
    )
    .await;
    leases
        .patch(
            LEASE_NAME,
            &PatchParams::default(),
            &Patch::Merge(json!({"spec": {"holderIdentity": "host-b"}})),
        )
        .await
        .expect("the Lease taken");

    let (covered, caught_up) = observer.finish(&plane).await;
    let record = std::mem::take(&mut *record.lock().unwrap());
    assert!(caught_up, "the observer did not read up to the end");
    assert_eq!(covered.compacted, 0);
    assert!(covered.undecoded.is_empty(), "{:?}", covered.undecoded);
    let broken: BTreeMap<&str, Vec<String>> = record.invariants().into_iter().collect();
    let want = |what: &str| broken.get(what).cloned().unwrap_or_default();
    assert_eq!(
        want("durable children deleted while their parent wanted them"),
        ["/configmaps db-000-config"]
    );
    assert_eq!(
        want("data volumes deleted while their parent wanted them"),
        [claim.clone()]
    );
    assert_eq!(
        want("PVCs deleted without a ready snapshot under deletionPolicy Snapshot"),
        [claim]
    );
    assert_eq!(want("upgrade Jobs run twice"), ["db-000-upgrade-17-0 ×2"]);
    assert_eq!(
        want("upgrade Jobs created before their backup completed").len(),
        2
    );
    assert_eq!(want("currentVersion going back").len(), 1, "{broken:?}");
    assert_eq!(
        want("the Lease taken less than a lease after its holder renewed it").len(),
        1,
        "{broken:?}"
    );
    drop(scratch);
}

/// Waits until `name` is gone from `api`.
async fn eventually_absent(api: &Api<DynamicObject>, name: &str) {
    let deadline = Instant::now() + Duration::from_secs(60);
    while api.get_opt(name).await.expect("get").is_some() {
        assert!(Instant::now() < deadline, "{name} still there");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// etcd and kube-apiserver are killed with SIGKILL and started again while two hosts (leader
/// election, one clock skewed) take SampleDBs through create (etcd restarts), scale
/// (kube-apiserver restarts), upgrade (both, etcd down for twice the Lease) and delete
/// (kube-apiserver restarts while the parents finalize). What must hold: every parent converges
/// after each step, and the devcluster suite's invariants, counted the same way ([`Record`])
/// from etcd's own watch read from a revision before the first parent (so a loss during a
/// restart is seen, not only the state at phase boundaries): no durable child or data volume
/// deleted while its parent wanted it, no PVC of a `Snapshot` parent deleted before a ready
/// snapshot of it, no upgrade Job twice or before its backup, `currentVersion` never back, the
/// Lease never taken from a live holder; no sample with both hosts leading while etcd is down
/// and after; and the observer missed nothing.
///
/// Runs in the real control plane's pass (`WINDLASS_TEST_CLUSTER=real`, part of `cargo xtask
/// ci`); the devcluster's restarts are its fault switchboard's, in the suite above.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
#[ignore = "real control plane only: cargo xtask ci runs it in the real pass"]
async fn etcd_and_kube_apiserver_restart_under_sampledbs() {
    use windlass_devcluster::simulator;
    assert!(
        crate::support::real_cluster(),
        "restarting etcd and kube-apiserver needs the real control plane: run with WINDLASS_TEST_CLUSTER=real"
    );
    let parents: usize = std::env::var("WINDLASS_CHAOS_REAL_PARENTS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(6);
    let plane = windlass_kubeplane::ControlPlane::start_with(windlass_kubeplane::Options {
        storage_json: true,
    })
    .await
    .expect("the real control plane starts");
    let client = plane.client().await.expect("a client");

    // The observer: every change etcd stores from here on.
    let record = Arc::new(Mutex::new(Record::default()));
    let observer = EtcdObserver::start(&plane, record.clone()).await;
    simulator::remote::install_snapshot_api(&client)
        .await
        .expect("the snapshot API");
    let sim = tokio::spawn(simulator::remote::run(
        plane.config().await.expect("the admin's configuration"),
        simulator::Config::from(&Options {
            cron_speedup: 60.0,
            ..Options::default()
        }),
    ));
    let scratch = tempfile::tempdir().expect("scratch");
    let kubeconfig = plane.kubeconfig();
    dev::prepare(&client, &dev_config(&kubeconfig))
        .await
        .expect("installed");
    crate::support::create_backup_volume(&client, NS).await;
    let hosts = [
        Host::spawn("host-a", &kubeconfig, scratch.path()),
        Host::spawn("host-b", &kubeconfig, scratch.path()),
    ];
    dev::wait_plugins_ready(
        &client,
        &guests::SAMPLEDB.iter().map(|(n, _)| *n).collect::<Vec<_>>(),
        Duration::from_secs(300),
    )
    .await
    .expect("the plugins serve");
    let dbs: Api<DynamicObject> = Api::namespaced_with(client.clone(), NS, &sampledb_resource());

    let bound = Duration::from_secs(300);
    let mut phases = Vec::new();
    let restart = |process: &'static str, down: Duration| {
        let plane = &plane;
        async move {
            plane
                .restart(process, down)
                .await
                .unwrap_or_else(|e| panic!("{process} restarts: {e:#}"));
        }
    };

    // Create; etcd restarts.
    let began = Instant::now();
    for i in 0..parents {
        create_parent(&dbs, i, Where::Real).await;
    }
    tokio::time::sleep(Duration::from_secs(2)).await;
    restart("etcd", Duration::from_secs(2)).await;
    phases.push(
        converge(
            &dbs,
            parents,
            bound,
            (began, Instant::now()),
            "create, etcd restarted",
            |db| db.is_some_and(|db| at_spec(db, 1, OLD, None)),
        )
        .await,
    );

    // Scale; kube-apiserver restarts.
    let began = Instant::now();
    patch_parents(&dbs, parents, |_| true, json!({"spec": {"replicas": 2}})).await;
    tokio::time::sleep(Duration::from_secs(2)).await;
    restart("kube-apiserver", Duration::from_secs(2)).await;
    phases.push(
        converge(
            &dbs,
            parents,
            bound,
            (began, Instant::now()),
            "scale, kube-apiserver restarted",
            |db| db.is_some_and(|db| at_spec(db, 2, OLD, None)),
        )
        .await,
    );

    // Upgrade; both restart, etcd down for longer than the Lease.
    let began = Instant::now();
    patch_parents(&dbs, parents, |_| true, json!({"spec": {"version": NEW}})).await;
    tokio::time::sleep(Duration::from_secs(2)).await;
    // Both hosts' leadership sampled from etcd's stop until well after it is back.
    let (_, mut split) = tokio::join!(
        async {
            restart("etcd", Duration::from_secs(2 * LEASE_SECONDS)).await;
            restart("kube-apiserver", Duration::from_secs(1)).await;
        },
        two_leaders(&hosts, Duration::from_secs(6 * LEASE_SECONDS))
    );
    phases.push(
        converge(
            &dbs,
            parents,
            bound,
            (began, Instant::now()),
            "upgrade, both restarted, the Lease lapsed",
            |db| db.is_some_and(|db| at_spec(db, 2, NEW, None)),
        )
        .await,
    );

    // Delete; kube-apiserver restarts while the parents finalize.
    let snapshot_parents: HashSet<String> = (0..parents)
        .filter(|i| POLICIES[i % POLICIES.len()] == "Snapshot")
        .map(name)
        .collect();
    let claims: Api<k8s_openapi::api::core::v1::PersistentVolumeClaim> =
        Api::namespaced(client.clone(), NS);
    let snapshot_claims: Vec<String> = claims
        .list(&ListParams::default().labels("app.kubernetes.io/instance"))
        .await
        .expect("claims listed")
        .items
        .into_iter()
        .filter(|c| {
            c.metadata
                .labels
                .as_ref()
                .and_then(|l| l.get("app.kubernetes.io/instance"))
                .is_some_and(|i| snapshot_parents.contains(i))
        })
        .filter_map(|c| c.metadata.name)
        .collect();
    let began = Instant::now();
    for i in 0..parents {
        delete_parent(&dbs, i).await;
    }
    tokio::time::sleep(Duration::from_secs(1)).await;
    let (_, more) = tokio::join!(
        restart("kube-apiserver", Duration::from_secs(2)),
        two_leaders(&hosts, Duration::from_secs(4 * LEASE_SECONDS))
    );
    split += more;
    phases.push(
        converge(
            &dbs,
            parents,
            bound,
            (began, Instant::now()),
            "delete, kube-apiserver restarted",
            |db| db.is_none(),
        )
        .await,
    );
    let snapshots: Api<DynamicObject> = Api::namespaced_with(
        client.clone(),
        NS,
        &ApiResource::from_gvk_with_plural(
            &GroupVersionKind::gvk("snapshot.storage.k8s.io", "v1", "VolumeSnapshot"),
            "volumesnapshots",
        ),
    );
    let ready: HashSet<String> = snapshots
        .list(&ListParams::default())
        .await
        .expect("snapshots listed")
        .items
        .into_iter()
        .filter(|s| s.data["status"]["readyToUse"] == true)
        .filter_map(|s| {
            s.data["spec"]["source"]["persistentVolumeClaimName"]
                .as_str()
                .map(str::to_string)
        })
        .collect();
    let unsnapshotted: Vec<&String> = snapshot_claims
        .iter()
        .filter(|c| !ready.contains(*c))
        .collect();
    let (gaps, caught_up) = observer.finish(&plane).await;
    let record = std::mem::take(&mut *record.lock().unwrap());
    sim.abort();

    println!(
        "control plane restarts: {parents} SampleDBs, two hosts; {} changes read from etcd's \
         watch (revisions {} to {})",
        record.events, gaps.from, gaps.to
    );
    println!("| phase | converged | converge time after the restart | the phase took |");
    println!("| --- | ---: | ---: | ---: |");
    for p in &phases {
        print!("{}", p.rows(parents));
    }
    println!();
    print!("{}", invariant_table(&record.invariants()));
    println!(
        "| revisions etcd compacted before the observer read them | {} | 0 |",
        gaps.compacted
    );
    println!(
        "| values the observer could not decode | {} | 0 |",
        gaps.undecoded.len()
    );
    println!("| the observer read up to the end revision | {caught_up} | true |");
    println!(
        "| resources an invariant reads that the observer saw no change of | {:?} | none |",
        record.unseen()
    );
    println!(
        "| samples with both hosts leading (4 a second, from each restart of etcd or kube-apiserver in the last two phases) | {split} | 0 |"
    );
    println!(
        "data volumes of Snapshot parents without a ready snapshot at the end: {unsnapshotted:?} (of {})",
        snapshot_claims.len()
    );
    let passed = phases.iter().all(|p| p.converged == parents)
        && record
            .invariants()
            .iter()
            .all(|(_, broken)| broken.is_empty())
        && gaps.compacted == 0
        && gaps.undecoded.is_empty()
        && caught_up
        && record.unseen().is_empty()
        && split == 0
        && unsnapshotted.is_empty()
        && !snapshot_claims.is_empty();
    if !passed {
        let kept = scratch.keep();
        println!("logs kept in {}", kept.display());
    }
    drop(hosts);
    assert!(passed, "a target was missed on the real control plane");
}
