//! Copy beside compute: a 256 MiB upload from pinned memory and a 4096³ f32 GEMM, one after the
//! other on the default stream, then the upload on a side stream while the GEMM runs on the
//! default one (`cuda::with_stream`), each timed from the host's start to both done. What
//! overlapping saves is the shorter of the two, at most; `torch_gpu.py`'s `overlap()` runs the
//! same in PyTorch. Then notebook 9's two loops (`lesson`), measured beside the lanes the cost
//! model predicts for this GPU.

use std::time::Instant;

use placelab::cost::GpuSpec;
use placelab::cuda::{self, Stream, with_stream};
use placelab::prelude::*;
use placelab::profile::{Lanes, profile_as};

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

/// Notebook 9's batches: four of 16 MiB in pinned memory, each multiplied by a 2048² weight.
const LESSON_BATCHES: usize = 4;
const LESSON_N: usize = 2048;

/// Notebook 9's loops as the lesson runs them: on one stream, then each next batch prefetched
/// on a side stream. Each is timed as `overlap`'s rows are, and profiled once: its lanes' length
/// and the copies' share hidden behind compute, measured by CUDA events, beside the lanes the
/// cost model predicts for this GPU (`spec`) from the same profile, where it knows the GPU.
pub fn lesson(spec: Option<&'static GpuSpec>) -> Result<()> {
    let w = Tensor::randn([LESSON_N, LESSON_N], GPU)?;
    let batches = (0..LESSON_BATCHES)
        .map(|_| Tensor::randn([LESSON_N, LESSON_N], Device::Cpu)?.pin_memory())
        .collect::<Result<Vec<_>>>()?;
    let side = Stream::new(&GPU)?;
    let default = cuda::current_stream(&GPU)?;
    let one_stream = || -> Result<()> {
        for b in &batches {
            let x = b.to_non_blocking(&GPU)?;
            drop(x.matmul(&w)?);
        }
        Ok(())
    };
    let prefetched = || -> Result<()> {
        let mut x = with_stream(&side, || batches[0].to_non_blocking(&GPU))?;
        for i in 0..batches.len() {
            default.wait_stream(&side)?;
            x.record_stream(&default)?;
            let next = match batches.get(i + 1) {
                Some(b) => Some(with_stream(&side, || b.to_non_blocking(&GPU))?),
                None => None,
            };
            drop(x.matmul(&w)?);
            if let Some(n) = next {
                x = n;
            }
        }
        Ok(())
    };
    let loops: [(&str, &dyn Fn() -> Result<()>); 2] =
        [("one_stream", &one_stream), ("prefetched", &prefetched)];
    for (kind, run) in loops {
        let ms = timed(run)?;
        let traced = || {
            run()?;
            cuda::synchronize(0)
        };
        let p = match spec {
            Some(g) => profile_as(g, traced),
            None => profile(traced),
        };
        let measured = p.engine_lanes();
        let predicted = p.predicted_lanes().map(|lanes| Lanes {
            lanes,
            predicted_for: spec,
        });
        let share = |l: &Lanes| l.copies_hidden().unwrap_or(0.0);
        let prediction = predicted.as_ref().map_or(String::new(), |l| {
            format!(
                ",\"predicted_lanes_ms\":{:.4},\"predicted_hidden\":{:.3}",
                l.end().as_secs_f64() * 1e3,
                share(l)
            )
        });
        println!(
            "{{\"bench\":\"lesson\",\"kind\":\"{kind}\",\"bytes\":{},\"ms\":{ms:.4},\"lanes_ms\":{:.4},\"hidden\":{:.3}{prediction}}}",
            LESSON_N * LESSON_N * 4,
            measured.end().as_secs_f64() * 1e3,
            share(&measured)
        );
        eprintln!("notebook 9's {kind} loop, measured:\n{}", p.lanes_text());
    }
    Ok(())
}
