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
    #[arg(short = 'f', long = "filename")]
    parent: PathBuf,
    /// A plugin component; repeat in pipeline order.
    #[arg(long = "plugin", required = true)]
    plugins: Vec<PathBuf>,
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
    let mut config = match &args.config_file {
        Some(path) => render::read_config_file(path)?,
        None => Default::default(),
    };
    for assignment in &args.config {
        render::set_config(&mut config, assignment)?;
    }
    let input = render::Input {
        parent: render::read_parent(&args.parent)?,
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
        options: LoadOptions {
            limits: Limits {
                timeout: Duration::from_millis(args.timeout_ms),
                memory_bytes: args.memory_mib << 20,
                fuel: None,
            },
            mode: InstanceMode::Fresh,
        },
    };
    let outcome = render::render(&global.runtime()?, &input)?;
    let text = match args.output {
        Output::Yaml => render::to_yaml(&outcome)?,
        Output::Json => serde_json::to_string_pretty(&render::to_json(&outcome))? + "\n",
    };
    super::print(&text)
}
