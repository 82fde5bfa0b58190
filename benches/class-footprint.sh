#!/usr/bin/env bash
# What one learner's kernel costs, in one run, beside its peers: placelab (a session as the
# kernel runs it: start, rust-analyzer warm-up, first cell), plain evcxr (the same evcxr, no
# dependency, its own defaults) and ipykernel (Python). Each side runs alone, so its memory is
# its own: RSS after the first cell, of the kernel's process and of its cell process.
#
#   benches/class-footprint.sh        (uses target/classroom/venv: tests/classroom/run.sh makes it)
set -euo pipefail
repo="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd -P)"
venv="$repo/target/classroom/venv"
cd "$repo"
lscpu | grep -E "Model name|^CPU\(s\)|CPU family|^Model:" | sed "s/  */ /g"
cargo bench --quiet --bench session -- placelab | grep -E "start|first|RSS|completion"
cargo bench --quiet --bench session -- plain | grep -E "start|first|RSS|completion"
"$venv/bin/python" - <<'PY'
import os, time
from jupyter_client.manager import start_new_kernel
t = time.monotonic()
km, kc = start_new_kernel(kernel_name="python3")
reply = kc.execute_interactive("v = [1000, 1000]\nv", timeout=60)
took = time.monotonic() - t
assert reply["content"]["status"] == "ok"
pid = km.provisioner.process.pid
rss = int(next(l for l in open(f"/proc/{pid}/status") if l.startswith("VmRSS:")).split()[1]) / 1024
print(f"ipykernel: start to first result {took * 1e3:.3f} ms")
print(f"ipykernel: RSS after the first cell {rss:.0f} MiB (the kernel's process; no cell process)")
kc.stop_channels()
km.shutdown_kernel(now=True)
PY
