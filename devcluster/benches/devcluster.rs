//! Devcluster throughput, measured through kube-rs over HTTP as an operator would load it:
//! sustained creates/s, server-side apply patches/s and watch fan-out (events/s delivered to
//! 10 watchers) with 10k objects stored, and resident memory per 1k stored objects.
//!
//! `cargo bench -p windlass-devcluster` (set `DEVCLUSTER_BENCH_OBJECTS` to change the 10,000).

use futures::{StreamExt, TryStreamExt, stream};
use k8s_openapi::api::core::v1::ConfigMap;
use kube::api::{Api, Patch, PatchParams, PostParams, WatchEvent, WatchParams};
use serde_json::json;
use std::time::{Duration, Instant};
use windlass_devcluster::{DevCluster, Options};

const CONCURRENCY: usize = 32;

fn rss_kib() -> u64 {
    std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|s| {
            s.lines()
                .find(|l| l.starts_with("VmRSS:"))
                .and_then(|l| l.split_whitespace().nth(1)?.parse().ok())
        })
        .unwrap_or(0)
}

fn configmap(i: usize) -> ConfigMap {
    serde_json::from_value(json!({"metadata": {"name": format!("bench-{i}"), "labels": {"app": "bench", "shard": (i % 10).to_string()}},
        "data": {"index": i.to_string(), "payload": "x".repeat(200)}}))
    .unwrap_or_default()
}

#[tokio::main(flavor = "multi_thread", worker_threads = 2)]
async fn main() -> anyhow::Result<()> {
    let n: usize = std::env::var("DEVCLUSTER_BENCH_OBJECTS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(10_000);
    let dc = DevCluster::start(Options {
        simulator: false,
        history: 200_000,
        ..Options::default()
    })
    .await?;
    let api: Api<ConfigMap> = Api::default_namespaced(dc.client());
    let rss_before = rss_kib();

    let t = Instant::now();
    let results: Vec<_> = stream::iter(0..n)
        .map(|i| {
            let api = api.clone();
            async move { api.create(&PostParams::default(), &configmap(i)).await }
        })
        .buffer_unordered(CONCURRENCY)
        .collect()
        .await;
    let failures = results.iter().filter(|r| r.is_err()).count();
    anyhow::ensure!(failures == 0, "{failures} creates failed");
    let creates = n as f64 / t.elapsed().as_secs_f64();
    let rss_after = rss_kib();

    let patches = n / 2;
    let t = Instant::now();
    let results: Vec<_> = stream::iter(0..patches)
        .map(|i| {
            let api = api.clone();
            async move {
                let name = format!("bench-{i}");
                let body = json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": name, "labels": {"applied": "yes"}},
                    "data": {"owner": "bench-ssa", "round": i.to_string()}});
                api.patch(&name, &PatchParams::apply("bench-ssa"), &Patch::Apply(&body)).await
            }
        })
        .buffer_unordered(CONCURRENCY)
        .collect()
        .await;
    let failures = results.iter().filter(|r| r.is_err()).count();
    anyhow::ensure!(failures == 0, "{failures} applies failed");
    let ssa = patches as f64 / t.elapsed().as_secs_f64();

    // Watch fan-out: 10 watchers from the current resourceVersion, then `updates` writes.
    let updates = 2_000;
    let rv = dc.resource_version().to_string();
    let mut watchers = Vec::new();
    for _ in 0..10 {
        let s = api
            .watch(&WatchParams::default().timeout(290), &rv)
            .await?
            .boxed();
        watchers.push(tokio::spawn(async move {
            let mut s = s;
            let mut seen = 0usize;
            while let Some(ev) = s.try_next().await? {
                if matches!(ev, WatchEvent::Modified(_)) {
                    seen += 1;
                    if seen == updates {
                        break;
                    }
                }
            }
            anyhow::Ok(seen)
        }));
    }
    tokio::time::sleep(Duration::from_millis(200)).await;
    let t = Instant::now();
    let results: Vec<_> = stream::iter(0..updates)
        .map(|i| {
            let api = api.clone();
            async move {
                let p = json!({"data": {"tick": i.to_string()}});
                api.patch(
                    &format!("bench-{}", i % n),
                    &PatchParams::default(),
                    &Patch::Merge(&p),
                )
                .await
            }
        })
        .buffer_unordered(CONCURRENCY)
        .collect()
        .await;
    anyhow::ensure!(results.iter().all(Result::is_ok), "updates failed");
    let mut delivered = 0;
    for w in watchers {
        delivered += w.await??;
    }
    let fanout = delivered as f64 / t.elapsed().as_secs_f64();

    let per_1k = (rss_after.saturating_sub(rss_before)) as f64 / (n as f64 / 1000.0) / 1024.0;
    println!(
        "devcluster benchmark ({n} ConfigMaps of ~0.5 KiB, {CONCURRENCY} requests in flight, kube-rs over HTTP, client and server in one process on 2 worker threads)"
    );
    println!("  creates/s:                 {creates:>8.0}");
    println!("  server-side applies/s:     {ssa:>8.0}  (on {patches} of the stored objects)");
    println!(
        "  watch fan-out events/s:    {fanout:>8.0}  ({updates} updates x 10 watchers = {delivered} events)"
    );
    println!("  resident memory per 1k:    {per_1k:>8.2} MiB  (RSS growth over the creates)");
    println!("  objects stored:            {:>8}", dc.object_count());
    dc.shutdown().await;
    Ok(())
}
