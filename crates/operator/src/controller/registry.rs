//! The pipelines: for each parent kind, the loaded plugins in order, held as an immutable
//! snapshot that a swap replaces whole. A reconcile takes the snapshot once, so a swap never
//! changes a pipeline mid-run.

use std::{
    collections::{BTreeMap, BTreeSet, HashMap},
    sync::{Arc, Mutex},
};

use tokio::sync::watch;

use windlass_policy::{
    Policy,
    pipeline::{Pipeline, Stage},
};

use crate::crd::{FailurePolicy, ParentKind, WasmPluginSpec};

/// One loaded WasmPlugin.
#[derive(Debug, Clone)]
struct Entry {
    parent: ParentKind,
    order: i32,
    stage: Stage,
    spec: WasmPluginSpec,
}

/// What a parent kind's controller needs to know.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct KindPlan {
    /// The parent kind.
    pub parent: ParentKind,
    /// Kinds to observe (children and reads of every plugin).
    pub observed: BTreeSet<String>,
}

/// All loaded plugins and the pipelines built from them.
#[derive(Debug)]
pub struct Registry {
    state: Mutex<State>,
    changed: watch::Sender<u64>,
}

#[derive(Debug, Default)]
struct State {
    entries: BTreeMap<String, Entry>,
    /// Every WasmPlugin in the cluster, by name, with its parent kind and failure policy:
    /// what each kind's pipeline is meant to hold, served or not.
    expected: BTreeMap<String, (ParentKind, FailurePolicy)>,
    /// Whether the WasmPlugins have been listed once: until then nothing is known complete.
    listed: bool,
    /// The WasmPlugins whose last load failed (not those still loading).
    failed: BTreeSet<String>,
    pipelines: HashMap<String, Arc<Pipeline>>,
    triggers: HashMap<String, watch::Sender<u64>>,
    policy: Policy,
    version: u64,
}

impl Default for Registry {
    fn default() -> Self {
        Registry {
            state: Mutex::new(State::default()),
            changed: watch::channel(0).0,
        }
    }
}

impl Registry {
    fn lock(&self) -> std::sync::MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Tells the policy which ServiceAccount the host runs as: no plugin's pod may use it.
    pub fn set_host_account(&self, account: Option<windlass_policy::HostAccount>) {
        self.lock().policy.host_account = account;
    }

    /// The current pipeline of a parent kind (`group/version/Kind`).
    pub fn pipeline(&self, kind: &str) -> Option<Arc<Pipeline>> {
        self.lock().pipelines.get(kind).cloned()
    }

    /// The digest and spec of the version of a WasmPlugin that is serving.
    pub fn serving(&self, wasm_plugin: &str) -> Option<(String, WasmPluginSpec)> {
        self.lock()
            .entries
            .get(wasm_plugin)
            .map(|e| (e.stage.plugin.digest().to_string(), e.spec.clone()))
    }

    /// Installs (or replaces) a WasmPlugin's stage and rebuilds its kind's pipeline; every
    /// parent of the kind is then reconciled again.
    pub fn install(
        &self,
        wasm_plugin: &str,
        spec: WasmPluginSpec,
        stage: Stage,
        cluster_scoped: &[String],
    ) {
        let mut state = self.lock();
        for kind in cluster_scoped {
            state.policy.add_cluster_scoped(kind.clone());
        }
        // A kind newly served as a parent changes what every pipeline may produce: each is
        // rebuilt with the policy that knows it.
        let new_parent_kind = !state.policy.is_parent_kind(&spec.parent.key());
        state.policy.add_parent_kind(spec.parent.key());
        let previous = state.entries.insert(
            wasm_plugin.to_string(),
            Entry {
                parent: spec.parent.clone(),
                order: spec.order,
                stage,
                spec: spec.clone(),
            },
        );
        let mut kinds = vec![spec.parent.key()];
        if let Some(previous) = previous
            && previous.parent != spec.parent
        {
            kinds.push(previous.parent.key());
        }
        if new_parent_kind {
            kinds.extend(state.pipelines.keys().cloned());
            kinds.sort();
            kinds.dedup();
        }
        for kind in kinds {
            rebuild(&mut state, &kind);
        }
        self.bump(&mut state);
    }

    /// The pipeline `install` would build, without installing it: for a canary run.
    pub fn candidate(&self, wasm_plugin: &str, spec: &WasmPluginSpec, stage: Stage) -> Pipeline {
        let state = self.lock();
        let mut stages: Vec<(i32, String, Stage)> = state
            .entries
            .iter()
            .filter(|(name, e)| e.parent == spec.parent && name.as_str() != wasm_plugin)
            .map(|(name, e)| (e.order, name.clone(), e.stage.clone()))
            .collect();
        stages.push((spec.order, wasm_plugin.to_string(), stage));
        stages.sort_by(|a, b| (a.0, &a.1).cmp(&(b.0, &b.1)));
        Pipeline {
            stages: stages.into_iter().map(|(_, _, s)| s).collect(),
            policy: Arc::new(state.policy.clone()),
        }
    }

    /// Removes a WasmPlugin; its kind's pipeline is rebuilt without it.
    pub fn remove(&self, wasm_plugin: &str) -> bool {
        let mut state = self.lock();
        let Some(entry) = state.entries.remove(wasm_plugin) else {
            return false;
        };
        rebuild(&mut state, &entry.parent.key());
        self.bump(&mut state);
        true
    }

    /// Records a WasmPlugin that exists in the cluster, whether or not a version of it serves.
    pub fn expect(&self, wasm_plugin: &str, parent: ParentKind, failure_policy: FailurePolicy) {
        let mut state = self.lock();
        let previous = state
            .expected
            .insert(wasm_plugin.to_string(), (parent.clone(), failure_policy));
        if previous.as_ref().map(|(p, f)| (p, *f)) != Some((&parent, failure_policy)) {
            notify(&mut state, &parent.key());
            if let Some((old, _)) = previous
                && old != parent
            {
                notify(&mut state, &old.key());
            }
            // The kinds with a controller may have changed (see `kinds`).
            self.bump(&mut state);
        }
    }

    /// The names of every WasmPlugin known to exist.
    pub fn expected_names(&self) -> Vec<String> {
        self.lock().expected.keys().cloned().collect()
    }

    /// Records whether the last load of a WasmPlugin failed; a change is news to its kind's
    /// parents when none of the kind's plugins serves (see [`Registry::failed_to_load`]).
    pub fn load_failed(&self, wasm_plugin: &str, failed: bool) {
        let mut state = self.lock();
        let changed = if failed {
            state.failed.insert(wasm_plugin.to_string())
        } else {
            state.failed.remove(wasm_plugin)
        };
        if changed && let Some((parent, _)) = state.expected.get(wasm_plugin).cloned() {
            notify(&mut state, &parent.key());
        }
    }

    /// The WasmPlugins of `kind` that exist, do not serve, and whose last load failed: what a
    /// parent of a kind with no serving plugin waits for (still loading is not news).
    pub fn failed_to_load(&self, kind: &str) -> Vec<String> {
        let state = self.lock();
        state
            .expected
            .iter()
            .filter(|(name, (parent, _))| {
                parent.key() == kind
                    && !state.entries.contains_key(name.as_str())
                    && state.failed.contains(name.as_str())
            })
            .map(|(name, _)| name.clone())
            .collect()
    }

    /// Forgets a WasmPlugin deleted from the cluster.
    pub fn unexpect(&self, wasm_plugin: &str) {
        let mut state = self.lock();
        state.failed.remove(wasm_plugin);
        if let Some((parent, _)) = state.expected.remove(wasm_plugin) {
            notify(&mut state, &parent.key());
            self.bump(&mut state);
        }
    }

    /// Every WasmPlugin has been listed once: from now on [`Registry::not_serving`] knows
    /// them all.
    pub fn listed(&self) {
        let mut state = self.lock();
        if !state.listed {
            state.listed = true;
            let kinds: Vec<String> = state.triggers.keys().cloned().collect();
            for kind in kinds {
                notify(&mut state, &kind);
            }
        }
    }

    /// The WasmPlugins of `kind` that exist but have no serving version, with their failure
    /// policies: while one with `Fail` is among them, the kind's pipeline is not the one its
    /// WasmPlugins describe, and running it would prune (or finalize) without that plugin.
    /// Before the first listing, a placeholder stands for the WasmPlugins not known yet.
    pub fn not_serving(&self, kind: &str) -> Vec<(String, FailurePolicy)> {
        let state = self.lock();
        if !state.listed {
            return vec![(
                "(the WasmPlugins are not listed yet)".into(),
                FailurePolicy::Fail,
            )];
        }
        state
            .expected
            .iter()
            .filter(|(name, (parent, _))| {
                parent.key() == kind && !state.entries.contains_key(name.as_str())
            })
            .map(|(name, (_, policy))| (name.clone(), *policy))
            .collect()
    }

    /// The names of every loaded WasmPlugin.
    pub fn names(&self) -> Vec<String> {
        self.lock().entries.keys().cloned().collect()
    }

    /// Whether any loaded WasmPlugin still serves this digest.
    pub fn uses_digest(&self, digest: &str) -> bool {
        self.lock()
            .entries
            .values()
            .any(|e| e.stage.plugin.digest() == digest)
    }

    /// Every parent kind with a pipeline and what its controller observes.
    pub fn kinds(&self) -> BTreeMap<String, KindPlan> {
        let state = self.lock();
        let mut out: BTreeMap<String, KindPlan> = BTreeMap::new();
        for entry in state.entries.values() {
            let plan = out.entry(entry.parent.key()).or_insert_with(|| KindPlan {
                parent: entry.parent.clone(),
                observed: BTreeSet::new(),
            });
            plan.observed
                .extend(entry.stage.observed_kinds().map(String::from));
        }
        // A kind whose WasmPlugins exist but none serves still gets its controller: its
        // parents are told why nothing happens (`PluginsNotServing`), not left without a word.
        for (parent, _) in state.expected.values() {
            out.entry(parent.key()).or_insert_with(|| KindPlan {
                parent: parent.clone(),
                observed: BTreeSet::new(),
            });
        }
        out
    }

    /// Changes whenever any pipeline changes.
    pub fn subscribe(&self) -> watch::Receiver<u64> {
        self.changed.subscribe()
    }

    /// Changes whenever the pipeline of `kind` changes: every parent of it must be reconciled.
    pub fn trigger(&self, kind: &str) -> watch::Receiver<u64> {
        let mut state = self.lock();
        state
            .triggers
            .entry(kind.to_string())
            .or_insert_with(|| watch::channel(0).0)
            .subscribe()
    }

    fn bump(&self, state: &mut State) {
        state.version += 1;
        self.changed.send_replace(state.version);
    }
}

/// Tells the controller of `kind` to reconcile every parent again.
fn notify(state: &mut State, kind: &str) {
    if let Some(trigger) = state.triggers.get(kind) {
        trigger.send_modify(|v| *v += 1);
    }
}

/// Rebuilds the pipeline of one kind from the entries, in (order, name) order.
fn rebuild(state: &mut State, kind: &str) {
    let mut stages: Vec<(&i32, &String, &Entry)> = state
        .entries
        .iter()
        .filter(|(_, e)| e.parent.key() == kind)
        .map(|(name, e)| (&e.order, name, e))
        .collect();
    stages.sort_by(|a, b| (a.0, a.1).cmp(&(b.0, b.1)));
    if stages.is_empty() {
        state.pipelines.remove(kind);
    } else {
        let pipeline = Pipeline {
            stages: stages
                .into_iter()
                .map(|(_, _, e)| e.stage.clone())
                .collect(),
            policy: Arc::new(state.policy.clone()),
        };
        state.pipelines.insert(kind.to_string(), Arc::new(pipeline));
    }
    let version = state.version + 1;
    if let Some(trigger) = state.triggers.get(kind) {
        trigger.send_replace(version);
    }
}
