//! `:plot transfers` (time against size, log-log) and `:plot bandwidth` (GB/s against size), a
//! line per route and kind of host memory, with, on devices standing for a named GPU, its
//! predicted pinned and pageable curves dashed beside them; and `:plot memory` (allocated bytes
//! per device after each cell), drawn with plotters as SVG files.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use plotters::coord::ranged1d::ValueFormatter;
use plotters::prelude::*;

use super::probe_client::{DeviceStats, TransferLine};
use placelab::cost::CopyRoute;

const COLOURS: [RGBColor; 6] = [
    RGBColor(59, 110, 165),
    RGBColor(90, 143, 0),
    RGBColor(183, 121, 31),
    RGBColor(170, 50, 50),
    RGBColor(110, 70, 160),
    RGBColor(40, 140, 140),
];

fn err(e: impl std::fmt::Display) -> String {
    format!("could not draw the plot: {e}")
}

/// Draws the legend, shared by both plots.
fn finish<'a, CT: CoordTranslate>(
    chart: &mut ChartContext<'a, SVGBackend<'a>, CT>,
) -> Result<(), String> {
    chart
        .configure_series_labels()
        .background_style(WHITE.mix(0.8))
        .border_style(BLACK)
        .draw()
        .map_err(err)
}

/// What `:plot transfers` and `:plot bandwidth` put on the y axis.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TransferAxis {
    /// Time (µs, logarithmic): small copies are all latency.
    Time,
    /// Bandwidth (GB/s, linear): the curve rises to the link's plateau.
    Bandwidth,
}

/// One series per route and host-memory kind (`cpu → cuda:0 (pinned)`), points sorted by size;
/// at a size measured more than once, the median.
fn transfer_series(log: &[TransferLine], axis: TransferAxis) -> BTreeMap<String, Vec<(f64, f64)>> {
    let mut by_size: BTreeMap<String, BTreeMap<u64, Vec<f64>>> = BTreeMap::new();
    for t in log {
        let kind = if t.pinned { "pinned" } else { "pageable" };
        let sim = (t.clock.stand_in_word()).map_or(String::new(), |w| format!(", {w}"));
        let secs = t.nanos.max(1) as f64 / 1e9;
        let y = match axis {
            TransferAxis::Time => secs * 1e6,
            TransferAxis::Bandwidth => t.bytes as f64 / secs / 1e9,
        };
        by_size
            .entry(format!("{} → {} ({kind}{sim})", t.from, t.to))
            .or_default()
            .entry(t.bytes.max(1))
            .or_default()
            .push(y);
    }
    by_size
        .into_iter()
        .map(|(route, sizes)| {
            let points = sizes
                .into_iter()
                .map(|(bytes, mut ys)| {
                    ys.sort_by(f64::total_cmp);
                    (bytes as f64, ys[ys.len() / 2])
                })
                .collect();
            (route, points)
        })
        .collect()
}

/// The name of a predicted curve's series: drawn dashed, without dots.
const PREDICTED: &str = "predicted";
/// The name of a series of points measured on a real GPU: drawn as points, without a line.
const MEASURED: &str = "measured by placelab";

/// Where `log` has copies timed on a device standing for a named GPU: that GPU's predicted
/// curves (pinned, and pageable each way) from `xmin` to `xmax` bytes, and the points placelab
/// measured on that GPU (its newest kept run), for the nearest real figures.
fn predicted_series(
    log: &[TransferLine],
    axis: TransferAxis,
    (xmin, xmax): (f64, f64),
) -> BTreeMap<String, Vec<(f64, f64)>> {
    let Some(gpu) = log
        .iter()
        .find_map(|t| t.predicted.as_ref())
        .and_then(|(key, _)| placelab::cost::find(key))
    else {
        return BTreeMap::new();
    };
    let y = |bytes: f64, seconds: f64| match axis {
        TransferAxis::Time => seconds * 1e6,
        TransferAxis::Bandwidth => bytes / seconds / 1e9,
    };
    let steps = 48;
    let sizes: Vec<f64> = (0..=steps)
        .map(|i| xmin * (xmax / xmin).powf(i as f64 / steps as f64))
        .collect();
    let routes = [
        (CopyRoute::Pinned, "pinned", "h2d_pinned"),
        (
            CopyRoute::PageableToDevice,
            "pageable → GPU",
            "h2d_pageable",
        ),
        (CopyRoute::PageableToHost, "pageable → host", "d2h_pageable"),
    ];
    let mut series: BTreeMap<String, Vec<(f64, f64)>> = (routes.iter())
        .map(|&(route, kind, _)| {
            let points = (sizes.iter())
                .map(|&bytes| {
                    let s = placelab::cost::copy(gpu, route, bytes as u64).seconds;
                    (bytes, y(bytes, s))
                })
                .collect();
            (format!("{} {PREDICTED}, {kind}", gpu.name), points)
        })
        .collect();
    if let Some(run) = placelab::cost::measured::newest_on(gpu.key) {
        for (_, kind, row_kind) in routes {
            let points: Vec<(f64, f64)> = (run.rows.iter())
                .filter(|r| r.bench == "transfer" && r.name == row_kind)
                .filter(|r| (xmin..=xmax).contains(&(r.bytes as f64)))
                .map(|r| (r.bytes as f64, y(r.bytes as f64, r.seconds)))
                .collect();
            if !points.is_empty() {
                let label = format!("{} {MEASURED} {}, {kind}", gpu.name, run.date);
                series.insert(label, points);
            }
        }
    }
    series
}

/// Transfer time (µs, log) or bandwidth (GB/s) against size (bytes, log), a line per route and
/// kind of host memory.
pub fn transfers(dir: &Path, log: &[TransferLine], axis: TransferAxis) -> Result<PathBuf, String> {
    if log.is_empty() {
        return Err("no transfers yet: move a tensor with `.to(&device)?` first".into());
    }
    let mut series = transfer_series(log, axis);
    let measured = |series: &BTreeMap<String, Vec<(f64, f64)>>| {
        let xs = series.values().flatten().map(|p| p.0);
        xs.fold((f64::MAX, f64::MIN), |(a, b), x| (a.min(x), b.max(x)))
    };
    // Whole decades, so that even one transfer gets labelled ticks on both axes; a predicted
    // curve spans the whole axis.
    let (xmin, xmax) = decades(measured(&series));
    series.extend(predicted_series(log, axis, (xmin, xmax)));
    let points = || series.values().flatten();
    let (ymin, ymax) = points().fold((f64::MAX, f64::MIN), |(a, b), p| (a.min(p.1), b.max(p.1)));
    let (name, caption) = match axis {
        TransferAxis::Time => ("transfers.svg", "Transfer time against size"),
        TransferAxis::Bandwidth => ("bandwidth.svg", "Transfer bandwidth against size"),
    };
    let path = dir.join(name);
    let root = SVGBackend::new(&path, (720, 440)).into_drawing_area();
    root.fill(&WHITE).map_err(err)?;
    let mut builder = ChartBuilder::on(&root);
    builder
        .caption(caption, ("sans-serif", 20))
        .margin(12)
        .x_label_area_size(40)
        .y_label_area_size(60);
    let xs = (xmin..xmax).log_scale();
    match axis {
        TransferAxis::Time => {
            let (ymin, ymax) = decades((ymin, ymax));
            let mut chart = builder
                .build_cartesian_2d(xs, (ymin..ymax).log_scale())
                .map_err(err)?;
            draw_series(&mut chart, series, "µs")?;
        }
        TransferAxis::Bandwidth => {
            let mut chart = builder
                .build_cartesian_2d(xs, 0.0..ymax * 1.15)
                .map_err(err)?;
            draw_series(&mut chart, series, "GB/s")?;
        }
    }
    root.present().map_err(err)?;
    drop(root);
    Ok(path)
}

/// The powers of ten just outside `(lo, hi)`: at least one decade, so a log axis has two
/// labelled ticks however close its values are.
fn decades((lo, hi): (f64, f64)) -> (f64, f64) {
    let lo = 10f64.powf(lo.max(f64::MIN_POSITIVE).log10().floor());
    let hi = 10f64.powf(hi.max(f64::MIN_POSITIVE).log10().ceil());
    (lo, if hi > lo { hi } else { lo * 10.0 })
}

/// A tick's value as people write it: `1 MB`, `10 kB`, `0.5`, `1000` (no `1000000.0`).
fn tick(v: f64, bytes: bool) -> String {
    let plain = |x: f64| {
        let t = format!("{x:.2}");
        t.trim_end_matches('0').trim_end_matches('.').to_string()
    };
    match bytes {
        true => match v {
            v if v >= 1e9 => format!("{} GB", plain(v / 1e9)),
            v if v >= 1e6 => format!("{} MB", plain(v / 1e6)),
            v if v >= 1e3 => format!("{} kB", plain(v / 1e3)),
            v => format!("{} B", plain(v)),
        },
        false => plain(v),
    }
}

/// Lines with a dot at each measured size, a mesh and the legend.
fn draw_series<'a, X, Y>(
    chart: &mut ChartContext<'a, SVGBackend<'a>, Cartesian2d<X, Y>>,
    series: BTreeMap<String, Vec<(f64, f64)>>,
    y_desc: &str,
) -> Result<(), String>
where
    X: Ranged<ValueType = f64> + ValueFormatter<f64>,
    Y: Ranged<ValueType = f64> + ValueFormatter<f64>,
{
    chart
        .configure_mesh()
        .x_desc("bytes")
        .y_desc(y_desc)
        .x_label_formatter(&|v| tick(*v, true))
        .y_label_formatter(&|v| tick(*v, false))
        .draw()
        .map_err(err)?;
    for (i, (route, points)) in series.into_iter().enumerate() {
        let c = COLOURS[i % COLOURS.len()];
        if route.contains(PREDICTED) {
            // A model's curve, not measurements: dashed, no dots.
            let dashed = DashedLineSeries::new(points, 6, 4, c.stroke_width(2));
            chart
                .draw_series(dashed)
                .map_err(err)?
                .label(route)
                .legend(move |(x, y)| {
                    PathElement::new(vec![(x - 6, y), (x + 6, y)], c.stroke_width(2))
                });
            continue;
        }
        if route.contains(MEASURED) {
            // Another machine's measurements: crosses, no line, so they read as points to
            // compare the curves with, not as this session's copies.
            chart
                .draw_series(
                    points
                        .into_iter()
                        .map(|p| Cross::new(p, 5, c.stroke_width(2))),
                )
                .map_err(err)?
                .label(route)
                .legend(move |(x, y)| Cross::new((x, y), 5, c.stroke_width(2)));
            continue;
        }
        chart
            .draw_series(LineSeries::new(points.clone(), c.stroke_width(2)))
            .map_err(err)?
            .label(route)
            .legend(move |(x, y)| Circle::new((x, y), 4, c.filled()));
        chart
            .draw_series(points.into_iter().map(|p| Circle::new(p, 3, c.filled())))
            .map_err(err)?;
    }
    finish(chart)
}

/// Allocated MiB per device after each cell of the session.
/// Each device's memory after each code cell, for `:plot memory`: the latest
/// [`MemoryHistory::KEEP`] cells, so that a session of any length holds a bounded amount.
#[derive(Default)]
pub struct MemoryHistory {
    /// Cells dropped from the front: the oldest kept is cell `dropped + 1`.
    dropped: usize,
    cells: std::collections::VecDeque<BTreeMap<String, DeviceStats>>,
}

impl MemoryHistory {
    pub const KEEP: usize = 10_000;

    pub fn push(&mut self, devices: BTreeMap<String, DeviceStats>) {
        if self.cells.len() == Self::KEEP {
            self.cells.pop_front();
            self.dropped += 1;
        }
        self.cells.push_back(devices);
    }

    pub fn len(&self) -> usize {
        self.cells.len()
    }

    pub fn is_empty(&self) -> bool {
        self.cells.is_empty()
    }

    /// The number (from 1) of the oldest cell kept.
    fn first_cell(&self) -> usize {
        self.dropped + 1
    }
}

pub fn memory(dir: &Path, history: &MemoryHistory) -> Result<PathBuf, String> {
    let mut series: BTreeMap<String, Vec<(f64, f64)>> = BTreeMap::new();
    let first = history.first_cell();
    for (i, devices) in history.cells.iter().enumerate() {
        for (name, d) in devices {
            series
                .entry(name.clone())
                .or_default()
                .push(((first + i) as f64, d.allocated as f64 / (1 << 20) as f64));
        }
    }
    if series.is_empty() {
        return Err("no device memory used yet".into());
    }
    let path = dir.join("memory.svg");
    let root = SVGBackend::new(&path, (720, 440)).into_drawing_area();
    root.fill(&WHITE).map_err(err)?;
    let ymax = series
        .values()
        .flatten()
        .map(|p| p.1)
        .fold(0.0, f64::max)
        .max(1.0);
    let mut chart = ChartBuilder::on(&root)
        .caption("Allocated memory after each cell", ("sans-serif", 20))
        .margin(12)
        .x_label_area_size(40)
        .y_label_area_size(60)
        .build_cartesian_2d(
            first as f64 - 0.5..(first + history.len()) as f64 - 0.5,
            0.0..ymax * 1.1,
        )
        .map_err(err)?;
    chart
        .configure_mesh()
        .x_desc("cell")
        // Cells are whole numbers: a tick between two cells stays unlabelled.
        .x_label_formatter(&|x| {
            if x.fract() == 0.0 {
                format!("{x:.0}")
            } else {
                String::new()
            }
        })
        .y_desc("MiB")
        .draw()
        .map_err(err)?;
    for (i, (device, points)) in series.into_iter().enumerate() {
        let c = COLOURS[i % COLOURS.len()];
        chart
            .draw_series(LineSeries::new(points, c.stroke_width(2)))
            .map_err(err)?
            .label(device)
            .legend(move |(x, y)| PathElement::new(vec![(x, y), (x + 16, y)], c.stroke_width(2)));
    }
    finish(&mut chart)?;
    root.present().map_err(err)?;
    drop(chart);
    drop(root);
    Ok(path)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn line(bytes: u64, nanos: u64, pinned: bool) -> TransferLine {
        TransferLine {
            seq: 1,
            from: placelab::Device::Cpu,
            to: placelab::Device::Cuda(0),
            bytes,
            nanos,
            pinned,
            clock: placelab::transfer::Clock::SimulatedHostCopy,
            predicted: Some(("h100".into(), 1)),
        }
    }

    /// On devices standing for an H100, `:plot bandwidth` draws its predicted curves beside the
    /// measured points: pinned far above pageable once copies are large, both rising to their
    /// plateaus, and the points placelab measured on a real H100 beside them.
    #[test]
    fn bandwidth_plots_carry_the_named_gpus_predicted_curves_and_measured_points() {
        let log = [
            line(1 << 20, 100_000, false),
            line(64 << 20, 6_710_886, true),
        ];
        let series = transfer_series(&log, TransferAxis::Bandwidth);
        let predicted = predicted_series(&log, TransferAxis::Bandwidth, (1e6, 7e7));
        let pinned = &predicted["H100 SXM predicted, pinned"];
        let pageable = &predicted["H100 SXM predicted, pageable → GPU"];
        let (p, q) = (pinned.last().unwrap(), pageable.last().unwrap());
        assert!(p.1 > 50.0 && p.1 < 56.0, "PCIe 5 ×16 plateau: {p:?}");
        assert!(q.1 > 5.0 && q.1 < 15.0, "the driver's staging: {q:?}");
        assert!(p.1 > 4.0 * q.1, "pinned is several times pageable");
        assert!(
            pinned.first().unwrap().1 < p.1,
            "small copies are latency-bound"
        );
        let measured = &predicted["H100 SXM measured by placelab 2026-11-27, pinned"];
        assert_eq!(
            measured.iter().map(|m| m.0).collect::<Vec<_>>(),
            [(1 << 20) as f64, (16 << 20) as f64],
            "the H100 run's pinned uploads inside the axis"
        );
        assert!(
            measured.iter().all(|m| m.1 > 20.0 && m.1 < 60.0),
            "{measured:?}"
        );
        assert_eq!(series.len(), 2, "the session's series stay as they were");
        let dir = std::env::temp_dir().join(format!("placelab-plot-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let svg = std::fs::read_to_string(transfers(&dir, &log, TransferAxis::Bandwidth).unwrap())
            .unwrap();
        for legend in [
            "H100 SXM predicted, pinned",
            "H100 SXM measured by placelab",
        ] {
            assert!(svg.contains(legend), "the legend names {legend:?}");
        }
        std::fs::remove_dir_all(&dir).unwrap();
    }

    /// A session of any length keeps the latest cells' memory only, and plots them under their
    /// own numbers.
    #[test]
    fn the_memory_history_keeps_the_latest_cells() {
        let mut history = MemoryHistory::default();
        let stats = |mib: u64| {
            BTreeMap::from([(
                "cpu".to_string(),
                DeviceStats {
                    allocated: mib << 20,
                    ..Default::default()
                },
            )])
        };
        for cell in 1..=MemoryHistory::KEEP + 5 {
            history.push(stats(cell as u64));
        }
        assert_eq!(history.len(), MemoryHistory::KEEP);
        assert_eq!(history.first_cell(), 6);
        assert_eq!(history.cells[0]["cpu"].allocated, 6 << 20);
        let dir = std::env::temp_dir().join(format!("placelab-plot-mem-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let svg = std::fs::read_to_string(memory(&dir, &history).unwrap()).unwrap();
        let ticks: Vec<&str> = svg.split(['<', '>']).map(str::trim).collect();
        assert!(
            ticks.contains(&"10000"),
            "the axis runs to the latest cell: {ticks:?}"
        );
        std::fs::remove_dir_all(&dir).unwrap();
    }

    /// A session's first `.to()` alone still gets an axis a reader can read: whole decades with
    /// their ticks labelled as sizes and times are written, and the named GPU's predicted curves
    /// drawn across it (they used to span the one measured size: no curve at all).
    #[test]
    fn one_transfer_gets_labelled_decades_and_whole_predicted_curves() {
        assert_eq!(decades((4e6, 4e6)), (1e6, 1e7));
        assert_eq!(decades((1e6, 1e6)), (1e6, 1e7));
        assert_eq!(decades((390.0, 1560.0)), (100.0, 1e4));
        assert_eq!(tick(1e6, true), "1 MB");
        assert_eq!(tick(2.5e4, true), "25 kB");
        assert_eq!(tick(1000.0, false), "1000");
        assert_eq!(tick(0.5, false), "0.5");
        let log = [line(4_000_000, 780_000, false)];
        let dir = std::env::temp_dir().join(format!("placelab-plot-one-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let svg =
            std::fs::read_to_string(transfers(&dir, &log, TransferAxis::Time).unwrap()).unwrap();
        let texts: Vec<&str> = svg.split(['<', '>']).map(str::trim).collect();
        for label in ["1 MB", "10 MB", "100", "1000"] {
            assert!(texts.contains(&label), "no tick {label:?} in the plot");
        }
        let predicted = predicted_series(&log, TransferAxis::Time, decades((4e6, 4e6)));
        let pinned = &predicted["H100 SXM predicted, pinned"];
        assert_eq!(
            (pinned.first().unwrap().0, pinned.last().unwrap().0),
            (1e6, 1e7)
        );
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
