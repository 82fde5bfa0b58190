//! Copy beside compute: a 256 MiB upload from pinned memory and a 4096³ f32 GEMM, one after the
//! other on the default stream, then the upload on a side stream while the GEMM runs on the
//! default one (`cuda::with_stream`), each timed from the host's start to both done. What
//! overlapping saves is the shorter of the two, at most; `torch_gpu.py`'s `overlap()` runs the
//! same in PyTorch.

use std::time::Instant;

use placelab::cuda::{self, Stream, with_stream};
use placelab::prelude::*;

const GPU: Device = Device::Cuda(0);
const UPLOAD_BYTES: usize = 256 << 20;
const GEMM_N: usize = 4096;

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(f64::total_cmp);
    v[v.len() / 2]
}

/// Milliseconds from the start of `run` until the device has done its work, median of 7.
fn timed(run: &dyn Fn() -> Result<()>) -> Result<f64> {
    run()?; // warm: the blocks cached, cuBLAS's handle made
    cuda::synchronize(0)?;
    let mut ms = Vec::new();
    for _ in 0..7 {
        let t = Instant::now();
        run()?;
        cuda::synchronize(0)?;
        ms.push(t.elapsed().as_secs_f64() * 1e3);
    }
    Ok(median(ms))
}

pub fn overlap() -> Result<()> {
    let host = Tensor::zeros([UPLOAD_BYTES / 4], Device::Cpu)?.pin_memory()?;
    let a = Tensor::randn([GEMM_N, GEMM_N], GPU)?;
    let side = Stream::new(&GPU)?;
    let copy_only = timed(&|| host.to_non_blocking(&GPU).map(drop))?;
    let gemm_only = timed(&|| a.matmul(&a).map(drop))?;
    let serial = timed(&|| {
        let up = host.to_non_blocking(&GPU)?;
        let c = a.matmul(&a)?;
        drop((up, c));
        Ok(())
    })?;
    let two_streams = timed(&|| {
        let up = with_stream(&side, || host.to_non_blocking(&GPU))?;
        let c = a.matmul(&a)?;
        // `up` came from the side stream's pool and only that stream used it: no record_stream.
        drop((up, c));
        Ok(())
    })?;
    for (kind, ms) in [
        ("copy_only", copy_only),
        ("gemm_only", gemm_only),
        ("serial", serial),
        ("two_streams", two_streams),
    ] {
        println!(
            "{{\"bench\":\"overlap\",\"kind\":\"{kind}\",\"bytes\":{UPLOAD_BYTES},\"gemm_n\":{GEMM_N},\"ms\":{ms:.4}}}"
        );
    }
    Ok(())
}
