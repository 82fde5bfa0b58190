//! A profile's lanes of time (`profile/lanes.rs`) as text: one row per engine, each a strip of
//! cells across the profile's span, `█` where the lane computed and `▒` where it copied, then
//! the share of the copies hidden behind compute.

use std::time::Duration;

use crate::base::units::human_duration;
use crate::profile::{Lane, Profile};

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

impl Profile {
    /// The lanes as text: the host and each GPU stream over the profile's span, and how much of
    /// the copies' time another stream computed beside them.
    pub fn lanes_text(&self) -> String {
        let lanes = self.lanes();
        let end = lanes
            .iter()
            .flat_map(|l| l.spans.iter().map(|s| s.end))
            .max()
            .unwrap_or_default()
            .max(self.wall());
        let width = lanes.iter().map(|l| l.name.len()).max().unwrap_or(4);
        let mut out = format!(
            "{:width$}  0 {:─^w$} {}\n",
            "",
            "",
            human_duration(end),
            w = CELLS - 2
        );
        for lane in &lanes {
            out += &format!("{:width$}  {}\n", lane.name, strip(lane, end));
        }
        out += "█ compute  ▒ copy";
        if lanes.len() == 1 {
            out += "  (no GPU times: a simulated device's work runs on the host)";
        }
        match self.copies_hidden() {
            Some(h) => out += &format!("\ncopies hidden behind compute: {:.0}%", h * 100.0),
            None => out += "\nno copy on a GPU to hide",
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use crate::profile::Profile;

    #[test]
    fn a_profile_without_gpu_times_says_its_lanes_are_the_hosts() {
        let text = crate::profile::example().lanes_text();
        assert!(text.lines().nth(1).unwrap().starts_with("host"), "{text}");
        assert!(text.contains("no GPU times"), "{text}");
        assert!(text.ends_with("no copy on a GPU to hide"), "{text}");
        assert_eq!(Profile::default().lanes().len(), 1);
    }
}
