//! One card model for a tensor, rendered as text (optionally with ANSI colour) and as HTML (which
//! `cell/show.rs` hands to Jupyter through evcxr's `evcxr_display`), and the device badge that
//! cards and memory strips share.

use std::fmt;

use super::html::{Html, el};
use super::preview::preview;
use crate::base::units::human_bytes;
use crate::device::{Device, DeviceKind};
use crate::tensor::Tensor;

fn shape_text(t: &Tensor) -> String {
    let dims: Vec<String> = t.shape().iter().map(|d| d.to_string()).collect();
    format!("{}[{}]", t.dtype(), dims.join(", "))
}

/// The memory part of a card: the view's bytes, and the storage's when a view shows less.
fn bytes_text(t: &Tensor) -> String {
    let own = t.nbytes();
    let storage = t.storage().numel() * t.element_size();
    if storage > own {
        format!("{} (view of {})", human_bytes(own), human_bytes(storage))
    } else {
        human_bytes(own)
    }
}

fn transfer_text(t: &Tensor) -> String {
    if let Some(q) = t.transfer_in_flight() {
        return in_flight_text(q);
    }
    match t.last_transfer() {
        Some(tr) => format!("last .to(): {tr}"),
        None => "no .to() yet".into(),
    }
}

/// A non-blocking copy still running: its route and the call that waits for it.
fn in_flight_text(q: &crate::transfer::Transfer) -> String {
    let gpu = [q.to, q.from]
        .into_iter()
        .find_map(|d| d.index())
        .unwrap_or(0);
    format!(
        "last .to(): {}, non-blocking, still copying (cuda::synchronize({gpu}) waits for it)",
        q.route()
    )
}

/// ANSI colour of a device badge: blue CPU, green GPU, yellow simulated GPU, magenta emulated.
fn ansi(device: &Device) -> &'static str {
    match device.kind().unwrap_or_default() {
        DeviceKind::Cpu => "\x1b[1;34m",
        DeviceKind::Gpu => "\x1b[1;32m",
        DeviceKind::SimulatedGpu { .. } => "\x1b[1;33m",
        DeviceKind::EmulatedGpu { .. } => "\x1b[1;35m",
    }
}

/// The card's first line: `Tensor f32[2, 3] · cpu · 24 B · no .to() yet`.
pub fn header(t: &Tensor, colour: bool) -> String {
    let device = t.device().label();
    let device = if colour {
        format!("{}{device}\x1b[0m", ansi(&t.device()))
    } else {
        device
    };
    let pinned = if t.is_pinned() { " · pinned" } else { "" };
    format!(
        "Tensor {} · {device} · {}{pinned} · {}",
        shape_text(t),
        bytes_text(t),
        transfer_text(t)
    )
}

/// The whole text card: the header, then the values.
pub fn card_text(t: &Tensor, colour: bool) -> String {
    // Values first: reading them waits for a copy still landing, and the header then has its time.
    let values = preview(t, 0);
    card_text_of(t, colour, &values)
}

/// The text card around values already read (`preview`): a card shown in several forms reads
/// the values once, so a GPU's error reported at that read shows in each form.
pub fn card_text_of(t: &Tensor, colour: bool, values: &str) -> String {
    format!("{}\n{values}", header(t, colour))
}

/// A device's HTML badge, as cards and memory strips show it: its colour (blue for the CPU,
/// green for a GPU, amber for a simulated one, purple for an emulated one) and its text.
pub fn device_badge(name: &str, kind: DeviceKind) -> (&'static str, String) {
    let colour = match kind {
        DeviceKind::Cpu => "#3b6ea5",
        DeviceKind::Gpu => "#5a8f00",
        DeviceKind::SimulatedGpu { .. } => "#b7791f",
        DeviceKind::EmulatedGpu { .. } => "#7b4fa0",
    };
    match kind.label_word() {
        Some(word) => (colour, format!("{name} · {word}")),
        None => (colour, name.to_string()),
    }
}

/// The HTML card: a coloured device badge, shape and dtype, bytes, the last transfer, values.
pub fn card_html(t: &Tensor) -> String {
    card_html_of(t, &preview(t, 0))
}

/// The HTML card around values already read (`preview`), as `card_text_of`.
pub fn card_html_of(t: &Tensor, values: &str) -> String {
    let d = t.device();
    let (bg, label) = device_badge(&d.to_string(), d.kind().unwrap_or_default());
    let transfer: Html = match t.transfer_in_flight().ok_or_else(|| t.last_transfer()) {
        Ok(q) => Html::text(&in_flight_text(q)),
        Err(Some(tr)) => el("span")
            .attr(
                "title",
                &format!("{} bytes, timed by {:?}", tr.bytes, tr.clock),
            )
            .text("last ")
            .child(el("code").text(".to()"))
            .text(&format!(": {tr}"))
            .into(),
        Err(None) => el("span")
            .style("color:#888")
            .text("no ")
            .child(el("code").text(".to()"))
            .text(" yet")
            .into(),
    };
    let pinned = if t.is_pinned() { " · pinned" } else { "" };
    let badge = el("span")
        .style(&format!(
            "background:{bg};color:#fff;border-radius:4px;padding:1px 7px;font-weight:600"
        ))
        .text(&label);
    let head = el("div")
        .child(badge)
        .text(" ")
        .child(el("b").text(&shape_text(t)))
        .text(&format!(" · {}{pinned} · ", bytes_text(t)))
        .child(transfer);
    el("div")
        .class("placelab-tensor")
        .style("font-family:ui-monospace,monospace;font-size:13px;border:1px solid #d0d7de;border-radius:6px;padding:6px 10px;display:inline-block;max-width:100%")
        .child(head)
        .child(el("pre").style("margin:6px 0 0 0").text(values))
        .into_string()
}

impl fmt::Display for Tensor {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&card_text(self, false))
    }
}

/// Markers around a card printed by `Tensor::show()`: the front end turns them into a card of
/// its own, so a cell can show several (evcxr keeps only the last value of a cell).
pub const CARD_BEGIN: &str = "PLACELAB_CARD_BEGIN";
pub const CARD_PLAIN: &str = "PLACELAB_CARD_PLAIN";
pub const CARD_HTML: &str = "PLACELAB_CARD_HTML";
pub const CARD_END: &str = "PLACELAB_CARD_END";
