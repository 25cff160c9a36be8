//! The `windlass` command line. Each subcommand is a module of `cmd/` with its arguments and
//! what it does; this file parses, sets up logging and the TLS provider, and dispatches.

use std::process::ExitCode;

use clap::{CommandFactory, Parser, Subcommand};

mod cmd;

/// A Kubernetes operator host whose reconcile logic runs as sandboxed WebAssembly plugins.
#[derive(Debug, Parser)]
#[command(name = "windlass", version, about)]
struct Cli {
    #[command(flatten)]
    global: cmd::Global,

    #[command(subcommand)]
    command: Command,
}

#[derive(Debug, Subcommand)]
enum Command {
    /// Run the operator against a cluster (in-cluster config or a kubeconfig).
    Run(cmd::run::Args),
    /// Start the embedded devcluster with the SampleDB plugins and the examples, and run the
    /// operator on it until Ctrl-C: the embedded default.
    #[cfg(feature = "dev")]
    Dev(cmd::dev::Args),
    /// Print the CustomResourceDefinitions as YAML: WasmPlugin (and SampleDB, built with `dev`).
    Crds,
    /// Run a pipeline of plugins on a parent from a file and print what the host would apply.
    Render(cmd::render::Args),
    /// Work with plugin components.
    #[command(subcommand)]
    Plugin(cmd::plugin::Command),
    /// GET a URL over plain HTTP; succeed only on 200 OK (the chart's `helm test` runs it
    /// against `/readyz`: the image has no shell).
    Probe(cmd::probe::Args),
    /// Print what was built: the version, the commit, the wasmtime version linked and the WIT
    /// packages served.
    Version,
    /// Print a completion script for a shell: `source <(windlass completions bash)`, or write it
    /// where the shell loads completions (see the README).
    Completions {
        /// bash, zsh, fish, elvish or powershell.
        shell: clap_complete::Shell,
    },
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    // First: the OTLP exporter's HTTPS client (rustls) needs it too.
    windlass::source::install_crypto_provider();
    // Kept to the end: dropping it sends the traces still buffered.
    let _telemetry = cli.global.init_logging();
    let result = match cli.command {
        Command::Run(args) => cmd::block_on(cmd::run::run(&cli.global, args)),
        #[cfg(feature = "dev")]
        Command::Dev(args) => cmd::block_on(cmd::dev::run(&cli.global, args)),
        Command::Crds => cmd::crds::run(),
        Command::Render(args) => cmd::render::run(&cli.global, args),
        Command::Plugin(command) => cmd::plugin::run(&cli.global, command),
        Command::Probe(args) => cmd::block_on(cmd::probe::run(args)),
        Command::Version => cmd::version::run(),
        Command::Completions { shell } => {
            clap_complete::generate(
                shell,
                &mut Cli::command(),
                "windlass",
                &mut std::io::stdout(),
            );
            Ok(())
        }
    };
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("error: {e:#}");
            ExitCode::FAILURE
        }
    }
}
