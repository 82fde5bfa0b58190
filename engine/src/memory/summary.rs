//! `memory_summary`: a compact, PyTorch-shaped table of one device's allocator state.

use std::fmt::Write;

use super::{LiveStorage, MemoryStats};
use crate::device::Device;
use crate::device::error::Result;

/// PyTorch's `_format_size`: divide by 1024 while the value is ≥ 768 Ki of the unit.
fn format_size(mut n: usize) -> String {
    let mut unit = 0;
    let units = ["B  ", "KiB", "MiB", "GiB", "TiB"];
    while n >= 768 * 1024 && unit + 1 < units.len() {
        n /= 1024;
        unit += 1;
    }
    format!("{n:>9} {}", units[unit])
}

/// A table of `device`'s memory: current and peak bytes, blocks and segments, then each live
/// tensor storage. `torch.cuda.memory_summary(abbreviated=True)` is the model.
pub fn memory_summary(device: &Device) -> Result<String> {
    let s = super::stats(device)?;
    let live = super::live_storages(device)?;
    let (free, total) = super::mem_get_info(device)?;
    let mut o = String::new();
    write_heading(&mut o, device, &s);
    write_usage(&mut o, &s, (free, total));
    if !live.is_empty() {
        write_storages(&mut o, &live);
    }
    Ok(o)
}

/// The table's rules: the outer one, and the thin one between a section's head and its rows.
fn rules() -> (String, String) {
    ("=".repeat(75), "-".repeat(75))
}

/// The title, and the allocator's event counts (out-of-memory errors, retries, segments).
fn write_heading(o: &mut String, device: &Device, s: &MemoryStats) {
    let (line, thin) = rules();
    let _ = writeln!(o, "{line}");
    let _ = writeln!(
        o,
        "|{:^73}|",
        format!("placelab memory summary, {}", device.label())
    );
    let _ = writeln!(o, "{thin}");
    let counts = format!(
        "OOMs: {} · alloc retries: {} · segments allocated: {} · freed: {}",
        s.num_ooms, s.num_alloc_retries, s.num_device_alloc, s.num_device_free
    );
    let _ = writeln!(o, "|{counts:^73}|");
    let _ = writeln!(o, "{line}");
}

/// Each metric's current and peak value, then the device's free and total memory.
fn write_usage(o: &mut String, s: &MemoryStats, (free, total): (usize, usize)) {
    let (line, thin) = rules();
    let _ = writeln!(
        o,
        "| {:<29} | {:>18} | {:>18} |",
        "Metric", "Cur Usage", "Peak Usage"
    );
    let _ = writeln!(o, "{thin}");
    let rows: [(&str, String, String); 6] = [
        (
            "Allocated memory",
            format_size(s.allocated_bytes),
            format_size(s.peak_allocated_bytes),
        ),
        (
            "Requested memory",
            format_size(s.requested_bytes),
            String::new(),
        ),
        (
            "Reserved memory",
            format_size(s.reserved_bytes),
            format_size(s.peak_reserved_bytes),
        ),
        (
            "Non-releasable memory",
            format_size(s.inactive_split_bytes),
            String::new(),
        ),
        (
            "Allocations",
            format!("{:>13}", s.allocations),
            format!("{:>13}", s.peak_allocations),
        ),
        (
            "Reserved segments",
            format!("{:>13}", s.segments),
            String::new(),
        ),
    ];
    for (name, cur, peak) in rows {
        let _ = writeln!(o, "| {name:<29} | {cur:>18} | {peak:>18} |");
    }
    let _ = writeln!(o, "{thin}");
    let _ = writeln!(
        o,
        "| {:<29} | {:>18} | {:>18} |",
        "Device free / total",
        format_size(free),
        format_size(total)
    );
    let _ = writeln!(o, "{line}");
}

/// One row per live storage: a tensor's id, dtype and size, or the engine buffer it is.
fn write_storages(o: &mut String, live: &[LiveStorage]) {
    let (line, _) = rules();
    let _ = writeln!(
        o,
        "| {:<8} {:<6} {:>16} {:>18} {:>18}  |",
        "storage", "dtype", "elements", "bytes", "block"
    );
    for l in live {
        let _ = match l.engine_buffer {
            None => writeln!(
                o,
                "| #{:<7} {:<6} {:>16} {:>18} {:>18}  |",
                l.id,
                l.dtype.name(),
                l.numel,
                format_size(l.requested),
                format_size(l.bytes)
            ),
            Some(what) => writeln!(
                o,
                "| {:<32} {:>18} {:>18}  |",
                what,
                format_size(l.requested),
                format_size(l.bytes)
            ),
        };
    }
    let _ = writeln!(o, "{line}");
}
