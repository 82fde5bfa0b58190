#!/usr/bin/env bash
# The Jupyter kernel beside ipykernel (benches/kernel_peer.py), then the session beside plain
# evcxr (cargo bench --bench session), in one run on this machine. Needs the test venv
# (`cargo test --test jupyter` makes target/jupyter-venv, ipykernel included).
set -euo pipefail
cd "$(dirname "$0")/.."
lscpu | grep -E '^Model name' || true
cargo build --release
prefix="$PWD/target/bench-prefix"
./target/release/placelab install-kernel --prefix "$prefix" --name placelab-bench >/dev/null
py="$PWD/target/jupyter-venv/bin/python"
"$py" -m ipykernel install --prefix "$prefix" --name python3 >/dev/null
export JUPYTER_PATH="$prefix/share/jupyter" PLACELAB_SIMULATE_CUDA=1
"$py" benches/kernel_peer.py placelab-bench --peer python3
cargo bench --bench session
