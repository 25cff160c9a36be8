//! What a new version of a WasmPlugin would do to every live parent of its kind, applying
//! nothing (`windlass plugin diff`). The candidate joins the rest of the kind's pipeline as the
//! plugins controller would swap it in (`plugins::build_stage`, `Registry::candidate`), every
//! version loaded from its source as the host loads it; then the canary's judge runs it on every
//! parent (`canary::judge_all`), as the diff gate does inside the host.

use kube::{Api, ResourceExt, api::ListParams};
use serde::Serialize;

pub use super::canary::{Change, Counts, ParentPreview, PreviewError, Verdict};
use super::{canary, plugins, registry::Registry, shared::Shared, source};
use crate::crd::{WasmPlugin, WasmPluginSpec};

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
    /// How many parents each verdict has.
    pub fn counts(&self) -> Counts {
        canary::counts(&self.parents)
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
        }
        if wp.spec.parent != spec.parent {
            continue;
        }
        // Every version as its WasmPlugin names it now, this one's too: the pipeline the
        // candidate is judged against (a parent it already fails on is not the candidate's).
        let (stage, cluster_scoped) = stage_of(shared, &other, &wp.spec).await?;
        registry.install(&other, wp.spec.clone(), stage, &cluster_scoped);
    }
    let (stage, _) = stage_of(shared, name, spec).await?;
    let digest = stage.plugin.digest().to_string();
    let pipeline = std::sync::Arc::new(registry.candidate(name, spec, stage));
    let kind = spec.parent.key();
    let now = registry.pipeline(&kind);
    let parents = canary::judge_all(shared, &pipeline, now.as_ref(), &kind, namespace).await?;
    Ok(Preview {
        wasm_plugin: name.to_string(),
        kind,
        digest,
        serving,
        parents,
    })
}
