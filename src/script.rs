//! `placelab run-script FILE`: runs a file of cells as the REPL would, printing each cell and
//! what it produced. Cells are separated by lines starting with `// %%`; a line starting with `:`
//! (a command such as `:mem`) is a cell of its own. Exits 1 if any cell failed.

use super::evaluator::Evaluator;
use super::interrupter;
use super::render::render;

/// Splits a script into cells.
pub fn cells(text: &str) -> Vec<String> {
    let mut cells = Vec::new();
    let mut current = String::new();
    let mut flush = |current: &mut String| {
        if !current.trim().is_empty() {
            cells.push(current.trim_end().to_string());
        }
        current.clear();
    };
    for line in text.lines() {
        if line.starts_with("// %%") {
            flush(&mut current);
        } else if line.starts_with(':') {
            flush(&mut current);
            current.push_str(line);
            flush(&mut current);
        } else {
            current.push_str(line);
            current.push('\n');
        }
    }
    flush(&mut current);
    cells
}

/// Runs every cell in order; returns whether all that ran succeeded. An exit, or a Ctrl-C (during
/// a cell, which it interrupts, or between cells), skips the rest, as it would a Python script.
pub fn run(evaluator: &Evaluator, text: &str) -> bool {
    let sigints = interrupter::sigints();
    let mut all_ok = true;
    for cell in cells(text) {
        if interrupter::sigints() != sigints {
            println!("(interrupted: the rest of the script was not run)");
            return false;
        }
        println!(">> {}", cell.replace('\n', "\n.. "));
        if super::magics::is_exit(&cell) {
            break;
        }
        let report = evaluator.execute(&cell, |_| {});
        all_ok &= report.ok();
        let shown = render(&report, false);
        if !shown.is_empty() {
            println!("{shown}");
        }
    }
    all_ok
}

#[cfg(test)]
mod tests {
    #[test]
    fn splits_cells_on_markers_and_commands() {
        let c = super::cells("let x = 1;\n\nlet y = 2;\n// %%\nx + y\n:mem\n:del x\n");
        assert_eq!(
            c,
            vec!["let x = 1;\n\nlet y = 2;", "x + y", ":mem", ":del x"]
        );
    }
}
