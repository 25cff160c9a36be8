//! What a new version of a WasmPlugin would do to every live parent of its kind, applying
//! nothing (`windlass plugin diff`). The candidate joins the rest of the kind's pipeline as the
//! plugins controller would swap it in (`plugins::build_stage`, `Registry::candidate`); each
//! parent is observed from the API as the canary does, the pipeline runs, and each desired
//! object is made what a reconcile would apply (`plan::claim`, `plan::to_apply`) and sent as a
//! server-side apply dry run, so the API server's defaulting and validation are in what is
//! compared with the live object. What the run would prune and the status it would write
//! are compared too.

use std::collections::{BTreeSet, HashSet};

use kube::{
    Api, ResourceExt,
    api::{DynamicObject, ListParams, Patch, PatchParams},
};
use serde::Serialize;
use serde_json::Value;
use windlass_contract::Phase;
use windlass_policy::pipeline::{Input, Outcome, Pipeline};

use super::{
    canary,
    error::LoadError,
    plan::{self, ParentRef},
    plugins,
    registry::Registry,
    shared::Shared,
    source, status,
};
use crate::crd::{WasmPlugin, WasmPluginSpec};

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
}

/// The preview of a candidate on every parent of its kind.
#[derive(Debug, Clone, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Preview {
    /// The WasmPlugin.
    pub wasm_plugin: String,
    /// The parent kind's key.
    pub kind: String,
    /// The candidate's digest.
    pub digest: String,
    /// The digest serving now, per the WasmPlugin's status (none: a new WasmPlugin).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub serving: Option<String>,
    pub parents: Vec<ParentPreview>,
}

impl Preview {
    /// How many parents each verdict has: (unchanged, changed, refused, failing).
    pub fn counts(&self) -> (usize, usize, usize, usize) {
        let mut c = (0, 0, 0, 0);
        for p in &self.parents {
            match p.verdict {
                Verdict::Unchanged => c.0 += 1,
                Verdict::Changed => c.1 += 1,
                Verdict::Refused { .. } => c.2 += 1,
                Verdict::Failing { .. } => c.3 += 1,
            }
        }
        c
    }
}

/// A WasmPlugin's component, fetched and checked as the plugins controller does before it
/// serves.
async fn stage_of(
    shared: &Shared,
    name: &str,
    spec: &WasmPluginSpec,
) -> Result<(windlass_policy::pipeline::Stage, Vec<String>), PreviewError> {
    let source = source::parse(name, &spec.source)?;
    let resolved = source
        .resolve(&shared.client, name, &shared.settings.oci)
        .await?;
    let fetched = source
        .fetch(
            &shared.client,
            name,
            &shared.settings.oci,
            resolved,
            spec.source.sha256.as_deref(),
        )
        .await?;
    Ok(plugins::build_stage(shared, name, spec, fetched.bytes).await?)
}

/// Previews WasmPlugin `name` with `spec` (a new source, config or anything else) on every
/// parent of its kind, or those in `namespace`.
///
/// # Errors
/// When a version cannot be loaded, the kind is not served, or the parents cannot be listed.
pub async fn preview(
    shared: &Shared,
    name: &str,
    spec: &WasmPluginSpec,
    namespace: Option<&str>,
) -> Result<Preview, PreviewError> {
    let api_error = |what: &str| {
        let what = what.to_string();
        move |source| PreviewError::Api { what, source }
    };
    let wasm_plugins: Api<WasmPlugin> = Api::all(shared.client.clone());
    let all = wasm_plugins
        .list(&ListParams::default())
        .await
        .map_err(api_error("listing WasmPlugins"))?;
    // The rest of the kind's pipeline, as it would serve beside the candidate.
    let registry = Registry::default();
    let mut serving = None;
    for wp in &all.items {
        let other = wp.name_any();
        if other == name {
            serving = wp.status.as_ref().and_then(|s| s.digest.clone());
            continue;
        }
        if wp.spec.parent != spec.parent {
            continue;
        }
        let (stage, cluster_scoped) = stage_of(shared, &other, &wp.spec).await?;
        registry.install(&other, wp.spec.clone(), stage, &cluster_scoped);
    }
    let (stage, _) = stage_of(shared, name, spec).await?;
    let digest = stage.plugin.digest().to_string();
    let pipeline = std::sync::Arc::new(registry.candidate(name, spec, stage));
    let kind = spec.parent.key();
    let (resource, namespaced) =
        shared
            .discovery
            .resolve(&kind)
            .await
            .map_err(|e| PreviewError::Kind {
                kind: kind.clone(),
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
    let mut out = Vec::new();
    for parent in parents
        .items
        .iter()
        .filter(|p| p.metadata.deletion_timestamp.is_none())
    {
        let (verdict, changes, status) =
            match one(shared, &pipeline, &resource, parent, &kinds, &child_kinds).await {
                Ok(done) => done,
                Err(message) => (Verdict::Failing { message }, Vec::new(), None),
            };
        out.push(ParentPreview {
            namespace: parent.namespace(),
            name: parent.name_any(),
            verdict,
            changes,
            status,
        });
    }
    Ok(Preview {
        wasm_plugin: name.to_string(),
        kind,
        digest,
        serving,
        parents: out,
    })
}

type OneParent = (Verdict, Vec<Change>, Option<(Value, Value)>);

/// One parent: observe, run, and judge every object the run would write or prune.
async fn one(
    shared: &Shared,
    pipeline: &std::sync::Arc<Pipeline>,
    resource: &kube::core::ApiResource,
    parent: &DynamicObject,
    kinds: &BTreeSet<String>,
    child_kinds: &HashSet<String>,
) -> Result<OneParent, String> {
    let uid = parent.uid().unwrap_or_default();
    let observed = canary::observe(shared, parent, kinds)
        .await
        .map_err(|e| format!("observing: {e}"))?;
    let parent_json = crate::k8s::typed_json(parent, resource).map_err(|e| e.to_string())?;
    let outcome = {
        let pipeline = pipeline.clone();
        let (parent_json, observed) = (parent_json.clone(), observed.clone());
        tokio::task::spawn_blocking(move || {
            let now = windlass_contract::now_rfc3339();
            pipeline.run(Input::new(Phase::Reconcile, &parent_json, &observed, &now))
        })
        .await
        .map_err(|e| e.to_string())?
    };
    let outcome: Outcome = match outcome {
        Ok(outcome) => outcome,
        Err(e) => return Ok((verdict_of(&e), Vec::new(), None)),
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
                return Ok((verdict, Vec::new(), None));
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
                return Ok((verdict, Vec::new(), None));
            }
        };
        let live = stored.as_ref().map(|e| comparable(e, &ar.kind));
        let after = comparable(&after, &ar.kind);
        if live.as_ref() != Some(&after) {
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
            let text = |p: &str| pruned.pointer(p).and_then(Value::as_str).unwrap_or("");
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
            changes.push(Change {
                object,
                plugin: None,
                live: Some(comparable(pruned, text("/kind"))),
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
    Ok((verdict, changes, status))
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
