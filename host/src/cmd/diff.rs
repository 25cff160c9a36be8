//! `windlass plugin diff`: what a new version of a WasmPlugin would do to every live parent of
//! its kind, applying nothing (the work is `windlass::controller::preview`); per parent a
//! unified diff of each object against the live one, then a summary, and an exit status for CI
//! gates.

use std::{path::PathBuf, sync::Arc};

use anyhow::{Context as _, Result, bail};
use clap::ValueEnum;
use kube::Api;
use serde_json::Value;
use windlass::{
    controller::{
        Settings, Shared,
        preview::{self, Preview, Verdict},
    },
    crd::{FileSource, OciSource, PluginSource, WasmPlugin, WasmPluginSpec},
};

use super::{Global, KubeArgs};

#[derive(Debug, clap::Args)]
pub struct Args {
    /// The WasmPlugin. With -f, the file's.
    #[arg(required_unless_present = "filename")]
    name: Option<String>,
    /// The new version: a component file.
    #[arg(long, conflicts_with_all = ["oci", "filename"])]
    component: Option<PathBuf>,
    /// The new version: a component in a registry (registry/repository:tag or …@sha256:…),
    /// pulled as the host pulls it.
    #[arg(long, conflicts_with = "filename")]
    oci: Option<String>,
    /// The new version: an edited WasmPlugin (YAML or JSON); its spec replaces the live one.
    /// (Without -n, the parents of every namespace are previewed.)
    #[arg(short = 'f', long = "filename")]
    filename: Option<PathBuf>,
    /// A registry (host:port) spoken to over plain HTTP, for --oci and OCI sources;
    /// repeatable.
    #[arg(long = "insecure-registry")]
    insecure_registries: Vec<String>,
    #[command(flatten)]
    kube: KubeArgs,
    /// Output format: diffs and a summary (`text`) or the preview as `json`.
    #[arg(short, long, value_enum, default_value_t = Format::Text)]
    output: Format,
}

#[derive(Debug, Clone, Copy, ValueEnum)]
enum Format {
    Text,
    Json,
}

/// The WasmPlugin's name and the spec to preview.
async fn candidate(args: &Args, client: &kube::Client) -> Result<(String, WasmPluginSpec)> {
    if let Some(path) = &args.filename {
        let text =
            std::fs::read_to_string(path).with_context(|| format!("reading {}", path.display()))?;
        let wp: WasmPlugin = serde_yaml::from_str(&text)
            .with_context(|| format!("{}: not a WasmPlugin", path.display()))?;
        let name = wp
            .metadata
            .name
            .clone()
            .with_context(|| format!("{}: the WasmPlugin has no name", path.display()))?;
        if let Some(given) = &args.name
            && *given != name
        {
            bail!("{}: names WasmPlugin {name}, not {given}", path.display());
        }
        return Ok((name, wp.spec));
    }
    let name = args.name.clone().unwrap_or_default();
    let wasm_plugins: Api<WasmPlugin> = Api::all(client.clone());
    let mut spec = wasm_plugins
        .get_opt(&name)
        .await?
        .with_context(|| format!("WasmPlugin {name} not found (-f previews a new one)"))?
        .spec;
    if let Some(component) = &args.component {
        let path = std::path::absolute(component)
            .with_context(|| format!("{}: no such file", component.display()))?;
        spec.source = PluginSource {
            file: Some(FileSource {
                path: path.display().to_string(),
            }),
            ..PluginSource::default()
        };
    } else if let Some(reference) = &args.oci {
        let pull_secret = spec.source.oci.as_ref().and_then(|o| o.pull_secret.clone());
        spec.source = PluginSource {
            oci: Some(OciSource {
                reference: reference.clone(),
                pull_secret,
                verify: None,
            }),
            ..PluginSource::default()
        };
    }
    Ok((name, spec))
}

pub async fn run(global: &Global, args: Args) -> Result<()> {
    let (client, _, _) = args.kube.connect().await?;
    let (name, spec) = candidate(&args, &client).await?;
    let engine = Arc::new(global.runtime()?);
    let mut settings = Settings::default();
    settings.oci.options.insecure_registries = args.insecure_registries.clone();
    let shared = Shared::new(
        client,
        engine,
        Arc::default(),
        Arc::default(),
        settings,
        "windlass-plugin-diff",
    );
    // Every parent of the kind unless -n narrows it: a gate that looked at one namespace would
    // pass a version that breaks the others.
    let namespace = args
        .kube
        .namespace
        .clone()
        .filter(|_| !args.kube.all_namespaces);
    let preview = preview::preview(&shared, &name, &spec, namespace.as_deref())
        .await
        .with_context(|| format!("previewing WasmPlugin {name}"))?;
    shared.stop();
    let text = match args.output {
        Format::Text => render(&preview),
        Format::Json => serde_json::to_string_pretty(&preview)? + "\n",
    };
    super::print(&text)?;
    let c = preview.counts();
    if c.blocking > 0 {
        bail!(
            "{} of {} parents would be refused or fail under this version",
            c.blocking,
            preview.parents.len()
        );
    }
    if c.unjudged > 0 {
        bail!(
            "{} of {} parents could not be judged (see above)",
            c.unjudged,
            preview.parents.len()
        );
    }
    Ok(())
}

/// An object as YAML lines for the diff (empty: absent).
fn yaml(v: Option<&Value>) -> String {
    v.map(|v| serde_yaml::to_string(v).unwrap_or_default())
        .unwrap_or_default()
}

fn unified(before: &str, after: &str, from: &str, to: &str) -> String {
    similar::TextDiff::from_lines(before, after)
        .unified_diff()
        .context_radius(3)
        .header(from, to)
        .to_string()
}

/// The preview as text: per parent its verdict, then each change as a unified diff; last, the
/// summary.
pub fn render(p: &Preview) -> String {
    let mut out = format!(
        "WasmPlugin {} at {}{} on {} parent(s) of {}\n",
        p.wasm_plugin,
        p.digest,
        p.serving
            .as_ref()
            .map(|s| format!(" (serving now: {s})"))
            .unwrap_or_default(),
        p.parents.len(),
        p.kind
    );
    for parent in &p.parents {
        let name = match &parent.namespace {
            Some(ns) => format!("{ns}/{}", parent.name),
            None => parent.name.clone(),
        };
        out.push('\n');
        match &parent.verdict {
            Verdict::Unchanged => out.push_str(&format!("{name}: unchanged\n")),
            Verdict::Changed => out.push_str(&format!("{name}: changed\n")),
            Verdict::Refused {
                plugin,
                rule,
                message,
            } => out.push_str(&format!(
                "{name}: refused by {rule} (plugin {plugin}): {message}\n"
            )),
            Verdict::Failing { message } if parent.unjudged => {
                out.push_str(&format!("{name}: not judged: {message}\n"));
            }
            Verdict::Failing { message } => out.push_str(&format!("{name}: failing: {message}\n")),
        }
        if parent.already_failing {
            out.push_str("  (the version serving now fails here too: not this version's doing)\n");
        }
        for c in &parent.changes {
            let what = match (&c.live, &c.after) {
                (None, Some(_)) => "created",
                (Some(_), None) => "pruned",
                _ => "changed",
            };
            out.push_str(&format!(
                "  {} would be {what}{}\n",
                c.object,
                c.plugin
                    .as_ref()
                    .map(|p| format!(" (by {p})"))
                    .unwrap_or_default()
            ));
            let diff = unified(
                &yaml(c.live.as_ref()),
                &yaml(c.after.as_ref()),
                "live",
                "would be",
            );
            for line in diff.lines() {
                out.push_str("    ");
                out.push_str(line);
                out.push('\n');
            }
        }
        if let Some((before, after)) = &parent.status {
            out.push_str("  status would change\n");
            let diff = unified(
                &yaml(Some(before)),
                &yaml(Some(after)),
                "status",
                "would be",
            );
            for line in diff.lines() {
                out.push_str("    ");
                out.push_str(line);
                out.push('\n');
            }
        }
    }
    let c = p.counts();
    out.push_str(&format!(
        "\n{} parent(s): {} unchanged, {} changed, {} refused by policy, {} failing; {} broken by this version\n",
        p.parents.len(),
        c.unchanged,
        c.changed,
        c.refused,
        c.failing,
        c.blocking
    ));
    out
}
