//! What a named GPU would take for a copy, a kernel or a matmul: the vendor's peaks
//! (`gpus.rs`) times the fraction real work reaches, plus a fixed latency. Each fraction is
//! fitted on one published measurement, named beside it; the tests below hold the model to the
//! published points it was not fitted on.

use super::gpus::GpuSpec;
use crate::dtype::DType;

/// PCIe copies reach this fraction of the link's rate: an H100 (PCIe 5 ×16, 63.0 GB/s) copies
/// pinned host memory to the device at 55.63 GB/s (nvbandwidth `host_to_device_memcpy_ce`,
/// NVIDIA's nvbandwidth blog post).
pub const PCIE_EFFICIENCY: f64 = 0.883;
/// NVLink copies reach this fraction: HGX H100, about 380 GB/s one way of 450
/// (NVIDIA/nccl issue 1264).
pub const NVLINK_EFFICIENCY: f64 = 0.844;
/// Streaming kernels reach this fraction of device memory bandwidth: an H100 SXM copies within
/// its memory at about 3.0 TB/s, read plus write, of 3.35 (this project's H100 machine).
pub const MEMORY_EFFICIENCY: f64 = 0.896;
/// cuBLAS reaches this fraction of the tensor-core peak once every wave of tiles is full: an
/// H100 SXM multiplies 8192³ in bf16 at 798 TFLOP/s (this project's H100 machine), in 32 waves
/// of 132 tiles that fill 97% of them.
pub const GEMM_EFFICIENCY: f64 = 0.832;
/// A copy's fixed cost, from the call to its completion, when the bytes take no time: the one
/// assumed figure (small copies measure 8–12 µs on PCIe GPUs), not fitted on a measurement.
pub const COPY_LATENCY: f64 = 10e-6;
/// A kernel's fixed cost: the launch and the start of its blocks (assumed, as `COPY_LATENCY`).
pub const LAUNCH_LATENCY: f64 = 4e-6;
/// The output tile one thread block of a GEMM computes (cuBLAS's common 128 × 128).
const GEMM_TILE: u64 = 128;

/// The way a copy goes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CopyRoute {
    /// Between the host and the device, from or into page-locked memory: the copy engine reads
    /// or writes the host's memory itself, over PCIe.
    Pinned,
    /// From or into pageable memory: the driver stages the bytes through a pinned buffer of its
    /// own, so the copy is no faster than the host's memcpy either.
    Pageable,
    /// Between two GPUs of this kind: over NVLink where the part has it, else PCIe peer to
    /// peer, else staged through host memory (both directions over PCIe).
    BetweenGpus,
    /// Within one GPU's memory: every byte read once and written once.
    OnDevice,
}

/// A predicted copy: how long, and the link it went over ("PCIe 5 ×16, pinned").
#[derive(Debug, Clone, PartialEq)]
pub struct CopyPrediction {
    pub seconds: f64,
    pub link: String,
}

fn pcie_label(gpu: &GpuSpec) -> String {
    format!("PCIe {} ×{}", gpu.pcie.generation, gpu.pcie.lanes)
}

/// What copying `bytes` along `route` takes on `gpu`. `host_memcpy_gbps` is the host's own
/// memcpy rate, which bounds a pageable copy (placelab measures it: a simulated copy is one).
pub fn copy(gpu: &GpuSpec, route: CopyRoute, bytes: u64, host_memcpy_gbps: f64) -> CopyPrediction {
    let b = bytes as f64;
    let pcie = PCIE_EFFICIENCY * gpu.pcie.gbps() * 1e9;
    let (seconds, link) = match route {
        CopyRoute::Pinned => (
            COPY_LATENCY + b / pcie,
            format!("{}, pinned", pcie_label(gpu)),
        ),
        CopyRoute::Pageable => {
            // The driver pipelines its staging copies with the DMA: the slower of the two sets
            // the pace.
            let host = host_memcpy_gbps.max(f64::MIN_POSITIVE) * 1e9;
            let t = COPY_LATENCY + (b / pcie).max(b / host);
            (t, format!("{}, pageable", pcie_label(gpu)))
        }
        CopyRoute::BetweenGpus => match gpu.nvlink_gbps {
            Some(nv) => (
                COPY_LATENCY + b / (NVLINK_EFFICIENCY * nv * 1e9),
                format!("NVLink, {nv:.0} GB/s each way"),
            ),
            None if gpu.pcie_peer => (
                COPY_LATENCY + b / pcie,
                format!("{}, peer to peer", pcie_label(gpu)),
            ),
            None => (
                2.0 * (COPY_LATENCY + b / pcie),
                format!("{}, staged through host memory", pcie_label(gpu)),
            ),
        },
        CopyRoute::OnDevice => (
            LAUNCH_LATENCY + 2.0 * b / (MEMORY_EFFICIENCY * gpu.memory_gbps * 1e9),
            "device memory".to_string(),
        ),
    };
    CopyPrediction { seconds, link }
}

/// The arithmetic a kernel or GEMM runs in, which picks the peak it can reach.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Arithmetic {
    F64,
    F32,
    /// f32 matmuls on tensor cores (`cuda::set_allow_tf32(true)`).
    Tf32,
    F16,
    Bf16,
}

impl Arithmetic {
    /// The arithmetic a matmul of `dtype` runs in (`tf32`: TF32 allowed for f32).
    pub fn of_matmul(dtype: DType, tf32: bool) -> Arithmetic {
        match dtype {
            DType::F64 => Arithmetic::F64,
            DType::F16 => Arithmetic::F16,
            DType::BF16 => Arithmetic::Bf16,
            _ if tf32 => Arithmetic::Tf32,
            _ => Arithmetic::F32,
        }
    }

    /// `gpu`'s dense peak for this arithmetic, in FLOP/s. A part without the unit (a T4 has no
    /// TF32 or BF16) runs it at its f32 rate.
    pub fn peak(self, gpu: &GpuSpec) -> f64 {
        let tflops = match self {
            Arithmetic::F64 => gpu.fp64_tflops,
            Arithmetic::F32 => gpu.fp32_tflops,
            Arithmetic::Tf32 => gpu.tf32_tflops.unwrap_or(gpu.fp32_tflops),
            Arithmetic::F16 => gpu.fp16_tflops,
            Arithmetic::Bf16 => gpu.bf16_tflops.unwrap_or(gpu.fp32_tflops),
        };
        tflops * 1e12
    }
}

/// An element-wise op or a reduction moving `bytes` to and from device memory and doing `flops`
/// of arithmetic: whichever of the two takes longer, plus the launch.
pub fn kernel(gpu: &GpuSpec, bytes: u64, flops: f64, arithmetic: Arithmetic) -> f64 {
    let memory = bytes as f64 / (MEMORY_EFFICIENCY * gpu.memory_gbps * 1e9);
    let compute = flops / arithmetic.peak(gpu);
    LAUNCH_LATENCY + memory.max(compute)
}

/// `batch` products of `m × k` and `k × n` matrices of `element_bytes`-byte elements, as cuBLAS
/// runs them: 128 × 128 output tiles in waves of one tile per SM, so a last wave that fills few
/// SMs costs as much as a full one; the operands read and the result written once.
pub fn matmul(
    gpu: &GpuSpec,
    (batch, m, n, k): (u64, u64, u64, u64),
    element_bytes: u64,
    arithmetic: Arithmetic,
) -> f64 {
    let tiles = batch * m.div_ceil(GEMM_TILE) * n.div_ceil(GEMM_TILE);
    let sms = gpu.sms as u64;
    let waves = tiles.div_ceil(sms).max(1);
    let filled = tiles as f64 / (waves * sms) as f64;
    let flops = 2.0 * (batch * m * n * k) as f64;
    let compute = flops / (GEMM_EFFICIENCY * filled.max(1e-9) * arithmetic.peak(gpu));
    let bytes = batch * (m * k + k * n + m * n) * element_bytes;
    let memory = bytes as f64 / (MEMORY_EFFICIENCY * gpu.memory_gbps * 1e9);
    LAUNCH_LATENCY + compute.max(memory)
}

#[cfg(test)]
mod tests {
    //! Published measurements the model was not fitted on, each with the error the model is
    //! held to. Points left out, and why: `bandwidthTest --mode=quick` host copies from cloud
    //! VMs whose PCIe generation is not stated (a T4 at 9.7 GB/s, an A100 at 12.3 GB/s: an A100
    //! is a PCIe 4 part, and 12.3 GB/s is a PCIe 3 rate).
    use super::*;
    use crate::cost::gpus::find;

    const GB: f64 = 1e9;
    const MIB: u64 = 1 << 20;

    fn gpu(key: &str) -> GpuSpec {
        *find(key).unwrap()
    }

    fn within(what: &str, predicted: f64, published: f64, error: f64) {
        let off = (predicted - published).abs() / published;
        assert!(
            off <= error,
            "{what}: predicted {predicted:.1}, published {published:.1} ({:.0}% off; held to {:.0}%)",
            off * 100.0,
            error * 100.0
        );
    }

    /// GB/s of a copy of `bytes` that takes `seconds`, counted once (or twice: read + write).
    fn rate(bytes: u64, seconds: f64, counted: f64) -> f64 {
        counted * bytes as f64 / seconds / GB
    }

    #[test]
    fn pinned_host_copies_match_published_nvbandwidth_runs() {
        // NVIDIA/nvbandwidth issue 6: host_to_device_memcpy_ce on an H100 VM, 57.06 GB/s
        // (three of four GPUs; the fourth's 14.2 GB/s is a misconfigured slot).
        let h100 = gpu("h100");
        let t = copy(&h100, CopyRoute::Pinned, 512 * MIB, 10.0).seconds;
        within("H100 pinned H2D", rate(512 * MIB, t, 1.0), 57.06, 0.10);
        // NVIDIA/nvbandwidth issue 42: an A100 SXM (PCIe 4 ×16), 512 MiB host to device,
        // 25.13 GB/s.
        let a100 = gpu("a100");
        let t = copy(&a100, CopyRoute::Pinned, 512 * MIB, 10.0).seconds;
        within("A100 pinned H2D", rate(512 * MIB, t, 1.0), 25.13, 0.15);
    }

    #[test]
    fn pcie_peer_copies_match_a_published_run() {
        // NVIDIA/nvbandwidth issue 50: RTX A6000 pairs without NVLink (PCIe 4 ×16) copy to
        // each other at 26.34 GB/s (device_to_device_memcpy_read_ce, same switch). An L4 is a
        // PCIe 4 ×16 part with PCIe peer copies and no NVLink: the same route.
        let l4 = gpu("l4");
        let t = copy(&l4, CopyRoute::BetweenGpus, 512 * MIB, 10.0).seconds;
        within("PCIe 4 peer", rate(512 * MIB, t, 1.0), 26.34, 0.10);
    }

    #[test]
    fn on_device_copies_match_published_runs() {
        // This project's H200 machine: ≈4.3 TB/s read + write within device memory.
        let h200 = gpu("h200");
        let t = copy(&h200, CopyRoute::OnDevice, 1 << 30, 10.0).seconds;
        within("H200 device copy", rate(1 << 30, t, 2.0), 4300.0, 0.05);
        // bandwidthTest (CUDA samples), 32 MB device to device, counting read + write:
        // A100-SXM4-40GB (1555 GB/s) 1157.5 GB/s; T4 239.6 GB/s (router-gao/cuda-demo).
        let a100_40 = GpuSpec {
            memory_gbps: 1555.0,
            ..gpu("a100")
        };
        let t = copy(&a100_40, CopyRoute::OnDevice, 32_000_000, 10.0).seconds;
        within(
            "A100 40GB device copy",
            rate(32_000_000, t, 2.0),
            1157.5,
            0.15,
        );
        let t = copy(&gpu("t4"), CopyRoute::OnDevice, 32_000_000, 10.0).seconds;
        within("T4 device copy", rate(32_000_000, t, 2.0), 239.6, 0.20);
    }

    #[test]
    fn a_large_gemm_matches_a_published_run() {
        // This project's H200 machine: 8192³ bf16 at 769–798 TFLOP/s (the H200 has the H100's
        // SMs and peak, so this checks the wave model and the fit together, not independently).
        let t = matmul(&gpu("h200"), (1, 8192, 8192, 8192), 2, Arithmetic::Bf16);
        let tflops = 2.0 * 8192f64.powi(3) / t / 1e12;
        within("H200 8192³ bf16", tflops, 783.5, 0.05);
    }

    #[test]
    fn pinned_beats_pageable_and_nvlink_beats_pcie() {
        for g in crate::cost::gpus::GPUS {
            // A host that copies at 10 GB/s, below every PCIe 4/5 rate, and a PCIe 3 one's
            // 13.9 GB/s too.
            let bytes = 16 * MIB;
            let pinned = copy(g, CopyRoute::Pinned, bytes, 10.0).seconds;
            let pageable = copy(g, CopyRoute::Pageable, bytes, 10.0).seconds;
            assert!(
                pinned < pageable,
                "{}: pinned {pinned} pageable {pageable}",
                g.name
            );
            let peer = copy(g, CopyRoute::BetweenGpus, bytes, 10.0);
            if g.nvlink_gbps.is_some() {
                assert!(peer.seconds * 4.0 < pinned, "{}: {peer:?}", g.name);
                assert!(peer.link.starts_with("NVLink"), "{}", peer.link);
            }
        }
        let staged = copy(&gpu("rtx4090"), CopyRoute::BetweenGpus, 16 * MIB, 10.0);
        assert!(
            staged.link.contains("staged through host memory"),
            "{}",
            staged.link
        );
    }

    #[test]
    fn small_work_costs_its_latency_and_a_ragged_last_wave_costs_a_whole_one() {
        let h100 = gpu("h100");
        let tiny = kernel(&h100, 4096, 1024.0, Arithmetic::F32);
        assert!((tiny - LAUNCH_LATENCY) / LAUNCH_LATENCY < 0.01, "{tiny}");
        // 12 × 11 = 132 tiles fill one wave of the H100's 132 SMs; 7 × 19 = 133 need two, so
        // cost about twice as much (both compute-bound at k = 4096).
        let one = matmul(&h100, (1, 128 * 12, 128 * 11, 4096), 2, Arithmetic::Bf16);
        let two = matmul(&h100, (1, 128 * 7, 128 * 19, 4096), 2, Arithmetic::Bf16);
        assert!(two > 1.8 * one - LAUNCH_LATENCY, "{one} {two}");
        // A T4 has no bf16 tensor cores: bf16 runs at its f32 rate.
        let t4 = gpu("t4");
        assert_eq!(Arithmetic::Bf16.peak(&t4), Arithmetic::F32.peak(&t4));
    }

    #[test]
    fn names_are_found_in_any_case_and_unknown_ones_are_not() {
        assert_eq!(find("H100").unwrap().name, "H100 SXM");
        assert_eq!(find("4090").unwrap().key, "rtx4090");
        assert!(find("h800").is_none());
        let by_driver = |n: &str| crate::cost::gpus::for_device_name(n).map(|g| g.key);
        assert_eq!(by_driver("NVIDIA H100 80GB HBM3"), Some("h100"));
        assert_eq!(by_driver("NVIDIA H100 PCIe"), Some("h100-pcie"));
        assert_eq!(by_driver("NVIDIA H200"), Some("h200"));
        assert_eq!(by_driver("NVIDIA A100-SXM4-80GB"), Some("a100"));
        assert_eq!(
            by_driver("NVIDIA A100-SXM4-40GB"),
            None,
            "not the table's A100"
        );
        assert_eq!(by_driver("Tesla T4"), Some("t4"));
        assert_eq!(by_driver("NVIDIA L4"), Some("l4"));
        assert_eq!(by_driver("NVIDIA GeForce RTX 4090"), Some("rtx4090"));
        assert!(crate::cost::gpus::names().contains(&"a100"));
    }
}
