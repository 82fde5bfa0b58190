//! A profile's memory timeline: allocated bytes of each device over the code's run, over bands
//! for its phases, with each device's peak marked. As an SVG (Jupyter), every element and text
//! through the escaping builder, and as a one-line sparkline (the REPL). The steps and the
//! phase bands are the profile's (`profile/timeline.rs`).

use std::time::Duration;

use super::html::{El, el, svg};
use crate::base::units::{human_bytes, human_duration};
use crate::device::Device;
use crate::profile::{Peak, Phase, Profile};

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

/// A coordinate as the SVG writes it: one decimal.
fn at(v: f64) -> String {
    format!("{v:.1}")
}

/// An SVG `<text>` at (x, y), its words escaped.
fn label(x: f64, y: f64, words: &str) -> El {
    el("text").attr("x", &at(x)).attr("y", &at(y)).text(words)
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
    fn band(&self, phase: Phase, from: Duration, to: Duration) -> Vec<El> {
        let (x0, x1) = (self.x(from), self.x(to));
        let rect = el("rect")
            .attr("x", &at(x0))
            .attr("y", &at(TOP))
            .attr("width", &at((x1 - x0).max(0.5)))
            .attr("height", &at(self.h))
            .attr("fill", band_colour(phase))
            .child(el("title").text(phase.name()));
        let mut band = vec![rect];
        if x1 - x0 > 48.0 {
            band.push(label(x0 + 3.0, TOP + 11.0, phase.name()).attr("fill", "#555"));
        }
        band
    }

    /// The two axes, the byte labels (the top, 0 B) and the time labels (0, the wall time).
    fn axes(&self, wall: Duration) -> Vec<El> {
        let (bottom, right) = (TOP + self.h, LEFT + self.w);
        let rule = |x1: f64, y1: f64, x2: f64, y2: f64| {
            let line = el("line").attr("x1", &at(x1)).attr("y1", &at(y1));
            line.attr("x2", &at(x2))
                .attr("y2", &at(y2))
                .attr("stroke", "#333")
        };
        let end = |e: El| e.attr("text-anchor", "end");
        let top_bytes = human_bytes(self.top as usize);
        vec![
            rule(LEFT, bottom, right, bottom),
            rule(LEFT, TOP, LEFT, bottom),
            end(label(LEFT - 4.0, TOP + 4.0, &top_bytes)),
            end(label(LEFT - 4.0, bottom, "0 B")),
            label(LEFT, HEIGHT - 8.0, "0"),
            end(label(
                right,
                HEIGHT - 8.0,
                &format!("{} (wall)", human_duration(wall)),
            )),
        ]
    }

    /// `device`'s allocated bytes as a step line: level until each change, then straight up or
    /// down.
    fn line(&self, device: &Device, colour: &str, steps: &[(Duration, u64)]) -> El {
        let mut points = Vec::new();
        let mut previous: Option<u64> = None;
        for &(t, b) in steps {
            if let Some(p) = previous {
                points.push(format!("{:.1},{:.1}", self.x(t), self.y(p)));
            }
            points.push(format!("{:.1},{:.1}", self.x(t), self.y(b)));
            previous = Some(b);
        }
        el("polyline")
            .attr("fill", "none")
            .attr("stroke", colour)
            .attr("stroke-width", "1.5")
            .attr("points", &points.join(" "))
            .child(el("title").text(&format!("{device} allocated")))
    }

    /// A device's peak: a dot, labelled toward the middle of the plot.
    fn peak(&self, p: &Peak) -> Vec<El> {
        let (px, py) = (self.x(p.at), self.y(p.allocated));
        let anchor = if px > LEFT + self.w / 2.0 {
            "end"
        } else {
            "start"
        };
        let tx = if anchor == "end" { px - 5.0 } else { px + 5.0 };
        let ty = (py - 5.0).max(TOP + 22.0);
        let words = format!("peak {}", human_bytes(p.allocated as usize));
        let dot = el("circle").attr("cx", &at(px)).attr("cy", &at(py));
        // Drawn twice, a white outline under the red, so the line never hides it.
        let outline = label(tx, ty, &words)
            .attr("fill", "white")
            .attr("stroke", "white");
        vec![
            dot.attr("r", "3.5").attr("fill", "#d32f2f"),
            outline
                .attr("stroke-width", "3")
                .attr("text-anchor", anchor),
            label(tx, ty, &words)
                .attr("fill", "#d32f2f")
                .attr("text-anchor", anchor),
        ]
    }
}

impl Profile {
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
            end: self.wall().as_secs_f64().max(1e-9),
            top,
            w: WIDTH - LEFT - RIGHT,
            h: HEIGHT - TOP - BOTTOM,
        };
        let mut svg = svg(WIDTH, HEIGHT);
        for (phase, from, to) in self.phase_bands() {
            svg = svg.children(plot.band(phase, from, to));
        }
        svg = svg.children(plot.axes(self.wall()));
        for (i, d) in devices.iter().enumerate() {
            let colour = LINE_COLOURS[i % LINE_COLOURS.len()];
            // The legend sits under the axis, between its two time labels.
            let legend_x = LEFT + plot.w * (i + 1) as f64 / (devices.len() + 1) as f64;
            let legend = label(legend_x, HEIGHT - 8.0, &format!("── {d} allocated"));
            svg = svg
                .child(plot.line(d, colour, &self.steps(d)))
                .child(legend.attr("fill", colour).attr("text-anchor", "middle"));
            if let Some(p) = self.peak(d) {
                svg = svg.children(plot.peak(p));
            }
        }
        svg.into_string()
    }

    /// `device`'s allocated bytes over the run in `width` characters (▁ the least, █ the most),
    /// with the range: "▁▁▃▅█▅▃▁ 1.2 MiB … 4.5 MiB".
    pub fn sparkline(&self, device: &Device, width: usize) -> String {
        const LEVELS: [char; 8] = ['▁', '▂', '▃', '▄', '▅', '▆', '▇', '█'];
        let steps = self.steps(device);
        if steps.is_empty() || width == 0 {
            return String::new();
        }
        let end = self.wall().as_secs_f64().max(1e-9);
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
    use crate::device::Device;
    use crate::profile::example;

    #[test]
    fn the_sparkline_shows_the_most_held_in_each_slice_of_time() {
        // One character a millisecond, each the most held in it (400 B in the 6th, until 6 ms).
        assert_eq!(
            example().sparkline(&Device::Cpu, 8),
            "▁▁█████▃ 100 B … 400 B"
        );
    }

    #[test]
    fn the_svg_draws_the_phases_the_line_and_the_peak() {
        let svg = example().timeline_svg();
        assert_eq!(svg.matches("<rect").count(), 3, "{svg}");
        for phase in ["forward", "backward", "optimizer"] {
            assert!(svg.contains(&format!("<title>{phase}</title>")), "{svg}");
        }
        assert_eq!(svg.matches("<polyline").count(), 1);
        assert!(
            svg.contains("peak 400 B") && svg.contains("cpu allocated"),
            "{svg}"
        );
        let lines = example().peak_lines();
        assert!(
            lines[0].contains("peak 400 B allocated, 300 B above the start, at 2.00 ms (backward, in matmul's backward), reached by the 300 B output of matmul"),
            "{lines:?}"
        );
    }
}
