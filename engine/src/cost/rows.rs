//! What each measured row (`measured.rs`) asked of the GPU, so the model can price it: the
//! copies, kernels and GEMMs behind a transfer, an op timed whole, a row of a profiled step, or
//! a whole training step. The rows are `benches/gpu.rs`'s workloads; a row this file does not
//! know (the pinned-memory and loader workloads, a step with no op list) is not priced.

use super::measured::Row;
use super::model::{self, Access, Arithmetic, Constants, CopyRoute};
use crate::base::op::{BinaryOp, CmpOp, Op, UnaryOp, parse_row_label};
use crate::cost::GpuSpec;

/// One piece of work on the GPU.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Work {
    Copy(CopyRoute, u64),
    /// A kernel reading and writing this many bytes.
    Kernel(Access, u64),
    /// An `m × k` by `k × n` product of `element_bytes`-byte values.
    Gemm {
        m: u64,
        n: u64,
        k: u64,
        element_bytes: u64,
        arithmetic: Arithmetic,
    },
}

/// How a row's time is made of its work.
#[derive(Debug, Clone, PartialEq)]
pub enum Priced {
    /// Time between CUDA events: the work, one piece after another.
    Events(Vec<Work>),
    /// A blocking copy timed on the host's clock: its events' time and the host's own part.
    Blocking(Work),
    /// An op timed whole, with a synchronize: the host queues it, then the GPU runs it.
    Whole { host_ops: f64, work: Vec<Work> },
    /// One op of a long queue, launching these kernels: the host and the GPU overlap, the
    /// slower sets the pace. Each launch costs the host its own dispatch time.
    Queued(Vec<Work>),
    /// A whole training step of `ops` ops: the larger of host and GPU time.
    Step { ops: usize, work: Vec<Work> },
    /// One row of a profiled step (`calls` calls of an op), timed between CUDA events. When
    /// the `step` is host-bound, the GPU waits for each op to be queued, so the events are
    /// at least the host's time per op apart (`step_op`); when it is GPU-bound they time
    /// the kernels alone.
    StepOp {
        calls: u64,
        work: Vec<Work>,
        step: Box<Priced>,
    },
}

impl Work {
    pub fn seconds(&self, c: &Constants, gpu: &GpuSpec) -> f64 {
        match *self {
            Work::Copy(route, bytes) => model::copy_with(c, gpu, route, bytes).seconds,
            Work::Kernel(access, bytes) => {
                model::kernel_with(c, gpu, access, bytes, 0.0, Arithmetic::F32)
            }
            Work::Gemm {
                m,
                n,
                k,
                element_bytes,
                arithmetic,
            } => model::matmul_with(c, gpu, (1, m, n, k), element_bytes, arithmetic),
        }
    }
}

impl Priced {
    /// The model's time for the row under the constants `c`.
    pub fn seconds(&self, c: &Constants, gpu: &GpuSpec) -> f64 {
        let sum = |work: &[Work]| work.iter().map(|w| w.seconds(c, gpu)).sum::<f64>();
        match self {
            Priced::Events(work) => sum(work),
            Priced::Blocking(work) => work.seconds(c, gpu) + c.blocking_copy_host,
            Priced::Whole { host_ops, work } => host_ops * c.host_op + sum(work),
            Priced::Queued(work) => {
                let host = work.len() as f64 * c.host_op;
                let gpu_time = work
                    .iter()
                    .map(|w| model::queued_with(c, w.seconds(c, gpu)));
                host.max(gpu_time.sum())
            }
            Priced::Step { .. } => self.step(c, gpu).map_or(0.0, |s| s.seconds),
            Priced::StepOp { calls, work, step } => {
                let host_bound = step.step(c, gpu).map(|s| s.bound) == Some(model::Bound::Host);
                match host_bound {
                    true => sum(work).max(*calls as f64 * c.step_op),
                    false => sum(work),
                }
            }
        }
    }

    /// A whole step's prediction: the host's time and the GPU's, and which binds.
    pub fn step(&self, c: &Constants, gpu: &GpuSpec) -> Option<model::StepPrediction> {
        let Priced::Step { ops, work } = self else {
            return None;
        };
        let queued = work
            .iter()
            .map(|w| model::queued_with(c, w.seconds(c, gpu)));
        Some(model::step_with(c, *ops, 0.0, queued.sum()))
    }
}

const F32: u64 = 4;
const MIB: u64 = 1 << 20;

fn gemm(m: u64, n: u64, k: u64, arithmetic: Arithmetic) -> Work {
    Work::Gemm {
        m,
        n,
        k,
        element_bytes: if arithmetic == Arithmetic::F32 || arithmetic == Arithmetic::Tf32 {
            4
        } else {
            2
        },
        arithmetic,
    }
}

fn streaming(bytes: u64) -> Work {
    Work::Kernel(Access::Streaming, bytes)
}

fn reduction(bytes: u64) -> Work {
    Work::Kernel(Access::Reduction, bytes)
}

/// A sum of all of `bytes` of f32: one launch up to 4096 values, else two, as
/// `backend::gpu::reduce::sum_rows` launches them (the chunks' partial sums, then a block
/// adding up at most 2048 partials).
fn whole_sum(bytes: u64) -> Vec<Work> {
    match bytes / F32 <= 4096 {
        true => vec![reduction(bytes)],
        false => vec![reduction(bytes), reduction(2048 * 8)],
    }
}

/// How the model prices `row` of `rows` (the run it belongs to: a whole step is priced from
/// that run's profiled rows of the same step), if it knows the row.
pub fn price(row: &Row, rows: &[Row]) -> Option<Priced> {
    match row.bench.as_str() {
        "transfer" => {
            let route = match row.name.as_str() {
                "h2d_pinned" | "d2h_pinned" => CopyRoute::Pinned,
                "h2d_pageable" => CopyRoute::PageableToDevice,
                "d2h_pageable" => CopyRoute::PageableToHost,
                _ => return None,
            };
            Some(Priced::Events(vec![Work::Copy(route, row.bytes)]))
        }
        "profile" => {
            let (label, op) = row.name.split_once(", ")?;
            let (phase, op) = op.split_once(": ")?;
            let mlp = Mlp::named(label)?;
            Some(Priced::StepOp {
                calls: row.calls,
                work: profiled_row(&mlp, phase, parse_row_label(op), row.calls)?,
                step: Box::new(profiled_step(label, rows)?),
            })
        }
        "op" => whole_op(&row.name, rows),
        _ => None,
    }
}

/// How the model prices an op timed whole (a `bench` "op" row), if it knows the op.
fn whole_op(name: &str, rows: &[Row]) -> Option<Priced> {
    const TEN_M: u64 = 10_000_000 * F32;
    let whole = |work: Vec<Work>| {
        Some(Priced::Whole {
            host_ops: 1.0,
            work,
        })
    };
    let tiny = streaming(4 * F32);
    if let Some(rest) = name.strip_prefix("matmul 4096^3 ") {
        return big_matmul(rest);
    }
    if let Some(step) = name.strip_prefix("step ") {
        return training_step(step, rows);
    }
    let sweep = |rest: &str| -> Option<u64> {
        let shift: u32 = rest.strip_suffix(" f32 queued")?.parse().ok()?;
        Some((1u64 << shift) * F32)
    };
    if let Some(bytes) = name.strip_prefix("add 2^").and_then(sweep) {
        // `a + a`: the one input is read once per element.
        return Some(Priced::Queued(vec![streaming(2 * bytes)]));
    }
    if let Some(bytes) = name.strip_prefix("sum 2^").and_then(sweep) {
        return Some(Priced::Queued(whole_sum(bytes)));
    }
    match name {
        "add 10M f32" => whole(vec![streaming(3 * TEN_M)]),
        "exp 10M f32" => whole(vec![streaming(2 * TEN_M)]),
        "sum 10M f32" => whole(vec![reduction(TEN_M)]),
        // Read for the max, for the sum, and to write: three reads and a write.
        "softmax 1x10M f32" => whole(vec![reduction(4 * TEN_M)]),
        "softmax 4096x4096 f32" => whole(vec![reduction(4 * 64 * MIB)]),
        // The index is read back to check it on the host (a pageable download), then gathered.
        "index_select 1000 of 4096 rows f32" => Some(Priced::Whole {
            host_ops: 1.0,
            work: vec![
                Work::Copy(CopyRoute::PageableToHost, 1000 * 8),
                streaming(2 * 1000 * 4096 * F32),
            ],
        }),
        "transpose contiguous 4096x4096 f32" => {
            whole(vec![Work::Kernel(Access::Strided, 2 * 64 * MIB)])
        }
        "dispatch add [1]" | "queued add [1]" => Some(Priced::Queued(vec![tiny])),
        // Two ops queued, then the value read back (a pageable download of 4 bytes).
        "add+sum+item [1] round trip" | "add [1] + sum + item" => Some(Priced::Whole {
            host_ops: 2.0,
            work: vec![
                tiny,
                reduction(F32),
                Work::Copy(CopyRoute::PageableToHost, F32),
            ],
        }),
        _ => None,
    }
}

/// A 4096³ matmul timed whole, of the arithmetic `rest` names ("f32 tf32", "bf16", …).
fn big_matmul(rest: &str) -> Option<Priced> {
    let arithmetic = match rest {
        "f32" => Arithmetic::F32,
        "f32 tf32" => Arithmetic::Tf32,
        "bf16" => Arithmetic::Bf16,
        "f16" => Arithmetic::F16,
        _ => return None,
    };
    Some(Priced::Whole {
        host_ops: 1.0,
        work: vec![gemm(4096, 4096, 4096, arithmetic)],
    })
}

/// A whole training step (`step` as "784-128-10 b64"), priced from the same run's profiled
/// rows of that step: every op of it, and its work.
fn training_step(step: &str, rows: &[Row]) -> Option<Priced> {
    let label = match step {
        "784-128-10 b64" => "batch 64",
        "784-128-10 b1024" => "batch 1024",
        "1024-4096-4096-10 b1024" => "1024-4096-4096-10 batch 1024",
        _ => return None,
    };
    profiled_step(label, rows)
}

/// The step profiled under `label` ("batch 64") in `rows`: its ops and their work.
fn profiled_step(label: &str, rows: &[Row]) -> Option<Priced> {
    let mlp = Mlp::named(label)?;
    let (mut ops, mut work) = (0, Vec::new());
    for r in rows.iter().filter(|r| r.bench == "profile") {
        let Some((l, op)) = r.name.split_once(", ") else {
            continue;
        };
        if l == label {
            let (phase, op) = op.split_once(": ")?;
            ops += r.calls as usize;
            work.extend(profiled_row(&mlp, phase, parse_row_label(op), r.calls)?);
        }
    }
    (ops > 0).then_some(Priced::Step { ops, work })
}

/// An MLP of `gpu.rs`'s profiled steps: its widths and batch, trained in f32 with SGD.
struct Mlp {
    widths: Vec<u64>,
    batch: u64,
}

impl Mlp {
    fn named(label: &str) -> Option<Mlp> {
        let (widths, batch): (&[u64], u64) = match label {
            "batch 64" => (&[784, 128, 10], 64),
            "batch 1024" => (&[784, 128, 10], 1024),
            "1024-4096-4096-10 batch 1024" => (&[1024, 4096, 4096, 10], 1024),
            _ => return None,
        };
        Some(Mlp {
            widths: widths.to_vec(),
            batch,
        })
    }

    /// (inputs, outputs) of each layer.
    fn layers(&self) -> impl Iterator<Item = (u64, u64)> + '_ {
        self.widths.windows(2).map(|w| (w[0], w[1]))
    }

    /// The hidden activations' sizes, one per ReLU.
    fn hidden(&self) -> impl Iterator<Item = u64> + '_ {
        let last = self.widths.len() - 1;
        self.widths[1..last].iter().map(|h| self.batch * h)
    }

    fn parameters(&self) -> u64 {
        self.layers().map(|(i, o)| i * o + o).sum()
    }
}

/// The work behind one row of a profiled step: its op, with the backward it ran for (`None`
/// for a row whose label names no op), in `phase` over `calls` calls. The small ops of the
/// loss move a few KiB each: one small kernel a call.
fn profiled_row(
    mlp: &Mlp,
    phase: &str,
    row: Option<(Op, Option<Op>)>,
    calls: u64,
) -> Option<Vec<Work>> {
    use Op::{Addmm, Binary, Compare, CopyInPlace, Matmul, SgdStep, Sum, Unary, Where};
    let b = mlp.batch;
    let f32 = Arithmetic::F32;
    let layers = mlp.layers().count() as u64;
    let (add, relu) = (Binary(BinaryOp::Add), Unary(UnaryOp::Relu));
    let work: Vec<Work> = match row {
        Some((Matmul, None)) => mlp.layers().map(|(i, o)| gemm(b, o, i, f32)).collect(),
        // The bias copied into the output, then the GEMM adds the product onto it.
        Some((Addmm, None)) => mlp
            .layers()
            .flat_map(|(i, o)| [streaming(b * o * F32), gemm(b, o, i, f32)])
            .collect(),
        Some((Matmul, Some(Matmul | Addmm))) => {
            let weights = mlp.layers().map(|(i, o)| gemm(i, o, b, f32));
            let inputs = mlp.layers().skip(1).map(|(i, o)| gemm(b, i, o, f32));
            weights.chain(inputs).collect()
        }
        Some((op, None)) if op == add && phase == "forward" => mlp
            .layers()
            .map(|(_, o)| streaming(2 * b * o * F32))
            .collect(),
        Some((op, None)) if op == relu => mlp.hidden().map(|n| streaming(2 * n * F32)).collect(),
        Some((Sum, Some(f))) if f == add || f == Addmm => {
            mlp.layers().map(|(_, o)| reduction(b * o * F32)).collect()
        }
        Some((Compare(CmpOp::Gt), Some(f))) if f == relu => {
            mlp.hidden().map(|n| streaming(5 * n)).collect()
        }
        Some((Where, Some(f))) if f == relu => mlp.hidden().map(|n| streaming(9 * n)).collect(),
        Some((Binary(BinaryOp::ReluBackward), Some(f))) if f == relu => {
            mlp.hidden().map(|n| streaming(3 * n * F32)).collect()
        }
        // SGD without momentum: `p -= lr * g` as mul, add and copy_ per parameter, or one
        // fused update of every parameter.
        Some((op @ (Binary(BinaryOp::Mul | BinaryOp::Add) | CopyInPlace), None))
            if phase == "optimizer" =>
        {
            let per_value = if op == add { 3 } else { 2 };
            mlp.layers()
                .flat_map(|(i, o)| [i * o, o])
                .map(|n| streaming(per_value * n * F32))
                .collect()
        }
        Some((SgdStep, None)) => vec![streaming(3 * mlp.parameters() * F32)],
        _ => vec![streaming(3 * b * mlp.widths.last()? * F32)],
    };
    // A row whose calls are not its layers' (the loss's one-per-step ops) repeats its work.
    // `addmm` is two kernels a call: its calls are the layers.
    Some(
        if work.len() as u64 == calls || (row == Some((Addmm, None)) && calls == layers) {
            work
        } else if work.len() == 1 {
            vec![work[0]; calls as usize]
        } else {
            return None;
        },
    )
}
