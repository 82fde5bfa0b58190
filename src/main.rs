//! The `placelab` command: the REPL (default), the Jupyter kernel and its installer,
//! `run-script FILE`, `devices`.

use std::path::PathBuf;

use clap::{Args, Parser, Subcommand};
use placelab::frontend::cell_output::Sink;
use placelab::frontend::evaluator::Evaluator;
use placelab::frontend::kernel::{self, install::Place};
use placelab::frontend::{devices_banner, prebuild, repl, script, session, setup};

#[derive(Parser)]
#[command(
    name = "placelab",
    version,
    about = "Tensors on the CPU and CUDA devices, in a Rust REPL and a Jupyter kernel",
    after_help = "Environment: PLACELAB_SIMULATE_CUDA=N[,CAPACITY|,GPU] gives N simulated CUDA devices \
                  (e.g. 2,8GiB; 2,h100 stands them for H100s, with predicted costs); \
                  PLACELAB_CACHE moves the compile cache (default ~/.cache/placelab)."
)]
struct Cli {
    #[command(subcommand)]
    command: Option<Command>,
}

#[derive(Subcommand)]
enum Command {
    /// Start the REPL (the default)
    Repl,
    /// Run the cells of FILE (separated by `// %%` lines) and print what they show
    RunScript { file: PathBuf },
    /// List the devices and exit
    Devices,
    /// Run as a Jupyter kernel (Jupyter starts this; see install-kernel)
    Kernel {
        /// The connection file Jupyter wrote
        #[arg(long, short = 'f')]
        connection_file: PathBuf,
    },
    /// Install the kernelspec, so Jupyter lists "Rust (placelab)"
    InstallKernel {
        #[command(flatten)]
        place: PlaceArgs,
        /// The kernel's name (what notebooks' metadata refers to)
        #[arg(long, default_value = "placelab")]
        name: String,
        /// The name Jupyter shows
        #[arg(long, default_value = "Rust (placelab)")]
        display_name: String,
        /// KEY=VALUE set for the kernel (e.g. PLACELAB_SIMULATE_CUDA=2); repeatable
        #[arg(long, value_parser = parse_env)]
        env: Vec<(String, String)>,
    },
    /// Compile the engine once, into the directory every session links to (a class: one build
    /// for all learners, with --shared)
    Prebuild {
        /// Where (default: $PLACELAB_ENGINE, else ~/.cache/placelab/engine). Kernels find it
        /// through PLACELAB_ENGINE=DIR, e.g. `install-kernel --env PLACELAB_ENGINE=DIR`
        dir: Option<PathBuf>,
        /// For other users: readable by all, writable by none; sessions never replace it
        #[arg(long)]
        shared: bool,
    },
    /// Remove an installed kernelspec
    UninstallKernel {
        #[command(flatten)]
        place: PlaceArgs,
        #[arg(long, default_value = "placelab")]
        name: String,
    },
}

#[derive(Args)]
#[group(multiple = false)]
struct PlaceArgs {
    /// Your Jupyter data directory (the default)
    #[arg(long)]
    user: bool,
    /// The active Python environment (virtualenv or conda)
    #[arg(long)]
    sys_prefix: bool,
    /// PREFIX/share/jupyter/kernels
    #[arg(long, value_name = "PREFIX")]
    prefix: Option<PathBuf>,
}

impl PlaceArgs {
    fn place(&self) -> Place {
        match (&self.prefix, self.sys_prefix) {
            (Some(p), _) => Place::Prefix(p.clone()),
            (None, true) => Place::SysPrefix,
            _ => Place::User,
        }
    }
}

fn parse_env(s: &str) -> Result<(String, String), String> {
    s.split_once('=')
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .ok_or_else(|| format!("{s:?} is not KEY=VALUE"))
}

fn main() {
    // First: this binary is also evcxr's cell runner and rustc wrapper.
    setup::hooks();
    let cli = Cli::parse();
    let code = match cli.command.unwrap_or(Command::Repl) {
        Command::Repl => match session::prepare("repl") {
            Ok(p) => repl::run(devices_banner(true), p),
            Err(e) => fail(&e),
        },
        Command::RunScript { file } => run_script(&file),
        Command::Devices => {
            println!("{}", devices_banner(true));
            0
        }
        Command::Kernel { connection_file } => {
            // Read the connection file before anything starts: a bad one fails at once.
            match kernel::read_connection_file(&connection_file) {
                Err(e) => fail(&e),
                Ok(info) => match session::prepare(&connection_file.to_string_lossy()) {
                    Err(e) => fail(&e),
                    Ok(p) => kernel::run(info, p),
                },
            }
        }
        Command::InstallKernel {
            place,
            name,
            display_name,
            env,
        } => match kernel::install::install(&place.place(), &name, &display_name, &env) {
            Ok(dir) => {
                println!(
                    "installed the {name:?} kernel in {}\nopen a notebook with `jupyter lab` and pick \"{display_name}\"",
                    dir.display()
                );
                0
            }
            Err(e) => fail(&e),
        },
        Command::Prebuild { dir, shared } => match prebuild::run(dir, shared) {
            Ok(dir) => {
                println!(
                    "the engine is built in {0}{1}\nsessions use it with PLACELAB_ENGINE={0}",
                    dir.display(),
                    if shared { ", shared read-only" } else { "" }
                );
                0
            }
            Err(e) => fail(&e),
        },
        Command::UninstallKernel { place, name } => {
            match kernel::install::uninstall(&place.place(), &name) {
                Ok(dir) => {
                    println!("removed {}", dir.display());
                    0
                }
                Err(e) => fail(&e),
            }
        }
    };
    std::process::exit(code);
}

fn run_script(file: &std::path::Path) -> i32 {
    let text = match std::fs::read_to_string(file) {
        Ok(t) => t,
        Err(e) => return fail(&format!("cannot read {}: {e}", file.display())),
    };
    let prepared = match session::prepare(&format!("script {}", file.display())) {
        Ok(p) => p,
        Err(e) => return fail(&e),
    };
    let sink: Sink = std::sync::Arc::new(|is_err, line| {
        if is_err {
            eprintln!("{line}")
        } else {
            println!("{line}")
        }
    });
    let evaluator = Evaluator::spawn(prepared, sink, None);
    let code = match evaluator.wait_started() {
        Err(e) => fail(&e),
        Ok(()) => i32::from(!script::run(&evaluator, &text)),
    };
    evaluator.finish(std::time::Duration::from_secs(5));
    code
}

fn fail(msg: &str) -> i32 {
    eprintln!("placelab: {msg}");
    2
}
