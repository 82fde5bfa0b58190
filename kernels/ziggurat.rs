// The ziggurat's tables, computed once by `build.rs` and written out twice, as the same bits: for
// the CPU (`random_tables.rs`, included by `engine/src/backend/cpu/random.rs`) and for the GPU
// (`random_tables.cuh`, before `kernels/random.cu`). So a seed's normals are the same on every
// device: both take each value from the same table entries.
//
// Marsaglia and Tsang's ziggurat with 256 layers. Layer `i` is the box `[0, x[i]] × [f[i],
// f[i+1]]`; the base layer (`i = 0`) has the width that gives it the area of the others with the
// tail beyond `x[1]` folded in.

const ZIGGURAT_LAYERS: usize = 256;
/// Where the tail begins, and the area of each layer (Marsaglia and Tsang 2000, 256 layers).
/// With 256 layers 98.5% of draws are accepted by the fast pass (97.2% with 128).
const ZIGGURAT_TAIL_START: f64 = 3.654152885361009;
const ZIGGURAT_LAYER_AREA: f64 = 0.00492867323399;
/// A draw's low 8 bits pick the layer and bit 8 the sign; the position is what lies above the
/// first `ZIGGURAT_SHIFT32` (32-bit draws: 23 bits) or `ZIGGURAT_SHIFT64` bits (64-bit: 53).
const ZIGGURAT_SHIFT32: u32 = 9;
const ZIGGURAT_SHIFT64: u32 = 11;

/// `(x, f)`: each layer's right edge and the unnormalised density `exp(-x²/2)` there.
fn ziggurat_edges() -> ([f64; ZIGGURAT_LAYERS + 1], [f64; ZIGGURAT_LAYERS + 1]) {
    let density = |x: f64| (-0.5 * x * x).exp();
    let mut x = [0.0f64; ZIGGURAT_LAYERS + 1];
    x[0] = ZIGGURAT_LAYER_AREA / density(ZIGGURAT_TAIL_START);
    x[1] = ZIGGURAT_TAIL_START;
    for i in 2..ZIGGURAT_LAYERS {
        x[i] = (-2.0 * (ZIGGURAT_LAYER_AREA / x[i - 1] + density(x[i - 1])).ln()).sqrt();
    }
    x[ZIGGURAT_LAYERS] = 0.0;
    (x, x.map(density))
}

/// One table, as the bits of its entries (`u64` for f64s, `u32` for f32s and u32s).
struct ZigguratTable {
    name: &'static str,
    /// The element type in C and in Rust, and its unsigned integer of the same width.
    c: &'static str,
    rust: &'static str,
    bits: Vec<u64>,
}

/// Every table the samplers read. For a 32- or 64-bit draw `h` with `B` position bits (23, 53):
/// `ACCEPT{32,64}[i]`: a position `u` in layer `i` is under the density everywhere when
/// `u < ACCEPT[i]`; `SCALE{32,64}[j]`: `±x[j & 0xff] / 2^B`, the sign from bit 8 of `j`, so the
/// value of position `u` is `u * SCALE[h & 0x1ff]` with no branch on the sign.
fn ziggurat_tables() -> Vec<ZigguratTable> {
    let (x, f) = ziggurat_edges();
    let scale = |bits: i32, j: usize| {
        let sign = if j & 0x100 != 0 { -1.0 } else { 1.0 };
        sign * x[j & 0xff] / 2f64.powi(bits)
    };
    let table = |name, c, rust, bits| ZigguratTable {
        name,
        c,
        rust,
        bits,
    };
    let layers = 0..ZIGGURAT_LAYERS;
    vec![
        table("ZIG_X", "double", "f64", x.iter().map(|v| v.to_bits()).collect()),
        table("ZIG_F", "double", "f64", f.iter().map(|v| v.to_bits()).collect()),
        table(
            "ZIG_ACCEPT32",
            "unsigned",
            "u32",
            layers.clone().map(|i| (x[i + 1] / x[i] * 2f64.powi(23)) as u32 as u64).collect(),
        ),
        table(
            "ZIG_ACCEPT64",
            "u64",
            "u64",
            layers.map(|i| (x[i + 1] / x[i] * 2f64.powi(53)) as u64).collect(),
        ),
        table(
            "ZIG_SCALE32",
            "float",
            "f32",
            (0..2 * ZIGGURAT_LAYERS).map(|j| (scale(23, j) as f32).to_bits() as u64).collect(),
        ),
        table(
            "ZIG_SCALE64",
            "double",
            "f64",
            (0..2 * ZIGGURAT_LAYERS).map(|j| scale(53, j).to_bits()).collect(),
        ),
    ]
}

const ZIGGURAT_WRITTEN: &str = "Written by build.rs from kernels/ziggurat.rs: edit that file, not this one.";

/// The tables as Rust constants (floats rebuilt from their bits).
fn ziggurat_rust() -> String {
    let mut s = format!("// {ZIGGURAT_WRITTEN}\n");
    s += &format!("pub const ZIG_TAIL_START: f64 = f64::from_bits({:#x});\n", ZIGGURAT_TAIL_START.to_bits());
    s += &format!("pub const ZIG_SHIFT32: u32 = {ZIGGURAT_SHIFT32};\npub const ZIG_SHIFT64: u32 = {ZIGGURAT_SHIFT64};\n");
    for t in ziggurat_tables() {
        let entry = |b: &u64| match t.rust {
            "f64" => format!("f64::from_bits({b:#x})"),
            "f32" => format!("f32::from_bits({b:#x})"),
            _ => format!("{b:#x}"),
        };
        let entries: Vec<String> = t.bits.iter().map(entry).collect();
        s += &format!(
            "pub static {}: [{}; {}] = [{}];\n",
            t.name,
            t.rust,
            t.bits.len(),
            entries.join(", ")
        );
    }
    s
}

/// The same tables as CUDA constants: the bits, read as floats where used (`zig_f64`).
fn ziggurat_cuda() -> String {
    let mut s = format!("// {ZIGGURAT_WRITTEN}\n#pragma once\n");
    s += &format!("#define ZIG_TAIL_START_BITS {:#x}ull\n", ZIGGURAT_TAIL_START.to_bits());
    s += &format!("#define ZIG_SHIFT32 {ZIGGURAT_SHIFT32}\n#define ZIG_SHIFT64 {ZIGGURAT_SHIFT64}\n");
    for t in ziggurat_tables() {
        let int = match t.c {
            "double" | "u64" => "unsigned long long",
            _ => "unsigned",
        };
        let suffix = if int == "unsigned" { "u" } else { "ull" };
        let entries: Vec<String> = t.bits.iter().map(|b| format!("{b:#x}{suffix}")).collect();
        s += &format!(
            "__device__ const {int} {}_BITS[{}] = {{{}}};\n",
            t.name,
            t.bits.len(),
            entries.join(", ")
        );
    }
    s
}
