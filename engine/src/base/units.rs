//! How the engine writes sizes, times and rates for people, and reads sizes back: the leaf every
//! message, card and table shares.

use std::time::Duration;

/// `512 B`, `3.81 MiB`, `20.00 MiB`, `1.50 GiB` (binary units, as PyTorch's memory tools).
pub fn human_bytes(n: usize) -> String {
    const UNITS: [&str; 5] = ["KiB", "MiB", "GiB", "TiB", "PiB"];
    if n < 1024 {
        return format!("{n} B");
    }
    let mut v = n as f64 / 1024.0;
    let mut u = 0;
    while v >= 1024.0 && u + 1 < UNITS.len() {
        v /= 1024.0;
        u += 1;
    }
    format!("{v:.2} {}", UNITS[u])
}

/// `850 ns`, `41.2 µs`, `0.41 ms`, `1.25 s`.
pub fn human_duration(d: Duration) -> String {
    let ns = d.as_nanos();
    if ns < 1_000 {
        format!("{ns} ns")
    } else if ns < 1_000_000 {
        format!("{:.1} µs", ns as f64 / 1e3)
    } else if ns < 1_000_000_000 {
        format!("{:.2} ms", ns as f64 / 1e6)
    } else {
        format!("{:.2} s", ns as f64 / 1e9)
    }
}

/// `9.7 GB/s`, `850 MB/s` (decimal units, as bandwidth is quoted for PCIe and HBM).
pub fn human_rate(bytes_per_s: f64) -> String {
    if !bytes_per_s.is_finite() {
        "∞ GB/s".into()
    } else if bytes_per_s >= 1e9 {
        format!("{:.1} GB/s", bytes_per_s / 1e9)
    } else if bytes_per_s >= 1e6 {
        format!("{:.0} MB/s", bytes_per_s / 1e6)
    } else {
        format!("{:.0} kB/s", bytes_per_s / 1e3)
    }
}

/// `8GiB`, `8G`, `512MiB`, `512M`, `64KiB`, `1000` (bytes).
pub fn parse_bytes(s: &str) -> Option<usize> {
    let s = s.trim();
    let split = s
        .find(|c: char| !c.is_ascii_digit() && c != '.')
        .unwrap_or(s.len());
    let (num, unit) = s.split_at(split);
    let num: f64 = num.parse().ok()?;
    let mult = match unit.trim().to_ascii_lowercase().as_str() {
        "" | "b" => 1u64,
        "k" | "kb" | "kib" => 1 << 10,
        "m" | "mb" | "mib" => 1 << 20,
        "g" | "gb" | "gib" => 1 << 30,
        "t" | "tb" | "tib" => 1 << 40,
        _ => return None,
    };
    let bytes = num * mult as f64;
    (bytes.is_finite() && bytes >= 1.0 && bytes < usize::MAX as f64).then_some(bytes as usize)
}

/// [`parse_bytes`], with the one message every setting that takes a size gives for what is not
/// one (`PLACELAB_SIMULATE_CUDA=2,8GiB` and `:simulate cuda 2 8GiB` alike).
pub fn parse_size(s: &str) -> Result<usize, String> {
    parse_bytes(s).ok_or_else(|| {
        format!(
            "{:?} is not a size; write e.g. 8GiB, 512MiB or a byte count",
            s.trim()
        )
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_sizes_as_written() {
        assert_eq!(parse_bytes("8GiB"), Some(8 << 30));
        assert_eq!(parse_bytes("1.5G"), Some(3 << 29));
        assert_eq!(parse_bytes("512 MiB"), Some(512 << 20));
        assert_eq!(parse_bytes("lots"), None);
        assert_eq!(parse_size("8GiB"), Ok(8 << 30));
        assert_eq!(
            parse_size(" lots").unwrap_err(),
            "\"lots\" is not a size; write e.g. 8GiB, 512MiB or a byte count"
        );
        assert_eq!(human_bytes(4_000_000), "3.81 MiB");
    }
}
