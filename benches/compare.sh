#!/usr/bin/env bash
# Runs the engine's CPU benchmark and its PyTorch peer in one go and prints median ratios.
# Usage: benches/compare.sh [PYTHON]   (PYTHON: an interpreter with torch; default below)
set -euo pipefail
cd "$(dirname "$0")/.."
py="${1:-/root/.cache/placelab/torch-venv/bin/python}"
out="$(mktemp -d)"
cargo bench --no-default-features --bench engine -- "${@:2}" >"$out/placelab.jsonl"
RAYON_NUM_THREADS=2 "$py" benches/torch_peer.py --threads 2 >"$out/torch.jsonl"
"$py" - "$out/placelab.jsonl" "$out/torch.jsonl" <<'PY'
import json, sys
ours = {r["name"]: r for r in map(json.loads, open(sys.argv[1]))}
peer = {r["name"]: r for r in map(json.loads, open(sys.argv[2]))}
print(f"{'workload':24} {'placelab ms':>12} {'PyTorch ms':>12} {'ratio':>7}")
for name, r in ours.items():
    p = peer.get(name)
    if p:
        print(f"{name:24} {r['median_ms']:12.3f} {p['median_ms']:12.3f} {r['median_ms'] / p['median_ms']:7.2f}")
print(f"(ratio = placelab / PyTorch medians; < 1 is faster; {next(iter(peer.values()))['peer']})")
PY
