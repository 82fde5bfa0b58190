#!/usr/bin/env bash
# Runs the engine's CPU benchmark and its PyTorch peer in one go and prints median ratios, each
# workload's rate beside this machine's ceiling (f32 FMA peak for products, memory read
# bandwidth for the memory-bound ops), measured once per run.
# Usage: benches/compare.sh [PYTHON [-- BENCH ARGS]]   (PYTHON: an interpreter with torch)
#        benches/compare.sh --guard [--quick]           (no PyTorch: each workload against its
#                                                        floor, benches/guard.py)
set -euo pipefail
cd "$(dirname "$0")/.."
if [ "${1:-}" = "--guard" ]; then
    shift
    exec python3 benches/guard.py "$@"
fi
py="${1:-/root/.cache/placelab/torch-venv/bin/python}"
out="$(mktemp -d)"
cargo bench -p placelab --bench engine -- --ceilings >"$out/ceilings.json"
cargo bench -p placelab --bench engine -- "${@:2}" >"$out/placelab.jsonl"
RAYON_NUM_THREADS=2 "$py" benches/torch_peer.py --threads 2 >"$out/torch.jsonl"
"$py" - "$out/ceilings.json" "$out/placelab.jsonl" "$out/torch.jsonl" <<'PY'
import json, subprocess, sys
sys.path.insert(0, "benches")
from guard import rate_and_share
ceil = json.load(open(sys.argv[1]))
ours = {r["name"]: r for r in map(json.loads, open(sys.argv[2]))}
peer = {r["name"]: r for r in map(json.loads, open(sys.argv[3]))}
cpu = subprocess.run(["lscpu"], capture_output=True, text=True).stdout
model = next((l.split(":", 1)[1].strip() for l in cpu.splitlines() if l.startswith("Model name")), "?")
print(f"CPU: {model}, {ceil['threads']} threads; ceilings this run: f32 FMA peak "
      f"{ceil['fma_peak_gflops']:.0f} GFLOP/s, memory read {ceil['memory_read_gbps']:.1f} GB/s")
print(f"{'workload':24} {'placelab ms':>12} {'PyTorch ms':>12} {'ratio':>7} {'placelab rate':>16} {'of ceiling':>11}")
for name, r in ours.items():
    p = peer.get(name)
    ms = r["median_ms"]
    rate_s, frac = rate_and_share(r, ceil)
    frac_s = f"{frac:.0%}" if frac is not None else ""
    ratio = f"{ms / p['median_ms']:7.2f}" if p else f"{'':7}"
    pms = f"{p['median_ms']:12.3f}" if p else f"{'':12}"
    print(f"{name:24} {ms:12.3f} {pms} {ratio} {rate_s:>16} {frac_s:>11}")
print(f"(ratio = placelab / PyTorch medians; < 1 is faster; {next(iter(peer.values()))['peer']}. "
      "Memory-bound rates count each byte read or written once; data a workload reuses from "
      "cache can exceed the memory ceiling.)")
PY
