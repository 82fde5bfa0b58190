//! The memory strip under a cell: what each device in use holds after it, what the cell changed,
//! and the cell's transfers — as terminal lines and as a compact HTML table for Jupyter.

use std::time::Duration;

use super::probe_client::{DeviceStats, IdleReleaseLine, Snapshot, TransferLine};
use placelab::display::html::el;
use placelab::units::{human_bytes, human_duration, human_rate};

/// Device memory before and after a cell (or, while it runs, after so far).
#[derive(Debug, Clone, Default, PartialEq)]
pub struct MemoryChange {
    pub before: Snapshot,
    pub after: Snapshot,
    /// The GPU caches the process gave back while idle (`PLACELAB_IDLE_EMPTY_CACHE`) since the
    /// last cell's strip said so.
    pub idle_released: Vec<IdleReleaseLine>,
}

/// One device row of the strip.
struct Row<'a> {
    stats: &'a DeviceStats,
    delta: i128,
}

impl MemoryChange {
    /// Devices that hold or held memory around this cell; devices never used stay out.
    fn rows(&self) -> Vec<Row<'_>> {
        self.after
            .devices
            .iter()
            .filter_map(|(name, d)| {
                let prev = self.before.devices.get(name).cloned().unwrap_or_default();
                let unused = d.allocated == 0 && d.reserved == 0 && prev.reserved == 0;
                (!unused).then(|| Row {
                    stats: d,
                    delta: d.allocated as i128 - prev.allocated as i128,
                })
            })
            .collect()
    }

    /// Whether the cell has changed any device's memory, or moved anything, so far.
    pub fn changed(&self) -> bool {
        !self.after.transfers.is_empty()
            || self.after.devices.iter().any(|(name, d)| {
                let prev = self.before.devices.get(name).cloned().unwrap_or_default();
                (d.allocated, d.reserved) != (prev.allocated, prev.reserved)
            })
    }

    pub fn is_empty(&self) -> bool {
        self.rows().is_empty() && self.after.transfers.is_empty() && self.idle_released.is_empty()
    }

    /// One line per device in use: `── cuda:0 allocated 3.81 MiB (1 tensor) · reserved
    /// 20.00 MiB · free 15.98 / 16.00 GiB · this cell +3.81 MiB`, then one for the transfers.
    pub fn lines(&self) -> Vec<String> {
        let mut lines: Vec<String> = self
            .rows()
            .iter()
            .map(|r| {
                let d = r.stats;
                let free = match free_text(d) {
                    Some(f) => format!(" · free {f}"),
                    None => String::new(),
                };
                let cell = match r.delta {
                    0 => String::new(),
                    delta => format!(" · this cell {}", signed_bytes(delta)),
                };
                format!(
                    "── {} allocated {} ({}) · reserved {}{free}{cell}",
                    label(d),
                    human_bytes(d.allocated as usize),
                    tensors_text(d.tensors),
                    human_bytes(d.reserved as usize)
                )
            })
            .collect();
        lines.extend(self.transfers_text().map(|t| format!("── {t}")));
        lines.extend(
            self.idle_released
                .iter()
                .map(|r| format!("── {}", idle_text(r))),
        );
        lines
    }

    /// One short line for a terminal's status line while a cell runs:
    /// `cpu 3.81 MiB · cuda:0 (simulated) 1.20 GiB (+1.19 GiB)`.
    pub fn status_line(&self) -> String {
        self.rows()
            .iter()
            .map(|r| {
                let change = match r.delta {
                    0 => String::new(),
                    d => format!(" ({})", signed_bytes(d)),
                };
                format!(
                    "{} {}{change}",
                    label(r.stats),
                    human_bytes(r.stats.allocated as usize)
                )
            })
            .collect::<Vec<_>>()
            .join(" · ")
    }

    /// The same as a small table (one row per device) and a line of transfers.
    pub fn html(&self) -> String {
        self.html_strip(false)
    }

    /// The strip of a cell still running: the same, under a line saying so.
    pub fn html_while_running(&self) -> String {
        self.html_strip(true)
    }

    fn html_strip(&self, running: bool) -> String {
        const CELL: &str = "padding:1px 10px 1px 0;text-align:right";
        const HEAD: [&str; 6] = [
            "",
            "allocated",
            "reserved",
            "free / total",
            "this cell",
            "live",
        ];
        let td = || el("td").style(CELL);
        let rows = self.rows().into_iter().map(|r| {
            let d = r.stats;
            let (badge, name) = placelab::display::device_badge(&d.name, d.kind);
            let colour = match r.delta {
                0 => "color:#888",
                delta if delta > 0 => "color:#b35900",
                _ => "color:#2f7d32",
            };
            let change = match r.delta {
                0 => "±0".to_string(),
                delta => signed_bytes(delta),
            };
            let badge = el("span")
                .style(&format!(
                    "background:{badge};color:#fff;border-radius:4px;padding:0 6px"
                ))
                .text(&name);
            el("tr")
                .child(el("td").style("padding:1px 10px 1px 0").child(badge))
                .child(td().text(&human_bytes(d.allocated as usize)))
                .child(td().text(&human_bytes(d.reserved as usize)))
                .child(td().text(&free_text(d).unwrap_or_else(|| "—".into())))
                .child(td().child(el("span").style(colour).text(&change)))
                .child(td().text(&tensors_text(d.tensors)))
        });
        let th = |h| {
            el("th")
                .style(&format!("{CELL};font-weight:normal;color:#666"))
                .text(h)
        };
        let running = running.then(|| el("div").style("color:#b35900").text("running…"));
        let transfers = self
            .transfers_text()
            .into_iter()
            .chain(self.idle_released.iter().map(idle_text))
            .map(|t| el("div").style("color:#555;margin-top:2px").text(&t));
        el("div")
            .class("placelab-memory")
            .style("font-family:ui-monospace,monospace;font-size:12px;border-top:1px solid #d0d7de;padding-top:3px")
            .children(running)
            .child(
                el("table")
                    .style("border-collapse:collapse")
                    .child(el("tr").children(HEAD.map(th)))
                    .children(rows),
            )
            .children(transfers)
            .into_string()
    }

    /// `3 transfers this cell: 11.44 MiB in 1.02 ms (11.8 GB/s)`.
    fn transfers_text(&self) -> Option<String> {
        let t = &self.after.transfers;
        if t.is_empty() {
            return None;
        }
        let bytes: u64 = t.iter().map(|t| t.bytes).sum();
        let nanos: u64 = t.iter().map(|t| t.nanos).sum();
        let simulated = match t.iter().find_map(|t| t.clock.stand_in_note()) {
            Some(note) => format!(", {note}"),
            None => String::new(),
        };
        let simulated = simulated + &predicted_total(t).unwrap_or_default();
        // The process keeps its latest 100,000 transfers: a cell that made more is told how
        // many, and what the kept ones add up to.
        let made = (self.after.last_seq.saturating_sub(self.before.last_seq) as usize).max(t.len());
        let kept = if made > t.len() {
            format!(", the latest {} kept", t.len())
        } else {
            String::new()
        };
        Some(format!(
            "{made} transfer{}{kept} this cell: {} in {} ({}{simulated})",
            if made == 1 { "" } else { "s" },
            human_bytes(bytes as usize),
            human_duration(Duration::from_nanos(nanos)),
            human_rate(bytes as f64 / (nanos.max(1) as f64 / 1e9))
        ))
    }
}

/// `cuda:0 gave back its 20.00 MiB cache after 10 min 0 s idle (PLACELAB_IDLE_EMPTY_CACHE)`.
fn idle_text(r: &IdleReleaseLine) -> String {
    format!(
        "{} gave back its {} cache after {} idle (PLACELAB_IDLE_EMPTY_CACHE): reserved memory no tensor held, returned for others on the GPU",
        r.device,
        human_bytes(r.bytes as usize),
        match r.idle_ms {
            ms if ms >= 60_000 => format!("{} min", (ms as f64 / 60_000.0).round()),
            ms => human_duration(Duration::from_millis(ms)),
        }
    )
}

/// `; ≈ 0.22 ms on an H100 SXM, predicted`: the predicted times of the transfers that have one
/// (a device standing for a named GPU), summed.
pub(crate) fn predicted_total(lines: &[TransferLine]) -> Option<String> {
    let (gpu, _) = lines.iter().find_map(|t| t.predicted.as_ref())?;
    let nanos: u64 = lines
        .iter()
        .filter_map(|t| t.predicted.as_ref())
        .map(|p| p.1)
        .sum();
    let name = placelab::cost::find(gpu).map_or_else(|| gpu.clone(), |g| g.with_article());
    Some(format!(
        "; ≈ {} on {name}, predicted",
        human_duration(Duration::from_nanos(nanos))
    ))
}

fn signed_bytes(delta: i128) -> String {
    let sign = if delta < 0 { "-" } else { "+" };
    format!("{sign}{}", human_bytes(delta.unsigned_abs() as usize))
}

fn tensors_text(n: u64) -> String {
    if n == 1 {
        "1 tensor".into()
    } else {
        format!("{n} tensors")
    }
}

/// `15.98 GiB / 16.00 GiB` for a GPU (real or simulated); the CPU and pinned memory have no such
/// limit to show.
fn free_text(d: &DeviceStats) -> Option<String> {
    (d.name != "cpu" && d.name != super::probe_client::PINNED).then(|| {
        format!(
            "{} / {}",
            human_bytes(d.free as usize),
            human_bytes(d.total as usize)
        )
    })
}

pub fn label(d: &DeviceStats) -> String {
    placelab::device_label(&d.name, d.kind)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::probe_client::TransferLine;

    fn gpu(allocated: u64) -> DeviceStats {
        DeviceStats {
            name: "cuda:0".into(),
            kind: placelab::DeviceKind::SimulatedGpu {
                capacity: 16 << 30,
                stands_for: None,
            },
            allocated,
            reserved: 20 << 20,
            peak: allocated,
            tensors: 1,
            free: 15 << 30,
            total: 16 << 30,
        }
    }

    #[test]
    fn a_cache_given_back_while_idle_is_said_in_text_and_html() {
        let mut change = MemoryChange::default();
        assert!(change.is_empty());
        change.idle_released.push(IdleReleaseLine {
            seq: 1,
            device: "cuda:0".into(),
            bytes: 20 << 20,
            idle_ms: 600_000,
        });
        let line =
            "cuda:0 gave back its 20.00 MiB cache after 10 min idle (PLACELAB_IDLE_EMPTY_CACHE)";
        assert!(!change.is_empty());
        assert!(
            change.lines()[0].starts_with(&format!("── {line}")),
            "{:?}",
            change.lines()
        );
        assert!(change.html().contains(line), "{}", change.html());
    }

    #[test]
    fn a_cell_that_moved_a_tensor_shows_its_growth_and_transfer() {
        let mut change = MemoryChange::default();
        change.after.devices.insert("cuda:0".into(), gpu(4_000_256));
        change.after.transfers.push(TransferLine {
            seq: 1,
            from: placelab::Device::Cpu,
            to: placelab::Device::Cuda(0),
            bytes: 4_000_000,
            nanos: 1_000_000,
            pinned: false,
            clock: placelab::transfer::Clock::SimulatedHostCopy,
            predicted: None,
        });
        assert_eq!(
            change.lines(),
            vec![
                "── cuda:0 (simulated) allocated 3.81 MiB (1 tensor) · reserved 20.00 MiB · free 15.00 GiB / 16.00 GiB · this cell +3.81 MiB",
                "── 1 transfer this cell: 3.81 MiB in 1.00 ms (4.0 GB/s, simulated: host copy time)"
            ]
        );
        // Standing for an H100, the total carries the predicted time too.
        let mut standing = change.clone();
        standing.after.transfers[0].predicted = Some(("h100".into(), 82_000));
        let mut second = standing.after.transfers[0].clone();
        second.predicted = Some(("h100".into(), 18_000));
        standing.after.transfers.push(second);
        assert_eq!(
            standing.lines()[1],
            "── 2 transfers this cell: 7.63 MiB in 2.00 ms (4.0 GB/s, simulated: host copy time; ≈ 100.0 µs on an H100 SXM, predicted)"
        );
        // A cell that made more transfers than the process keeps says how many it made.
        let mut many = standing.clone();
        (many.before.last_seq, many.after.last_seq) = (10, 130_010);
        assert!(
            many.lines()[1]
                .starts_with("── 130000 transfers, the latest 2 kept this cell: 7.63 MiB in"),
            "{}",
            many.lines()[1]
        );
        let html = change.html();
        assert!(html.contains("class=\"placelab-memory\""));
        assert!(html.contains("cuda:0 · simulated") && html.contains("+3.81 MiB"));
        assert!(!html.contains("running"));
        // While the cell runs, the same strip, under a line saying so.
        let running = change.html_while_running();
        assert!(
            running.starts_with("<div class=\"placelab-memory\"")
                && running.contains("<div style=\"color:#b35900\">running…</div><table"),
            "{running}"
        );
        assert_eq!(
            running.replacen("<div style=\"color:#b35900\">running…</div>", "", 1),
            html
        );
    }

    #[test]
    fn devices_never_used_are_left_out() {
        let mut change = MemoryChange::default();
        change.after.devices.insert("cuda:0".into(), {
            let mut d = gpu(0);
            d.reserved = 0;
            d
        });
        assert!(change.is_empty());
        assert!(change.lines().is_empty());
    }
}
