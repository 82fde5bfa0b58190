//! `placelab run-notebook NB.ipynb [--out OUT.ipynb]`: runs a notebook's code cells in order
//! through the kernel's own `Executor` (the same session, streams, memory strip and errors a
//! Jupyter client is sent), builds each cell's outputs as nbclient does, and writes the notebook
//! as `jupyter nbconvert --execute --to notebook` would, with no Python or Jupyter on the machine.

use std::path::{Path, PathBuf};
use std::time::Instant;

use jupyter_protocol::{ExecuteRequest, JupyterMessage, ReplyStatus};
use serde_json::{Value, json};

use super::execute::Executor;
use super::iopub::Iopub;
use super::notebook_file::{CellOutputs, Notebook, language_info};
use crate::evaluator::Evaluator;
use crate::interrupter::{self, interrupt_grace};
use crate::session::Prepared;

/// What `run-notebook` was asked.
pub struct Options {
    pub out: PathBuf,
    /// Go on past a failed cell (by default only a cell tagged `raises-exception` may fail).
    pub allow_errors: bool,
}

/// Where the notebook goes without `--out`: beside it, named as nbconvert names it.
pub fn default_out(notebook: &Path) -> PathBuf {
    let stem = notebook.file_stem().unwrap_or_default().to_string_lossy();
    notebook.with_file_name(format!("{stem}.nbconvert.ipynb"))
}

/// Why the run stopped before the last cell.
enum Stop {
    Failed { cell: String, error: String },
    Interrupted { cell: String },
}

/// Runs the cells and writes the notebook, also when a cell stopped the run (what ran is kept);
/// returns the exit code: 0, 1 when a cell failed or Ctrl-C stopped the run, 2 when the session
/// could not start or the file could not be written.
pub fn run(mut notebook: Notebook, options: &Options, prepared: Prepared) -> i32 {
    let runtime = match super::runtime() {
        Ok(r) => r,
        Err(e) => return fail(&e),
    };
    let started = Instant::now();
    let (ran, stop, evaluator) = runtime.block_on(run_cells(&mut notebook, options, prepared));
    runtime.shutdown_timeout(std::time::Duration::from_millis(200));
    evaluator.finish(interrupt_grace() + std::time::Duration::from_secs(3));
    notebook.json["metadata"]["language_info"] =
        language_info(&super::replies::kernel_info("").language_info);
    if let Err(e) = notebook.write(&options.out) {
        return fail(&e);
    }
    let total = notebook.code_cells.len();
    let seconds = started.elapsed().as_secs_f64();
    let out = options.out.display();
    match stop {
        None => {
            eprintln!("ran {ran} code cells in {seconds:.1} s; wrote {out}");
            0
        }
        Some(Stop::Failed { cell, error }) => {
            eprintln!(
                "{cell} failed, so the run stopped there ({ran} of {total} code cells ran; \
                 {out} has their outputs):\n{error}\nTag a cell raises-exception if its error is \
                 its lesson, or pass --allow-errors to run every cell whatever fails."
            );
            1
        }
        Some(Stop::Interrupted { cell }) => {
            eprintln!(
                "interrupted at {cell}: {ran} of {total} code cells ran; {out} has their outputs"
            );
            1
        }
    }
}

/// The cells, one after another, as a client's execute requests; returns how many ran, why the
/// run stopped early, and the evaluator (to finish once the runtime is down).
async fn run_cells(
    notebook: &mut Notebook,
    options: &Options,
    prepared: Prepared,
) -> (usize, Option<Stop>, Evaluator) {
    let (iopub, mut messages) = Iopub::recording();
    let mut executor = Executor::start(iopub, prepared);
    let evaluator = executor.evaluator.clone();
    let sigints = interrupter::sigints();
    let total = notebook.code_cells.len();
    let mut ran = 0;
    for (n, index) in notebook.code_cells.clone().into_iter().enumerate() {
        let cell = notebook.name(index);
        if interrupter::sigints() != sigints {
            return (ran, Some(Stop::Interrupted { cell }), evaluator);
        }
        let request = ExecuteRequest::new(notebook.source(index));
        let message = JupyterMessage::new(request.clone(), None);
        let started = Instant::now();
        let reply = executor.execute(&message, &request).await;
        // Every message of the cell was handed to the channel before its reply was made.
        let mut outputs = CellOutputs::default();
        while let Ok(m) = messages.try_recv() {
            if m.parent_header.as_ref().map(|p| &p.msg_id) == Some(&message.header.msg_id) {
                outputs.take(&m.content);
            }
        }
        let error = (outputs.outputs.iter())
            .find(|o| o["output_type"] == "error")
            .map(error_text);
        let entry = notebook.cell_mut(index);
        entry["outputs"] = Value::Array(outputs.outputs);
        entry["execution_count"] = json!(reply.execution_count.0);
        ran += 1;
        let failed = reply.status == ReplyStatus::Error;
        let seconds = started.elapsed().as_secs_f64();
        let interrupted = interrupter::sigints() != sigints;
        let how = match (failed, interrupted, notebook.may_fail(index)) {
            (false, _, _) => "ok",
            (true, true, _) => "interrupted",
            (true, false, true) => "failed, as its tag raises-exception says it may",
            (true, false, false) => "failed",
        };
        eprintln!("[{}/{total}] {cell}: {how} ({seconds:.1} s)", n + 1);
        if interrupted {
            return (ran, Some(Stop::Interrupted { cell }), evaluator);
        }
        if failed && !notebook.may_fail(index) && !options.allow_errors {
            let error = error.unwrap_or_else(|| "(the cell failed)".into());
            return (ran, Some(Stop::Failed { cell, error }), evaluator);
        }
    }
    (ran, None, evaluator)
}

/// An error output as a terminal shows it: its traceback, without the red.
fn error_text(output: &Value) -> String {
    let lines = output["traceback"].as_array().into_iter().flatten();
    let text: Vec<String> = lines
        .filter_map(Value::as_str)
        .map(|l| l.replace("\x1b[31m", "").replace("\x1b[0m", ""))
        .collect();
    text.join("\n")
}

fn fail(message: &str) -> i32 {
    eprintln!("placelab: {message}");
    2
}
