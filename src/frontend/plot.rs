//! `:plot transfers` (time against size, log-log, one colour per route) and `:plot memory`
//! (allocated bytes per device after each cell), drawn with plotters as SVG files.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use plotters::prelude::*;

use super::probe_client::{Snapshot, TransferLine};

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

/// Transfer time (µs) against size (bytes), both logarithmic, one series per route.
pub fn transfers(dir: &Path, log: &[TransferLine]) -> Result<PathBuf, String> {
    if log.is_empty() {
        return Err("no transfers yet: move a tensor with `.to(&device)?` first".into());
    }
    let path = dir.join("transfers.svg");
    let root = SVGBackend::new(&path, (720, 440)).into_drawing_area();
    root.fill(&WHITE).map_err(err)?;
    let xs = |t: &TransferLine| (t.bytes.max(1)) as f64;
    let ys = |t: &TransferLine| (t.nanos.max(1)) as f64 / 1e3;
    let (xmin, xmax) = log
        .iter()
        .map(xs)
        .fold((f64::MAX, f64::MIN), |(a, b), v| (a.min(v), b.max(v)));
    let (ymin, ymax) = log
        .iter()
        .map(ys)
        .fold((f64::MAX, f64::MIN), |(a, b), v| (a.min(v), b.max(v)));
    let mut chart = ChartBuilder::on(&root)
        .caption("Transfer time against size", ("sans-serif", 20))
        .margin(12)
        .x_label_area_size(40)
        .y_label_area_size(60)
        .build_cartesian_2d(
            (xmin / 2.0..xmax * 2.0).log_scale(),
            (ymin / 2.0..ymax * 2.0).log_scale(),
        )
        .map_err(err)?;
    chart
        .configure_mesh()
        .x_desc("bytes")
        .y_desc("µs")
        .draw()
        .map_err(err)?;
    let mut routes: BTreeMap<String, Vec<(f64, f64)>> = BTreeMap::new();
    for t in log {
        let kind = if t.pinned { "pinned" } else { "pageable" };
        let sim = if t.simulated { ", simulated" } else { "" };
        routes
            .entry(format!("{} → {} ({kind}{sim})", t.from, t.to))
            .or_default()
            .push((xs(t), ys(t)));
    }
    for (i, (route, points)) in routes.into_iter().enumerate() {
        let c = COLOURS[i % COLOURS.len()];
        chart
            .draw_series(points.into_iter().map(|p| Circle::new(p, 4, c.filled())))
            .map_err(err)?
            .label(route)
            .legend(move |(x, y)| Circle::new((x, y), 4, c.filled()));
    }
    finish(&mut chart)?;
    root.present().map_err(err)?;
    drop(chart);
    drop(root);
    Ok(path)
}

/// Allocated MiB per device after each cell of the session.
pub fn memory(dir: &Path, history: &[Snapshot]) -> Result<PathBuf, String> {
    let mut series: BTreeMap<String, Vec<(f64, f64)>> = BTreeMap::new();
    for (cell, snap) in history.iter().enumerate() {
        for (name, d) in &snap.devices {
            series
                .entry(name.clone())
                .or_default()
                .push(((cell + 1) as f64, d.allocated as f64 / (1 << 20) as f64));
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
        .build_cartesian_2d(0.5..history.len() as f64 + 0.5, 0.0..ymax * 1.1)
        .map_err(err)?;
    chart
        .configure_mesh()
        .x_desc("cell")
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
