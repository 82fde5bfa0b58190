//! How a cell's report looks in a terminal (with colour) or a plain log.

use super::report::{CellReport, Output};

/// The report as text; `colour` adds ANSI colour (red errors, dim memory lines, coloured cards).
pub fn render(report: &CellReport, colour: bool) -> String {
    let mut out = Vec::new();
    for o in &report.outputs {
        match o {
            Output::Value { plain, ansi, .. } => out.push(if colour {
                ansi.clone().unwrap_or_else(|| plain.clone())
            } else {
                plain.clone()
            }),
            Output::Card { plain, ansi, .. } => {
                out.push(if colour { ansi.clone() } else { plain.clone() })
            }
            Output::Info(t) | Output::Table { plain: t, .. } => out.push(t.clone()),
            Output::Plot { path, .. } => {
                out.push(format!("wrote {} (open it in a browser)", path.display()))
            }
            Output::Error { kind, text } => {
                let text = kind.headed(text, "       ");
                out.push(if colour {
                    format!("\x1b[31m{text}\x1b[0m")
                } else {
                    text
                });
            }
        }
    }
    for m in report.memory.iter().flat_map(|m| m.lines()) {
        out.push(if colour {
            format!("\x1b[2m{m}\x1b[0m")
        } else {
            m
        });
    }
    out.join("\n")
}
