//! One interactive session: an evcxr context with the engine preloaded, the side channel to the
//! cell process, and per-cell reports (outputs, errors, memory lines). The REPL and script
//! runner are thin shells over it.

use std::sync::atomic::Ordering;

use evcxr::{CommandContext, Error as EvcxrError};

use super::cell_output::{CellOutput, ClearSink, Sink};
use super::interrupter::{self, Interrupter, interrupt_grace};
use super::probe_client::{DeviceList, IdleReleaseLine, ProbeClient, Reply, Request, Snapshot};
use super::report::{CellReport, ErrorKind, Output};
pub use super::session_prepare::{Prepared, prepare};
use super::session_prepare::{engine_load_failure, engine_rebuild_notice};
use super::setup;
use super::strip::MemoryChange;
use super::{cell_end, compile_error, engine};

/// Completions: the byte range they replace and the candidates.
pub type Completion = (usize, usize, Vec<String>);

pub struct Session {
    ctx: CommandContext,
    pub(super) probe: ProbeClient,
    pub(super) last_seq: u64,
    /// The last idle release of the GPUs' caches a strip has said (`memory::idle`).
    last_idle_release: u64,
    /// Cards and failures the running cell reported through its output streams.
    cell_output: CellOutput,
    /// The last token sent to the cell process to mark the end of a cell's output.
    sync_token: u64,
    /// Device memory after each code cell, for `:plot memory`.
    pub(super) history: super::plot::MemoryHistory,
    interrupter: Interrupter,
    prepared: Prepared,
    /// The `Debug` format `:fmt` set, when not evcxr's default `{:?}`.
    value_format: Option<String>,
    /// The stand-in GPUs `:simulate` made (its `cuda::` call), made again in a restarted cell
    /// process: a notebook's `:simulate` cell ran once, and its GPUs must outlive a crash.
    stand_ins: Option<String>,
}

/// The preload: the engine (the crate in engine/) as a dependency, and its prelude; the cell
/// process's setup follows it.
fn preload_code() -> String {
    let major = super::cuda_libs::choice().major();
    format!(
        ":dep placelab = {}\nuse placelab::prelude::*;\n",
        super::cuda_libs::dep_spec(super::engine_check::SOURCES, major)
    )
}

/// The code that sets the value format (`:fmt`) in the cell process.
fn value_format_code(format: &str) -> String {
    format!("placelab::show::set_value_format({format:?});")
}

/// Compiles and loads the engine. A Ctrl-C at the terminal while it builds (the first start
/// takes minutes) reaches cargo and the cell process, which share the terminal's process group,
/// and ends them: the crates cargo finished are kept, and the build goes on from there, as often
/// as it is stopped.
fn execute_preload(ctx: &mut CommandContext, preload: &str) -> Result<(), EvcxrError> {
    let before = interrupter::sigints();
    let mut attempts = 0;
    loop {
        attempts += 1;
        match ctx.execute(preload) {
            // After a Ctrl-C, cargo that ended with no compiler error, or the cell process that
            // ended (its handler is not installed yet), was stopped, not refused: evcxr starts
            // them again. (A few times: a failure for another reason must still be said.)
            Err(e)
                if interrupter::sigints() != before
                    && attempts < 5
                    && (compile_error::cargo_ended_without_an_error(&e)
                        || matches!(e, EvcxrError::SubprocessTerminated(_))) =>
            {
                if attempts == 1 {
                    eprintln!("(Ctrl-C stops a running cell; the engine's build goes on)");
                }
            }
            done => return done.map(|_| ()),
        }
    }
}

impl Session {
    /// Starts evcxr and compiles the engine into it (minutes the first time on a machine,
    /// seconds after), streaming the cell process's output to `sink`.
    pub fn start(mut prepared: Prepared, sink: Sink) -> Result<Session, String> {
        let tty = super::progress::stderr_is_terminal();
        prepared.take_the_build();
        let mut s = Session::with_evaluator(prepared, sink.clone())?;
        let (mut loaded, mut compiled) = s.load_engine();
        if let Err(e) = &loaded
            && compile_error::crates_do_not_fit(e)
        {
            // The engine's crates were built apart (issue 38): a manifest cannot see every such
            // mix, so a compile that meets one starts the build over, with nothing linked.
            let rustc_said = e
                .to_string()
                .lines()
                .find(|l| l.contains("can't find crate for `"))
                .unwrap_or("can't find crate")
                .trim()
                .to_string();
            let notice = engine_rebuild_notice(
                &s.prepared.engine,
                &format!("its crates come from different builds (rustc: \"{rustc_said}\")"),
            );

            eprintln!("placelab: {notice}");
            let mut prepared = s.into_prepared();
            if !engine::is_shared(&prepared.engine) {
                engine::discard(&prepared.engine);
            }
            engine::unlink(&prepared.workdir)
                .map_err(|e| format!("cannot make the compile directory afresh: {e}"))?;
            prepared.notices.push(notice);
            prepared.linked = false;
            prepared.take_the_build();
            s = Session::with_evaluator(prepared, sink)?;
            (loaded, compiled) = s.load_engine();
        }
        loaded.map_err(|e| engine_load_failure(&s.prepared.engine, &e))?;
        if (1..usize::MAX).contains(&compiled) && tty {
            let plural = if compiled == 1 { "" } else { "s" };
            eprintln!("built the engine ({compiled} crate{plural}); later starts reuse it");
        }
        s.prepared.keep_engine_build(compiled);
        s.prepared.build_lock = None;
        // From the first cell on, a Ctrl-C reaches a compile only through the interrupter, which
        // knows which cell it was meant for (before, the terminal's second Ctrl-C for a stopped
        // cell ended the next cell's compile).
        s.ctx.set_compile_in_own_process_group(true);
        Ok(s)
    }

    /// A session over a new evaluator (evcxr's context and its cell process), nothing loaded.
    fn with_evaluator(prepared: Prepared, sink: Sink) -> Result<Session, String> {
        let (mut ctx, outputs) = CommandContext::new()
            .map_err(|e| format!("could not start the Rust evaluator: {e}"))?;
        // A new variable's type is named from the run: its cell compiles once.
        ctx.set_type_namer(super::type_names::public_type);
        // Every engine call returns a `Result`: `?` works from the first cell, which then
        // compiles once.
        ctx.allow_question_mark();
        // rust-analyzer in a process of its own: letting it go gives its memory back whole.
        ctx.analyze_in_child_process();
        let cell_output = CellOutput::read(outputs, sink);
        let probe = ProbeClient {
            path: prepared.probe.clone(),
        };
        Ok(Session {
            ctx,
            probe,
            last_seq: 0,
            last_idle_release: 0,
            cell_output,
            sync_token: 0,
            history: Default::default(),
            interrupter: Interrupter::default(),
            prepared,
            value_format: None,
            stand_ins: None,
        })
    }

    /// Compiles and loads the engine into the evaluator; with the number of crates compiled.
    fn load_engine(&mut self) -> (Result<(), EvcxrError>, usize) {
        let cache = setup::cache_dir();
        let preload = preload_code() + &self.cell_process_setup();
        super::progress::while_compiling(&cache, || execute_preload(&mut self.ctx, &preload))
    }

    /// The session's directory and paths, its evaluator ended (its cell process stops).
    fn into_prepared(self) -> Prepared {
        self.prepared
    }

    /// What a new cell process runs first: the side channel, and the value format `:fmt` set.
    pub(super) fn cell_process_setup(&self) -> String {
        let mut code = String::from("placelab::probe::serve_from_env();");
        if let Some(f) = &self.value_format {
            code.push('\n');
            code.push_str(&value_format_code(f));
        }
        if let Some(call) = &self.stand_ins {
            code.push_str(&format!("\nlet _ = placelab::cuda::{call};"));
        }
        code
    }

    /// Remembers the stand-in GPUs `:simulate` just made in the cell process (`cuda::{call}`),
    /// or that it turned them off (`None`), for a restarted process to make them again.
    pub(super) fn set_stand_ins(&mut self, call: Option<String>) {
        self.stand_ins = call;
    }

    /// Loads rust-analyzer now, in its process (the engine's and std's sources: about 3 s on a
    /// 2-core machine, `benches/session.rs`), so that the next completion answers at once: the REPL
    /// does it after the start, while the user reads or types. Changes no state.
    pub fn warm_up(&mut self) {
        let code = "let warm_up = Tensor::randn([1], &Device::Cpu)?;\nwarm_up.";
        let _ = self.ctx.completions(code, code.len());
    }

    /// Whether rust-analyzer holds the engine's and std's sources: loaded by the first
    /// completion or inspection (cells take their variables' types from the run), and kept until
    /// [`Session::release_analyzer`].
    pub fn analyzer_loaded(&self) -> bool {
        self.ctx.analyzer_loaded()
    }

    /// Ends rust-analyzer's process, and with it all the memory a completion loaded
    /// (`benches/class-footprint.sh`). The next completion starts and loads it again (seconds).
    /// Changes no state.
    pub fn release_analyzer(&mut self) {
        let _ = self.ctx.release_analyzer();
    }

    /// Sends the cells' `clear_output()` to `clear` (the kernel's iopub); without it (the REPL,
    /// scripts) a clear takes nothing back.
    pub fn on_clear_output(&self, clear: ClearSink) {
        self.cell_output.on_clear(clear);
    }

    /// A handle that stops the running cell from another thread.
    pub fn interrupter(&self) -> Interrupter {
        self.interrupter.clone()
    }

    pub fn workdir(&self) -> &std::path::Path {
        &self.prepared.workdir
    }

    /// The `Debug` format values print with, when `:fmt` changed it.
    pub(super) fn value_format(&self) -> Option<&str> {
        self.value_format.as_deref()
    }

    /// Sets the format values print with: evcxr's `:fmt`, and the prelude's `ShowDebug` in the
    /// cell process (which prints most values), kept in step; a restarted process gets it too.
    pub(super) fn set_value_format(&mut self, format: &str) -> Result<(), String> {
        self.ctx
            .execute(&format!(":fmt {format}"))
            .map_err(|e| format!("evcxr refused `:fmt {format}`: {e}"))?;
        self.value_format = (format != "{:?}").then(|| format.to_string());
        self.ctx
            .execute(&value_format_code(format))
            .map(|_| ())
            .map_err(|e| format!("could not set the value format in the cell process: {e}"))
    }

    /// The devices the cell process can use; `None` while it is not answering.
    pub(super) fn devices(&self) -> Option<DeviceList> {
        match self.probe.ask(Request::Devices)? {
            Reply::Devices(list) => Some(list),
            _ => None,
        }
    }

    pub(super) fn snapshot(&self) -> Snapshot {
        self.probe.snapshot(self.last_seq).unwrap_or_default()
    }

    /// The notices of the session's start (its predecessor died and Jupyter restarted the
    /// kernel; the engine had to be built again), once: the first cell shows them.
    pub(super) fn take_start_notices(&mut self) -> Vec<String> {
        std::mem::take(&mut self.prepared.notices)
    }

    /// Completions for `code` at byte offset `pos`: the replaced range and the candidates.
    pub fn completions(&mut self, code: &str, pos: usize) -> Completion {
        match self.ctx.completions(code, pos) {
            Ok(c) => {
                // `zeros(shape, opts)` is a snippet with its parameters' names; a notebook
                // inserts the name (`zeros`), as Python kernels do.
                let mut names: Vec<String> = Vec::new();
                for c in c.completions {
                    let name = match c.code.find(['(', '[', '{']) {
                        Some(at) if at > 0 => c.code[..at].to_string(),
                        _ => c.code,
                    };
                    if !names.contains(&name) {
                        names.push(name);
                    }
                }
                (c.start_offset, c.end_offset, names)
            }
            Err(_) => (pos, pos, Vec::new()),
        }
    }

    /// The session's variables and their types.
    pub fn variables(&self) -> Vec<(String, String)> {
        self.ctx
            .variables_and_types()
            .map(|(n, t)| (n.to_string(), super::type_names::short(t)))
            .collect()
    }

    /// How many compiles this session's evaluator has started (`:time` says a cell's).
    pub fn compile_count(&self) -> usize {
        self.ctx.compile_count()
    }

    /// What rust-analyzer knows of the expression ending at byte offset `pos` (plain, HTML):
    /// a method's signature and the first lines of its documentation.
    pub fn hover(&mut self, code: &str, pos: usize) -> Option<(String, String)> {
        let (plain, html) = self.ctx.hover_at(code, pos).ok()?;
        (!plain.trim().is_empty()).then_some((plain, html))
    }

    /// The value of a variable as its card or text, without a memory strip.
    pub fn show_variable(&mut self, name: &str) -> Option<Output> {
        let out = self.ctx.execute(name).ok()?;
        let get = |k: &str| out.content_by_mime_type.get(k).cloned();
        Some(Output::Value {
            plain: get("text/plain")?,
            ansi: get("text/x-ansi"),
            html: get("text/html"),
        })
    }

    /// The process that runs cells (0 if it cannot be read).
    fn cell_process_id(&self) -> i32 {
        (self.ctx.process_handle().lock())
            .map(|c| c.id() as i32)
            .unwrap_or(0)
    }

    /// Rust code (or an evcxr command), with the memory lines of what it did.
    pub(super) fn run_code(&mut self, code: &str) -> CellReport {
        let before = self.snapshot();
        let mut report = CellReport::default();
        let mut variables: Vec<String> = self.variables().into_iter().map(|(n, _)| n).collect();
        variables.sort();
        let running = self.interrupter.running.clone();
        let run = running.next_run();
        // A new run: an interrupt that came while none ran is forgotten, and one still on its
        // way for an earlier run will be ignored.
        let named = self.probe.ask(Request::Begin { cell: run }).is_some();
        let pid = self.cell_process_id();
        if !running.begin(pid, run, named) {
            return CellReport::stopped_before_start();
        }
        let result = self.ctx.execute(code);
        running.end();
        let requested = running.requested.swap(false, Ordering::AcqRel);
        report.interrupted = requested;
        let compile_stopped = running.compile_stopped.swap(false, Ordering::AcqRel)
            || (requested
                && result
                    .as_ref()
                    .is_err_and(compile_error::cargo_ended_without_an_error));
        // Wait until the cell's own streams are read to the end (its cards and failure are in).
        self.sync_token += 1;
        if self
            .probe
            .ask(Request::Sync {
                token: self.sync_token,
            })
            .is_some()
        {
            self.cell_output
                .wait_for_sync(self.sync_token, super::probe_client::PROBE_PATIENCE);
        }
        report.outputs.append(&mut self.cell_output.take());
        report.folded = self.cell_output.take_fold();
        match result {
            Ok(out) => {
                let get = |k: &str| out.content_by_mime_type.get(k).cloned();
                // `()` (a cell ending in a loop, say) shows nothing, as Python's `None` does.
                if let Some(plain) = get("text/plain").filter(|p| p != "()") {
                    report.outputs.push(Output::Value {
                        plain,
                        ansi: get("text/x-ansi"),
                        html: get("text/html"),
                    });
                }
            }
            Err(_) if compile_stopped => report.outputs.push(Output::error(
                ErrorKind::Interrupted,
                "interrupted by the user while the cell compiled: none of it ran. \
                 Variables defined before this cell are kept.",
            )),
            Err(e) => {
                let (kind, text) = self.describe_error(code, e, &variables);
                report.outputs.push(Output::error(kind, text));
            }
        }
        // The index checks the cell's GPU kernels made: a bad index fails this cell, not the next.
        // Waiting for them is part of the run, so an interrupt reaches the cell's process and
        // ends the wait; one that came since the code ended leaves the checks to the next wait.
        let now: Vec<String> = self.variables().into_iter().map(|(n, _)| n).collect();
        // (A process restarted since, after the cell ended its own, has no work of the cell's.)
        let same_process = self.cell_process_id() == pid;
        let may_wait = same_process && running.begin(pid, run, named);
        let checks = cell_end::device_checks(&self.probe, code, (&variables, &now), may_wait);
        running.end();
        report.outputs.extend(checks);
        let after = self.snapshot();
        self.last_seq = self.last_seq.max(after.last_seq);
        self.history.push(after.devices.clone());
        let idle_released = self.idle_releases_unsaid(&after);
        report.memory = Some(MemoryChange {
            before,
            after,
            idle_released,
        });
        report
    }

    /// The idle releases of the GPUs' caches in `after` that no strip has said yet; they are
    /// said from now on.
    fn idle_releases_unsaid(&mut self, after: &Snapshot) -> Vec<IdleReleaseLine> {
        let unsaid: Vec<IdleReleaseLine> = (after.idle_releases.iter())
            .filter(|r| r.seq > self.last_idle_release)
            .cloned()
            .collect();
        self.last_idle_release =
            (unsaid.iter().map(|r| r.seq)).fold(self.last_idle_release, u64::max);
        unsaid
    }

    fn describe_error(
        &mut self,
        code: &str,
        e: EvcxrError,
        variables: &[String],
    ) -> (ErrorKind, String) {
        let kind = match &e {
            EvcxrError::CompilationErrors(_) => ErrorKind::Compile,
            EvcxrError::SubprocessTerminated(_) => ErrorKind::ProcessEnded,
            _ => ErrorKind::Error,
        };
        let text = match e {
            // Not the user's doing: the compiler was ended from outside (or by the system, out
            // of memory) after it printed only warnings.
            EvcxrError::CompilationErrors(_) if compile_error::cargo_ended_without_an_error(&e) => {
                return (
                    ErrorKind::Error,
                    "the compiler ended before it finished, with no error in the cell (it was \
                     stopped from outside, or ran out of memory): none of the cell ran, and \
                     variables defined before it are kept. Run the cell again."
                        .to_string(),
                );
            }
            EvcxrError::CompilationErrors(errors) => compile_error::render(code, &errors),
            EvcxrError::SubprocessTerminated(why) => {
                // The process that ran cells is gone, and every variable with it; evcxr restarts
                // it on the next cell. Re-open the side channel there.
                let _ = self.ctx.execute(&self.cell_process_setup());
                self.last_seq = 0;
                let cause = if self
                    .interrupter
                    .running
                    .killed
                    .swap(false, Ordering::AcqRel)
                {
                    format!(
                        "the cell did not stop within {:.1} s of the interrupt (it reached no tensor operation to stop at), so its process was ended",
                        interrupt_grace().as_secs_f64()
                    )
                } else {
                    format!("the cell's process ended ({why})")
                };
                let lost = match variables {
                    [] => String::new(),
                    names => format!(" ({})", names.join(", ")),
                };
                let remade = match self.stand_ins {
                    Some(_) => " `:simulate`'s devices were made again, empty.",
                    None => "",
                };
                format!(
                    "{cause}: every variable was lost{lost} and device memory freed. \
                     The session restarted; `use` lines and dependencies are kept.{remade}"
                )
            }
            EvcxrError::TypeRedefinedVariablesLost(vars) => {
                format!(
                    "a type was redefined, so these variables were dropped: {}",
                    vars.join(", ")
                )
            }
            EvcxrError::Message(m) => compile_error::scrub_generated_names(&m),
        };
        (kind, text)
    }
}
