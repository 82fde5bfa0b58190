//! A model card: parameter count, bytes and devices per layer, and a warning when parameters
//! are spread over several devices (the "I moved the model but one tensor stayed" bug).

use super::{Module, ModuleExt};
use crate::base::units::human_bytes;

/// `12,345` — counts read better with separators.
fn grouped(n: usize) -> String {
    let s = n.to_string();
    let mut out = String::new();
    for (i, c) in s.chars().enumerate() {
        if i > 0 && (s.len() - i).is_multiple_of(3) {
            out.push(',');
        }
        out.push(c);
    }
    out
}

fn devices_text(m: &dyn Module) -> String {
    let d = m.devices();
    if d.is_empty() {
        String::new()
    } else {
        d.iter().map(|d| d.label()).collect::<Vec<_>>().join(", ")
    }
}

fn bytes_of(m: &dyn Module) -> usize {
    m.parameters().iter().map(|p| p.nbytes()).sum()
}

/// The model card of `m` as text.
pub fn summary(m: &dyn Module) -> String {
    let mut out = format!(
        "{} · {} parameters · {} · {}",
        m.describe(),
        grouped(m.num_parameters()),
        human_bytes(bytes_of(m)),
        devices_text(m)
    );
    for (name, child) in m.children() {
        let n = child.num_parameters();
        let detail = if n == 0 {
            String::new()
        } else {
            format!(
                "{:>12} params · {} · {}",
                grouped(n),
                human_bytes(bytes_of(child)),
                devices_text(child)
            )
        };
        let line = format!("\n  {name:<3} {:<24} {detail}", child.describe());
        out.push_str(line.trim_end());
    }
    let devices = m.devices();
    if devices.len() > 1 {
        let first = devices[0];
        let odd: Vec<String> = m
            .named_parameters()
            .into_iter()
            .filter(|(_, p)| p.device() != devices[devices.len() - 1])
            .map(|(n, p)| format!("{n} on {}", p.device()))
            .collect();
        out.push_str(&format!(
            "\n  ⚠ parameters are on {} devices ({}); {}: move the whole model with `model.to(&device)?`",
            devices.len(),
            devices.iter().map(|d| d.to_string()).collect::<Vec<_>>().join(", "),
            if odd.is_empty() { format!("some are on {first}") } else { odd.join(", ") }
        ));
    }
    out
}
