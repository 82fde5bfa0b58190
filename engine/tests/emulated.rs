//! The emulator itself: the kernels compiled for the host are the ones the launchers declare,
//! with the same parameters; a launch that does not fit its kernel or CUDA's limits is refused,
//! naming the kernel; and the launch geometry the ops choose (one block, many, a grid smaller
//! than the work, ragged tails, views with offsets, empty tensors, long rows split over blocks,
//! more rows than blocks) gives the CPU's results. The engine's other tests run again on emulated
//! devices from their own binaries (`support/stand_in.rs`).

#[path = "support/own_process.rs"]
mod own_process;

use own_process::in_own_process;
use placelab::gpu::driver::{Arg, Grid};
use placelab::gpu::emulated;
use placelab::gpu::launch::{KERNELS, Param};
use placelab::prelude::*;
use placelab::probe::wire::{Reply, Request};

const GPU: Device = Device::Cuda(0);

fn grid(blocks: u32, threads: u32) -> Grid {
    Grid {
        blocks: (blocks, 1, 1),
        threads: (threads, 1, 1),
        shared_bytes: 0,
    }
}

#[test]
fn every_launcher_has_its_host_kernel_with_the_same_parameters() {
    let mut checked = 0;
    for k in KERNELS {
        for suffix in k.suffixes {
            let name = format!("{}_{suffix}", k.family);
            let params = emulated::kernel_params(&name)
                .unwrap_or_else(|| panic!("{name} is launched but not compiled for the host"));
            assert_eq!(params, k.params, "{name}: the launcher's parameters");
            checked += 1;
        }
    }
    assert!(checked >= 90, "only {checked} kernels checked");
}

#[test]
fn a_launch_that_does_not_fit_its_kernel_is_refused_naming_it() {
    // unary_f32(int op, u64 n, f32* out, const f32* a, Strided la): one argument short, and
    // the wrong kind first.
    let e =
        emulated::check_launch("unary_f32", grid(1, 256), &[Arg::U64(0), Arg::U64(1)]).unwrap_err();
    assert!(
        e.contains("kernel unary_f32 takes parameters") && e.contains("the launch passed"),
        "{e}"
    );
    let e = emulated::check_launch("unary_f33", grid(1, 256), &[]).unwrap_err();
    assert!(e.contains("no kernel named unary_f33"), "{e}");
    let args = [Arg::U64(0), Arg::U64(0), Arg::U64(0)];
    for (g, why) in [
        (grid(1, 2048), "a block of 2048×1×1 threads"),
        (grid(0, 256), "a grid of 0×1×1 blocks"),
        (
            Grid {
                shared_bytes: 64,
                ..grid(1, 256)
            },
            "dynamic shared memory",
        ),
    ] {
        let e = emulated::check_launch("fill_b4", g, &args).unwrap_err();
        assert!(e.contains("fill_b4") && e.contains(why), "{e}");
    }
    assert_eq!(
        emulated::check_launch("fill_b4", grid(65536, 256), &args),
        Ok(())
    );
    assert_eq!(
        emulated::kernel_params("fill_b4"),
        Some(vec![Param::U64, Param::U64, Param::U64])
    );
}

/// `f` on the CPU and on the emulated GPU, bit for bit.
fn same_on_both(name: &str, x: &Tensor, f: impl Fn(&Tensor) -> Result<Tensor>) {
    let want = f(x).unwrap_or_else(|e| panic!("{name} on cpu: {e}"));
    let got = f(&x.to(&GPU).unwrap()).unwrap_or_else(|e| panic!("{name} on {GPU}: {e}"));
    assert_eq!(got.device(), GPU);
    assert_eq!(got.shape(), want.shape(), "{name}");
    let (g, w) = (got.to_f64_vec().unwrap(), want.to_f64_vec().unwrap());
    let same = g.iter().zip(&w).all(|(a, b)| a.to_bits() == b.to_bits());
    assert!(
        same && g.len() == w.len(),
        "{name}: the GPU's values differ"
    );
}

#[test]
fn the_ops_launch_geometry_gives_the_cpus_results() {
    cuda::emulate(2, None).unwrap();
    // Grid-stride element-wise kernels: one block, exactly one, a ragged tail, many blocks.
    for n in [0usize, 1, 255, 256, 257, 100_003] {
        let x = Tensor::randn([n], Device::Cpu).unwrap();
        same_on_both(&format!("add of {n}"), &x, |t| t.add(&t.mul(3.0)?));
        same_on_both(&format!("relu of {n}"), &x, |t| t.relu());
        same_on_both(&format!("f32 → f16 → f32 of {n}"), &x, |t| {
            t.to_dtype(DType::F16)?.to_dtype(DType::F32)
        });
    }
    // A view with an offset, and a transposed one (strided reads).
    let m = Tensor::randn([300, 70], Device::Cpu).unwrap();
    same_on_both("narrowed rows", &m, |t| t.narrow(0, 13, 200)?.mul(2.0));
    same_on_both("transposed", &m, |t| t.t()?.contiguous());
    // More elements than the grid has threads (65,536 × 256): each thread does several.
    let big = Tensor::ones([(1 << 24) + 1000], (DType::U8, &Device::Cpu)).unwrap();
    same_on_both("u8 add beyond the grid", &big, |t| t.add(t));
    // Long rows: each row's sum split over blocks whose partial sums a second kernel adds.
    let long = Tensor::randn([2, 100_000], Device::Cpu)
        .unwrap()
        .to_dtype(DType::F64)
        .unwrap();
    let sums = |t: &Tensor| -> Vec<f64> { t.sum(1, false).unwrap().to_f64_vec().unwrap() };
    let (c, g) = (sums(&long), sums(&long.to(&GPU).unwrap()));
    for (c, g) in c.iter().zip(&g) {
        assert!((c - g).abs() <= 1e-12 * c.abs().max(1.0), "{c} vs {g}");
    }
    same_on_both("argmax of long rows", &long, |t| t.argmax(1, false));
    // Empty rows and tensors.
    let empty = Tensor::zeros([0, 5], Device::Cpu).unwrap();
    same_on_both("sum of no rows", &empty, |t| t.sum(1, false));
}

/// Contiguous operands are read and written 16 bytes at a time (a pack: 4 f32, 8 f16, 16 u8),
/// the tail that does not fill a pack one element at a time, and an operand that does not start
/// on a 16-byte boundary (a view with an offset) element by element: in every dtype, for lengths
/// around a pack, aligned or not, as on the CPU bit for bit. index_select copies whole rows the
/// same way (a block a row, packs where both ends allow).
#[test]
fn contiguous_kernels_move_16_byte_packs_and_their_tails_as_the_cpu() {
    cuda::emulate(2, None).unwrap();
    for dtype in DType::ALL {
        for n in [1usize, 3, 4, 5, 8, 15, 16, 17, 33, 1027] {
            let x = Tensor::randn([n + 2], Device::Cpu)
                .unwrap()
                .mul(5.0)
                .unwrap()
                .to_dtype(dtype)
                .unwrap();
            // Starting at element 0 (a fresh block: 16-byte aligned) and at 1 (not).
            for (a, b) in [(0, 0), (0, 1), (1, 0), (1, 1)] {
                let name = format!("{dtype} add of {n}, starts {a} and {b}");
                same_on_both(&name, &x, |t| t.narrow(0, a, n)?.add(&t.narrow(0, b, n)?));
                if dtype != DType::Bool {
                    let name = format!("{dtype} relu of {n}, start {a}");
                    same_on_both(&name, &x, |t| t.narrow(0, a, n)?.relu());
                }
            }
            if dtype.is_float() {
                same_on_both(&format!("{dtype} abs of {n}"), &x, |t| t.abs());
            }
        }
    }
    let idx = Tensor::from_vec(vec![4i64, 0, -1, 4, 7], [5], Device::Cpu).unwrap();
    for dtype in [DType::F32, DType::F16, DType::U8, DType::F64] {
        for inner in [128usize, 130, 259] {
            let x = Tensor::randn([9, inner + 1], Device::Cpu)
                .unwrap()
                .mul(9.0)
                .unwrap()
                .to_dtype(dtype)
                .unwrap();
            let name = format!("{dtype} index_select of rows of {inner}");
            same_on_both(&name, &x, |t| {
                // Rows from column 0 (packs while the row length allows) and from column 1.
                let a = t
                    .narrow(1, 0, inner)?
                    .index_select(0, &idx.to(&t.device())?)?;
                let b = t
                    .narrow(1, 1, inner)?
                    .index_select(0, &idx.to(&t.device())?)?;
                Tensor::cat(&[&a, &b], 0)
            });
        }
    }
}

/// Max, min and their positions over leading dims run down the columns (no transposed copy) and
/// over the last dims along rows, split over blocks when long: the CPU and the GPU give the
/// values and first positions a transposed copy's rows give, NaN first, ties to the first.
#[test]
fn max_and_argmax_down_columns_and_along_rows_are_the_transposed_rows() {
    cuda::emulate(2, None).unwrap();
    manual_seed(9);
    // Long columns and long rows are split over blocks (40 and 13 parts).
    for (rows, cols) in [(7, 3), (20_000, 4), (3, 50_000), (513, 70)] {
        // Small integers as floats: many ties. A few NaNs in some columns.
        let mut data = Tensor::randint(0, 5, [rows, cols], Device::Cpu)
            .unwrap()
            .to_vec::<i64>()
            .unwrap()
            .into_iter()
            .map(|v| v as f32)
            .collect::<Vec<f32>>();
        for k in [rows * cols / 3, rows * cols / 2 + 1] {
            data[k] = f32::NAN;
        }
        let x = Tensor::from_vec(data, [rows, cols], Device::Cpu).unwrap();
        for device in [Device::Cpu, GPU] {
            let x = x.to(&device).unwrap();
            let by_rows = x.t().unwrap().contiguous().unwrap();
            for greater in [true, false] {
                let pick = |t: &Tensor, dim: i64| match greater {
                    true => t.max_dim(dim, false).unwrap(),
                    false => t.min_dim(dim, false).unwrap(),
                };
                let ((v, i), (rv, ri)) = (pick(&x, 0), pick(&by_rows, 1));
                let what = format!("{rows}×{cols} on {device}, greater {greater}");
                let bits = |t: &Tensor| -> Vec<u32> {
                    (t.to_vec::<f32>().unwrap().iter())
                        .map(|v| v.to_bits())
                        .collect()
                };
                assert_eq!(bits(&v), bits(&rv), "values down the columns, {what}");
                assert_eq!(
                    i.to_vec::<i64>().unwrap(),
                    ri.to_vec::<i64>().unwrap(),
                    "positions down the columns, {what}"
                );
            }
        }
        same_on_both("argmax down columns", &x, |t| t.argmax(0, false));
        same_on_both("argmin along rows", &x, |t| t.argmin(1, true));
        same_on_both("max of all", &x, |t| t.max_all());
        same_on_both("argmin of all", &x, |t| t.argmin_all());
    }
    // Several leading dims at once, and i64 and f16 columns.
    let x = Tensor::randn([50, 40, 3], Device::Cpu).unwrap();
    same_on_both("max over two leading dims", &x, |t| t.max([0, 1], false));
    same_on_both("i64 argmax down columns", &x, |t| {
        t.mul(4.0)?.to_dtype(DType::I64)?.argmax(0, false)
    });
    same_on_both("f16 min down columns", &x, |t| {
        t.to_dtype(DType::F16)?.min(0, true)
    });
}

#[test]
fn views_the_kernels_cannot_take_are_refused_not_misread() {
    cuda::emulate(2, None).unwrap();
    // Nine dims that cannot merge: a kernel's view holds at most eight.
    let x = Tensor::randn([2; 9], GPU).unwrap();
    let nine = x.permute([8, 7, 6, 5, 4, 3, 2, 1, 0]).unwrap();
    let e = nine.contiguous().unwrap_err().to_string();
    assert!(e.contains("at most 8 dims"), "{e}");
    // Reshaped to fewer dims first, as the message says, it works.
    let flat = x
        .reshape([16, 32])
        .unwrap()
        .t()
        .unwrap()
        .contiguous()
        .unwrap();
    assert_eq!(flat.shape(), &[32, 16]);
}

#[test]
fn out_of_memory_on_an_emulated_device_is_an_error_with_the_numbers() {
    cuda::emulate(2, None).unwrap();
    let err = Tensor::zeros([5usize << 30], GPU).unwrap_err();
    match &err {
        Error::OutOfMemory {
            device, requested, ..
        } => assert_eq!((*device, *requested), (GPU, 20 << 30)),
        e => panic!("expected OutOfMemory, got {e:?}"),
    }
    assert!(err.to_string().contains("out of memory on cuda:0"), "{err}");
    let ok = Tensor::ones([4], GPU).unwrap().sum_all().unwrap();
    assert_eq!(ok.item::<f32>().unwrap(), 4.0);
}

/// `engine/src/backend/gpu/ops.rs` and `kernels/*.cu` each read the op codes from `kernels/codes.rs` (the kernels
/// through the `ops.cuh` that `build.rs` writes): a code that meant another op on one side would
/// give another result here.
#[test]
fn every_op_code_means_the_same_op_in_rust_and_in_the_kernels() {
    cuda::emulate(2, None).unwrap();
    let values = vec![-2.5, -1.0, -0.0, 0.0, 0.5, 2.0, 3.0, f64::NAN];
    let a = Tensor::from_vec(values.clone(), [8], Device::Cpu).unwrap();
    let b = Tensor::from_vec(
        vec![1.5, -1.0, 2.0, 0.0, 0.5, 3.0, -2.0, 1.0],
        [8],
        Device::Cpu,
    )
    .unwrap();
    type Op = fn(&Tensor, &Tensor) -> Result<Tensor>;
    let pairs: [(&str, Op); 13] = [
        ("add", |x, y| x.add(y)),
        ("sub", |x, y| x.sub(y)),
        ("mul", |x, y| x.mul(y)),
        ("div", |x, y| x.div(y)),
        ("maximum", |x, y| x.maximum(y)),
        ("minimum", |x, y| x.minimum(y)),
        ("eq", |x, y| x.eq(y)),
        ("ne", |x, y| x.ne(y)),
        ("lt", |x, y| x.lt(y)),
        ("le", |x, y| x.le(y)),
        ("gt", |x, y| x.gt(y)),
        ("ge", |x, y| x.ge(y)),
        ("pow", |x, y| x.abs()?.pow(y)),
    ];
    let (ga, gb) = (a.to(&GPU).unwrap(), b.to(&GPU).unwrap());
    let close = |c: &[f64], g: &[f64]| {
        c.iter().zip(g).all(|(c, g)| {
            c.to_bits() == g.to_bits()
                || (c.is_nan() && g.is_nan())
                || (c - g).abs() <= 1e-12 * c.abs()
        })
    };
    for dtype in [DType::F64, DType::I64] {
        let (a, b) = (a.to_dtype(dtype).unwrap(), b.to_dtype(dtype).unwrap());
        let (ga, gb) = (ga.to_dtype(dtype).unwrap(), gb.to_dtype(dtype).unwrap());
        for (name, op) in pairs {
            let (Ok(c), Ok(g)) = (op(&a, &b), op(&ga, &gb)) else {
                continue; // refused on both (integer powers of negatives)
            };
            let (c, g) = (c.to_f64_vec().unwrap(), g.to_f64_vec().unwrap());
            assert!(close(&c, &g), "{name} {dtype}: cpu {c:?}, {GPU} {g:?}");
        }
    }
    type Unary = fn(&Tensor) -> Result<Tensor>;
    let unary: [(&str, Unary); 9] = [
        ("neg", |x| x.neg()),
        ("abs", |x| x.abs()),
        ("relu", |x| x.relu()),
        ("exp", |x| x.exp()),
        ("log", |x| x.log()),
        ("sqrt", |x| x.sqrt()),
        ("sigmoid", |x| x.sigmoid()),
        ("tanh", |x| x.tanh()),
        ("gelu", |x| x.gelu()),
    ];
    for (name, op) in unary {
        let (c, g) = (op(&a).unwrap(), op(&ga).unwrap());
        let (c, g) = (c.to_f64_vec().unwrap(), g.to_f64_vec().unwrap());
        assert!(close(&c, &g), "{name}: cpu {c:?}, {GPU} {g:?}");
    }
    // GELU's derivative is the last unary code: the gradient of gelu.
    let grad = |x: &Tensor| {
        let x = x.clone().requires_grad_(true).unwrap();
        x.gelu().unwrap().sum_all().unwrap().backward().unwrap();
        x.grad().unwrap().to_f64_vec().unwrap()
    };
    let (c, g) = (grad(&a), grad(&ga));
    assert!(close(&c, &g), "gelu'(x): cpu {c:?}, {GPU} {g:?}");
    // ReLU's gradient is the last binary code (PyTorch's threshold_backward): the incoming
    // gradient `b` where relu(x) > 0 or is NaN (PyTorch passes the gradient through NaN), else 0.
    let relu_grad = |x: &Tensor, upstream: &Tensor| {
        let x = x.detach().requires_grad_(true).unwrap();
        x.relu().unwrap().backward_with(upstream).unwrap();
        x.grad().unwrap().to_f64_vec().unwrap()
    };
    let (c, g) = (relu_grad(&a, &b), relu_grad(&ga, &gb));
    assert!(close(&c, &g), "relu'(x): cpu {c:?}, {GPU} {g:?}");
    assert!(
        close(&c, &[0.0, 0.0, 0.0, 0.0, 0.5, 3.0, -2.0, 1.0]),
        "relu'(x): {c:?}"
    );
    // Every cast, by dtype code.
    for to in DType::ALL {
        let (c, g) = (a.to_dtype(to).unwrap(), ga.to_dtype(to).unwrap());
        let (c, g) = (c.to_f64_vec().unwrap(), g.to_f64_vec().unwrap());
        assert!(close(&c, &g), "f64 → {to}: cpu {c:?}, {GPU} {g:?}");
    }
}

/// `contiguous()` (and any same-dtype copy) moves bits, on the CPU and on a GPU: NaN payloads,
/// signalling NaNs and negative zero survive.
#[test]
fn a_same_dtype_copy_keeps_every_bit() {
    cuda::emulate(2, None).unwrap();
    let bits: [u32; 4] = [0x7f80_0001, 0x7fc1_2345, 0x8000_0000, 0xffc0_0001];
    let values: Vec<f32> = bits.iter().map(|&b| f32::from_bits(b)).collect();
    // In f16 too, where a trip through f32 quiets the signalling NaN (0x7c01 → 0x7e01).
    let bits16: [u16; 4] = [0x7c01, 0x7e55, 0x8000, 0xfc03];
    let values16: Vec<half::f16> = bits16.iter().map(|&b| half::f16::from_bits(b)).collect();
    for device in [Device::Cpu, GPU] {
        let x = Tensor::from_vec(values.clone(), [2, 2], device).unwrap();
        let t = x.t().unwrap().contiguous().unwrap();
        let got: Vec<u32> = t
            .to_vec::<f32>()
            .unwrap()
            .iter()
            .map(|v| v.to_bits())
            .collect();
        assert_eq!(got, [bits[0], bits[2], bits[1], bits[3]], "f32 on {device}");
        let x = Tensor::from_vec(values16.clone(), [2, 2], device).unwrap();
        let t = x.t().unwrap().contiguous().unwrap();
        let got: Vec<u16> = t
            .to_vec::<half::f16>()
            .unwrap()
            .iter()
            .map(|v| v.to_bits())
            .collect();
        assert_eq!(
            got,
            [bits16[0], bits16[2], bits16[1], bits16[3]],
            "f16 on {device}"
        );
    }
}

/// A non-blocking copy to a GPU with work queued returns at once: the copy waits for that work
/// on the device (an event), not on the host, and lands after it.
#[test]
fn a_copy_to_a_busy_gpu_does_not_wait_on_the_host() {
    cuda::emulate(2, None).unwrap();
    let other = Device::Cuda(1);
    let x = Tensor::randn([1000], Device::Cpu).unwrap();
    let (src, rows) = (
        x.to(&GPU).unwrap(),
        Tensor::randn([10_000, 3], other).unwrap(),
    );
    cuda::synchronize(0).unwrap();
    cuda::synchronize(1).unwrap();
    let start = std::time::Instant::now();
    // Queued on cuda:1: a row per block of 256 threads, each row through their barriers.
    let busy = rows.softmax(1).unwrap();
    let y = src.to_non_blocking(&other).unwrap();
    let returned = start.elapsed();
    cuda::synchronize(1).unwrap();
    let done = start.elapsed();
    assert!(
        returned * 10 < done,
        "the call returned after {returned:?}; cuda:1's queued work took {done:?}"
    );
    assert_eq!(y.to_vec::<f32>().unwrap(), x.to_vec::<f32>().unwrap());
    drop(busy);
}

/// `pin_memory()` takes its page-locked memory through a GPU the program already uses, never by
/// creating another device's context; a pinned copy from a GPU goes through that GPU's.
#[test]
fn pinning_uses_a_gpu_already_in_use() {
    // In a process of its own: the other tests here open cuda:0.
    if !in_own_process("pinning_uses_a_gpu_already_in_use", &[]) {
        return;
    }
    cuda::emulate(3, None).unwrap();
    let on_2 = Tensor::ones([1000], Device::Cuda(2)).unwrap();
    let pinned = Tensor::ones([1000], Device::Cpu)
        .unwrap()
        .pin_memory()
        .unwrap();
    assert!(pinned.is_pinned());
    let back = on_2.cpu_pinned().unwrap();
    assert!(back.is_pinned());
    assert_eq!(cuda::context_setup_time(0), None, "cuda:0 was never opened");
    assert!(cuda::context_setup_time(2).is_some());
}

/// A copy between two GPUs enables peer access for that pair first (once), and the transfer
/// says which way the copy went.
#[test]
fn gpu_to_gpu_copies_enable_peer_access_first_and_say_so() {
    cuda::emulate(2, None).unwrap();
    let x = Tensor::randn([1000], GPU).unwrap();
    let y = x.to(&Device::Cuda(1)).unwrap();
    let t = y.last_transfer().unwrap();
    assert_eq!(t.between_gpus, Some(placelab::transfer::PeerCopy::Direct));
    assert!(t.to_string().contains("peer to peer"), "{t}");
    let back = y.to_non_blocking(&GPU).unwrap();
    cuda::synchronize(0).unwrap();
    assert_eq!(back.to_vec::<f32>().unwrap(), x.to_vec::<f32>().unwrap());
    let enabled = emulated::peer_access_enabled();
    assert!(
        enabled.contains(&(0, 1)) && enabled.contains(&(1, 0)),
        "{enabled:?}"
    );
    // A host copy is no copy between GPUs.
    let t = x.cpu().unwrap().last_transfer().unwrap().clone();
    assert_eq!(t.between_gpus, None);
}

/// Softmax over `len`-long rows of `x`, written out here in f64 from the definition.
fn softmax_reference(x: &[f64], len: usize, log: bool) -> Vec<f64> {
    x.chunks(len)
        .flat_map(|row| {
            let m = row.iter().copied().fold(f64::NEG_INFINITY, f64::max);
            let s: f64 = row.iter().map(|v| (v - m).exp()).sum();
            row.iter().map(move |v| {
                if log {
                    v - m - s.ln()
                } else {
                    (v - m).exp() / s
                }
            })
        })
        .collect()
}

/// A long row's softmax is split over many blocks (each chunk's max and sum of exponentials,
/// then combined per row) and equals the formula; chunks of nothing but -inf (a masked half of
/// a row) add nothing, and a row of nothing but -inf is NaN, as in PyTorch.
#[test]
fn long_rows_of_softmax_are_split_over_blocks_and_equal_the_formula() {
    cuda::emulate(2, None).unwrap();
    let len = 100_000;
    let mut data = Tensor::randn([3 * len], Device::Cpu)
        .unwrap()
        .to_dtype(DType::F64)
        .unwrap()
        .to_vec::<f64>()
        .unwrap();
    data[len..len + 60_000].fill(f64::NEG_INFINITY); // row 1: its first 60% masked
    data[2 * len..].fill(f64::NEG_INFINITY); // row 2: all masked
    let x = Tensor::from_vec(data.clone(), [3, len], GPU).unwrap();
    for log in [false, true] {
        let splits = emulated::launches("softmax_partials_f64");
        let y = if log { x.log_softmax(1) } else { x.softmax(1) }.unwrap();
        let got = y.to_vec::<f64>().unwrap();
        assert!(
            emulated::launches("softmax_partials_f64") > splits,
            "the rows were not split"
        );
        let want = softmax_reference(&data, len, log);
        for (i, (g, w)) in got.iter().zip(&want).enumerate() {
            let close = if w.is_finite() {
                (g - w).abs() <= 1e-12 * w.abs().max(1e-300) + 1e-300
            } else {
                g.to_bits() == w.to_bits() || (g.is_nan() && w.is_nan())
            };
            assert!(
                close,
                "log={log}: element {i} is {g}, the formula gives {w}"
            );
        }
        assert!(got[2 * len..].iter().all(|v| v.is_nan()));
    }
}

/// `index_select` is one kernel however many indices it takes, along any dim of any view, with
/// negative indices counting from the end.
#[test]
fn index_select_is_one_launch_for_any_number_of_indices() {
    cuda::emulate(2, None).unwrap();
    let (rows, cols) = (300usize, 40usize);
    let data: Vec<f64> = (0..rows * cols).map(|i| i as f64 * 0.5 - 7.0).collect();
    let x = Tensor::from_vec(data.clone(), [rows, cols], Device::Cpu).unwrap();
    let index: Vec<i64> = (0..1000i64).map(|i| (i * 7919) % 600 - 300).collect();
    let idx = Tensor::from_vec(index.clone(), [1000], Device::Cpu).unwrap();
    let before = emulated::launches("index_select_b8");
    let got = x
        .to(&GPU)
        .unwrap()
        .index_select(0, &idx.to(&GPU).unwrap())
        .unwrap()
        .to_vec::<f64>()
        .unwrap();
    assert_eq!(emulated::launches("index_select_b8") - before, 1);
    let want: Vec<f64> = index
        .iter()
        .flat_map(|&i| {
            let r = if i < 0 { i + rows as i64 } else { i } as usize;
            data[r * cols..(r + 1) * cols].to_vec()
        })
        .collect();
    assert_eq!(got, want);
    // Along the middle dim of a permuted, narrowed view, i32 indices: as on the CPU.
    let idx32 = Tensor::from_vec(vec![-1i32, 3, 3, 0, 9], [5], Device::Cpu).unwrap();
    same_on_both("index_select of a view", &x, |t| {
        let view = t
            .reshape([30, 10, 40])?
            .permute([2, 0, 1])?
            .narrow(0, 5, 20)?;
        view.index_select(2, &idx32.to(&t.device())?)
    });
}

/// Ctrl-C while a cell waits for a GPU's queued work (reading a value, copying to the CPU,
/// `synchronize`) ends the wait with `Interrupted` at once, where it would have waited seconds;
/// the work finishes on the device, and the tensors stay, their values right.
#[test]
fn an_interrupt_ends_a_wait_for_queued_work_and_keeps_the_tensors() {
    // In a process of its own: the interrupt flag is the whole process's.
    let name = "an_interrupt_ends_a_wait_for_queued_work_and_keeps_the_tensors";
    if !in_own_process(name, &[]) {
        return;
    }
    cuda::emulate(1, None).unwrap();
    // A block per row of 256 threads meeting at barriers: seconds of work on an emulated GPU.
    let rows = Tensor::randn([20_000, 3], GPU).unwrap();
    cuda::synchronize(0).unwrap();
    for wait in ["item", "cpu", "synchronize"] {
        let busy = rows.softmax(1).unwrap();
        let total = busy.sum_all().unwrap();
        // Ctrl-C once the wait begins (the flag is set just before it), not after a guessed delay.
        let waiting = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
        let stopper = std::thread::spawn({
            let waiting = waiting.clone();
            move || {
                while !waiting.load(std::sync::atomic::Ordering::Acquire) {
                    std::thread::yield_now();
                }
                placelab::interrupt::request();
            }
        });
        let start = std::time::Instant::now();
        waiting.store(true, std::sync::atomic::Ordering::Release);
        let result = match wait {
            "item" => total.item::<f32>().map(drop),
            "cpu" => busy.cpu().map(drop),
            _ => cuda::synchronize(0),
        };
        let returned = start.elapsed();
        stopper.join().unwrap();
        assert!(
            matches!(result, Err(Error::Interrupted)),
            "{wait}: {result:?}"
        );
        placelab::interrupt::clear();
        cuda::synchronize(0).unwrap();
        let done = start.elapsed();
        println!("{wait}: interrupted after {returned:?}, the work took {done:?}");
        // Returned at the interrupt, with most of the queued work still to run (the work takes
        // seconds, the interrupt is requested as the wait begins).
        assert!(
            returned * 3 < done,
            "{wait} returned after {returned:?}; the queued work took {done:?}"
        );
        let sum = total.item::<f32>().unwrap();
        assert!((sum - 20_000.0).abs() < 0.5, "{sum}");
    }
}

/// A wrong class index on a GPU: `nll_loss` makes its rows where the indices are, so the host
/// never reads them back (no wait inside a training step), and the kernel checks them as it runs.
/// The error surfaces at the host's next wait for the device, whichever it is, names the op and
/// the index as on the CPU, and the session goes on: later losses are right, and more checks than
/// the device holds slots for make the host read them, not fail.
#[test]
fn a_class_index_out_of_range_on_a_gpu_is_reported_at_the_next_wait_and_the_session_goes_on() {
    // In a process of its own: the check is the device's, and the first wait for the device in
    // the process reports it, whichever test's thread made that wait.
    let name =
        "a_class_index_out_of_range_on_a_gpu_is_reported_at_the_next_wait_and_the_session_goes_on";
    if !in_own_process(name, &[]) {
        return;
    }
    use placelab::nn::CrossEntropyLoss;
    cuda::emulate(1, None).unwrap();
    let scores = Tensor::randn([4, 3], GPU)
        .unwrap()
        .requires_grad_(true)
        .unwrap();
    let good = Tensor::from_vec(vec![0i64, 2, 1, 2], [4], GPU).unwrap();
    let bad = Tensor::from_vec(vec![0i64, 3, 1, 2], [4], GPU).unwrap();
    let want = CrossEntropyLoss
        .forward(&scores.cpu().unwrap(), &good.cpu().unwrap())
        .unwrap()
        .item::<f32>()
        .unwrap();
    for wait in ["item", "cpu", "synchronize", "card", "backward, then item"] {
        let loss = CrossEntropyLoss.forward(&scores, &bad).unwrap();
        let found = |r: placelab::Result<()>| match r {
            Err(e @ Error::FoundOnDevice { .. }) => e.to_string(),
            other => panic!("{wait}: {other:?}"),
        };
        let text = match wait {
            "item" => found(loss.item::<f32>().map(drop)),
            "cpu" => found(loss.cpu().map(drop)),
            "synchronize" => found(cuda::synchronize(0)),
            // A cell's value: the card reads the values, and shows the error in their place.
            "card" => {
                let card = placelab::display::card_text(&loss, false);
                let (_, shown) = card.split_once("(values not shown: ").expect(&card);
                shown.to_string()
            }
            _ => {
                // The forward's check fails first; the backward's own check fails at the next.
                let first = loss.item::<f32>().map(drop);
                assert!(first.is_err(), "{first:?}");
                loss.backward().unwrap();
                found(scores.grad().unwrap().cpu().map(drop))
            }
        };
        assert!(
            text.contains("index 3 out of range in nll_loss: dimension 1 has size 3")
                && text.contains("at the next point the host waited for the device"),
            "{wait}: {text}"
        );
        // Nothing left behind: the next loss is right and reads without an error.
        let got = CrossEntropyLoss.forward(&scores, &good).unwrap();
        assert!((got.item::<f32>().unwrap() - want).abs() < 1e-6, "{wait}");
        scores.zero_grad();
    }
    // More checks than slots before any wait: the host reads them when the slots run out.
    let losses: Vec<Tensor> = (0..200)
        .map(|_| CrossEntropyLoss.forward(&scores, &good).unwrap())
        .collect();
    for l in &losses {
        assert!((l.item::<f32>().unwrap() - want).abs() < 1e-6);
    }
}

/// `index_select` on a GPU reads its index where it is and checks each entry as it runs: a wrong
/// one gives zeros and is reported at the host's next wait, naming the entry as on the CPU, and
/// the session goes on. Its gradient (which reads the entries back, in the backward) is the
/// CPU's, repeated and negative entries included, for whole rows and for short ones.
#[test]
fn index_select_on_a_gpu_checks_its_entries_as_it_runs_and_its_gradient_is_the_cpus() {
    let name = "index_select_on_a_gpu_checks_its_entries_as_it_runs_and_its_gradient_is_the_cpus";
    if !in_own_process(name, &[]) {
        return;
    }
    cuda::emulate(1, None).unwrap();
    // 200 columns: the kernel copies whole rows; 3: element by element.
    for cols in [200usize, 3] {
        let data = Tensor::randn([6, cols], Device::Cpu).unwrap();
        let weights = Tensor::randn([5, cols], Device::Cpu).unwrap();
        let gradient_on = |device: &Device| {
            let x = data.to(device).unwrap().requires_grad_(true).unwrap();
            let idx = Tensor::from_vec(vec![5i32, -1, 0, 5, 2], [5], Device::Cpu).unwrap();
            let picked = x.index_select(0, &idx.to(device).unwrap()).unwrap();
            (picked.mul(weights.to(device).unwrap()).unwrap())
                .sum_all()
                .unwrap()
                .backward()
                .unwrap();
            (
                picked.to_vec::<f32>().unwrap(),
                x.grad().unwrap().to_vec::<f32>().unwrap(),
            )
        };
        let (picked, grad) = gradient_on(&GPU);
        let (want_picked, want_grad) = gradient_on(&Device::Cpu);
        assert!(
            picked == want_picked,
            "{cols} columns: the rows picked differ"
        );
        // A repeated row's gradient is a sum, in another order on each device.
        let off = (grad.iter().zip(&want_grad)).fold(0f32, |m, (a, b)| m.max((a - b).abs()));
        assert!(off < 1e-5, "{cols} columns: the gradients differ by {off}");

        let x = data.to(&GPU).unwrap();
        for (bad, entry) in [(vec![0i64, 6, 1], 6), (vec![-7, 0, 0], -7)] {
            let idx = Tensor::from_vec(bad, [3], GPU).unwrap();
            let waits = emulated::host_waits();
            let picked = x.index_select(0, &idx).unwrap();
            assert_eq!(
                emulated::host_waits(),
                waits,
                "index_select waited for the GPU"
            );
            let e = picked.cpu().map(drop).unwrap_err();
            let text = e.to_string();
            assert!(
                matches!(e, Error::FoundOnDevice { .. })
                    && text.contains(&format!(
                        "index {entry} out of range in index_select: dimension 0 has size 6"
                    )),
                "{text}"
            );
            let good = Tensor::from_vec(vec![1i64, 0], [2], GPU).unwrap();
            let rows = x.index_select(0, &good).unwrap().to_vec::<f32>().unwrap();
            let want = data.index_select(0, &good.cpu().unwrap()).unwrap();
            assert_eq!(rows, want.to_vec::<f32>().unwrap());
        }
    }
}

/// The end of a REPL cell (the probe's `cell_end`, which the session asks as each cell ends)
/// reads the index checks that cell's kernels made, so a bad entry, positive or negative, is
/// that cell's error: it names the op, the entry and the device, says the cell queued it, and is
/// not reported again by the next cell's wait, whose value is right. A wait that reaches its
/// limit names the device still running and leaves the check to the session's next ask; one the
/// user interrupts names the device, and the check says, at the next wait, that an earlier cell
/// queued it. A program that asks nothing keeps the next-wait behaviour (the two tests above).
#[test]
fn the_end_of_a_cell_reads_the_checks_its_kernels_made() {
    let name = "the_end_of_a_cell_reads_the_checks_its_kernels_made";
    if !in_own_process(name, &[]) {
        return;
    }
    // The front end's `CellEnd` request, as the cell process answers it: (found, failed,
    // still running, stopped).
    let cell_end = |wait_ms: u64| {
        let reply = placelab::probe::answer(&Request::CellEnd { wait_ms }.encode());
        match Reply::parse(&reply) {
            Some(Reply::CellEnd {
                found,
                failed,
                still_running,
                stopped,
            }) => (found.join("\n"), failed, still_running, stopped),
            other => panic!("not a cell's end: {other:?}"),
        }
    };
    let nothing = (String::new(), vec![], vec![], vec![]);
    assert_eq!(cell_end(1000), nothing, "no GPU opened yet");
    cuda::emulate(1, None).unwrap();
    let x = Tensor::zeros([3, 2], GPU).unwrap();
    assert_eq!(cell_end(1000), nothing, "no check queued");
    for entry in [9i64, -5] {
        // One cell: the op is queued, nothing waits for the device.
        let idx = Tensor::from_vec(vec![0i64, entry], [2], GPU).unwrap();
        let _y = x.index_select(0, &idx).unwrap();
        let (reply, failed, ..) = cell_end(1000);
        assert!(
            reply.starts_with(&format!(
                "index {entry} out of range in index_select: dimension 0 has size 3"
            )) && reply.contains("cuda:0 checked this as its kernel ran")
                && reply.contains("this cell queued that op: it is reported as the cell ended")
                && reply.contains("run the cell again")
                && failed.is_empty(),
            "{reply}"
        );
        // The next cell: nothing left to report, and its value is right.
        let z = Tensor::ones([4], GPU).unwrap();
        assert_eq!(z.sum_all().unwrap().item::<f32>().unwrap(), 4.0);
        assert_eq!(cell_end(1000), nothing);
    }
    // A cell that ends while its device still runs its work (a GEMM of tens of milliseconds
    // queued before the gather, after the index's copy, which waits): a wait that reaches its
    // limit names the device and marks nothing, so the session's next ask still reads the
    // check as this cell's.
    let idx = Tensor::from_vec(vec![3i64], [1], GPU).unwrap();
    let a = Tensor::randn([1024, 1024], GPU).unwrap();
    let _product = a.matmul(&a).unwrap();
    let _y = x.index_select(0, &idx).unwrap();
    let running = (String::new(), vec![], vec!["cuda:0".to_string()], vec![]);
    assert_eq!(cell_end(0), running);
    let (reply, ..) = cell_end(60_000);
    assert!(
        reply.starts_with("index 3 out of range in index_select")
            && reply.contains("this cell queued that op"),
        "{reply}"
    );
    // The user interrupts the wait: the device is named, and the check is read at the next
    // wait, saying an earlier cell queued it.
    let _product = a.matmul(&a).unwrap();
    let _y = x.index_select(0, &idx).unwrap();
    placelab::interrupt::request();
    let stopped = (String::new(), vec![], vec![], vec!["cuda:0".to_string()]);
    assert_eq!(cell_end(60_000), stopped);
    placelab::interrupt::clear();
    let e = Tensor::ones([4], GPU).unwrap().cpu().map(drop).unwrap_err();
    let text = e.to_string();
    assert!(
        matches!(e, Error::FoundOnDevice { .. })
            && text.contains("index 3 out of range in index_select")
            && text
                .contains("An earlier cell queued that op and ended while the device still ran it")
            && text.contains("at the next point the host waited for the device"),
        "{text}"
    );
    assert_eq!(cell_end(1000), nothing);
}
