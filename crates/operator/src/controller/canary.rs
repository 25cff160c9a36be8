//! The canary: a new plugin version runs with the rest of its kind's pipeline on a few existing
//! parents, applying nothing, before it serves. A version that traps, times out, runs out of
//! memory, returns forbidden output or refuses its config there is refused; a parent the new
//! version calls invalid does not count against it.
//!
//! And the judge of a candidate on every parent ([`judge_all`]), for the diff gate
//! (`rollout.diffGate`) and `windlass plugin diff` (`preview.rs`): per parent the run, each
//! object it would write made as a reconcile makes it (`plan::claim`, `plan::to_apply`) and sent
//! as a server-side apply dry run with the parent's field manager, so the API server's
//! defaulting and validation are in what is compared with the stored object; what it would
//! prune, and the status it would write. A verdict each: unchanged, changed, refused, failing.

use std::{
    collections::{BTreeSet, HashSet},
    sync::Arc,
};
use windlass_policy::At as _;

use kube::{
    Api, ResourceExt,
    api::{DynamicObject, ListParams, Patch, PatchParams},
};
use serde::Serialize;
use serde_json::Value;
use windlass_contract::Phase;
use windlass_policy::pipeline::{Input, Outcome, Pipeline, Stage};

use super::{
    error::LoadError,
    plan::{self, PARENT_UID_LABEL, ParentRef},
    shared::Shared,
    status,
};
use crate::crd::WasmPluginSpec;
use crate::k8s::observed_json;

/// How many existing parents a new version is tried on.
const CANARY_PARENTS: u32 = 3;

/// Tries `stage`, the new version of WasmPlugin `name`, on up to [`CANARY_PARENTS`] parents.
pub(super) async fn check(
    shared: &Shared,
    name: &str,
    spec: &WasmPluginSpec,
    stage: &Stage,
) -> Result<(), LoadError> {
    let parent_kind = spec.parent.key();
    let Ok((resource, _)) = shared.discovery.resolve(&parent_kind).await else {
        return Ok(()); // no parents can exist yet
    };
    // Without the rest of the pipeline the run is not the one the parents will see (a missing
    // earlier plugin's objects are missing, and references to them look foreign): no verdict.
    // Parents wait until every plugin serves, and a failing plugin prunes nothing.
    let others_waiting: Vec<String> = shared
        .registry
        .not_serving(&parent_kind)
        .into_iter()
        .map(|(w, _)| w)
        .filter(|w| w != name)
        .collect();
    if !others_waiting.is_empty() {
        tracing::info!(wasm_plugin = name, waiting = ?others_waiting, "no canary: the rest of the pipeline is not serving yet");
        return Ok(());
    }
    let pipeline = Arc::new(shared.registry.candidate(name, spec, stage.clone()));
    let kinds: BTreeSet<String> = pipeline
        .stages
        .iter()
        .flat_map(|s| s.observed_kinds().map(String::from))
        .collect();
    let api: Api<DynamicObject> = Api::all_with(shared.client.clone(), &resource);
    let parents = api
        .list(&ListParams::default().limit(CANARY_PARENTS))
        .await?;
    for parent in parents
        .items
        .into_iter()
        .filter(|p| p.metadata.deletion_timestamp.is_none())
    {
        let observed = observe(shared, &parent_kind, &parent, &kinds).await?;
        let parent_json =
            crate::k8s::typed_json(&parent, &resource).map_err(|source| LoadError::Encode {
                object: parent.name_any(),
                source,
            })?;
        if let Err(e) = run(pipeline.clone(), parent_json, observed).await?
            && e.plugin() == Some(stage.plugin.name())
            && !e.blames_parent()
        {
            let parent = match parent.namespace() {
                Some(ns) => format!("{ns}/{}", parent.name_any()),
                None => parent.name_any(),
            };
            return Err(LoadError::Canary { parent, source: e });
        }
    }
    Ok(())
}

/// How many parents each verdict has.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Counts {
    pub unchanged: usize,
    pub changed: usize,
    pub refused: usize,
    pub failing: usize,
    /// Of the refused and failing, those the candidate itself breaks ([`ParentPreview::blocks`]).
    pub blocking: usize,
    /// Of the failing, those not judged (an API read failed).
    pub unjudged: usize,
}

/// Counts the verdicts of `parents`.
pub fn counts(parents: &[ParentPreview]) -> Counts {
    let mut c = Counts::default();
    for p in parents {
        match p.verdict {
            Verdict::Unchanged => c.unchanged += 1,
            Verdict::Changed => c.changed += 1,
            Verdict::Refused { .. } => c.refused += 1,
            Verdict::Failing { .. } => c.failing += 1,
        }
        c.blocking += usize::from(p.blocks());
        c.unjudged += usize::from(p.unjudged);
    }
    c
}

/// The diff gate (`rollout.diffGate`): `stage`, the new version of WasmPlugin `name`, judged
/// on every live parent of its kind against the pipeline serving now. None when it cannot be
/// judged yet (the rest of the pipeline is not serving, as for the canary, or the kind is not
/// served: no parent exists).
///
/// # Errors
/// [`LoadError::DiffGate`] when a parent would refuse or fail it that the serving version does
/// not; [`LoadError::DiffGateUnjudged`] (tried again later) when a parent could not be judged;
/// the API's error when the parents cannot be listed.
pub(super) async fn gate(
    shared: &Shared,
    name: &str,
    spec: &WasmPluginSpec,
    stage: &Stage,
) -> Result<Option<crate::crd::RolloutStatus>, LoadError> {
    let waiting = shared
        .registry
        .not_serving(&spec.parent.key())
        .into_iter()
        .any(|(w, _)| w != name);
    if waiting {
        tracing::info!(
            wasm_plugin = name,
            "no diff gate yet: the rest of the pipeline is not serving"
        );
        return Ok(None);
    }
    let pipeline = Arc::new(shared.registry.candidate(name, spec, stage.clone()));
    let serving = shared.registry.pipeline(&spec.parent.key());
    let parents = match judge_all(
        shared,
        &pipeline,
        serving.as_ref(),
        &spec.parent.key(),
        None,
    )
    .await
    {
        Ok(parents) => parents,
        Err(PreviewError::Kind { .. }) => return Ok(None),
        Err(PreviewError::Api { source, .. }) => return Err(LoadError::Kube(source)),
        Err(PreviewError::Load(e)) => return Err(e),
    };
    let c = counts(&parents);
    let said = |p: &ParentPreview| match &p.verdict {
        Verdict::Refused { rule, message, .. } => {
            format!("{}: refused by {rule}: {message}", p.describe())
        }
        Verdict::Failing { message } => format!("{}: {message}", p.describe()),
        _ => String::new(),
    };
    if c.blocking > 0 {
        let first = parents
            .iter()
            .find(|p| p.blocks())
            .map(said)
            .unwrap_or_default();
        return Err(LoadError::DiffGate {
            parents: parents.len(),
            refused: parents
                .iter()
                .filter(|p| p.blocks() && matches!(p.verdict, Verdict::Refused { .. }))
                .count(),
            failing: parents
                .iter()
                .filter(|p| p.blocks() && matches!(p.verdict, Verdict::Failing { .. }))
                .count(),
            first,
        });
    }
    if c.unjudged > 0 {
        let first = parents
            .iter()
            .find(|p| p.unjudged)
            .map(said)
            .unwrap_or_default();
        return Err(LoadError::DiffGateUnjudged {
            parents: c.unjudged,
            first,
        });
    }
    let n = |x: usize| u32::try_from(x).unwrap_or(u32::MAX);
    tracing::info!(
        wasm_plugin = name,
        parents = parents.len(),
        changed = c.changed,
        "diff gate passed"
    );
    Ok(Some(crate::crd::RolloutStatus {
        digest: stage.plugin.digest().to_string(),
        parents: n(parents.len()),
        unchanged: n(c.unchanged),
        changed: n(c.changed),
    }))
}

/// What a reconcile of `parent`, of the parent kind `parent_kind` (its key, as
/// `ParentKind::key` spells it and the kind's caches are registered under), would observe of
/// `kinds`: only what the parent controls, as in a reconcile. Read from the kind's watch caches
/// when its controller runs and they hold every one of `kinds` (see [`ListedCaches`]), from the
/// API otherwise (a kind without a controller yet, or a candidate observing a new kind).
///
/// [`ListedCaches`]: super::index::ListedCaches
pub(super) async fn observe(
    shared: &Shared,
    parent_kind: &str,
    parent: &DynamicObject,
    kinds: &BTreeSet<String>,
) -> Result<Vec<Value>, LoadError> {
    let uid = parent.uid().unwrap_or_default();
    let namespace = parent.namespace();
    if let Some(caches) = shared.listed.covering(parent_kind, kinds) {
        let observed = super::index::children_of(&caches, &uid, namespace.as_deref());
        return Ok(super::plan::ours(observed, &uid));
    }
    let selector = format!("{PARENT_UID_LABEL}={uid}");
    let mut observed = Vec::new();
    for kind in kinds {
        let Ok((ar, namespaced)) = shared.discovery.resolve(kind).await else {
            continue;
        };
        // Children share the parent's scope (the policy refuses the rest): never a
        // cluster-wide list of a namespaced kind.
        let Some(api) =
            crate::k8s::api(shared.client.clone(), &ar, namespace.as_deref(), namespaced)
        else {
            continue;
        };
        let children = api.list(&ListParams::default().labels(&selector)).await?;
        observed.extend(children.items.into_iter().filter_map(|mut c| {
            super::index::without_managed_fields(&mut c);
            observed_json(&c, &ar)
        }));
    }
    Ok(super::plan::ours(observed, &uid))
}

/// Runs the candidate pipeline on a blocking thread (plugin calls are synchronous).
async fn run(
    pipeline: Arc<Pipeline>,
    parent: Value,
    observed: Vec<Value>,
) -> Result<Result<(), windlass_policy::pipeline::Error>, LoadError> {
    let now = windlass_contract::now_rfc3339();
    tokio::task::spawn_blocking(move || {
        pipeline
            .run(Input::new(Phase::Reconcile, &parent, &observed, &now))
            .map(drop)
    })
    .await
    .map_err(LoadError::Join)
}

/// Why a preview could not be made at all.
#[derive(Debug, thiserror::Error)]
pub enum PreviewError {
    /// A version (the candidate or one serving beside it) cannot be loaded as the host would.
    #[error("{0}")]
    Load(#[from] LoadError),
    /// An API call failed.
    #[error("{what}: {source}")]
    Api {
        what: String,
        #[source]
        source: kube::Error,
    },
    /// The parent kind is not served.
    #[error("parent kind {kind} is not served: {why}")]
    Kind { kind: String, why: String },
}

/// How one parent would fare under the candidate.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(rename_all = "camelCase", tag = "verdict")]
pub enum Verdict {
    /// Nothing it applies, prunes or reports would change.
    Unchanged,
    /// Something would change (see the changes).
    Changed,
    /// The output policy, or the ownership check, would refuse the run: nothing applied.
    Refused {
        plugin: String,
        rule: String,
        message: String,
    },
    /// The run would fail (a trap, a timeout, an error, or the API refusing an object).
    Failing { message: String },
}

/// One object that would change.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Change {
    /// `apps/v1/StatefulSet shop/orders`.
    pub object: String,
    /// The plugin that would produce it (none: pruned).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub plugin: Option<String>,
    /// As it is (none: it would be created), without server-set fields.
    pub live: Option<Value>,
    /// As the dry run returned it (none: it would be pruned), likewise.
    pub after: Option<Value>,
}

/// One parent's preview.
#[derive(Debug, Clone, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct ParentPreview {
    #[serde(skip_serializing_if = "Option::is_none")]
    pub namespace: Option<String>,
    pub name: String,
    #[serde(flatten)]
    pub verdict: Verdict,
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub changes: Vec<Change>,
    /// The status now and as the run would write it, when it would change.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub status: Option<(Value, Value)>,
    /// Refused or failing, but the version serving now is too: not the candidate's doing.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub already_failing: bool,
    /// Not judged: an API read failed (it may pass).
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub unjudged: bool,
}

impl ParentPreview {
    /// Whether the candidate itself would break this parent: refused or failing where the
    /// serving version is not.
    pub fn blocks(&self) -> bool {
        matches!(
            self.verdict,
            Verdict::Refused { .. } | Verdict::Failing { .. }
        ) && !self.already_failing
            && !self.unjudged
    }

    /// `namespace/name`, or the name of a cluster-scoped parent.
    pub fn describe(&self) -> String {
        match &self.namespace {
            Some(ns) => format!("{ns}/{}", self.name),
            None => self.name.clone(),
        }
    }
}

/// How many parents are judged at once.
const JUDGED_AT_ONCE: usize = 8;

/// Judges the candidate `pipeline` on every live parent of `kind` (those in `namespace`):
/// what [`judge`] says of each, a parent it cannot judge failing and `unjudged`. Where the
/// candidate is refused or fails, the `serving` pipeline is run on the same input: if it fails
/// too, the parent is `already_failing`.
///
/// # Errors
/// When the kind is not served or its parents cannot be listed.
pub(super) async fn judge_all(
    shared: &Shared,
    pipeline: &Arc<Pipeline>,
    serving: Option<&Arc<Pipeline>>,
    kind: &str,
    namespace: Option<&str>,
) -> Result<Vec<ParentPreview>, PreviewError> {
    let api_error = |what: &str| {
        let what = what.to_string();
        move |source| PreviewError::Api { what, source }
    };
    let (resource, namespaced) =
        shared
            .discovery
            .resolve(&kind)
            .await
            .map_err(|e| PreviewError::Kind {
                kind: kind.to_string(),
                why: e.to_string(),
            })?;
    let api: Api<DynamicObject> = match namespace.filter(|_| namespaced) {
        Some(ns) => Api::namespaced_with(shared.client.clone(), ns, &resource),
        None => Api::all_with(shared.client.clone(), &resource),
    };
    let parents = api
        .list(&ListParams::default())
        .await
        .map_err(api_error(&format!("listing {kind}")))?;
    let kinds: BTreeSet<String> = pipeline
        .stages
        .iter()
        .flat_map(|s| s.observed_kinds().map(String::from))
        .collect();
    let child_kinds: HashSet<String> = pipeline
        .stages
        .iter()
        .flat_map(|s| s.plugin.info().child_kinds.iter().cloned())
        .collect();
    use futures::StreamExt as _;
    type Judging<'a> =
        std::pin::Pin<Box<dyn std::future::Future<Output = ParentPreview> + Send + 'a>>;
    let parent_kind = ParentKindOf {
        key: kind,
        resource: &resource,
    };
    let judged: Vec<Judging<'_>> = parents
        .items
        .iter()
        .filter(|p| p.metadata.deletion_timestamp.is_none())
        .map(|parent| {
            let (kinds, child_kinds) = (&kinds, &child_kinds);
            Box::pin(async move {
                let judged = judge(
                    shared,
                    pipeline,
                    serving,
                    parent_kind,
                    parent,
                    kinds,
                    child_kinds,
                )
                .await;
                let (verdict, changes, status, already_failing, unjudged) = match judged {
                    Ok((verdict, changes, status, already)) => {
                        (verdict, changes, status, already, false)
                    }
                    Err(message) => (Verdict::Failing { message }, Vec::new(), None, false, true),
                };
                ParentPreview {
                    namespace: parent.namespace(),
                    name: parent.name_any(),
                    verdict,
                    changes,
                    status,
                    already_failing,
                    unjudged,
                }
            }) as Judging<'_>
        })
        .collect();
    Ok(futures::stream::iter(judged)
        .buffered(JUDGED_AT_ONCE)
        .collect()
        .await)
}

/// A parent's verdict, changes, status change, and whether the serving pipeline fails there too.
type OneParent = (Verdict, Vec<Change>, Option<(Value, Value)>, bool);

/// The parent kind a judge runs on: its key (as given, the one its caches are registered
/// under) and the resource discovery resolved it to.
#[derive(Clone, Copy)]
struct ParentKindOf<'a> {
    key: &'a str,
    resource: &'a kube::core::ApiResource,
}

/// One parent: observe, run, and judge every object the run would write or prune. `Err`: it
/// could not be judged (an API read failed).
async fn judge(
    shared: &Shared,
    pipeline: &Arc<Pipeline>,
    serving: Option<&Arc<Pipeline>>,
    parent_kind: ParentKindOf<'_>,
    parent: &DynamicObject,
    kinds: &BTreeSet<String>,
    child_kinds: &HashSet<String>,
) -> Result<OneParent, String> {
    let (uid, resource) = (parent.uid().unwrap_or_default(), parent_kind.resource);
    let observed = observe(shared, parent_kind.key, parent, kinds)
        .await
        .map_err(|e| format!("observing: {e}"))?;
    let parent_json = crate::k8s::typed_json(parent, resource).map_err(|e| e.to_string())?;
    let run_on = |pipeline: Arc<Pipeline>| {
        let (parent_json, observed) = (parent_json.clone(), observed.clone());
        async move {
            tokio::task::spawn_blocking(move || {
                let now = windlass_contract::now_rfc3339();
                pipeline.run(Input::new(Phase::Reconcile, &parent_json, &observed, &now))
            })
            .await
            .map_err(|e| e.to_string())
        }
    };
    // Refused or failing: does the serving pipeline fail on this parent too?
    let broken = |verdict: Verdict| async {
        let already = match serving {
            Some(serving) => run_on(serving.clone()).await?.is_err(),
            None => false,
        };
        Ok::<OneParent, String>((verdict, Vec::new(), None, already))
    };
    let outcome: Outcome = match run_on(pipeline.clone()).await? {
        Ok(outcome) => outcome,
        Err(e) => return broken(verdict_of(&e)).await,
    };
    let parent_ref = ParentRef {
        api_version: resource.api_version.clone(),
        kind: resource.kind.clone(),
        name: parent.name_any(),
        uid: uid.clone(),
        namespace: parent.namespace(),
        adopts_retained: parent.annotations().get(plan::ADOPT_RETAINED_ANNOTATION)
            == Some(&"true".to_string()),
    };
    let family = plan::family(&observed, &uid);
    let manager = plan::field_manager(&uid);
    // As a reconcile claims: a pipeline that finalizes holds its children without owner
    // references' garbage collection (the finalize phase lets them go).
    let finalizing = pipeline.stages.iter().any(|s| s.plugin.info().finalizes);
    let mut changes = Vec::new();
    for desired in &outcome.desired {
        let id = desired.object.key();
        let describe = windlass_policy::describe(&desired.object);
        let (ar, namespaced) = shared
            .discovery
            .resolve(&desired.object.kind)
            .await
            .map_err(|e| format!("{describe}: {e}"))?;
        let Some(api) = crate::k8s::api(
            shared.client.clone(),
            &ar,
            desired.object.namespace.as_deref(),
            namespaced,
        ) else {
            return Err(format!("{describe}: not in the parent's scope"));
        };
        // As stored, to compare with; the claim and the up-to-date check judge the observed
        // form, as a reconcile does, or the stored one when the parent has not observed it.
        let stored = api
            .get_opt(&desired.object.name)
            .await
            .map_err(|e| format!("reading {describe}: {e}"))?
            .and_then(|o| serde_json::to_value(o).ok());
        let existing = observed
            .iter()
            .find(|o| id.is(o))
            .cloned()
            .or_else(|| stored.clone());
        let claim = plan::claim(desired, existing.as_ref(), &uid, &family, finalizing);
        let (object, force) = match plan::to_apply(desired, claim, existing.as_ref(), &parent_ref) {
            Ok(done) => done,
            Err(why) => {
                let verdict = Verdict::Refused {
                    plugin: desired.plugin.clone(),
                    rule: "ObjectNotOwned".into(),
                    message: format!("{describe}: {why}"),
                };
                return broken(verdict).await;
            }
        };
        if existing
            .as_ref()
            .is_some_and(|e| plan::up_to_date(&object, std::slice::from_ref(e)))
        {
            continue;
        }
        let mut params = PatchParams::apply(&manager).dry_run();
        params.force = force;
        let after = match api
            .patch(&desired.object.name, &params, &Patch::Apply(&object))
            .await
        {
            Ok(after) => serde_json::to_value(after).unwrap_or(Value::Null),
            Err(e) => {
                let verdict = Verdict::Failing {
                    message: format!("the API server refuses {describe}: {e}"),
                };
                return broken(verdict).await;
            }
        };
        let mut live = stored.as_ref().map(|e| comparable(e, &ar.kind));
        let mut after = comparable(&after, &ar.kind);
        if live.as_ref() != Some(&after) {
            if ar.kind == "Secret" {
                mask_secret(live.as_mut(), Some(&mut after));
            }
            changes.push(Change {
                object: describe,
                plugin: Some(desired.plugin.clone()),
                live,
                after: Some(after),
            });
        }
    }
    if !outcome.incomplete() {
        for pruned in plan::prune_plan(&observed, &outcome.desired, &uid, child_kinds) {
            let text = |p: &str| pruned.at(p).and_then(Value::as_str).unwrap_or("");
            let object = match text("/metadata/namespace") {
                "" => format!(
                    "{} {}",
                    windlass_policy::kind_of(pruned),
                    text("/metadata/name")
                ),
                ns => format!(
                    "{} {ns}/{}",
                    windlass_policy::kind_of(pruned),
                    text("/metadata/name")
                ),
            };
            let mut live = comparable(pruned, text("/kind"));
            if text("/kind") == "Secret" {
                mask_secret(Some(&mut live), None);
            }
            changes.push(Change {
                object,
                plugin: None,
                live: Some(live),
                after: None,
            });
        }
    }
    let now = windlass_contract::now_rfc3339();
    let patch = status::after_success(&parent_json, &outcome, &now);
    let status = (!plan::merge_is_noop(&parent_json, &patch)).then(|| {
        let before = parent_json.get("status").cloned().unwrap_or(Value::Null);
        let mut after = parent_json.clone();
        if let (Some(target), Some(patch)) = (after.as_object_mut(), patch.as_object()) {
            windlass_policy::pipeline::merge(target, patch.clone());
        }
        (before, after.get("status").cloned().unwrap_or(Value::Null))
    });
    let verdict = if changes.is_empty() && status.is_none() {
        Verdict::Unchanged
    } else {
        Verdict::Changed
    };
    Ok((verdict, changes, status, false))
}

/// The verdict of a run that failed.
fn verdict_of(e: &windlass_policy::pipeline::Error) -> Verdict {
    match (e.rule(), e.plugin()) {
        (Some(rule), plugin) => Verdict::Refused {
            plugin: plugin.unwrap_or_default().to_string(),
            rule: rule.as_str().to_string(),
            message: e.to_string(),
        },
        _ => Verdict::Failing {
            message: e.to_string(),
        },
    }
}

/// A Secret's values hidden, as `kubectl diff` hides them: `***` where both sides hold the
/// same value, `*** (before)` and `*** (after)` where it changes; the keys stay.
fn mask_secret(mut live: Option<&mut Value>, mut after: Option<&mut Value>) {
    for field in ["data", "stringData"] {
        let of = |side: Option<&Value>| side.and_then(|v| v.get(field)).cloned();
        let (before, now) = (of(live.as_deref()), of(after.as_deref()));
        hide(live.as_deref_mut(), field, now.as_ref(), "before");
        hide(after.as_deref_mut(), field, before.as_ref(), "after");
    }
}

/// `side`'s values of `field` hidden, each marked as changed when `other` holds another.
fn hide(side: Option<&mut Value>, field: &str, other: Option<&Value>, changed: &str) {
    let Some(map) = side
        .and_then(|v| v.get_mut(field))
        .and_then(Value::as_object_mut)
    else {
        return;
    };
    for (key, value) in map.iter_mut() {
        let same = other.and_then(|o| o.get(key)) == Some(&*value);
        *value = Value::String(if same {
            "***".into()
        } else {
            format!("*** ({changed})")
        });
    }
}

/// An object as compared: without what the API server sets on every write (managedFields,
/// resourceVersion, generation, uid, creationTimestamp), the host's applied stamp (new on any
/// change), and status (the cluster's to write, not the host's).
pub fn comparable(object: &Value, kind: &str) -> Value {
    let mut v = object.clone();
    if let Some(meta) = v.get_mut("metadata").and_then(Value::as_object_mut) {
        for key in [
            "managedFields",
            "resourceVersion",
            "generation",
            "uid",
            "creationTimestamp",
        ] {
            meta.remove(key);
        }
        if let Some(annotations) = meta.get_mut("annotations").and_then(Value::as_object_mut) {
            annotations.remove(plan::APPLIED_ANNOTATION);
            if annotations.is_empty() {
                meta.remove("annotations");
            }
        }
    }
    if let Some(map) = v.as_object_mut() {
        map.remove("status");
        if map.get("kind").is_none() && !kind.is_empty() {
            map.insert("kind".into(), Value::String(kind.to_string()));
        }
    }
    v
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use serde_json::json;

    use super::*;

    #[test]
    fn only_what_the_candidate_itself_breaks_blocks_and_an_unjudged_parent_is_counted_apart() {
        let parent = |verdict: Verdict, already_failing: bool, unjudged: bool| ParentPreview {
            namespace: Some("shop".into()),
            name: "p".into(),
            verdict,
            changes: Vec::new(),
            status: None,
            already_failing,
            unjudged,
        };
        let failing = || Verdict::Failing {
            message: "trap".into(),
        };
        let refused = Verdict::Refused {
            plugin: "x".into(),
            rule: "ForeignReference".into(),
            message: "m".into(),
        };
        let all = [
            parent(Verdict::Unchanged, false, false),
            parent(Verdict::Changed, false, false),
            parent(failing(), false, false),
            parent(refused, false, false),
            parent(failing(), true, false),
            parent(failing(), false, true),
        ];
        assert_eq!(
            all.iter().map(ParentPreview::blocks).collect::<Vec<_>>(),
            [false, false, true, true, false, false]
        );
        let c = counts(&all);
        assert_eq!(
            (
                c.unchanged,
                c.changed,
                c.refused,
                c.failing,
                c.blocking,
                c.unjudged
            ),
            (1, 1, 1, 3, 2, 1)
        );
        assert_eq!(all[0].describe(), "shop/p");
    }

    #[test]
    fn secret_values_are_hidden_saying_which_changed() {
        let mut live = json!({"kind": "Secret", "data": {"a": "MQ==", "b": "Mg=="}});
        let mut after = json!({"kind": "Secret", "data": {"a": "MQ==", "b": "Mw==", "c": "NA=="}});
        mask_secret(Some(&mut live), Some(&mut after));
        assert_eq!(live["data"], json!({"a": "***", "b": "*** (before)"}));
        assert_eq!(
            after["data"],
            json!({"a": "***", "b": "*** (after)", "c": "*** (after)"})
        );
        let mut pruned = json!({"kind": "Secret", "stringData": {"p": "x"}});
        mask_secret(Some(&mut pruned), None);
        assert_eq!(pruned["stringData"]["p"], "*** (before)");
    }

    #[test]
    fn server_set_fields_and_the_stamp_are_not_compared() {
        let live = json!({
            "apiVersion": "v1", "kind": "ConfigMap",
            "metadata": {"name": "a", "uid": "u", "resourceVersion": "7", "managedFields": [],
                         "creationTimestamp": "2026-12-05T10:00:00Z",
                         "annotations": {plan::APPLIED_ANNOTATION: "abc"}},
            "data": {"k": "v"},
        });
        let mut after = live.clone();
        after["metadata"]["resourceVersion"] = json!("8");
        after["metadata"]["annotations"][plan::APPLIED_ANNOTATION] = json!("def");
        assert_eq!(
            comparable(&live, "ConfigMap"),
            comparable(&after, "ConfigMap")
        );
        after["data"]["k"] = json!("w");
        assert_ne!(
            comparable(&live, "ConfigMap"),
            comparable(&after, "ConfigMap")
        );
        assert!(
            comparable(&live, "ConfigMap")["metadata"]
                .get("annotations")
                .is_none()
        );
    }
}
