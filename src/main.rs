//! The `placelab` command: the REPL (default), the Jupyter kernel and its installer,
//! `run-script FILE`, `run-notebook NB`, `devices`.

use std::path::PathBuf;

use clap::{Args, CommandFactory, FromArgMatches, Parser, Subcommand};
use placelab_frontend::cell_output::Sink;
use placelab_frontend::evaluator::{Analyzer, Evaluator};
use placelab_frontend::kernel::{self, install::Place, run_notebook};
use placelab_frontend::{
    cuda_libs, cuda_probe, devices_banner, prebuild, progress, repl, script, session, setup,
};

#[derive(Parser)]
#[command(
    name = "placelab",
    version,
    about = "Tensors on the CPU and CUDA devices, in a Rust REPL and a Jupyter kernel"
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
    RunScript {
        /// The script to run (required): Rust cells, each starting after a `// %%` line
        file: PathBuf,
    },
    /// Run a notebook and write its outputs, as nbconvert --execute would (no Jupyter)
    ///
    /// The same as `jupyter nbconvert --execute --to notebook`, with no Python or Jupyter on the
    /// machine: the cells run through the session the kernel uses. A failed cell stops the run, unless it is tagged raises-exception (its error is its
    /// lesson) or --allow-errors is given; what ran is written either way. Ctrl-C interrupts
    /// the running cell and stops. The cells run in the notebook's folder, as in Jupyter.
    RunNotebook(RunNotebookArgs),
    /// List the devices and exit
    Devices,
    /// (internal) Probe this machine's CUDA driver and libraries, as JSON: sessions run it in a
    /// child process before they build the engine
    #[command(name = "probe-cuda", hide = true)]
    ProbeCuda,
    /// Run as a Jupyter kernel (Jupyter starts this; see install-kernel)
    Kernel {
        /// The connection file Jupyter wrote (required; Jupyter passes it)
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
        /// The name Jupyter shows in its launcher and kernel menu
        #[arg(long, default_value = "Rust (placelab)")]
        display_name: String,
        /// Set KEY=VALUE for the kernel (repeatable; none by default), e.g. PLACELAB_NO_CUDA=1
        #[arg(long, value_name = "KEY=VALUE", value_parser = parse_env)]
        env: Vec<(String, String)>,
    },
    /// Compile the engine once, into the directory every session links to
    ///
    /// For a class: one build for all learners, with --shared. Sessions find a DIR other than
    /// the default through PLACELAB_ENGINE=DIR, e.g. `install-kernel --env PLACELAB_ENGINE=DIR`.
    Prebuild {
        /// Where to build it (default: $PLACELAB_ENGINE, else CACHE/engine; see Environment)
        dir: Option<PathBuf>,
        /// Make it for other users: readable by all, writable by none (default: yours alone)
        #[arg(long)]
        shared: bool,
    },
    /// Remove an installed kernelspec, and the empty folders install-kernel made for it
    UninstallKernel {
        #[command(flatten)]
        place: PlaceArgs,
        /// The name of the kernel to remove, as given to install-kernel
        #[arg(long, default_value = "placelab")]
        name: String,
    },
}

#[derive(Args)]
struct RunNotebookArgs {
    /// The notebook to run (required; .ipynb, nbformat 4)
    notebook: PathBuf,
    /// Where to write it, with its outputs (default NAME.nbconvert.ipynb beside it)
    #[arg(long, value_name = "OUT.ipynb")]
    out: Option<PathBuf>,
    /// Run every cell, whatever fails before it
    #[arg(long)]
    allow_errors: bool,
    /// The folder the cells run in (default: the notebook's, as in Jupyter)
    #[arg(long, value_name = "DIR")]
    cwd: Option<PathBuf>,
}

#[derive(Args)]
#[group(multiple = false)]
struct PlaceArgs {
    /// Your Jupyter data directory: $JUPYTER_DATA_DIR, else the platform's (the default)
    #[arg(long)]
    user: bool,
    /// The active Python environment: $VIRTUAL_ENV, $CONDA_PREFIX, else python3's prefix
    #[arg(long)]
    sys_prefix: bool,
    /// PREFIX/share/jupyter/kernels; Jupyter looks there only when JUPYTER_PATH names it
    #[arg(long, value_name = "PREFIX")]
    prefix: Option<PathBuf>,
}

/// The `--help` footer: every environment variable a user may set, one a line.
fn environment_help() -> String {
    let gib = placelab::cuda::DEFAULT_SIMULATED_CAPACITY >> 30;
    let vars = [
        (
            "PLACELAB_SIMULATE_CUDA=N[,CAPACITY|,GPU]",
            "N simulated CUDA devices (host memory, CPU kernels)",
        ),
        (
            "PLACELAB_EMULATE_CUDA=N[,CAPACITY]",
            "N emulated ones: the real CUDA kernels run on the CPU",
        ),
        (
            "PLACELAB_EMULATOR_KERNELS=LIB",
            "their kernels from LIB (.ci/kernel-library.py)",
        ),
        (
            "PLACELAB_NO_CUDA=1",
            "(any value) use no real GPU, never load the CUDA driver",
        ),
        (
            "PLACELAB_CUDA_MEMORY_FRACTION=F",
            "cap each GPU's memory for this process at F (0 to 1)",
        ),
        (
            "PLACELAB_IDLE_EMPTY_CACHE=SECONDS",
            "give GPU caches back after SECONDS idle (default: never)",
        ),
        (
            "PLACELAB_CUDA_LIB_DIRS=DIR[:DIR…]",
            "folders to load NVRTC and cuBLAS from (pip wheels)",
        ),
        (
            "PLACELAB_CACHE=CACHE",
            "builds, CUDA kernels, history; default ~/.cache/placelab",
        ),
        (
            "PLACELAB_ENGINE=DIR",
            "the engine build sessions link to (default CACHE/engine)",
        ),
        (
            "PLACELAB_HISTORY=FILE",
            "kernel history file (default CACHE/kernel-history.jsonl)",
        ),
        (
            "PLACELAB_INTERRUPT_GRACE=SECONDS",
            "seconds before an interrupted cell is killed (default 2)",
        ),
        (
            "PLACELAB_ANALYZER_QUIET=SECONDS",
            "rust-analyzer's idle seconds in a kernel (default 120)",
        ),
        (
            "PLACELAB_NO_KERNEL_CACHE=1",
            "(any value) recompile CUDA kernels; skip CACHE/kernels",
        ),
    ];
    let mut lines = vec!["Environment:".to_string()];
    lines.extend(
        vars.iter()
            .map(|(var, what)| format!("  {var:<40}  {what}")),
    );
    lines.push(format!(
        "CAPACITY: a size such as 8GiB, 512MiB or a byte count (default {gib}GiB); N=0 turns them off.\n\
         GPU: {}; the devices stand for it (its memory, and\n\
         predicted costs beside the measured ones). With both set, the emulated devices are used.",
        placelab::cost::names().join(", ")
    ));
    lines.join("\n")
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
    let cli = Cli::command().after_help(environment_help()).get_matches();
    let cli = Cli::from_arg_matches(&cli).unwrap_or_else(|e| e.exit());
    let code = match cli.command.unwrap_or(Command::Repl) {
        Command::Repl => match session::prepare("repl") {
            Ok(p) => repl::run(devices_banner(true), p),
            Err(e) => fail(&e),
        },
        Command::RunScript { file } => run_script(&file),
        Command::RunNotebook(args) => run_notebook(args),
        Command::Devices => devices(),
        Command::ProbeCuda => cuda_probe::print_probe(),
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
                println!("installed the {name:?} kernel in {}", dir.display());
                for line in kernel::install::how_jupyter_finds_it(&place.place(), &display_name) {
                    println!("{line}");
                }
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
                Ok(removed) => {
                    println!("removed the {name:?} kernel: {}", removed[0].display());
                    if removed.len() > 1 {
                        let folders: Vec<String> = removed[1..]
                            .iter()
                            .map(|d| d.display().to_string())
                            .collect();
                        println!(
                            "and the empty folders install-kernel made: {}",
                            folders.join(", ")
                        );
                    }
                    0
                }
                Err(e) => fail(&e),
            }
        }
    };
    // Stderr may be the progress display's pipe: the last lines must be out before the exit.
    progress::flush_stderr();
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
    let evaluator = Evaluator::spawn(prepared, sink, None, Analyzer::OnDemand);
    let code = match evaluator.wait_started() {
        Err(e) => fail(&e),
        Ok(()) => i32::from(!script::run(&evaluator, &text)),
    };
    evaluator.finish(std::time::Duration::from_secs(5));
    code
}

/// Reads the notebook before anything starts (a wrong file fails at once), then runs it in its
/// own folder, as Jupyter does, or in `cwd`.
fn run_notebook(args: RunNotebookArgs) -> i32 {
    let RunNotebookArgs {
        notebook,
        out,
        allow_errors,
        cwd,
    } = args;
    let read = match kernel::notebook_file::Notebook::read(&notebook) {
        Ok(nb) => nb,
        Err(e) => return fail(&e),
    };
    let out = out.unwrap_or_else(|| run_notebook::default_out(&notebook));
    let absolute = |p: &std::path::Path| std::path::absolute(p).unwrap_or_else(|_| p.to_path_buf());
    let (notebook, out) = (absolute(&notebook), absolute(&out));
    let options = run_notebook::Options { out, allow_errors };
    if let Some(folder) = cwd.as_deref().or(notebook.parent())
        && let Err(e) = std::env::set_current_dir(folder)
    {
        return fail(&format!("cannot run in {}: {e}", folder.display()));
    }
    match session::prepare(&format!("notebook {}", notebook.display())) {
        Ok(prepared) => run_notebook::run(read, &options, prepared),
        Err(e) => fail(&e),
    }
}

fn fail(msg: &str) -> i32 {
    eprintln!("placelab: {msg}");
    2
}

/// `placelab devices`: the devices, as a session's cell process would find them, and the CUDA
/// major a session's engine is built for.
fn devices() -> i32 {
    if let Err(e) = cuda_libs::prepare_environment(&setup::cache_dir()) {
        return fail(&e);
    }
    println!("{}", devices_banner(true));
    // A choice that failed is in the banner already, as the reason there is no CUDA device.
    let choice = cuda_libs::choice();
    if matches!(choice, placelab_frontend::cuda_choice::Choice::Major { .. }) {
        println!("{}", choice.summary());
    }
    0
}
