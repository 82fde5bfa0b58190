//! Named GPUs and their public figures: what a simulated device standing for one (`--as h100`)
//! predicts from. Every figure is the vendor's (dense, without sparsity), from the source named
//! beside the part; memory sizes are what `nvidia-smi` reports as total memory.

/// How a GPU reaches the host, and other GPUs without NVLink.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Pcie {
    pub generation: u8,
    pub lanes: u8,
}

impl Pcie {
    /// The link's rate per direction in GB/s (10⁹ bytes): the transfer rate per lane less the
    /// line code (8b/10b before generation 3, 128b/130b from it), times the lanes.
    pub fn gbps(self) -> f64 {
        let (gigatransfers, code) = match self.generation {
            1 => (2.5, 0.8),
            2 => (5.0, 0.8),
            3 => (8.0, 128.0 / 130.0),
            4 => (16.0, 128.0 / 130.0),
            _ => (32.0, 128.0 / 130.0),
        };
        gigatransfers * code / 8.0 * self.lanes as f64
    }
}

/// One GPU's public figures.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct GpuSpec {
    /// The name `--as` takes (`h100`), lower case.
    pub key: &'static str,
    /// Other names `--as` accepts.
    pub aliases: &'static [&'static str],
    /// As a learner reads it: "H100 SXM".
    pub name: &'static str,
    /// Device memory as `nvidia-smi` reports it, bytes.
    pub memory_bytes: u64,
    /// Device memory bandwidth, GB/s.
    pub memory_gbps: f64,
    /// Dense peaks in TFLOP/s; `None` where the part has no such unit (a T4 has no TF32/BF16).
    pub fp64_tflops: f64,
    pub fp32_tflops: f64,
    pub tf32_tflops: Option<f64>,
    pub fp16_tflops: f64,
    pub bf16_tflops: Option<f64>,
    /// Streaming multiprocessors: a GEMM's tiles run in waves of this many.
    pub sms: u32,
    pub pcie: Pcie,
    /// NVLink to another GPU of its kind, GB/s per direction; `None` without NVLink.
    pub nvlink_gbps: Option<f64>,
    /// Whether two of these copy to each other over PCIe peer to peer when they have no NVLink
    /// (GeForce parts do not: the driver stages such copies through host memory).
    pub pcie_peer: bool,
    /// Where the figures come from.
    pub source: &'static str,
}

const MIB: u64 = 1 << 20;

/// The H100 SXM; the H200 is the same chip with more, faster memory.
const H100_SXM: GpuSpec = GpuSpec {
    key: "h100",
    aliases: &["h100-sxm", "h100-sxm5"],
    name: "H100 SXM",
    memory_bytes: 81_559 * MIB,
    memory_gbps: 3350.0,
    fp64_tflops: 34.0,
    fp32_tflops: 67.0,
    tf32_tflops: Some(494.7),
    fp16_tflops: 989.4,
    bf16_tflops: Some(989.4),
    sms: 132,
    pcie: Pcie {
        generation: 5,
        lanes: 16,
    },
    nvlink_gbps: Some(450.0),
    pcie_peer: true,
    source: "NVIDIA H100 Tensor Core GPU datasheet (SXM5 column; NVLink 900 GB/s both directions)",
};

/// The named GPUs, most common in courses first.
pub const GPUS: &[GpuSpec] = &[
    H100_SXM,
    GpuSpec {
        key: "h100-pcie",
        aliases: &[],
        name: "H100 PCIe",
        memory_bytes: 81_559 * MIB,
        memory_gbps: 2000.0,
        fp64_tflops: 26.0,
        fp32_tflops: 51.0,
        tf32_tflops: Some(378.0),
        fp16_tflops: 756.0,
        bf16_tflops: Some(756.0),
        sms: 114,
        pcie: Pcie {
            generation: 5,
            lanes: 16,
        },
        nvlink_gbps: Some(300.0),
        pcie_peer: true,
        source: "NVIDIA H100 Tensor Core GPU datasheet (PCIe column; NVLink bridge 600 GB/s both directions)",
    },
    GpuSpec {
        key: "h200",
        aliases: &["h200-sxm"],
        name: "H200 SXM",
        memory_bytes: 143_771 * MIB,
        memory_gbps: 4800.0,
        source: "NVIDIA H200 Tensor Core GPU product page (SXM column; compute and links as the H100 SXM's)",
        ..H100_SXM
    },
    GpuSpec {
        key: "a100",
        aliases: &["a100-80gb", "a100-sxm"],
        name: "A100 80GB SXM",
        memory_bytes: 81_920 * MIB,
        memory_gbps: 2039.0,
        fp64_tflops: 9.7,
        fp32_tflops: 19.5,
        tf32_tflops: Some(156.0),
        fp16_tflops: 312.0,
        bf16_tflops: Some(312.0),
        sms: 108,
        pcie: Pcie {
            generation: 4,
            lanes: 16,
        },
        nvlink_gbps: Some(300.0),
        pcie_peer: true,
        source: "NVIDIA A100 Tensor Core GPU datasheet (80GB SXM column; NVLink 600 GB/s both directions)",
    },
    GpuSpec {
        key: "l4",
        aliases: &[],
        name: "L4",
        memory_bytes: 23_034 * MIB,
        memory_gbps: 300.0,
        fp64_tflops: 0.49,
        fp32_tflops: 30.3,
        tf32_tflops: Some(60.0),
        fp16_tflops: 121.0,
        bf16_tflops: Some(121.0),
        sms: 58,
        pcie: Pcie {
            generation: 4,
            lanes: 16,
        },
        nvlink_gbps: None,
        pcie_peer: true,
        source: "NVIDIA L4 Tensor Core GPU datasheet",
    },
    GpuSpec {
        key: "t4",
        aliases: &[],
        name: "T4",
        memory_bytes: 15_360 * MIB,
        memory_gbps: 320.0,
        fp64_tflops: 0.25,
        fp32_tflops: 8.1,
        tf32_tflops: None,
        fp16_tflops: 65.0,
        bf16_tflops: None,
        sms: 40,
        pcie: Pcie {
            generation: 3,
            lanes: 16,
        },
        nvlink_gbps: None,
        pcie_peer: true,
        source: "NVIDIA T4 Tensor Core GPU datasheet (Turing: no TF32 or BF16 units)",
    },
    GpuSpec {
        key: "rtx4090",
        aliases: &["4090", "rtx-4090"],
        name: "RTX 4090",
        memory_bytes: 24_564 * MIB,
        memory_gbps: 1008.0,
        fp64_tflops: 1.29,
        fp32_tflops: 82.6,
        tf32_tflops: Some(82.6),
        fp16_tflops: 165.2,
        bf16_tflops: Some(165.2),
        sms: 128,
        pcie: Pcie {
            generation: 4,
            lanes: 16,
        },
        nvlink_gbps: None,
        pcie_peer: false,
        source: "NVIDIA Ada Lovelace GPU architecture whitepaper, GeForce RTX 4090 (tensor rates with FP32 accumulate, as PyTorch uses)",
    },
];

impl GpuSpec {
    /// "an H100 SXM", "a T4": the name with the article it is read with.
    pub fn with_article(&self) -> String {
        // Letters whose names start with a vowel sound: "an H100", "an L4", "an RTX 4090".
        let vowel_sound = self
            .name
            .starts_with(['A', 'E', 'F', 'H', 'I', 'L', 'M', 'N', 'O', 'R', 'S', 'X']);
        format!("{} {}", if vowel_sound { "an" } else { "a" }, self.name)
    }
}

/// The GPU `name` stands for (its key or an alias, any case), if it is in the table.
pub fn find(name: &str) -> Option<&'static GpuSpec> {
    let name = name.trim().to_ascii_lowercase();
    GPUS.iter()
        .find(|g| g.key == name || g.aliases.contains(&name.as_str()))
}

/// A named GPU as its key (`h100`), for serde (`#[serde(with = "by_key")]`): the probe's wire
/// carries a simulated device's GPU so.
pub mod by_key {
    use serde::{Deserialize, Deserializer, Serialize, Serializer, de::Error};

    use super::GpuSpec;

    pub fn serialize<S: Serializer>(
        gpu: &Option<&'static GpuSpec>,
        s: S,
    ) -> Result<S::Ok, S::Error> {
        gpu.map(|g| g.key).serialize(s)
    }

    pub fn deserialize<'de, D: Deserializer<'de>>(
        d: D,
    ) -> Result<Option<&'static GpuSpec>, D::Error> {
        let key: Option<String> = Option::deserialize(d)?;
        let find = |k: String| {
            super::find(&k).ok_or_else(|| D::Error::custom(format!("no GPU named {k}")))
        };
        key.map(find).transpose()
    }
}

/// The table's entry for a GPU as its driver names it (`NVIDIA H100 80GB HBM3`, `Tesla T4`),
/// if the table has that part: a benchmark on real hardware sets its measurements beside the
/// model's predictions.
pub fn for_device_name(name: &str) -> Option<&'static GpuSpec> {
    let n = name.to_ascii_lowercase();
    let key = if n.contains("h100") {
        if n.contains("pcie") {
            "h100-pcie"
        } else {
            "h100"
        }
    } else if n.contains("h200") {
        "h200"
    } else if n.contains("a100") && n.contains("80g") {
        "a100"
    } else if n.contains("4090") {
        "rtx4090"
    } else if n.split_whitespace().any(|w| w == "l4") {
        "l4"
    } else if n.split_whitespace().any(|w| w == "t4") {
        "t4"
    } else {
        return None;
    };
    find(key)
}

/// Why `name` stands for no GPU, listing those that can be named.
pub fn unknown(name: &str) -> String {
    format!(
        "no GPU named {name:?} in placelab's table; known: {}",
        names().join(", ")
    )
}

/// The names `--as` takes, for an error that lists them.
pub fn names() -> Vec<&'static str> {
    GPUS.iter().map(|g| g.key).collect()
}
