//! A profile's lanes of time (`profile/lanes.rs`), one row per engine: as text, a strip of
//! cells across the profile's span, `█` where the lane computed and `▒` where it copied; as an
//! SVG, a bar per op (its name and times on hover). Then the share of the copies hidden behind
//! compute.

use std::time::Duration;

use super::html::{el, svg};
use crate::base::units::human_duration;
use crate::profile::{Lane, Lanes, Profile};

/// Cells across a lane.
const CELLS: usize = 60;

/// The lane's strip: each cell shows what ran in its slice of `end` (a copy over compute).
fn strip(lane: &Lane, end: Duration) -> String {
    let slice = end.as_secs_f64() / CELLS as f64;
    (0..CELLS)
        .map(|i| {
            let (a, b) = (i as f64 * slice, (i + 1) as f64 * slice);
            let here = lane
                .spans
                .iter()
                .filter(|s| s.start.as_secs_f64() < b && s.end.as_secs_f64() > a);
            let (mut copy, mut work) = (false, false);
            for s in here {
                copy |= s.copy;
                work |= !s.copy;
            }
            match (copy, work) {
                (true, _) => '▒',
                (false, true) => '█',
                (false, false) => '·',
            }
        })
        .collect()
}

/// The SVG's geometry: lane labels left of `LEFT`, lanes `ROW` pixels apart.
const WIDTH: f64 = 640.0;
const LEFT: f64 = 120.0;
const ROW: f64 = 22.0;
const COMPUTE: &str = "#1565c0";
const COPY: &str = "#ef6c00";

/// What the lanes show last: the copies' share hidden behind compute, or why there is none,
/// and whether the lanes are predicted.
fn verdict(lanes: &Lanes) -> String {
    let mut v = match lanes.copies_hidden() {
        Some(h) => format!("copies hidden behind compute: {:.0}%", h * 100.0),
        None => "no copy on a GPU to hide".into(),
    };
    match lanes.predicted_for {
        Some(gpu) => {
            v += &format!(
                " (predicted for an {} by placelab's cost model: a simulated device runs its work on the host)",
                gpu.name
            )
        }
        None if lanes.lanes.len() == 1 => {
            v += " (no GPU times: a simulated device's work runs on the host)"
        }
        None => {}
    }
    v
}

/// The end of the last span; for measured lanes at least the code's wall time.
fn span_end(p: &Profile, lanes: &Lanes) -> Duration {
    let end = lanes.end();
    match lanes.predicted_for {
        Some(_) => end,
        None => end.max(p.wall()),
    }
}

/// The first column's heading: `lanes`, or `predicted` for a predicted timeline.
fn heading(lanes: &Lanes) -> &'static str {
    match lanes.predicted_for {
        Some(_) => "predicted",
        None => "lanes",
    }
}

impl Profile {
    /// The lanes as an SVG: a row per engine, a bar per op (blue computing, orange copying),
    /// each bar's op and times in its tooltip, the span's end under the rows, and the share of
    /// the copies hidden behind compute.
    pub fn lanes_svg(&self) -> String {
        let shown = self.engine_lanes();
        let end = span_end(self, &shown);
        let lanes = &shown.lanes;
        let w = WIDTH - LEFT - 8.0;
        let x = |t: Duration| LEFT + w * t.as_secs_f64() / end.as_secs_f64().max(1e-9);
        let height = ROW * lanes.len() as f64 + 56.0;
        let text = |x: f64, y: f64, words: &str| {
            el("text")
                .attr("x", &format!("{x:.1}"))
                .attr("y", &format!("{y:.1}"))
                .text(words)
        };
        let mut svg = svg(WIDTH, height);
        svg = svg.child(text(4.0, 14.0, heading(&shown)));
        for (i, lane) in lanes.iter().enumerate() {
            let y = ROW * i as f64 + 20.0;
            svg = svg.child(text(4.0, y + 13.0, &lane.name));
            for s in &lane.spans {
                let (x0, x1) = (x(s.start), x(s.end));
                let tip = format!(
                    "{} {} from {} to {}",
                    if s.copy { "copy" } else { "op" },
                    s.op,
                    human_duration(s.start),
                    human_duration(s.end)
                );
                svg = svg.child(
                    el("rect")
                        .attr("x", &format!("{x0:.1}"))
                        .attr("y", &format!("{y:.1}"))
                        .attr("width", &format!("{:.1}", (x1 - x0).max(0.5)))
                        .attr("height", &format!("{:.1}", ROW - 6.0))
                        .attr("fill", if s.copy { COPY } else { COMPUTE })
                        .child(el("title").text(&tip)),
                );
            }
        }
        let bottom = ROW * lanes.len() as f64 + 32.0;
        svg = svg
            .child(text(LEFT, bottom, "0"))
            .child(text(WIDTH - 8.0, bottom, &human_duration(end)).attr("text-anchor", "end"))
            .child(text(4.0, bottom + 16.0, &verdict(&shown)));
        svg.into_string()
    }

    /// The lanes as text: the host and each GPU stream over the profile's span, and how much of
    /// the copies' time another stream computed beside them.
    pub fn lanes_text(&self) -> String {
        let shown = self.engine_lanes();
        let end = span_end(self, &shown);
        let lanes = &shown.lanes;
        let width = (lanes.iter().map(|l| l.name.chars().count()))
            .max()
            .unwrap_or(4)
            .max(heading(&shown).len());
        let mut out = format!(
            "{:width$}  0 {:─^w$} {}\n",
            heading(&shown),
            "",
            human_duration(end),
            w = CELLS - 2
        );
        for lane in lanes {
            out += &format!("{:width$}  {}\n", lane.name, strip(lane, end));
        }
        out + "█ compute  ▒ copy\n" + &verdict(&shown)
    }
}

#[cfg(test)]
mod tests {
    use crate::profile::Profile;

    #[test]
    fn a_profile_without_gpu_times_says_its_lanes_are_the_hosts() {
        let text = crate::profile::example().lanes_text();
        assert!(text.lines().nth(1).unwrap().starts_with("host"), "{text}");
        assert!(
            text.ends_with("no copy on a GPU to hide (no GPU times: a simulated device's work runs on the host)"),
            "{text}"
        );
        let svg = crate::profile::example().lanes_svg();
        assert!(
            svg.starts_with("<svg") && svg.contains(">host</text>"),
            "{svg}"
        );
        assert_eq!(svg.matches("<rect").count(), 3, "a bar per op: {svg}");
        assert_eq!(Profile::default().lanes().len(), 1);
    }
}
