//! Loading WasmPlugins: watch them and the ConfigMaps they point at; for each new version
//! fetch, verify the pin, compile (through the precompiled cache), smoke-call `info`, check the
//! parent kind, and only then swap it in. A version that fails any step never replaces the
//! running one; the WasmPlugin's status says why.

use std::{
    collections::{BTreeSet, HashMap},
    sync::{Arc, Mutex},
    time::Duration,
};

use futures::StreamExt;
use k8s_openapi::api::core::v1::ConfigMap;
use kube::{
    Api, ResourceExt,
    runtime::{WatchStreamExt, watcher},
};
use serde_json::json;
use tokio::sync::mpsc;

use tokio_util::task::AbortOnDropHandle;

use super::{
    error::LoadError,
    plugin_status, retire,
    shared::Shared,
    source::{self, Watch},
};
use windlass_contract::{InstanceMode, Limits, LoadOptions};
use windlass_policy::{
    Grants, PodGrants, Policy,
    pipeline::{FailurePolicy, Stage},
};

use crate::crd::{self, WasmPlugin, WasmPluginSpec};

/// The `kind` label of the loader's state in the `tracked` metric.
const LOADER: &str = "WasmPlugin";

/// A load to try again: how many times in a row it failed, and the timer that sends it back to
/// the worker (dropped, it stops).
struct Retry {
    failures: u32,
    _timer: AbortOnDropHandle<()>,
}

/// The wait before the next try after `failures` transient failures in a row: `base`, doubling,
/// at most `max`.
fn retry_delay(failures: u32, base: Duration, max: Duration) -> Duration {
    base.saturating_mul(2u32.saturating_pow(failures.saturating_sub(1)))
        .min(max)
}

/// The state of the loader.
struct Loader {
    shared: Arc<Shared>,
    specs: Mutex<HashMap<String, WasmPlugin>>,
    config_maps: Mutex<HashMap<(String, String), AbortOnDropHandle<()>>>,
    /// The manifest digest each OCI-sourced WasmPlugin was last loaded from.
    manifests: Mutex<HashMap<String, String>>,
    /// WasmPlugins whose last load failed for a reason that may pass ([`LoadError::is_transient`]),
    /// each tried again on its own backoff ([`Loader::retry_later`]).
    retry: Mutex<HashMap<String, Retry>>,
    reload: mpsc::UnboundedSender<String>,
    /// Deleting WasmPlugins, each watched until no parent's finalize phase needs it
    /// (`retire.rs`).
    retiring: Mutex<HashMap<String, AbortOnDropHandle<()>>>,
    /// What the diff gate found for each serving version it judged.
    gated: Mutex<HashMap<String, crate::crd::RolloutStatus>>,
}

/// Watches WasmPlugins and keeps the registry in step with them, until aborted.
pub async fn run(shared: Arc<Shared>) {
    let (tx, mut rx) = mpsc::unbounded_channel::<String>();
    let loader = Arc::new(Loader {
        shared: shared.clone(),
        specs: Mutex::new(HashMap::new()),
        config_maps: Mutex::new(HashMap::new()),
        manifests: Mutex::new(HashMap::new()),
        retry: Mutex::new(HashMap::new()),
        reload: tx,
        retiring: Mutex::new(HashMap::new()),
        gated: Mutex::new(HashMap::new()),
    });
    // Tags move: re-resolve every OCI source on an interval. A load whose manifest digest did
    // not change stops after one HEAD request.
    // Aborted on drop: when this task is aborted, they stop too (the worker holds the loader, and with it
    // every ConfigMap watch).
    let _poll = {
        let loader = loader.clone();
        let every = shared.settings.oci_poll;
        AbortOnDropHandle::new(tokio::spawn(async move {
            let mut tick = tokio::time::interval(every);
            tick.tick().await;
            loop {
                tick.tick().await;
                let names: Vec<String> = loader
                    .lock_specs()
                    .iter()
                    .filter(|(_, wp)| wp.spec.source.parse().map(|s| s.watch()) == Ok(Watch::Poll))
                    .map(|(n, _)| n.clone())
                    .collect();
                for name in names {
                    let _ = loader.reload.send(name);
                }
            }
        }))
    };
    let _worker = {
        let loader = loader.clone();
        AbortOnDropHandle::new(tokio::spawn(async move {
            while let Some(name) = rx.recv().await {
                let wp = loader.lock_specs().get(&name).cloned();
                if let Some(wp) = wp {
                    loader.load(&wp).await;
                }
            }
        }))
    };
    let api: Api<WasmPlugin> = Api::all(shared.client.clone());
    let mut events = watcher(api, watcher::Config::default())
        .default_backoff()
        .boxed();
    let mut seen_in_init = BTreeSet::new();
    while let Some(event) = events.next().await {
        match event {
            Ok(watcher::Event::Apply(wp) | watcher::Event::InitApply(wp)) => {
                let name = wp.name_any();
                seen_in_init.insert(name.clone());
                // Before any load: its kind's pipeline is incomplete until a version serves.
                shared
                    .registry
                    .expect(&name, wp.spec.parent.clone(), wp.spec.failure_policy);
                // The host's own status writes come back as changes too: only a new spec is
                // a reason to load (sources that move are watched or polled on their own).
                let same = loader
                    .lock_specs()
                    .insert(name.clone(), wp.clone())
                    .is_some_and(|old| old.spec == wp.spec);
                if !same {
                    let _ = loader.reload.send(name.clone());
                }
                if wp.metadata.deletion_timestamp.is_some() {
                    loader.retire(&name);
                } else if let Err(e) = retire::protect(&shared, &wp).await {
                    tracing::warn!(wasm_plugin = %name, error = %e, "adding the host's finalizer");
                }
            }
            Ok(watcher::Event::Delete(wp)) => {
                loader.forget(&wp.name_any());
                let kind = wp.spec.parent.key();
                let last = !loader
                    .lock_specs()
                    .values()
                    .any(|other| other.spec.parent.key() == kind);
                if last {
                    let shared = shared.clone();
                    tokio::spawn(async move {
                        if let Err(e) = retire::orphan_parents(&shared, &kind).await {
                            tracing::warn!(kind, error = %e, "taking the host's finalizer off the parents of a kind with no WasmPlugin left");
                        }
                    });
                }
            }
            Ok(watcher::Event::Init) => seen_in_init.clear(),
            Ok(watcher::Event::InitDone) => {
                // Plugins deleted while no watch was open.
                for name in shared.registry.names() {
                    if !seen_in_init.contains(&name) {
                        loader.forget(&name);
                    }
                }
                for name in shared.registry.expected_names() {
                    if !seen_in_init.contains(&name) {
                        shared.registry.unexpect(&name);
                        shared.metrics.set_plugin_serving(&name, None);
                    }
                }
                shared.registry.listed();
            }
            Err(e) => tracing::warn!(error = %e, "watching WasmPlugins"),
        }
    }
}

impl Loader {
    fn lock_specs(&self) -> std::sync::MutexGuard<'_, HashMap<String, WasmPlugin>> {
        self.specs.lock().unwrap_or_else(|e| e.into_inner())
    }

    fn lock_retry(&self) -> std::sync::MutexGuard<'_, HashMap<String, Retry>> {
        self.retry.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Sends `name` back to the worker after its backoff: the API or its source may be back
    /// by then (a host started during an API outage loads its plugins seconds after the API
    /// returns, not on the next OCI poll). Replaces any timer it had.
    fn retry_later(&self, name: &str) {
        let mut retry = self.lock_retry();
        let failures = retry.get(name).map_or(0, |r| r.failures) + 1;
        let settings = &self.shared.settings;
        let delay = retry_delay(failures, settings.load_retry_base, settings.load_retry_max);
        let reload = self.reload.clone();
        let name_owned = name.to_string();
        let timer = AbortOnDropHandle::new(tokio::spawn(async move {
            tokio::time::sleep(delay).await;
            let _ = reload.send(name_owned);
        }));
        tracing::info!(wasm_plugin = name, failures, retry_in = ?delay, "load to be tried again");
        retry.insert(
            name.to_string(),
            Retry {
                failures,
                _timer: timer,
            },
        );
        self.show("load_retries", retry.len());
    }

    /// Stops trying `name` again (loaded, refused for good, or forgotten).
    fn retry_done(&self, name: &str) {
        let mut retry = self.lock_retry();
        retry.remove(name);
        self.show("load_retries", retry.len());
    }

    /// Watches a deleting WasmPlugin until its finalizer can go ([`retire::step`]), every 2 s
    /// while a deleting parent of its kind still holds the host's finalizer.
    fn retire(self: &Arc<Self>, name: &str) {
        let mut retiring = self.retiring.lock().unwrap_or_else(|e| e.into_inner());
        if retiring.contains_key(name) {
            return;
        }
        // Weak: the task must not keep the loader (and itself) alive once the loader stops.
        let weak = Arc::downgrade(self);
        let name_owned = name.to_string();
        let task = AbortOnDropHandle::new(tokio::spawn(async move {
            let name = name_owned;
            loop {
                let Some(loader) = weak.upgrade() else {
                    return;
                };
                match retire::step(&loader.shared, &name).await {
                    Ok(retire::Step::Waiting(parents)) => {
                        tracing::debug!(wasm_plugin = %name, ?parents, "deletion waits for parents' finalize phase");
                    }
                    Ok(_) => return,
                    Err(e) => {
                        tracing::warn!(wasm_plugin = %name, error = %e, "retiring a deleted WasmPlugin")
                    }
                }
                drop(loader);
                tokio::time::sleep(Duration::from_secs(2)).await;
            }
        }));
        retiring.insert(name.to_string(), task);
    }

    fn lock_gated(&self) -> std::sync::MutexGuard<'_, HashMap<String, crate::crd::RolloutStatus>> {
        self.gated.lock().unwrap_or_else(|e| e.into_inner())
    }

    fn forget(&self, name: &str) {
        self.lock_gated().remove(name);
        self.retiring
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .remove(name);
        self.shared.registry.unexpect(name);
        self.shared.metrics.set_plugin_serving(name, None);
        self.lock_specs().remove(name);
        self.retry_done(name);
        self.forget_manifest(name);
        self.stop_unused_watches();
        if let Some((digest, _)) = self.shared.registry.serving(name) {
            self.shared.registry.remove(name);
            if !self.shared.registry.uses_digest(&digest) {
                self.shared.engine.forget(&digest);
            }
            tracing::info!(wasm_plugin = name, "plugin removed from its pipeline");
        }
    }

    /// Shows the size of one of the loader's maps in the `tracked` metric.
    fn show(&self, what: &str, len: usize) {
        self.shared
            .metrics
            .tracked_of(LOADER, what)
            .set(i64::try_from(len).unwrap_or(i64::MAX));
    }

    /// Forgets the manifest digest a WasmPlugin was loaded from (deleted, or no longer OCI).
    fn forget_manifest(&self, name: &str) {
        let mut manifests = self.manifests.lock().unwrap_or_else(|e| e.into_inner());
        manifests.remove(name);
        self.show("oci_manifests", manifests.len());
    }

    /// Stops the watches of ConfigMaps no WasmPlugin points at any more.
    fn stop_unused_watches(&self) {
        let used: BTreeSet<(String, String)> = self
            .lock_specs()
            .values()
            .filter_map(|wp| match wp.spec.source.parse().ok()?.watch() {
                Watch::ConfigMap { namespace, name } => Some((namespace, name)),
                Watch::Poll | Watch::Nothing => None,
            })
            .collect();
        let mut watches = self.config_maps.lock().unwrap_or_else(|e| e.into_inner());
        // Dropping an owned task stops it.
        watches.retain(|key, _| used.contains(key));
        self.show("config_map_watches", watches.len());
    }

    /// Brings one WasmPlugin's serving version up to date with its spec and source.
    async fn load(self: &Arc<Self>, wp: &WasmPlugin) {
        let name = wp.name_any();
        let watch = wp.spec.source.parse().map(|s| s.watch());
        if let Ok(Watch::ConfigMap { namespace, name }) = &watch {
            self.watch_config_map(namespace, name);
        }
        // A source that moved away from a ConfigMap or a registry leaves nothing behind.
        self.stop_unused_watches();
        if watch != Ok(Watch::Poll) {
            self.forget_manifest(&name);
        }
        let serving = self.shared.registry.serving(&name);
        let outcome = self.try_load(&name, &wp.spec, serving.as_ref()).await;
        let metrics = &self.shared.metrics;
        let result = match &outcome {
            Ok(true) => "swapped",
            Ok(false) => "unchanged",
            Err(e) => e.reason(),
        };
        metrics
            .hot_swaps
            .get_or_create(&crate::metrics::PluginOutcome {
                plugin: name.clone(),
                outcome: result.to_string(),
            })
            .inc();
        match &outcome {
            Err(e) if e.is_transient() => self.retry_later(&name),
            _ => self.retry_done(&name),
        }
        // A refused new version while an old one serves is not a failed plugin.
        let serves = self.shared.registry.serving(&name).is_some();
        self.shared
            .registry
            .load_failed(&name, outcome.is_err() && !serves);
        metrics.set_plugin_serving(&name, Some(serves));
        if let Err(e) = &outcome {
            tracing::warn!(wasm_plugin = %name, error = %e, "new plugin version refused");
        }
        let gated = self.lock_gated().get(&name).cloned();
        if let Err(e) =
            plugin_status::write_loaded(&self.shared, wp, outcome.as_ref().err(), gated).await
        {
            tracing::warn!(wasm_plugin = %name, error = %e, "writing WasmPlugin status");
        }
    }

    /// Returns whether a new version was swapped in.
    async fn try_load(
        &self,
        name: &str,
        spec: &WasmPluginSpec,
        serving: Option<&(String, WasmPluginSpec)>,
    ) -> Result<bool, LoadError> {
        let shared = &self.shared;
        let source = source::parse(name, &spec.source)?;
        // The revision (an OCI manifest digest): the same one, for the same spec, is nothing
        // new to load, and stops here after one request.
        let resolved = source
            .resolve(&shared.client, name, &shared.settings.oci)
            .await?;
        let manifest = resolved.revision.clone();
        if let Some(revision) = &manifest {
            let unchanged = self
                .manifests
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .get(name)
                == Some(revision);
            if unchanged && serving.is_some_and(|(_, old)| old == spec) {
                return Ok(false);
            }
        }
        let fetched = source
            .fetch(
                &shared.client,
                name,
                &shared.settings.oci,
                resolved,
                spec.source.sha256.as_deref(),
            )
            .await?;
        if let Some(manifest) = manifest {
            let mut manifests = self.manifests.lock().unwrap_or_else(|e| e.into_inner());
            manifests.insert(name.to_string(), manifest);
            self.show("oci_manifests", manifests.len());
        }
        if let Some((digest, old_spec)) = serving
            && *digest == fetched.digest
            && old_spec == spec
        {
            return Ok(false);
        }
        let (stage, cluster_scoped) = build_stage(shared, name, spec, fetched.bytes).await?;
        super::canary::check(shared, name, spec, &stage).await?;
        // A first load has nothing to keep serving instead: judged, one parent's failure would
        // leave the kind's pipeline incomplete, and so every parent of it unreconciled.
        let gated = if spec.rollout.diff_gate && serving.is_some() {
            super::canary::gate(shared, name, spec, &stage).await?
        } else {
            None
        };
        tracing::info!(
            wasm_plugin = name,
            plugin = stage.plugin.name(),
            version = %stage.plugin.info().version,
            digest = stage.plugin.digest(),
            "plugin version swapped in"
        );
        shared
            .registry
            .install(name, spec.clone(), stage, &cluster_scoped);
        self.lock_gated().remove(name);
        if let Some(gated) = gated {
            self.lock_gated().insert(name.to_string(), gated);
        }
        if let Some((old, _)) = serving
            && !shared.registry.uses_digest(old)
        {
            shared.engine.forget(old);
        }
        Ok(true)
    }

    /// Watches one ConfigMap (by name: least privilege) and reloads the WasmPlugins that point
    /// at it whenever it changes.
    fn watch_config_map(self: &Arc<Self>, namespace: &str, name: &str) {
        let key = (namespace.to_string(), name.to_string());
        let mut watches = self.config_maps.lock().unwrap_or_else(|e| e.into_inner());
        if watches.contains_key(&key) {
            return;
        }
        let api: Api<ConfigMap> = Api::namespaced(self.shared.client.clone(), namespace);
        let config = watcher::Config::default().fields(&format!("metadata.name={name}"));
        let loader = Arc::downgrade(self);
        let (ns, cm) = key.clone();
        let task = AbortOnDropHandle::new(tokio::spawn(async move {
            let mut events = watcher(api, config)
                .default_backoff()
                .applied_objects()
                .boxed();
            while let Some(event) = events.next().await {
                let Some(loader) = loader.upgrade() else {
                    return;
                };
                if event.is_err() {
                    continue;
                }
                let users: Vec<String> = loader
                    .lock_specs()
                    .iter()
                    .filter(|(_, wp)| {
                        wp.spec.source.parse().is_ok_and(|s| {
                            s.watch()
                                == Watch::ConfigMap {
                                    namespace: ns.clone(),
                                    name: cm.clone(),
                                }
                        })
                    })
                    .map(|(n, _)| n.clone())
                    .collect();
                for user in users {
                    let _ = loader.reload.send(user);
                }
            }
        }));
        watches.insert(key, task);
        self.show("config_map_watches", watches.len());
    }
}

/// A WasmPlugin's component as a pipeline stage, checked as for serving (not the canary): it
/// reconciles the spec's parent kind, every kind it produces or reads is served (the
/// cluster-scoped ones are returned), its reads are granted, and its config, if it checks
/// config, is accepted. The plugins controller swaps versions in with it; a preview
/// (`windlass plugin diff`) builds a candidate pipeline with it.
///
/// # Errors
/// What refuses the version, naming the plugin.
pub async fn build_stage(
    shared: &Shared,
    name: &str,
    spec: &WasmPluginSpec,
    bytes: Vec<u8>,
) -> Result<(Stage, Vec<String>), LoadError> {
    let options = load_options(spec);
    let engine = shared.engine.clone();
    let label = name.to_string();
    let plugin = tokio::task::spawn_blocking(move || engine.load(&label, &bytes, options))
        .await
        .map_err(LoadError::Join)??;
    let wanted = spec.parent.key();
    if !plugin.info().parent_kinds.contains(&wanted) {
        return Err(LoadError::WrongParentKind {
            plugin: plugin.name().to_string(),
            wanted,
            declared: plugin.info().parent_kinds.clone(),
        });
    }
    // Every kind the plugin produces or reads must be served, with a known scope: a plugin
    // that cannot be checked is refused here rather than failing (or guessing a scope) at
    // apply time.
    let info = plugin.info();
    let mut cluster_scoped = Vec::new();
    let mut policy = Policy::default();
    for kind in info.child_kinds.iter().chain(&info.reads_kinds) {
        match shared.discovery.resolve(kind).await {
            Ok((_, false)) => {
                cluster_scoped.push(kind.clone());
                policy.add_cluster_scoped(kind.clone());
            }
            Ok((_, true)) => {}
            Err(e) => {
                return Err(LoadError::KindNotServed {
                    plugin: plugin.name().to_string(),
                    kind: kind.clone(),
                    source: e,
                });
            }
        }
    }
    let grants = match &spec.grants {
        Some(kinds) => Grants::Kinds(kinds.iter().cloned().collect()),
        None => Grants::Declared,
    };
    grants
        .check_reads(&policy, &info.reads_kinds)
        .map_err(|why| LoadError::NotGranted {
            plugin: plugin.name().to_string(),
            why,
        })?;
    // A plugin that checks its config (contract 0.2.0) does so here, where the config is
    // written: a version with a config it refuses never serves, whether or not a parent
    // exists yet, and an old version keeps serving meanwhile.
    let config = spec.config.clone().unwrap_or_else(|| json!({}));
    if plugin.checks_config() {
        let checked = plugin.clone();
        let text = config.to_string();
        tokio::task::spawn_blocking(move || checked.validate_config(&text))
            .await
            .map_err(LoadError::Join)??;
    }
    let stage = Stage {
        plugin,
        config,
        grants,
        pods: PodGrants {
            max_pods: spec.limits.max_pods,
            ..spec.pod_security.grants()
        },
        failure_policy: match spec.failure_policy {
            crd::FailurePolicy::Fail => FailurePolicy::Fail,
            crd::FailurePolicy::Ignore => FailurePolicy::Ignore,
        },
    };
    Ok((stage, cluster_scoped))
}

/// Load options from a WasmPlugin's limits and instance mode.
fn load_options(spec: &WasmPluginSpec) -> LoadOptions {
    let defaults = Limits::default();
    LoadOptions {
        limits: Limits {
            timeout: spec
                .limits
                .timeout_ms
                .map_or(defaults.timeout, Duration::from_millis),
            memory_bytes: spec
                .limits
                .memory_mib
                .map_or(defaults.memory_bytes, |m| (m as usize) << 20),
            fuel: spec.limits.fuel,
        },
        mode: match spec.instance_mode {
            crd::InstanceMode::Fresh => InstanceMode::Fresh,
            crd::InstanceMode::Reuse => InstanceMode::Reuse,
        },
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_failed_load_waits_one_second_then_doubles_up_to_thirty() {
        let (base, max) = (Duration::from_secs(1), Duration::from_secs(30));
        let waits: Vec<u64> = (1..=8)
            .map(|n| retry_delay(n, base, max).as_secs())
            .collect();
        assert_eq!(waits, [1, 2, 4, 8, 16, 30, 30, 30]);
        assert_eq!(retry_delay(u32::MAX, base, max), max);
    }
}
