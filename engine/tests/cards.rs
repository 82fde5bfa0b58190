//! What a tensor looks like: the text card (pinned here) and the HTML card for Jupyter.

use placelab::display::{card_html, card_text};
use placelab::prelude::*;
use placelab::units::{human_bytes, human_duration};

#[test]
fn text_cards_are_pinned() {
    let x = Tensor::arange(0.0, 6.0, Device::Cpu)
        .unwrap()
        .reshape([2, 3])
        .unwrap();
    assert_eq!(
        x.to_string(),
        "Tensor f32[2, 3] · cpu · 24 B · no .to() yet\n[[0., 1., 2.],\n [3., 4., 5.]]"
    );
    let y = Tensor::from_vec(vec![0.5f32, -1.25, 3.0, 0.0], [2, 2], Device::Cpu).unwrap();
    assert_eq!(
        y.to_string(),
        "Tensor f32[2, 2] · cpu · 16 B · no .to() yet\n[[ 0.5000, -1.2500],\n [ 3.0000,  0.0000]]"
    );
    let s = Tensor::scalar(7, Device::Cpu).unwrap();
    assert_eq!(s.to_string(), "Tensor i64[] · cpu · 8 B · no .to() yet\n7");
    let b = Tensor::from_vec(vec![true, false], [2], Device::Cpu).unwrap();
    assert_eq!(
        b.to_string(),
        "Tensor bool[2] · cpu · 2 B · no .to() yet\n[ true, false]"
    );
    let e = Tensor::from_vec(vec![1e-6f64, 1.0, 12345.0], [3], Device::Cpu).unwrap();
    assert_eq!(
        e.to_string().lines().nth(1).unwrap(),
        "[1.0000e-06, 1.0000e+00, 1.2345e+04]"
    );
    let n = Tensor::from_vec(vec![f32::NAN, f32::INFINITY, -1.5], [3], Device::Cpu).unwrap();
    assert_eq!(
        n.to_string().lines().nth(1).unwrap(),
        "[    nan,     inf, -1.5000]"
    );
}

#[test]
fn big_tensors_are_elided_like_pytorch() {
    let x = Tensor::arange(0, 2000, Device::Cpu).unwrap();
    assert_eq!(
        x.to_string().lines().nth(1).unwrap(),
        "[   0,    1,    2,  ..., 1997, 1998, 1999]"
    );
    let m = Tensor::arange(0, 1_000_000, Device::Cpu)
        .unwrap()
        .reshape([1000, 1000])
        .unwrap();
    let text = m.to_string();
    let lines: Vec<&str> = text.lines().collect();
    assert_eq!(
        lines[0],
        "Tensor i64[1000, 1000] · cpu · 7.63 MiB · no .to() yet"
    );
    assert_eq!(
        lines[1],
        "[[     0,      1,      2,  ...,    997,    998,    999],"
    );
    assert_eq!(lines[4], " ...,");
    assert_eq!(
        lines[7],
        " [999000, 999001, 999002,  ..., 999997, 999998, 999999]]"
    );
    assert_eq!(lines.len(), 8);
}

#[test]
fn views_and_transfers_show_in_the_header() {
    cuda::simulate(2, None).unwrap();
    let x = Tensor::zeros([1000, 1000], Device::Cpu).unwrap();
    let v = x.narrow(0, 0, 10).unwrap();
    assert!(
        v.to_string().starts_with(
            "Tensor f32[10, 1000] · cpu · 39.06 KiB (view of 3.81 MiB) · no .to() yet"
        )
    );
    let g = x.to(&Device::Cuda(0)).unwrap();
    let header = g.to_string().lines().next().unwrap().to_string();
    let t = g.last_transfer().unwrap();
    assert_eq!(
        header,
        format!(
            "Tensor f32[1000, 1000] · cuda:0 (simulated) · 3.81 MiB · last .to(): cpu → cuda:0, {} ({}, pageable, simulated: host copy time)",
            human_duration(t.duration),
            placelab::units::human_rate(t.bandwidth())
        )
    );
    let coloured = card_text(&g, true);
    assert!(
        coloured.contains("\x1b[1;33mcuda:0 (simulated)\x1b[0m"),
        "yellow badge for a simulated GPU"
    );
}

#[test]
fn html_card_has_badge_shape_bytes_transfer_and_values() {
    cuda::simulate(2, None).unwrap();
    let g = Tensor::ones([2, 2], Device::Cpu).unwrap().cuda().unwrap();
    let html = card_html(&g);
    assert!(html.contains(">cuda:0 · simulated</span>"), "{html}");
    assert!(html.contains("<b>f32[2, 2]</b> · 16 B"), "{html}");
    assert!(
        html.contains("last <code>.to()</code>: cpu → cuda:0"),
        "{html}"
    );
    assert!(
        html.contains("<pre style=\"margin:6px 0 0 0\">[[1., 1.],\n [1., 1.]]</pre>"),
        "{html}"
    );
}

#[test]
fn human_units() {
    assert_eq!(human_bytes(512), "512 B");
    assert_eq!(human_bytes(4_000_000), "3.81 MiB");
    assert_eq!(human_bytes(20 << 20), "20.00 MiB");
    assert_eq!(human_bytes(3 << 30), "3.00 GiB");
    assert_eq!(
        human_duration(std::time::Duration::from_micros(410)),
        "410.0 µs"
    );
    assert_eq!(
        human_duration(std::time::Duration::from_micros(4100)),
        "4.10 ms"
    );
}
