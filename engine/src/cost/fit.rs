//! Fitting the model's constants to a run's measurements, and holding the model to rows it was
//! not fitted on. The fit minimises the sum of |ln(predicted / measured)| over the priced rows
//! (so a few rows the model cannot explain pull it less than squares would), one constant at a
//! time, each within bounds a real GPU keeps (an efficiency stays at or under 1).

use super::measured::{Row, Run};
use super::model::Constants;
use super::rows::{Priced, Work, price};
use crate::base::op::Op;
use crate::cost::GpuSpec;

/// Rows of the H200 run (commit a24d9d0) whose kernel placelab has since replaced: the fit and
/// the checks read PyTorch's time for them in that run, the same work on the same GPU, because
/// the replacements run at PyTorch's speed on the H100 (add 0.94–1.03×, exp 1.03–1.10×, sum
/// 1.03–1.11×, `benches/gpu-runs/h100-2026-11-27-b` and `-c`).
pub const STAND_INS: &[(&str, &str)] = &[
    ("add 10M f32", "16-byte packs since 1bae563"),
    ("exp 10M f32", "16-byte packs since 1bae563"),
    ("sum 10M f32", "one-pass reduction since 297ef58"),
];

/// Profiled rows of the H200 run of ops placelab no longer runs, left out of the fit and the
/// checks: a bias `add` (now inside `addmm`, c832dfa), ReLU's backward as `gt` + `where` +
/// `fill` (now one `threshold_backward`), a bias gradient as `sum (in add's backward)` (now
/// `addmm`'s), SGD as `mul` + `add` + `copy_` per parameter (now one `sgd_step_`), and the
/// large step's ReLU, whose kernel now moves 16-byte packs (1bae563). Their
/// one-element-a-thread kernels reached a quarter to a third of the H200's bandwidth.
pub const GONE: &[&str] = &[
    "1024-4096-4096-10 batch 1024, forward: relu",
    "forward: add",
    "backward: gt (in relu's backward)",
    "backward: where (in relu's backward)",
    "backward: fill (in relu's backward)",
    "backward: sum (in add's backward)",
    "optimizer: mul",
    "optimizer: add",
    "optimizer: copy_",
];

/// Rows the model does not price, and why: a softmax over one row of 10M values runs in one
/// block (PyTorch's too, 2.7× slower still), a kernel-design cost, not the GPU's.
pub const UNPRICED: &[&str] = &["softmax 1x10M f32"];

/// The runs `model::FITTED` is fitted on: placelab's H200 runs of the code that ships today
/// (fused ops since 6a65041), pooled. The H200 run of 2026-11-26 measured the code before them.
pub const FITTED_ON: &[&str] = &[
    "h200-2026-11-28",
    "h200-2026-11-28-b",
    "h200-2026-11-28-c",
    "h200-2026-11-28-d",
    "h200-2026-11-28-e",
    "h200-2026-11-28-f",
];

/// The priced rows of every run in `names`, pooled.
pub fn points_of_runs(names: &[&str]) -> Vec<Point> {
    (names.iter())
        .filter_map(|name| crate::cost::measured::run(name))
        .flat_map(points)
        .collect()
}

/// The run whose stand-ins apply and whose gone ops are left out.
const STAND_IN_COMMIT: &str = "a24d9d0";

/// The groups a row's error is reported in.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Class {
    PinnedCopy,
    PageableUpload,
    PageableDownload,
    /// Blocking copies timed on the host's clock, from the call to its return.
    BlockingCopy,
    /// Element-wise ops, reductions, gathers and transposes timed whole or queued.
    Kernel,
    Gemm,
    /// Queued one-element ops and a round trip: the host's part.
    Host,
    /// One row of a profiled step (CUDA events).
    ProfiledOp,
    /// A whole training step.
    Step,
}

impl Class {
    pub fn name(self) -> &'static str {
        match self {
            Class::PinnedCopy => "pinned copies",
            Class::PageableUpload => "pageable uploads",
            Class::PageableDownload => "pageable downloads",
            Class::BlockingCopy => "blocking copies, host time",
            Class::Kernel => "kernels timed whole",
            Class::Gemm => "GEMMs timed whole",
            Class::Host => "the host's issue time",
            Class::ProfiledOp => "profiled ops",
            Class::Step => "whole steps",
        }
    }

    fn of(row: &Row) -> Class {
        match (row.bench.as_str(), row.name.as_str()) {
            ("transfer", n) if n.ends_with("pinned") => Class::PinnedCopy,
            ("transfer", "h2d_pageable") => Class::PageableUpload,
            ("transfer", _) => Class::PageableDownload,
            ("profile", _) => Class::ProfiledOp,
            (_, n) if n.starts_with(Op::Matmul.name()) => Class::Gemm,
            (_, n) if n.starts_with("step ") => Class::Step,
            (_, n) if n.contains("[1]") => Class::Host,
            _ => Class::Kernel,
        }
    }
}

/// A measured row the model prices.
#[derive(Debug, Clone)]
pub struct Point {
    pub row: Row,
    pub class: Class,
    pub priced: Priced,
    /// What the model is held to: placelab's time, or PyTorch's for a stand-in.
    pub measured: f64,
}

/// The rows of `run` the model prices, with what each is held to: a transfer twice, its time
/// between CUDA events and (where the run kept it) the host's time for the blocking call.
pub fn points(run: &Run) -> Vec<Point> {
    let mut points: Vec<Point> = run.rows.iter().filter_map(|row| point(run, row)).collect();
    let walls: Vec<Point> = (points.iter())
        .filter_map(|p| {
            let wall = p.row.wall_seconds.filter(|w| *w > 0.0)?;
            let Priced::Events(work) = &p.priced else {
                return None;
            };
            let copy @ Work::Copy(..) = *work.first()? else {
                return None;
            };
            Some(Point {
                row: p.row.clone(),
                class: Class::BlockingCopy,
                priced: Priced::Blocking(copy),
                measured: wall,
            })
        })
        .collect();
    points.extend(walls);
    points
}

fn point(run: &Run, row: &Row) -> Option<Point> {
    let old = run.commit == STAND_IN_COMMIT;
    if old && row.bench == "profile" && GONE.iter().any(|g| row.name.ends_with(g)) {
        return None;
    }
    if UNPRICED.contains(&row.name.as_str()) {
        return None;
    }
    let priced = price(row, &run.rows)?;
    let stand_in = old && STAND_INS.iter().any(|(name, _)| *name == row.name);
    let measured = match (stand_in, row.torch_seconds) {
        (true, Some(torch)) => torch,
        _ => row.seconds,
    };
    Some(Point {
        row: row.clone(),
        class: Class::of(row),
        priced,
        measured,
    })
}

/// The model's relative error on `point`: (predicted − measured) / measured.
pub fn error(c: &Constants, gpu: &GpuSpec, point: &Point) -> f64 {
    point.priced.seconds(c, gpu) / point.measured - 1.0
}

/// The constants as an array, for the search, and each one's bounds.
const COUNT: usize = 15;

fn to_array(c: &Constants) -> [f64; COUNT] {
    [
        c.pcie_efficiency,
        c.pinned_latency,
        c.pageable_to_device_gbps,
        c.pageable_to_device_latency,
        c.pageable_to_host_gbps,
        c.pageable_to_host_latency,
        c.memory_efficiency,
        c.reduction_efficiency,
        c.strided_efficiency,
        c.kernel_min,
        c.gemm_efficiency,
        c.gemm_min,
        c.host_op,
        c.step_op,
        c.blocking_copy_host,
    ]
}

fn from_array(a: [f64; COUNT]) -> Constants {
    Constants {
        pcie_efficiency: a[0],
        pinned_latency: a[1],
        pageable_to_device_gbps: a[2],
        pageable_to_device_latency: a[3],
        pageable_to_host_gbps: a[4],
        pageable_to_host_latency: a[5],
        memory_efficiency: a[6],
        reduction_efficiency: a[7],
        strided_efficiency: a[8],
        kernel_min: a[9],
        gemm_efficiency: a[10],
        gemm_min: a[11],
        host_op: a[12],
        step_op: a[13],
        blocking_copy_host: a[14],
    }
}

/// The largest value each constant may take: efficiencies at most 1, times and rates wide.
const UPPER: [f64; COUNT] = [
    1.0, 1e-3, 1e3, 1e-3, 1e3, 1e-3, 1.0, 1.0, 1.0, 1e-3, 1.0, 1e-3, 1e-3, 1e-3, 1e-3,
];

/// Where a search starts: the model's constants before any fit (the published figures and
/// assumed latencies of the first model), so no fit starts from what it is being checked on.
pub const PRIOR: Constants = Constants {
    pcie_efficiency: 0.883,
    pinned_latency: 10e-6,
    pageable_to_device_gbps: 10.0,
    pageable_to_device_latency: 10e-6,
    pageable_to_host_gbps: 10.0,
    pageable_to_host_latency: 10e-6,
    memory_efficiency: 0.896,
    reduction_efficiency: 0.896,
    strided_efficiency: 0.896,
    kernel_min: 4e-6,
    gemm_efficiency: 0.832,
    gemm_min: 4e-6,
    host_op: 4e-6,
    step_op: 10e-6,
    blocking_copy_host: 10e-6,
};

/// Which constants (by index in `to_array`) each class of rows fixes. The fit takes them in
/// this order, each group on its own rows with the others held, so a constant is fixed by the
/// measurements its comment in `model.rs` names. The host's time per step op comes first from
/// the whole steps, so that the profiled rows of host-bound steps (whose events are that far
/// apart) do not push the kernels' constants up; the last stage refines it on both.
const STAGES: &[(&[usize], &[Class])] = &[
    (&[0, 1], &[Class::PinnedCopy]),
    (&[2, 3], &[Class::PageableUpload]),
    (&[4, 5], &[Class::PageableDownload]),
    (&[14], &[Class::BlockingCopy]),
    (&[12], &[Class::Host]),
    (&[13], &[Class::Step]),
    (&[6, 7, 8, 9], &[Class::Kernel, Class::ProfiledOp]),
    (&[10, 11], &[Class::Gemm, Class::ProfiledOp]),
    (&[6, 7, 8, 9], &[Class::Kernel, Class::ProfiledOp]),
    (&[13], &[Class::Step, Class::ProfiledOp]),
];

/// The constants that fit `points` on `gpu` best, from `PRIOR`.
pub fn fit(points: &[Point], gpu: &GpuSpec) -> Constants {
    let mut best = to_array(&PRIOR);
    for (constants, classes) in STAGES {
        let rows: Vec<&Point> = points
            .iter()
            .filter(|p| classes.contains(&p.class))
            .collect();
        let loss = |a: &[f64; COUNT]| -> f64 {
            let c = from_array(*a);
            let off = |p: &&Point| (p.priced.seconds(&c, gpu) / p.measured).ln().abs();
            rows.iter().map(off).sum()
        };
        let mut best_loss = loss(&best);
        // Each sweep tries every constant times factor^i for i in −8..=8 and keeps the best;
        // the factor narrows sweep by sweep, from ×2 a step to about ×1.001.
        let mut factor: f64 = 2.0;
        for _ in 0..10 {
            for &j in *constants {
                let centre = best[j];
                for i in -8..=8 {
                    let mut trial = best;
                    trial[j] = (centre * factor.powi(i)).min(UPPER[j]);
                    let l = loss(&trial);
                    if l < best_loss {
                        (best, best_loss) = (trial, l);
                    }
                }
            }
            factor = factor.sqrt();
        }
    }
    from_array(best)
}

/// Each point predicted by a model fitted on every other point of its run: the point, and the
/// model's error on it.
pub fn leave_one_out(points: &[Point], gpu: &GpuSpec) -> Vec<(Point, f64)> {
    (0..points.len())
        .map(|i| {
            let others: Vec<Point> = (points.iter().enumerate())
                .filter(|(j, _)| *j != i)
                .map(|(_, p)| p.clone())
                .collect();
            let c = fit(&others, gpu);
            (points[i].clone(), error(&c, gpu, &points[i]))
        })
        .collect()
}

/// The median of the absolute values of `errors` (0 for none).
pub fn median_abs(errors: impl IntoIterator<Item = f64>) -> f64 {
    let mut v: Vec<f64> = errors.into_iter().map(f64::abs).collect();
    if v.is_empty() {
        return 0.0;
    }
    v.sort_by(f64::total_cmp);
    let n = v.len();
    if n % 2 == 1 {
        v[n / 2]
    } else {
        (v[n / 2 - 1] + v[n / 2]) / 2.0
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cost::find;
    use crate::cost::measured::{Run, runs};
    use crate::cost::model::FITTED;

    fn h200() -> (Run, &'static GpuSpec) {
        let run = runs()[0].clone();
        let gpu = find(&run.spec).unwrap();
        (run, gpu)
    }

    /// The median absolute error per class, and over all rows.
    fn by_class(errors: &[(Point, f64)]) -> (Vec<(Class, f64)>, f64) {
        let mut classes: Vec<Class> = errors.iter().map(|e| e.0.class).collect();
        classes.sort();
        classes.dedup();
        let per_class = classes
            .into_iter()
            .map(|c| {
                let e = errors.iter().filter(|e| e.0.class == c).map(|e| e.1);
                (c, median_abs(e))
            })
            .collect();
        (per_class, median_abs(errors.iter().map(|e| e.1)))
    }

    fn errors(c: &Constants, run: &Run) -> Vec<(Point, f64)> {
        let gpu = find(&run.spec).unwrap();
        (points(run).into_iter())
            .map(|p| {
                let e = error(c, gpu, &p);
                (p, e)
            })
            .collect()
    }

    #[test]
    fn the_shipped_constants_are_the_fit_on_the_current_h200_runs() {
        let gpu = find("h200").unwrap();
        let points = points_of_runs(FITTED_ON);
        assert_eq!(points.len(), 6 * 115, "six runs of 115 priced rows");
        let fitted = to_array(&fit(&points, gpu));
        for (i, (shipped, fitted)) in to_array(&FITTED).iter().zip(fitted).enumerate() {
            assert!(
                (shipped / fitted - 1.0).abs() < 0.002,
                "constant {i} of model::FITTED is {shipped:e}; the fit gives {fitted:e}: copy \
                 the fit's value into model.rs"
            );
        }
    }

    /// Issue 64's targets, on runs the model was not fitted on: each current H200 run
    /// predicted by the model fitted on the other five.
    #[test]
    fn each_h200_run_is_predicted_by_a_fit_on_the_others() {
        let gpu = find("h200").unwrap();
        for held_out in FITTED_ON {
            let others: Vec<&str> = FITTED_ON
                .iter()
                .copied()
                .filter(|r| r != held_out)
                .collect();
            let c = fit(&points_of_runs(&others), gpu);
            let errors = errors(&c, crate::cost::measured::run(held_out).unwrap());
            let (per_class, all) = by_class(&errors);
            let table: Vec<String> = (per_class.iter())
                .map(|(c, e)| format!("{}: {:.0}%", c.name(), 100.0 * e))
                .collect();
            assert!(
                all <= 0.15,
                "{held_out}: median {:.1}% ({table:?})",
                100.0 * all
            );
            for (class, median) in &per_class {
                assert!(
                    *median <= 0.35,
                    "{held_out} {}: {:.0}%",
                    class.name(),
                    100.0 * median
                );
            }
            // The GPU-bound step within 25%. The host-bound ones within 35%: the same commit's
            // 784-128-10 step at batch 64 took 138–204 µs in runs d–f, so a fit on the other
            // runs misses the fastest and the slowest by about a third.
            for (point, error) in errors.iter().filter(|e| e.0.class == Class::Step) {
                let gpu_bound = point.row.name.contains("4096");
                let bound = if gpu_bound { 0.25 } else { 0.35 };
                assert!(
                    error.abs() <= bound,
                    "{held_out} {}: {:+.0}%",
                    point.row.name,
                    100.0 * error
                );
            }
            let steps = errors.iter().filter(|e| e.0.class == Class::Step).count();
            assert_eq!(steps, 3, "the three f32 steps with profiled op lists");
        }
    }

    /// The H100 runs were made on another GPU with older code: the model fitted on the H200
    /// runs alone predicts their copies and GEMMs, which the code since has not changed.
    #[test]
    fn fitted_on_the_h200_the_model_predicts_the_h100_runs_copies_and_gemms() {
        for run in runs().iter().filter(|r| r.spec == "h100") {
            let errors = errors(&FITTED, run);
            let copies_and_gemms = (errors.iter())
                .filter(|e| {
                    !matches!(
                        e.0.class,
                        Class::Kernel | Class::Host | Class::ProfiledOp | Class::Step
                    )
                })
                .map(|e| e.1);
            let median = median_abs(copies_and_gemms);
            assert!(
                median <= 0.20,
                "{}: median {:.1}%",
                run.name,
                100.0 * median
            );
        }
    }

    /// Notebook 03's sentence on the H100 runs: "From 1 MiB up, its pinned copies are within 7%
    /// of two of those runs and within 20% of the third ... Its pageable copies are off by up
    /// to 58%".
    #[test]
    fn the_h100_runs_copies_are_predicted_as_notebook_03_says() {
        let worst = |run: &Run, class: Class| -> f64 {
            (errors(&FITTED, run).into_iter())
                .filter(|(p, _)| p.class == class && p.row.bytes >= 1 << 20)
                .map(|(_, e)| e.abs())
                .fold(0.0, f64::max)
        };
        let h100: Vec<&Run> = runs().iter().filter(|r| r.spec == "h100").collect();
        let pinned: Vec<f64> = h100.iter().map(|r| worst(r, Class::PinnedCopy)).collect();
        assert!(pinned[0] <= 0.07 && pinned[1] <= 0.07, "{pinned:?}");
        assert!((0.15..=0.20).contains(&pinned[2]), "{pinned:?}");
        let pageable = (h100.iter())
            .flat_map(|r| {
                [
                    worst(r, Class::PageableUpload),
                    worst(r, Class::PageableDownload),
                ]
            })
            .fold(0.0, f64::max);
        assert!((0.50..=0.585).contains(&pageable), "{pageable}");
    }

    /// Every kept run under the shipped constants, the newest included: the runs they were
    /// fitted on within 12%, the older code's and the H100's within 21%.
    #[test]
    fn every_kept_run_is_within_its_bound_under_the_shipped_constants() {
        for run in runs() {
            let errors = errors(&FITTED, run);
            assert!(errors.len() >= 110, "{}: {} rows", run.name, errors.len());
            let (per_class, all) = by_class(&errors);
            let bound = if FITTED_ON.contains(&run.name.as_str()) {
                0.12
            } else {
                0.21
            };
            assert!(all <= bound, "{}: median {:.1}%", run.name, 100.0 * all);
            for (class, median) in per_class {
                assert!(
                    median <= 0.50,
                    "{} {}: {:.0}%",
                    run.name,
                    class.name(),
                    100.0 * median
                );
            }
        }
    }

    #[test]
    fn rows_of_gone_ops_and_stand_ins_are_what_the_h200_run_is_held_to() {
        let (run, _) = h200();
        let points = points(&run);
        let add = points.iter().find(|p| p.row.name == "add 10M f32").unwrap();
        let torch = add.row.torch_seconds.unwrap();
        assert_eq!(
            add.measured, torch,
            "PyTorch's time stands in for the old kernel"
        );
        assert!((torch - 0.042e-3).abs() < 1e-12);
        assert!(
            points
                .iter()
                .all(|p| !p.row.name.ends_with("optimizer: copy_"))
        );
        assert!(points.iter().all(|p| p.row.name != "softmax 1x10M f32"));
        // A later run's add is its own.
        let c = runs().last().unwrap();
        let add = points_of(c, "add 10M f32");
        assert_eq!(add.measured, add.row.seconds);
    }

    /// Notebook 06's ranges over the six H200 runs of 2026-11-28: "the product gained
    /// 14.0–14.7×, the step 2.9–3.1× (PyTorch's 1.5–2.1×)", TF32 "7.0–7.6× in the six runs,
    /// PyTorch's 6.6–7.7×".
    #[test]
    fn notebook_06s_speedups_span_the_six_h200_runs() {
        let six: Vec<&Run> = FITTED_ON
            .iter()
            .filter_map(|name| crate::cost::measured::run(name))
            .collect();
        assert_eq!(six.len(), 6);
        let span = |full: &str, fast: &str, torch: bool| -> (f64, f64) {
            let ratios = six.iter().map(|r| {
                let (f, b) = (r.op(full).unwrap(), r.op(fast).unwrap());
                match torch {
                    true => f.torch_seconds.unwrap() / b.torch_seconds.unwrap(),
                    false => f.seconds / b.seconds,
                }
            });
            ratios.fold((f64::MAX, 0.0), |(lo, hi), x| (lo.min(x), hi.max(x)))
        };
        let rounded =
            |(lo, hi): (f64, f64)| ((lo * 10.0).round() / 10.0, (hi * 10.0).round() / 10.0);
        let (f32, bf16, tf32) = (
            "matmul 4096^3 f32",
            "matmul 4096^3 bf16",
            "matmul 4096^3 f32 tf32",
        );
        let (step, autocast) = (
            "step 1024-4096-4096-10 b1024",
            "step 1024-4096-4096-10 b1024 bf16 autocast",
        );
        assert_eq!(rounded(span(f32, bf16, false)), (14.0, 14.7));
        assert_eq!(rounded(span(step, autocast, false)), (2.9, 3.1));
        assert_eq!(rounded(span(step, autocast, true)), (1.5, 2.1));
        assert_eq!(rounded(span(f32, tf32, false)), (7.0, 7.6));
        assert_eq!(rounded(span(f32, tf32, true)), (6.6, 7.7));
    }

    fn points_of(run: &Run, name: &str) -> Point {
        points(run)
            .into_iter()
            .find(|p| p.row.name == name)
            .unwrap()
    }
}
