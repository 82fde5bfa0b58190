//! On a real GPU (or emulated devices where there is none): the caching allocator over the
//! driver's memory (`cuMemAlloc`) gives PyTorch's numbers for the same sequence of allocations.
//! The sequence is `benches/torch_cuda_memory.py`'s; with `PLACELAB_GPU_OUT` set, the numbers
//! are written there for `benches/gpu-check.sh` to compare with PyTorch's, line by line.

#[path = "support/gpu.rs"]
mod gpu;

use placelab::prelude::*;

const GPU: Device = Device::Cuda(0);

fn snapshot(step: &str) -> serde_json::Value {
    serde_json::json!({
        "step": step,
        "allocated": cuda::memory_allocated(0).unwrap(),
        "reserved": cuda::memory_reserved(0).unwrap(),
        "max_allocated": cuda::max_memory_allocated(0).unwrap(),
    })
}

#[test]
fn allocator_numbers_follow_pytorch_on_the_gpu() {
    let _serial = gpu::serial();
    let mut steps = Vec::new();
    let a = Tensor::zeros([1], GPU).unwrap();
    steps.push(snapshot("zeros(1)"));
    let x = Tensor::randn([1000, 1000], GPU).unwrap();
    steps.push(snapshot("x = randn(1000, 1000)"));
    let y = Tensor::randn([1000, 1000], GPU).unwrap();
    steps.push(snapshot("y = randn(1000, 1000)"));
    drop(x);
    cuda::empty_cache();
    steps.push(snapshot("del x; empty_cache()"));
    cuda::reset_peak_memory_stats(0).unwrap();
    steps.push(snapshot("reset_peak_memory_stats()"));
    drop(y);
    cuda::empty_cache();
    steps.push(snapshot("del y; empty_cache()"));
    let big = Tensor::zeros([3 << 28], GPU).unwrap();
    steps.push(snapshot("zeros(3 GiB / 4)"));
    drop(big);
    cuda::empty_cache();
    steps.push(snapshot("del big; empty_cache()"));
    let mib = Tensor::zeros([1 << 18], GPU).unwrap();
    steps.push(snapshot("zeros(1 MiB / 4)"));
    let over = Tensor::zeros([(1 << 18) + 1], GPU).unwrap();
    steps.push(snapshot("zeros(1 MiB / 4 + 1)"));
    let m = Tensor::randn([64, 64], GPU).unwrap();
    let p = m.matmul(&m).unwrap();
    steps.push(snapshot("first matmul (cuBLAS workspace)"));
    drop((a, mib, over, m, p));
    cuda::empty_cache();
    steps.push(snapshot("del all; empty_cache()"));
    // Streams: a pool per stream, and a block another stream used kept until it is done with it.
    let side = cuda::Stream::new(&GPU).unwrap();
    let q = cuda::with_stream(&side, || Tensor::zeros([1000, 1000], GPU).unwrap());
    steps.push(snapshot("on a side stream: q = zeros(1000, 1000)"));
    let r = Tensor::zeros([1000, 1000], GPU).unwrap();
    steps.push(snapshot("r = zeros(1000, 1000)"));
    r.record_stream(&side).unwrap();
    drop(r);
    steps.push(snapshot("r.record_stream(side); del r"));
    drop(q);
    cuda::empty_cache();
    steps.push(snapshot("del q; empty_cache()"));

    if let Some(dir) = std::env::var_os("PLACELAB_GPU_OUT") {
        let path = std::path::Path::new(&dir).join("alloc_placelab.json");
        std::fs::write(&path, serde_json::to_string_pretty(&steps).unwrap()).unwrap();
    }
    let at = |i: usize, key: &str| steps[i][key].as_u64().unwrap();
    // The rules' worked numbers (../shared/notes/cuda.md §10).
    assert_eq!((at(0, "allocated"), at(0, "reserved")), (512, 2_097_152));
    assert_eq!(
        (at(1, "allocated"), at(1, "reserved")),
        (4_000_768, 23_068_672)
    );
    assert_eq!(
        (at(2, "allocated"), at(2, "reserved")),
        (8_001_024, 23_068_672)
    );
    assert_eq!(
        (at(3, "allocated"), at(3, "max_allocated")),
        (4_000_768, 8_001_024)
    );
    assert_eq!(at(4, "max_allocated"), 4_000_768);
    assert_eq!((at(5, "allocated"), at(5, "reserved")), (512, 2_097_152));
    assert_eq!(
        (at(6, "allocated"), at(6, "reserved")),
        (3_221_225_984, 3_223_322_624)
    );
    // The side stream's tensor takes a segment of its own, not one the default stream cached;
    // a freed block another stream used leaves memory_allocated at once and stays reserved.
    let (before, one) = (at(11, "reserved"), 4_000_256);
    assert_eq!(at(12, "reserved"), before + (20 << 20), "{}", steps[12]);
    assert_eq!(at(13, "reserved"), before + (40 << 20), "{}", steps[13]);
    assert_eq!(at(14, "allocated"), at(13, "allocated") - one);
    assert_eq!(at(14, "reserved"), at(13, "reserved"));
    assert_eq!(at(15, "reserved"), before, "{}", steps[15]);
    let cc = cuda::device_name(0).unwrap();
    eprintln!("{cc}: workspace step {}", steps[10]);
}

#[test]
fn out_of_memory_on_the_gpu_is_an_error_with_the_numbers() {
    let _serial = gpu::serial();
    let (free, total) = cuda::mem_get_info(0).unwrap();
    assert!(free > 0 && free <= total);
    let err = Tensor::zeros([total], GPU).unwrap_err();
    match &err {
        Error::OutOfMemory {
            device,
            requested,
            total: t,
            ..
        } => {
            assert_eq!((*device, *requested, *t), (GPU, total * 4, total));
        }
        e => panic!("expected OutOfMemory, got {e:?}"),
    }
    assert!(err.to_string().contains("out of memory on cuda:0"), "{err}");
    // The device still works after the failed allocation.
    let ok = Tensor::ones([4], GPU).unwrap().sum_all().unwrap();
    assert_eq!(ok.item::<f32>().unwrap(), 4.0);
}
