//! The emulator itself: the kernels compiled for the host are the ones the launchers declare,
//! with the same parameters; a launch that does not fit its kernel or CUDA's limits is refused,
//! naming the kernel; and the launch geometry the ops choose (one block, many, a grid smaller
//! than the work, ragged tails, views with offsets, empty tensors, long rows split over blocks,
//! more rows than blocks) gives the CPU's results. The engine's other tests run again on emulated
//! devices from their own binaries (`support/stand_in.rs`).

use placelab::cuda::driver::{Arg, Grid};
use placelab::cuda::emulated;
use placelab::cuda::launch::{KERNELS, Param};
use placelab::prelude::*;

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
