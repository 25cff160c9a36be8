//! `windlass render`: the pipeline run offline on a parent from a file (the work is in
//! `windlass::render`).

use std::{path::PathBuf, time::Duration};

use anyhow::Result;
use clap::ValueEnum;
use windlass::{
    render,
    runtime::{InstanceMode, Limits, LoadOptions, Phase},
};

use super::{Global, Output};

#[derive(Debug, clap::Args)]
pub struct Args {
    /// The parent object (YAML or JSON).
    #[arg(short = 'f', long = "filename", required_unless_present = "replay")]
    parent: Option<PathBuf>,
    /// A plugin component; repeat in pipeline order.
    #[arg(long = "plugin", required = true)]
    plugins: Vec<PathBuf>,
    /// Replay a recorded call (a file the host wrote under `--record-dir`) with the one
    /// `--plugin`: the recorded request and randomness again. The same component must give the
    /// recorded answer byte for byte (exit 1 if not); another shows how its answer differs.
    #[arg(long, conflicts_with_all = ["parent", "observed", "config", "config_file", "grants", "phase", "now"])]
    replay: Option<PathBuf>,
    /// Observed objects: a file or a directory of YAML/JSON files.
    #[arg(long)]
    observed: Option<PathBuf>,
    /// Config as [PLUGIN:]KEY=VALUE (KEY may be dotted; VALUE is JSON or a string). Without
    /// PLUGIN: it applies to every plugin.
    #[arg(long = "config")]
    config: Vec<String>,
    /// A YAML mapping of plugin name (or `*`) to config.
    #[arg(long)]
    config_file: Option<PathBuf>,
    /// Grant a kind by name (group/version/Kind) on top of what each plugin declared; needed for
    /// cluster-scoped and privileged kinds.
    #[arg(long = "grant")]
    grants: Vec<String>,
    /// Which phase to run.
    #[arg(long, value_enum, default_value_t = PhaseArg::Reconcile)]
    phase: PhaseArg,
    /// The time given to plugins (RFC 3339). Default: now.
    #[arg(long)]
    now: Option<String>,
    /// Time limit per plugin call, in milliseconds.
    #[arg(long, default_value_t = 2_000)]
    timeout_ms: u64,
    /// Memory limit per plugin instance, in MiB.
    #[arg(long, default_value_t = 128)]
    memory_mib: usize,
    /// Output format.
    #[arg(short, long, value_enum, default_value_t = Output::Yaml)]
    output: Output,
}

#[derive(Debug, Clone, Copy, ValueEnum)]
enum PhaseArg {
    Reconcile,
    Finalize,
}

pub fn run(global: &Global, args: Args) -> Result<()> {
    let options = LoadOptions {
        limits: Limits {
            timeout: Duration::from_millis(args.timeout_ms),
            memory_bytes: args.memory_mib << 20,
            fuel: None,
        },
        mode: InstanceMode::Fresh,
    };
    if let Some(recording) = &args.replay {
        let [plugin] = args.plugins.as_slice() else {
            anyhow::bail!("--replay takes one --plugin: the component to replay the call with");
        };
        let replayed = render::replay(&global.runtime()?, recording, plugin, options)?;
        let (name, digest) = &replayed.recorded;
        let diff = replayed.diff();
        if replayed.reproduced() {
            return super::print(&format!(
                "reproduced: {name}@{digest} gave the recorded answer byte for byte\n"
            ));
        }
        let mut text = if replayed.digest == *digest {
            format!("NOT reproduced: {name}@{digest} answered otherwise than recorded\n")
        } else {
            format!(
                "{name}: replayed with {} (recorded with {digest}): {}\n",
                replayed.digest,
                if diff.is_empty() {
                    "the same answer"
                } else {
                    "its answer differs"
                }
            )
        };
        if replayed.overdrawn {
            text.push_str("the guest drew more randomness than the recorded call did\n");
        }
        text.push_str(&diff);
        super::print(&text)?;
        if diff.is_empty() && !replayed.overdrawn {
            return Ok(());
        }
        anyhow::bail!("the replayed answer differs from the recording");
    }
    let Some(parent) = &args.parent else {
        anyhow::bail!("-f PARENT is required");
    };
    let mut config = match &args.config_file {
        Some(path) => render::read_config_file(path)?,
        None => Default::default(),
    };
    for assignment in &args.config {
        render::set_config(&mut config, assignment)?;
    }
    let input = render::Input {
        parent: render::read_parent(parent)?,
        plugins: args.plugins,
        observed: match &args.observed {
            Some(path) => render::read_observed(path)?,
            None => Vec::new(),
        },
        config,
        grants: args.grants,
        phase: match args.phase {
            PhaseArg::Reconcile => Phase::Reconcile,
            PhaseArg::Finalize => Phase::Finalize,
        },
        now: args.now.unwrap_or_else(windlass::contract::now_rfc3339),
        options,
    };
    let outcome = render::render(&global.runtime()?, &input)?;
    let text = match args.output {
        Output::Yaml => render::to_yaml(&outcome)?,
        Output::Json => serde_json::to_string_pretty(&render::to_json(&outcome))? + "\n",
    };
    super::print(&text)
}
