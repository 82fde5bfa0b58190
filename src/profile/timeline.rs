//! A profile's memory timeline: allocated bytes of each device over the code's run, over bands
//! for its phases, with each device's peak marked. As an SVG (Jupyter) and as a one-line
//! sparkline (the REPL).

use std::fmt::Write;
use std::time::Duration;

use super::{Peak, Phase, Profile};
use crate::device::Device;
use crate::html::{el, escape};
use crate::units::{human_bytes, human_duration};

const WIDTH: f64 = 640.0;
const HEIGHT: f64 = 200.0;
const LEFT: f64 = 72.0;
const RIGHT: f64 = 12.0;
const TOP: f64 = 16.0;
const BOTTOM: f64 = 28.0;
const LINE_COLOURS: [&str; 4] = ["#1565c0", "#2e7d32", "#6a1b9a", "#ef6c00"];

fn band_colour(phase: Phase) -> &'static str {
    match phase {
        Phase::Forward => "#e3f2fd",
        Phase::Backward => "#fce4ec",
        Phase::Optimizer => "#e8f5e9",
    }
}

/// The timeline's plotting area: `w × h` pixels right of `LEFT` and under `TOP`, for `end`
/// seconds across and `top` bytes up.
struct Plot {
    end: f64,
    top: f64,
    w: f64,
    h: f64,
}

impl Plot {
    /// The x of a time since the start.
    fn x(&self, t: Duration) -> f64 {
        LEFT + self.w * t.as_secs_f64() / self.end
    }

    /// The y of an allocated byte count.
    fn y(&self, b: u64) -> f64 {
        TOP + self.h * (1.0 - b as f64 / self.top)
    }

    /// A phase's band from `from` to `to`, named inside when it is wide enough.
    fn band(&self, svg: &mut String, phase: Phase, from: Duration, to: Duration) {
        let (x0, x1, h) = (self.x(from), self.x(to), self.h);
        let _ = write!(
            svg,
            "<rect x=\"{x0:.1}\" y=\"{TOP}\" width=\"{:.1}\" height=\"{h}\" fill=\"{}\"><title>{}</title></rect>",
            (x1 - x0).max(0.5),
            band_colour(phase),
            phase.name()
        );
        if x1 - x0 > 48.0 {
            let _ = write!(
                svg,
                "<text x=\"{:.1}\" y=\"{:.1}\" fill=\"#555\">{}</text>",
                x0 + 3.0,
                TOP + 11.0,
                phase.name()
            );
        }
    }

    /// The two axes, the byte labels (the top, 0 B) and the time labels (0, the wall time).
    fn axes(&self, svg: &mut String, wall: Duration) {
        let (w, h) = (self.w, self.h);
        let _ = write!(
            svg,
            "<line x1=\"{LEFT}\" y1=\"{0}\" x2=\"{1}\" y2=\"{0}\" stroke=\"#333\"/><line x1=\"{LEFT}\" y1=\"{TOP}\" x2=\"{LEFT}\" y2=\"{0}\" stroke=\"#333\"/>",
            TOP + h,
            LEFT + w
        );
        let _ = write!(
            svg,
            "<text x=\"{0}\" y=\"{1}\" text-anchor=\"end\">{2}</text><text x=\"{0}\" y=\"{3}\" text-anchor=\"end\">0 B</text>",
            LEFT - 4.0,
            TOP + 4.0,
            human_bytes(self.top as usize),
            TOP + h
        );
        let _ = write!(
            svg,
            "<text x=\"{LEFT}\" y=\"{0}\">0</text><text x=\"{1}\" y=\"{0}\" text-anchor=\"end\">{2} (wall)</text>",
            HEIGHT - 8.0,
            LEFT + w,
            human_duration(wall)
        );
    }

    /// `device`'s allocated bytes as a step line: level until each change, then straight up or
    /// down.
    fn line(&self, svg: &mut String, device: &Device, colour: &str, steps: &[(Duration, u64)]) {
        let mut points = String::new();
        let mut previous: Option<u64> = None;
        for &(t, b) in steps {
            if let Some(p) = previous {
                let _ = write!(points, "{:.1},{:.1} ", self.x(t), self.y(p));
            }
            let _ = write!(points, "{:.1},{:.1} ", self.x(t), self.y(b));
            previous = Some(b);
        }
        let _ = write!(
            svg,
            "<polyline fill=\"none\" stroke=\"{colour}\" stroke-width=\"1.5\" points=\"{}\"><title>{device} allocated</title></polyline>",
            points.trim_end()
        );
    }

    /// A device's peak: a dot, labelled toward the middle of the plot.
    fn peak(&self, svg: &mut String, p: &Peak) {
        let (px, py) = (self.x(p.at), self.y(p.allocated));
        let anchor = if px > LEFT + self.w / 2.0 {
            "end"
        } else {
            "start"
        };
        let (tx, ty) = (
            if anchor == "end" { px - 5.0 } else { px + 5.0 },
            (py - 5.0).max(TOP + 22.0),
        );
        let label = format!("peak {}", escape(&human_bytes(p.allocated as usize)));
        // Drawn twice, a white outline under the red, so the line never hides it.
        let _ = write!(
            svg,
            "<circle cx=\"{px:.1}\" cy=\"{py:.1}\" r=\"3.5\" fill=\"#d32f2f\"/><text x=\"{tx:.1}\" y=\"{ty:.1}\" fill=\"white\" stroke=\"white\" stroke-width=\"3\" text-anchor=\"{anchor}\">{label}</text><text x=\"{tx:.1}\" y=\"{ty:.1}\" fill=\"#d32f2f\" text-anchor=\"{anchor}\">{label}</text>"
        );
    }
}

impl Profile {
    /// `device`'s allocated bytes as steps: (time, bytes), from the start to the end.
    pub fn steps(&self, device: &Device) -> Vec<(Duration, u64)> {
        let Some(start) = self.start_allocated.get(device) else {
            return Vec::new();
        };
        let mut steps = vec![(Duration::ZERO, *start)];
        steps.extend(
            self.memory
                .iter()
                .filter(|p| p.device == *device)
                .map(|p| (p.at, p.allocated)),
        );
        let last = steps.last().map_or(0, |s| s.1);
        steps.push((
            self.wall.max(steps.last().map_or(Duration::ZERO, |s| s.0)),
            last,
        ));
        steps
    }

    /// The runs of ops in one phase: (phase, from, to).
    fn phase_bands(&self) -> Vec<(Phase, Duration, Duration)> {
        let mut bands: Vec<(Phase, Duration, Duration)> = Vec::new();
        for op in &self.ops {
            let end = op.start + op.measured;
            match bands.last_mut() {
                // A frame (the autograd engine) is recorded after the ops inside it.
                Some(b) if b.0 == op.phase => {
                    b.1 = b.1.min(op.start);
                    b.2 = b.2.max(end);
                }
                _ => bands.push((op.phase, op.start, end)),
            }
        }
        bands
    }

    /// The memory timeline as an SVG: a step line per device over phase bands, peaks marked.
    pub fn timeline_svg(&self) -> String {
        let devices = self.devices();
        if devices.is_empty() {
            return el("div")
                .text("no memory was allocated or freed")
                .into_string();
        }
        let top = devices
            .iter()
            .flat_map(|d| self.steps(d))
            .map(|s| s.1)
            .max()
            .unwrap_or(1)
            .max(1) as f64;
        let plot = Plot {
            end: self.wall.as_secs_f64().max(1e-9),
            top,
            w: WIDTH - LEFT - RIGHT,
            h: HEIGHT - TOP - BOTTOM,
        };
        let mut svg = format!(
            "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"{WIDTH}\" height=\"{HEIGHT}\" font-family=\"sans-serif\" font-size=\"11\">"
        );
        for (phase, from, to) in self.phase_bands() {
            plot.band(&mut svg, phase, from, to);
        }
        plot.axes(&mut svg, self.wall);
        for (i, d) in devices.iter().enumerate() {
            let colour = LINE_COLOURS[i % LINE_COLOURS.len()];
            plot.line(&mut svg, d, colour, &self.steps(d));
            // The legend sits under the axis, between its two time labels.
            let _ = write!(
                svg,
                "<text x=\"{:.1}\" y=\"{:.1}\" fill=\"{colour}\" text-anchor=\"middle\">── {d} allocated</text>",
                LEFT + plot.w * (i + 1) as f64 / (devices.len() + 1) as f64,
                HEIGHT - 8.0
            );
            if let Some(p) = self.peaks.get(d) {
                plot.peak(&mut svg, p);
            }
        }
        svg.push_str("</svg>");
        svg
    }

    /// `device`'s allocated bytes over the run in `width` characters (▁ the least, █ the most),
    /// with the range: "▁▁▃▅█▅▃▁ 1.2 MiB … 4.5 MiB".
    pub fn sparkline(&self, device: &Device, width: usize) -> String {
        const LEVELS: [char; 8] = ['▁', '▂', '▃', '▄', '▅', '▆', '▇', '█'];
        let steps = self.steps(device);
        if steps.is_empty() || width == 0 {
            return String::new();
        }
        let end = self.wall.as_secs_f64().max(1e-9);
        // Each character shows the most held in its slice of time.
        let mut most = vec![None::<u64>; width];
        let mut held = steps[0].1;
        for (i, slot) in most.iter_mut().enumerate() {
            let (from, to) = (
                end * i as f64 / width as f64,
                end * (i + 1) as f64 / width as f64,
            );
            let mut m = held;
            for (t, b) in &steps {
                let t = t.as_secs_f64();
                if t >= from && t < to {
                    m = m.max(*b);
                    held = *b;
                } else if t < from {
                    held = *b;
                }
            }
            *slot = Some(m.max(held));
        }
        let lo = steps.iter().map(|s| s.1).min().unwrap_or(0);
        let hi = steps.iter().map(|s| s.1).max().unwrap_or(0);
        let line: String = most
            .into_iter()
            .map(|m| {
                let m = m.unwrap_or(lo);
                let level = if hi == lo {
                    0
                } else {
                    ((m - lo) as f64 / (hi - lo) as f64 * 7.0).round() as usize
                };
                LEVELS[level.min(7)]
            })
            .collect();
        format!(
            "{line} {} … {}",
            human_bytes(lo as usize),
            human_bytes(hi as usize)
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::dtype::DType;
    use crate::profile::{MadeBlock, MemoryPoint, OpRecord, Peak};

    fn ms(n: u64) -> Duration {
        Duration::from_millis(n)
    }

    fn op(phase: Phase, start: u64, took: u64) -> OpRecord {
        OpRecord {
            name: "matmul",
            phase,
            grad_fn: None,
            device: Device::Cpu,
            start: ms(start),
            measured: ms(took),
            gpu_time: None,
            predicted: None,
            allocated: 0,
            freed: 0,
        }
    }

    /// The CPU holds 100 B, rises to 400 B at 2 ms (the peak, a 300 B matmul output made in the
    /// backward pass) and falls to 200 B at 6 ms; the code takes 8 ms.
    fn profile() -> Profile {
        let block = MadeBlock {
            bytes: 300,
            dtype: DType::F32,
            numel: 75,
            op: Some("matmul"),
            phase: Phase::Backward,
            grad_fn: Some("matmul"),
            engine_buffer: None,
        };
        let cpu = Device::Cpu;
        let mut p = Profile {
            wall: ms(8),
            ops: vec![
                op(Phase::Forward, 0, 1),
                op(Phase::Backward, 1, 5),
                op(Phase::Optimizer, 6, 1),
            ],
            memory: vec![
                MemoryPoint {
                    at: ms(2),
                    device: cpu,
                    allocated: 400,
                },
                MemoryPoint {
                    at: ms(6),
                    device: cpu,
                    allocated: 200,
                },
            ],
            ..Profile::default()
        };
        p.start_allocated.insert(cpu, 100);
        let peak = Peak {
            device: cpu,
            allocated: 400,
            at: ms(2),
            reached_by: block.clone(),
            held: vec![block],
        };
        p.peaks.insert(cpu, peak);
        p
    }

    #[test]
    fn the_timeline_steps_from_the_start_through_every_change_to_the_end() {
        let steps = profile().steps(&Device::Cpu);
        assert_eq!(
            steps,
            [(ms(0), 100), (ms(2), 400), (ms(6), 200), (ms(8), 200)]
        );
        // One character a millisecond, each the most held in it (400 B in the 6th, until 6 ms).
        assert_eq!(
            profile().sparkline(&Device::Cpu, 8),
            "▁▁█████▃ 100 B … 400 B"
        );
        assert_eq!(profile().steps(&Device::Cuda(0)), []);
    }

    #[test]
    fn the_svg_draws_the_phases_the_line_and_the_peak() {
        let svg = profile().timeline_svg();
        assert_eq!(svg.matches("<rect").count(), 3, "{svg}");
        for phase in ["forward", "backward", "optimizer"] {
            assert!(svg.contains(&format!("<title>{phase}</title>")), "{svg}");
        }
        assert_eq!(svg.matches("<polyline").count(), 1);
        assert!(
            svg.contains("peak 400 B") && svg.contains("cpu allocated"),
            "{svg}"
        );
        let lines = profile().peak_lines();
        assert!(
            lines[0].contains("peak 400 B allocated, 300 B above the start, at 2.00 ms (backward, in matmul's backward), reached by the 300 B output of matmul"),
            "{lines:?}"
        );
    }
}
