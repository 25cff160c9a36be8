//! The canary: a new plugin version runs with the rest of its kind's pipeline on a few existing
//! parents, applying nothing, before it serves. A version that traps, times out, runs out of
//! memory, returns forbidden output or refuses its config there is refused; a parent the new
//! version calls invalid does not count against it.

use std::{collections::BTreeSet, sync::Arc};

use kube::{
    Api, ResourceExt,
    api::{DynamicObject, ListParams},
};
use serde_json::Value;
use windlass_contract::Phase;
use windlass_policy::pipeline::{Input, Pipeline, Stage};

use super::{error::LoadError, plan::PARENT_UID_LABEL, shared::Shared};
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
    let Ok((resource, _)) = shared.discovery.resolve(&spec.parent.key()).await else {
        return Ok(()); // no parents can exist yet
    };
    // Without the rest of the pipeline the run is not the one the parents will see (a missing
    // earlier plugin's objects are missing, and references to them look foreign): no verdict.
    // Parents wait until every plugin serves, and a failing plugin prunes nothing.
    let others_waiting: Vec<String> = shared
        .registry
        .not_serving(&spec.parent.key())
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
        let observed = observe(shared, &parent, &kinds).await?;
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

/// What a reconcile of `parent` would observe, read from the API rather than from the caches
/// (a kind without a controller yet has none); only what the parent controls, as in a
/// reconcile.
pub(super) async fn observe(
    shared: &Shared,
    parent: &DynamicObject,
    kinds: &BTreeSet<String>,
) -> Result<Vec<Value>, LoadError> {
    let uid = parent.uid().unwrap_or_default();
    let namespace = parent.namespace();
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
        observed.extend(children.items.iter().filter_map(|c| observed_json(c, &ar)));
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
