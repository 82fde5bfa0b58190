//! A profile as a learner reads it: its rows (`profile/rows.rs`: one per op name within each
//! phase, its calls, host and GPU time, predicted time, the memory it took and gave back), then
//! the phase totals, the wall time, how busy each GPU was (host-bound or GPU-bound) and each
//! device's peak. As text (the REPL's, with a sparkline of memory) and as HTML (Jupyter's, with
//! the memory timeline).

use std::fmt::Write;
use std::time::Duration;

use super::html::{Html, el};
use crate::base::op::Op;
use crate::base::units::{human_bytes, human_duration};
use crate::profile::{Bound, MadeBlock, Phase, Profile, Row};

/// The columns a profile's text table shows, and the wall time its percentages are of.
struct Columns {
    /// The ops' GPU time (CUDA events), when one ran on a GPU.
    on_gpu: bool,
    /// The predicted time, when a device stands for a named GPU.
    predicts: bool,
    /// Seconds.
    wall: f64,
}

impl Columns {
    /// One row of the text table.
    fn write_text_row(&self, out: &mut String, r: &Row) {
        let _ = write!(
            out,
            "{:<10} {:<34} {:<8} {:>5} {:>10} {:>5.1}%",
            r.phase.name(),
            truncate(&r.name, 34),
            r.device.to_string(),
            r.calls,
            human_duration(r.measured),
            100.0 * r.measured.as_secs_f64() / self.wall
        );
        if self.on_gpu {
            let _ = write!(
                out,
                " {:>10}",
                r.gpu_time.map_or("–".into(), human_duration)
            );
        }
        if self.predicts {
            let _ = write!(
                out,
                " {:>11}",
                r.predicted
                    .map_or("–".into(), |p| format!("≈ {}", human_duration(p)))
            );
        }
        let _ = writeln!(
            out,
            " {:>10} {:>10}",
            human_bytes(r.allocated as usize),
            human_bytes(r.freed as usize)
        );
    }
}

impl Profile {
    /// "≈ 1.2 ms on an H100 SXM" when every predicting device stands for the same GPU.
    fn predicted_label(&self) -> String {
        let mut gpus: Vec<_> = self.stands_for().values().collect();
        gpus.dedup_by_key(|g| g.name);
        match gpus.as_slice() {
            [one] => format!("on {}", one.with_article()),
            _ => "on the named GPUs".into(),
        }
    }

    /// Per device: the peak, when, the block that reached it, and what the code held then.
    pub fn peak_lines(&self) -> Vec<String> {
        let mut lines = Vec::new();
        for p in self.peaks().values() {
            let start = self.start_allocated(&p.device);
            let above = p.allocated.saturating_sub(start);
            lines.push(format!(
                "{}: peak {} allocated, {} above the start, at {} ({}), reached by {}",
                p.device,
                human_bytes(p.allocated as usize),
                human_bytes(above as usize),
                human_duration(p.at),
                during(&p.reached_by),
                block_text(&p.reached_by)
            ));
            const SHOWN: usize = 4;
            let mut held: Vec<String> = p
                .held
                .iter()
                .take(SHOWN)
                .map(|b| format!("{} ({})", block_text(b), during(b)))
                .collect();
            if p.held.len() > SHOWN {
                let rest: u64 = p.held[SHOWN..].iter().map(|b| b.bytes).sum();
                held.push(format!(
                    "{} more blocks, {}",
                    p.held.len() - SHOWN,
                    human_bytes(rest as usize)
                ));
            }
            if !held.is_empty() {
                lines.push(format!(
                    "  made by this code and held at the peak: {}",
                    held.join(" · ")
                ));
            }
        }
        lines
    }

    /// One line per GPU: how busy it was over the step, and what that says.
    fn busy_lines(&self) -> Vec<String> {
        self.gpu_busy()
            .iter()
            .map(|g| {
                let mut line = format!(
                    "{} busy {} (CUDA events) of the {} until its work was done ({:.0}%)",
                    g.device,
                    human_duration(g.busy),
                    human_duration(g.span),
                    100.0 * g.share()
                );
                line.push_str(match (self.blocking(), g.bound()) {
                    (true, _) => ": each op waited for its work (CUDA_LAUNCH_BLOCKING=1), so the GPU idled while the host queued the next; profile without blocking to see what bounds the step",
                    (false, Bound::Host) => ": host-bound, the GPU waited for the host to queue work",
                    (false, Bound::Gpu) => ": GPU-bound, the host queued work faster than the GPU ran it",
                    (false, Bound::Mixed) => ": neither clearly host- nor GPU-bound, the GPU idled part of the step",
                });
                line
            })
            .collect()
    }

    /// The measured column's head: on a GPU the host's time beside the GPU's.
    fn measured_head(&self) -> &'static str {
        match self.gpu_total() {
            Some(_) => "host",
            None => "measured",
        }
    }

    /// A phase's total: "1.20 ms", or on a GPU "1.20 ms host, 310.2 µs on GPU".
    fn phase_total_text(&self, phase: Phase) -> String {
        let host = human_duration(self.phase_total(phase));
        let gpu = self.ops().iter().filter(|o| o.phase == phase);
        let gpu: Option<Duration> = gpu.filter_map(|o| o.gpu_time).reduce(|a, b| a + b);
        match (self.gpu_total(), gpu) {
            (Some(_), g) => format!(
                "{host} host, {} on GPU",
                human_duration(g.unwrap_or_default())
            ),
            (None, _) => host,
        }
    }

    /// Ops against wall time: "ops 11.8 ms of 12.3 ms (96%)".
    pub fn coverage_line(&self) -> String {
        let wall = self.wall().as_secs_f64().max(1e-12);
        let mut line = format!(
            "{} ops took {} of the code's {} ({:.0}%); the rest ran between ops (graph recording, your code)",
            self.ops().len(),
            human_duration(self.ops_total()),
            human_duration(self.wall()),
            100.0 * self.ops_total().as_secs_f64() / wall
        );
        // Only a wait worth reading: a few microseconds of it are in every profile.
        if let Some(waited) = self.cpu_wait().filter(|w| w.as_secs_f64() >= 0.05 * wall) {
            let _ = write!(
                line,
                "; for {} of the code's time this thread waited for a CPU core, other work having them",
                human_duration(waited)
            );
        }
        if let Some(step) = self.predicted_step() {
            let secs = |s: f64| human_duration(Duration::from_secs_f64(s));
            let bound = match step.bound {
                crate::cost::Bound::Host => "host-bound: the GPU would wait for the host",
                crate::cost::Bound::Gpu => "GPU-bound: the host would queue work faster",
            };
            let _ = write!(
                line,
                "; ≈ {} {} (predicted: the host queues the ops in {}, the GPU runs them in {}; {bound})",
                secs(step.seconds),
                self.predicted_label(),
                secs(step.host_seconds),
                secs(step.gpu_seconds),
            );
        }
        line
    }

    /// What a phase allocated and freed outside any op: "freed 115.00 KiB (tensors dropped
    /// between ops)".
    fn between_ops(&self, phase: Phase) -> Option<String> {
        let bytes = |b: Option<u64>| b.map(|b| human_bytes(b as usize));
        let (allocated, freed) = self.outside_ops(phase);
        match (bytes(allocated), bytes(freed)) {
            (None, None) => None,
            (Some(a), None) => Some(format!("allocated {a} (tensors made outside ops)")),
            (None, Some(f)) => Some(format!("freed {f} (tensors dropped between ops)")),
            (Some(a), Some(f)) => Some(format!("allocated {a}, freed {f} outside ops")),
        }
    }

    /// The table as text (the REPL's, and `text/plain`).
    pub fn text(&self) -> String {
        let mut out = String::new();
        if let Some(f) = self.failure() {
            let _ = writeln!(out, "the code failed, so this profile stops there: {f}");
        }
        let columns = Columns {
            on_gpu: self.gpu_total().is_some(),
            predicts: self.predicts(),
            wall: self.wall().as_secs_f64().max(1e-12),
        };
        self.write_text_head(&mut out, &columns);
        let rows = self.rows();
        for phase in self.phases() {
            for r in rows.iter().filter(|r| r.phase == phase) {
                columns.write_text_row(&mut out, r);
            }
            if let Some(between) = self.between_ops(phase) {
                let _ = writeln!(
                    out,
                    "{:<10} {:<34} {between}",
                    phase.name(),
                    "(between ops)"
                );
            }
            let _ = writeln!(
                out,
                "{:<10} total {}",
                phase.name(),
                self.phase_total_text(phase)
            );
        }
        let _ = writeln!(out, "{}", self.coverage_line());
        for line in self.busy_lines() {
            let _ = writeln!(out, "{line}");
        }
        for d in self.devices() {
            let _ = writeln!(out, "{d} memory {}", self.sparkline(&d, 48));
        }
        for line in self.peak_lines() {
            let _ = writeln!(out, "{line}");
        }
        out.trim_end().to_string()
    }

    /// The text table's head: a column per field, the GPU's and the predicted time where shown.
    fn write_text_head(&self, out: &mut String, columns: &Columns) {
        let _ = write!(
            out,
            "{:<10} {:<34} {:<8} {:>5} {:>10} {:>6}",
            "phase",
            "op",
            "device",
            "calls",
            self.measured_head(),
            "%"
        );
        if columns.on_gpu {
            let _ = write!(out, " {:>10}", "on GPU");
        }
        if columns.predicts {
            let _ = write!(out, " {:>11}", "predicted");
        }
        let _ = writeln!(out, " {:>10} {:>10}", "allocated", "freed");
    }

    /// The table and the memory timeline as HTML (Jupyter's rendering).
    pub fn html(&self) -> String {
        const PAD: &str = "padding:1px 8px";
        let td = |s: &str| el("td").style(PAD).text(s);
        let failure = self.failure().map(|f| {
            el("div")
                .style("color:#b00020")
                .child(el("b").text("The code failed"))
                .text(&format!(", so this profile stops there: {f}"))
        });
        let predicts = self.predicts();
        let on_gpu = self.gpu_total().is_some();
        let measured_head = match on_gpu {
            true => "host (CPU time)",
            false => "measured",
        };
        let mut heads = vec!["phase", "op", "device", "calls", measured_head, "% of wall"];
        if on_gpu {
            heads.push("on the GPU (CUDA events)");
        }
        let predicted_head = format!("predicted {}", self.predicted_label());
        if predicts {
            heads.push(&predicted_head);
        }
        heads.extend(["allocated", "freed"]);
        let heads = heads
            .into_iter()
            .map(|h| el("th").style("text-align:left;padding:1px 8px").text(h));
        let mut table = el("table")
            .style("border-collapse:collapse")
            .child(el("tr").children(heads));
        let wall = self.wall().as_secs_f64().max(1e-12);
        let rows = self.rows();
        for phase in self.phases() {
            for r in rows.iter().filter(|r| r.phase == phase) {
                let mut cells = vec![
                    phase.name().to_string(),
                    r.name.clone(),
                    r.device.to_string(),
                    r.calls.to_string(),
                    human_duration(r.measured),
                    format!("{:.1}%", 100.0 * r.measured.as_secs_f64() / wall),
                ];
                if on_gpu {
                    cells.push(r.gpu_time.map_or("–".into(), human_duration));
                }
                if predicts {
                    cells.push(
                        r.predicted
                            .map_or("–".into(), |p| format!("≈ {}", human_duration(p))),
                    );
                }
                cells.push(human_bytes(r.allocated as usize));
                cells.push(human_bytes(r.freed as usize));
                table = table.child(el("tr").children(cells.iter().map(String::as_str).map(td)));
            }
            let between = self
                .between_ops(phase)
                .map_or(String::new(), |b| format!(" (between ops: {b})"));
            let total = self.phase_total_text(phase);
            table = table.child(
                el("tr")
                    .style("border-top:1px solid #ccc")
                    .child(el("td").style(PAD).child(el("b").text(phase.name())))
                    .child(td(&format!("total{between}")).attr("colspan", "3"))
                    .child(el("td").style(PAD).child(el("b").text(&total))),
            );
        }
        el("div")
            .class("placelab-profile")
            .style("font-family:monospace;font-size:12px")
            .children(failure)
            .child(table)
            .child(el("div").text(&self.coverage_line()))
            .children(self.busy_lines().iter().map(|l| el("div").text(l)))
            .child(Html::raw(self.timeline_svg()))
            .children(self.peak_lines().iter().map(|l| el("div").text(l)))
            .into_string()
    }
}

/// "the 16.00 MiB output of matmul" (or the engine buffer it is).
fn block_text(b: &MadeBlock) -> String {
    let size = human_bytes(b.bytes as usize);
    match (b.engine_buffer, b.op) {
        (Some(what), _) => format!("the {size} {what}"),
        (None, Some(op)) => format!("the {size} output of {op}"),
        (None, None) => format!("a {size} tensor made outside any op"),
    }
}

/// When a block was made: "forward", "backward, in matmul's backward".
fn during(b: &MadeBlock) -> String {
    match b.grad_fn {
        Some(Op::AccumulateGrad) => "backward, into .grad".into(),
        Some(f) => format!("backward, in {f}'s backward"),
        None => b.phase.name().into(),
    }
}

fn truncate(s: &str, n: usize) -> String {
    if s.chars().count() <= n {
        s.to_string()
    } else {
        let cut: String = s.chars().take(n - 1).collect();
        format!("{cut}…")
    }
}
