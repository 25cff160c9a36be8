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
    /// Show a parent and its children as a tree: the plugin and digest that made each, whether
    /// it is ready or has drifted, then the parent's last run plugin by plugin, its conditions
    /// and its events. Linked or copied as `kubectl-windlass` it is `kubectl windlass trace`.
    Trace(cmd::trace::Args),
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

/// The name the binary is called by in help and errors: `kubectl windlass` when kubectl runs it
/// as its plugin (`kubectl-windlass` on the PATH), else `windlass`.
fn called_as() -> &'static str {
    let argv0 = std::env::args_os().next().unwrap_or_default();
    let name = std::path::Path::new(&argv0)
        .file_stem()
        .and_then(|n| n.to_str())
        .unwrap_or_default();
    if name == "kubectl-windlass" {
        "kubectl windlass"
    } else {
        "windlass"
    }
}

fn main() -> ExitCode {
    use clap::FromArgMatches as _;
    let cli = match Cli::from_arg_matches(&Cli::command().bin_name(called_as()).get_matches()) {
        Ok(cli) => cli,
        Err(e) => e.exit(),
    };
    // `dev` without `--kubeconfig` serves the devcluster in this process (the operator too):
    // glibc's allocator tuned for it (executes the process again, before any thread or log).
    #[cfg(feature = "dev")]
    if let Command::Dev(args) = &cli.command
        && args.serves_devcluster()
    {
        windlass_devcluster::malloc::tune();
    }
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
        Command::Trace(args) => cmd::block_on(cmd::trace::run(args)),
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
