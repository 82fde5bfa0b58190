#!/usr/bin/env bash
# Runs the engine's CPU benchmark and its PyTorch peer in one go and prints median ratios, each
# workload's rate beside this machine's ceiling (f32 FMA peak for products, memory read
# bandwidth for the memory-bound ops), measured once per run.
# Usage: benches/compare.sh [PYTHON [-- BENCH ARGS]]   (PYTHON: an interpreter with torch)
set -euo pipefail
cd "$(dirname "$0")/.."
py="${1:-/root/.cache/placelab/torch-venv/bin/python}"
out="$(mktemp -d)"
cargo bench --no-default-features --bench engine -- --ceilings >"$out/ceilings.json"
cargo bench --no-default-features --bench engine -- "${@:2}" >"$out/placelab.jsonl"
RAYON_NUM_THREADS=2 "$py" benches/torch_peer.py --threads 2 >"$out/torch.jsonl"
"$py" - "$out/ceilings.json" "$out/placelab.jsonl" "$out/torch.jsonl" <<'PY'
import json, subprocess, sys
ceil = json.load(open(sys.argv[1]))
ours = {r["name"]: r for r in map(json.loads, open(sys.argv[2]))}
peer = {r["name"]: r for r in map(json.loads, open(sys.argv[3]))}
MB = 1e6
# The work each workload does: ("flop", n) for products, ("byte", n) for what the memory-bound
# ones must read and write at least once.
mlp = lambda b: 2 * b * (784 * 128 * 2 + 128 * 10 * 3)
work = {
    "matmul_1000": ("flop", 2 * 1000**3), "matmul_2048": ("flop", 2 * 2048**3),
    "add_10m": ("byte", 120 * MB), "relu_10m": ("byte", 80 * MB), "exp_10m": ("byte", 80 * MB),
    "sum_10m": ("byte", 40 * MB), "softmax_1000x1000": ("byte", 8 * MB),
    "randn_1000x1000": ("byte", 4 * MB), "clone_400mb": ("byte", 800 * MB),
    "transpose_contig_2048": ("byte", 2048 * 2048 * 8), "to_f16_10m": ("byte", 60 * MB),
    "mlp_step_64": ("flop", mlp(64)), "mlp_step_64_profiled": ("flop", mlp(64)),
    "mlp_step_1024": ("flop", mlp(1024)),
}
cpu = subprocess.run(["lscpu"], capture_output=True, text=True).stdout
model = next((l.split(":", 1)[1].strip() for l in cpu.splitlines() if l.startswith("Model name")), "?")
print(f"CPU: {model}, {ceil['threads']} threads; ceilings this run: f32 FMA peak "
      f"{ceil['fma_peak_gflops']:.0f} GFLOP/s, memory read {ceil['memory_read_gbps']:.1f} GB/s")
print(f"{'workload':24} {'placelab ms':>12} {'PyTorch ms':>12} {'ratio':>7} {'placelab rate':>16} {'of ceiling':>11}")
for name, r in ours.items():
    p = peer.get(name)
    ms = r["median_ms"]
    kind, amount = work.get(name, ("", 0))
    if kind == "flop":
        rate = amount / (ms / 1e3) / 1e9
        rate_s, frac = f"{rate:.0f} GFLOP/s", rate / ceil["fma_peak_gflops"]
    elif kind == "byte":
        rate = amount / (ms / 1e3) / 1e9
        rate_s, frac = f"{rate:.1f} GB/s", rate / ceil["memory_read_gbps"]
    else:
        rate_s, frac = "", None
    frac_s = f"{frac:.0%}" if frac is not None else ""
    ratio = f"{ms / p['median_ms']:7.2f}" if p else f"{'':7}"
    pms = f"{p['median_ms']:12.3f}" if p else f"{'':12}"
    print(f"{name:24} {ms:12.3f} {pms} {ratio} {rate_s:>16} {frac_s:>11}")
print(f"(ratio = placelab / PyTorch medians; < 1 is faster; {next(iter(peer.values()))['peer']}. "
      "Memory-bound rates count each byte read or written once; data a workload reuses from "
      "cache can exceed the memory ceiling.)")
PY
