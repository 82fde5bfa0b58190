#!/usr/bin/env bash
# GPU verification in two steps, because the GPU machine has the NVIDIA driver, CUDA 13 and
# PyTorch but no Rust toolchain:
#
#   benches/gpu-check.sh build [--cuda-12]
#                                  # here: release-build the GPU tests and benchmark into
#                                  # target/gpu-check/ (carry that folder to the GPU machine);
#                                  # --cuda-12: the engine built for CUDA 12, whose `run` needs
#                                  # CUDA 12's NVRTC and cuBLAS in PLACELAB_CUDA_LIB_DIRS
#   benches/gpu-check.sh run [OUT] # there, from the repository root: run them, compare with
#                                  # PyTorch, write OUT/gpu-results.md (OUT defaults to $OUT or
#                                  # target/gpu-check/out), and OUT/run.json: the GPU,
#                                  # driver, the CUDA, NVRTC and cuBLAS versions loaded, host
#                                  # CPU, PyTorch and the commit measured
#   benches/gpu-check.sh notebooks # on a GPU machine with Rust: the ten tutorials, checked,
#                                  # their executed copies in notebooks/executed-GPU/ (below)
#
# `run` checks every op against the CPU backend and PyTorch's reference cases, the allocator's
# numbers against PyTorch's for the same allocations, and measures host↔device bandwidth
# (pageable and pinned), with two GPUs a copy between them peer to peer against one staged through
# host memory, a few kernels against PyTorch on the same GPU, and notebook 04's training step
# profiled op by op; where the GPU is in the cost model's table, each row beside its prediction.
set -euo pipefail
cd "$(dirname "$0")/.."
BIN=target/gpu-check

build() {
    mkdir -p "$BIN"
    local list major=13 features=()
    if [ "${1:-}" = --cuda-12 ]; then
        major=12
        features=(--no-default-features --features cuda-12)
    fi
    # The engine alone (-p placelab): the GPU tests need none of the front end's crates.
    # cargo's messages go to a log, said when the build fails (they would mix with the JSON).
    list=$(cargo test --release -p placelab "${features[@]}" --no-run --message-format=json \
        --test cuda_gpu --test cuda_gpu_memory --test cuda_gpu_simulation 2>"$BIN/build.log" &&
        cargo bench -p placelab "${features[@]}" --no-run --message-format=json --bench gpu \
            2>>"$BIN/build.log") || {
        tail -30 "$BIN/build.log" >&2
        echo "gpu-check: the build failed (all of cargo's output: $BIN/build.log)" >&2
        exit 1
    }
    for name in cuda_gpu cuda_gpu_memory cuda_gpu_simulation gpu; do
        local exe
        exe=$(printf '%s\n' "$list" | python3 -c "
import json, sys
for line in sys.stdin:
    try: m = json.loads(line)
    except ValueError: continue
    if m.get('reason') == 'compiler-artifact' and m.get('executable') and m['target']['name'] == '$name':
        print(m['executable'])" | tail -1)
        [ -n "$exe" ] || { echo "gpu-check: no executable for $name" >&2; exit 1; }
        cp "$exe" "$BIN/$name"
        strip "$BIN/$name" 2>/dev/null || true
    done
    # The GPU machine has no git: the commit built travels beside the binaries, for `run.json`.
    local commit
    commit=$(git rev-parse --short=7 HEAD)
    if [ -n "$(git status --porcelain --untracked-files=no)" ]; then
        commit="$commit (with uncommitted changes)"
    fi
    echo "$commit" > "$BIN/built-from"
    # Which CUDA's libraries `run` records (the engine loads only its own major's).
    echo "$major" > "$BIN/cuda-major"
    du -sh "$BIN"/cuda_gpu "$BIN"/cuda_gpu_memory "$BIN"/cuda_gpu_simulation "$BIN"/gpu
    echo "built; carry $BIN and run: benches/gpu-check.sh run"
}

# CUDA 13's NVRTC and cuBLAS from PyTorch's wheels when they are not on the loader path.
cuda_lib_dirs() {
    python3 - <<'PY'
import glob, os, site
dirs = []
for sp in site.getsitepackages() + [site.getusersitepackages()]:
    dirs += sorted(glob.glob(os.path.join(sp, "nvidia", "*", "lib")))
print(":".join(d for d in dirs if os.path.isdir(d)))
PY
}

# `OUT/run.json`: what was measured on what, so that a run's figures can be cited (GPU, driver,
# host CPU, PyTorch and CUDA versions, the placelab commit `build` recorded).
describe_run() {
    python3 - "$1" "$BIN/built-from" "$(cat "$BIN/cuda-major" 2>/dev/null || echo 13)" <<'PY'
import datetime, json, os, subprocess, sys
out, built_from, major = sys.argv[1], sys.argv[2], sys.argv[3]
def command(*args):
    try:
        return subprocess.run(args, capture_output=True, text=True, check=True).stdout
    except (OSError, subprocess.CalledProcessError):
        return ""
gpus = [l.split(", ") for l in command("nvidia-smi", "--query-gpu=name,driver_version,memory.total", "--format=csv,noheader").splitlines() if l.strip()]
cpu = dict(l.split(":", 1) for l in command("lscpu").splitlines() if ":" in l)
cpu = {k.strip(): v.strip() for k, v in cpu.items()}
try:
    import torch
    torch_version, cuda_version = torch.__version__, torch.version.cuda
except ImportError:
    torch_version = cuda_version = "not installed"


def cuda_versions():
    """The driver's CUDA version and the NVRTC and cuBLAS the engine loads (the first of its major
    in PLACELAB_CUDA_LIB_DIRS, else the loader's), each as the library reports it."""
    import ctypes, glob
    found = {"engine_built_for": f"CUDA {major}"}
    try:
        v = ctypes.c_int()
        ctypes.CDLL("libcuda.so.1").cuDriverGetVersion(ctypes.byref(v))
        found["driver_cuda"] = f"{v.value // 1000}.{v.value % 1000 // 10}"
    except OSError as e:
        found["driver_cuda"] = f"not loaded: {e}"
    dirs = [d for d in os.environ.get("PLACELAB_CUDA_LIB_DIRS", "").split(":") if d]
    for name, soname, ask in [("nvrtc", f"libnvrtc.so.{major}", "nvrtcVersion"),
                              ("cublas", f"libcublas.so.{major}", "cublasGetProperty"),
                              ("cublasLt", f"libcublasLt.so.{major}", "cublasLtGetProperty")]:
        paths = [p for d in dirs for p in glob.glob(os.path.join(d, soname))] + [soname]
        for path in paths:
            try:
                lib = ctypes.CDLL(path)
            except OSError:
                continue
            a, b = ctypes.c_int(), ctypes.c_int()
            if ask == "nvrtcVersion":
                lib.nvrtcVersion(ctypes.byref(a), ctypes.byref(b))
            else:
                getattr(lib, ask)(0, ctypes.byref(a))
                getattr(lib, ask)(1, ctypes.byref(b))
            found[name] = f"{a.value}.{b.value} ({path})"
            break
        else:
            found[name] = "not found"
    return found


run = {
    "date": datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M UTC"),
    "gpus": [{"name": g[0], "driver": g[1], "memory": g[2]} for g in gpus if len(g) == 3],
    "host_cpu": f"{cpu.get('Model name', 'unknown')}, {cpu.get('CPU(s)', '?')} CPUs (family {cpu.get('CPU family', '?')} model {cpu.get('Model', '?')})",
    "torch": torch_version,
    "torch_cuda": cuda_version,
    "cuda_libraries": cuda_versions(),
    "placelab_commit": open(built_from).read().strip() if os.path.exists(built_from) else "not recorded (build without git)",
}
json.dump(run, open(f"{out}/run.json", "w"), indent=1)
print(json.dumps(run))
PY
}

run() {
    local out=${1:-${OUT:-$BIN/out}}
    mkdir -p "$out"
    export PLACELAB_GPU_OUT="$out"
    export PLACELAB_CUDA_LIB_DIRS="${PLACELAB_CUDA_LIB_DIRS:-$(cuda_lib_dirs)}"
    export PLACELAB_CACHE="$out/cache"
    nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader | tee "$out/gpu.txt"
    describe_run "$out"
    local status=0
    "$BIN/cuda_gpu" --include-ignored --test-threads=1 --show-output 2>&1 | tee "$out/cuda_gpu.log" || status=1
    "$BIN/cuda_gpu_memory" --include-ignored --test-threads=1 2>&1 | tee "$out/cuda_gpu_memory.log" || status=1
    "$BIN/cuda_gpu_simulation" --include-ignored 2>&1 | tee "$out/cuda_gpu_simulation.log" || status=1
    python3 benches/torch_cuda_memory.py "$out/alloc_torch.json" || status=1
    python3 - "$out" <<'PY' || status=1
import json, sys
out = sys.argv[1]
ours = json.load(open(f"{out}/alloc_placelab.json"))
torch = json.load(open(f"{out}/alloc_torch.json"))
bad = 0
lines = ["| step | placelab allocated / reserved | PyTorch allocated / reserved |", "|---|---|---|"]
for a, b in zip(ours, torch):
    same = all(a[k] == b[k] for k in ("allocated", "reserved", "max_allocated"))
    bad += not same
    lines.append(f"| {a['step']} | {a['allocated']:,} / {a['reserved']:,} | {b['allocated']:,} / {b['reserved']:,}{'' if same else ' ✗'} |")
open(f"{out}/alloc.md", "w").write("\n".join(lines) + "\n")
print("\n".join(lines))
sys.exit(1 if bad else 0)
PY
    # A failure below is reported with the rest rather than ending the run before its summary.
    "$BIN/gpu" > "$out/bench_placelab.jsonl" || status=1
    python3 benches/torch_gpu.py > "$out/bench_torch.jsonl" || status=1
    python3 - "$out" <<'PY' || status=1
import json, sys
out = sys.argv[1]
load = lambda f: [json.loads(l) for l in open(f"{out}/{f}") if l.strip()]
ours, torch = load("bench_placelab.jsonl"), load("bench_torch.jsonl")
key = lambda r: (r["bench"], r.get("kind", r.get("name")), r.get("bytes", 0))
t = {key(r): r for r in torch}
# The cost model's prediction for this GPU (benches/gpu.rs adds predicted_ms where the GPU is in
# placelab's table), against the time measured: its error here, per row and at the median.
errors = []
def model(r, measured_ms):
    if "predicted_ms" not in r:
        return "–"
    e = (r["predicted_ms"] - measured_ms) / measured_ms
    errors.append(abs(e))
    return f"{r['predicted_ms']:.3f} ms ({e * 100:+.0f}%)"
rows = ["| transfer | bytes | placelab GB/s (event / wall) | PyTorch GB/s (event / wall) | model (error) |", "|---|---|---|---|---|"]
for r in ours:
    if r["bench"] == "transfer":
        p = t[key(r)]
        rows.append(f"| {r['kind']} | {r['bytes']:,} | {r['event_gbps']:.1f} / {r['wall_gbps']:.1f} | {p['event_gbps']:.1f} / {p['wall_gbps']:.1f} | {model(r, r['event_ms'])} |")
rows += ["", "| non-blocking | bytes | placelab call / copy ms | PyTorch call / copy ms |", "|---|---|---|---|"]
for r in ours:
    if r["bench"] == "non_blocking":
        p = t[key(r)]
        rows.append(f"| {r['kind']} | {r['bytes']:,} | {r['call_ms']:.3f} / {r['event_ms']:.3f} | {p['call_ms']:.3f} / {p['event_ms']:.3f} |")
peer = [r for r in ours if r["bench"] == "peer"]
if peer:
    rows += ["", "| cuda:0 → cuda:1 | bytes | placelab route | placelab GB/s direct / staged (wall) | PyTorch GB/s direct / staged (wall) | model, direct (error) |", "|---|---|---|---|---|---|"]
    for r in peer:
        p = t[key(r)]
        rows.append(f"| d2d | {r['bytes']:,} | {r['route']} | {r['direct_wall_gbps']:.1f} / {r['staged_wall_gbps']:.1f} | {p['direct_wall_gbps']:.1f} / {p['staged_wall_gbps']:.1f} | {model(r, r['event_ms'])} |")
else:
    rows += ["", "One GPU: no copy between GPUs to measure."]
rows += ["", "| op | placelab ms | PyTorch ms | ratio | model (error against placelab) |", "|---|---|---|---|---|"]
for r in ours:
    if r["bench"] == "op":
        p = t[key(r)]
        rows.append(f"| {r['name']} | {r['ms']:.3f} | {p['ms']:.3f} | {r['ms'] / p['ms']:.2f} | {model(r, r['ms'])} |")
overlap = [r for r in ours if r["bench"] == "overlap"]
if overlap:
    rows += ["", "| 256 MiB pinned upload and a 4096³ f32 GEMM | placelab ms | PyTorch ms |", "|---|---|---|"]
    for r in overlap:
        p = t.get(key(r))
        rows.append(f"| {r['kind']} | {r['ms']:.3f} | {p['ms']:.3f} |" if p else f"| {r['kind']} | {r['ms']:.3f} | – |")
lesson = [r for r in ours if r["bench"] == "lesson"]
if lesson:
    rows += ["", "| notebook 9's loop (4 × 16 MiB, 2048³ f32) | placelab ms | PyTorch ms | lanes measured: ms, copies hidden | lanes predicted for this GPU |", "|---|---|---|---|---|"]
    for r in lesson:
        p = t.get(key(r))
        predicted = f"{r['predicted_lanes_ms']:.3f} ms, {r['predicted_hidden'] * 100:.0f}%" if "predicted_lanes_ms" in r else "–"
        rows.append(f"| {r['kind']} | {r['ms']:.3f} | {p['ms']:.3f} | {r['lanes_ms']:.3f} ms, {r['hidden'] * 100:.0f}% | {predicted} |" if p else f"| {r['kind']} | {r['ms']:.3f} | – | {r['lanes_ms']:.3f} ms, {r['hidden'] * 100:.0f}% | {predicted} |")
profiled = [r for r in ours if r["bench"] == "profile"]
if profiled:
    rows += ["", "| profiled MLP step (notebook 04), row | calls | CUDA events ms | model (error) |", "|---|---|---|---|"]
    for r in profiled:
        rows.append(f"| {r['name']} | {r['calls']} | {r['ms']:.4f} | {model(r, r['ms'])} |")
if errors:
    errors.sort()
    rows += ["", f"Cost model on this GPU: median error {errors[len(errors) // 2] * 100:.0f}% over {len(errors)} rows (target ≤ 20%), largest {errors[-1] * 100:.0f}%."]
else:
    rows += ["", "Cost model: this GPU is not in placelab's table; nothing predicted."]
open(f"{out}/bench.md", "w").write("\n".join(rows) + "\n")
print("\n".join(rows))
PY
    # The refitted model's error per class of rows, and each whole step beside its prediction
    # (the same pricing `engine/src/cost/fit.rs` is tested with).
    "$BIN/gpu" model "$out/bench_placelab.jsonl" "$(cut -d, -f1 "$out/gpu.txt")" > "$out/model.md" \
        || echo "(no model report: see above)" > "$out/model.md"
    cat "$out/model.md"
    cat "$out/gpu.txt" "$out/run.json" "$out/alloc.md" "$out/bench.md" "$out/model.md" > "$out/gpu-results.md"
    [ "$status" = 0 ] && echo "gpu-check: all GPU tests passed" || echo "gpu-check: FAILURES (see $out)"
    return "$status"
}

# `notebooks [--emulated]`: the ten tutorials run by `placelab run-notebook` on this machine's
# GPU, each held to every assertion of tests/jupyter/test_notebooks.py that holds on a real GPU;
# their executed copies go to notebooks/executed-GPU/ (`h200` for an NVIDIA H200). With
# --emulated, the dry run: emulated devices, the copies left in target/gpu-check/. Unlike `run`
# it needs what a user's machine has: a Rust toolchain (the cells are Rust) and Python 3 with
# venv (the checks: a venv from tests/jupyter/requirements.txt is made in target/ if none is).
notebooks() {
    local emulated=""
    [ "${1:-}" = --emulated ] && emulated=1
    if ! command -v cargo > /dev/null; then
        echo "gpu-check notebooks: the cells are Rust: install a toolchain (https://rustup.rs)" >&2
        return 2
    fi
    cargo build --release --quiet
    local python=target/jupyter-venv/bin/python
    if [ ! -x "$python" ]; then
        python=target/notebook-venv/bin/python
        [ -x "$python" ] || python3 -m venv target/notebook-venv
        "$python" -m pip install --quiet -r tests/jupyter/requirements.txt
    fi
    local gpu out
    unset PLACELAB_SIMULATE_CUDA PLACELAB_EMULATE_CUDA
    if [ -n "$emulated" ]; then
        gpu=emulated
        export PLACELAB_EMULATE_CUDA=2,16GiB
    else
        gpu=$(nvidia-smi --query-gpu=name --format=csv,noheader | head -1 \
            | tr 'A-Z' 'a-z' | sed -e 's/^nvidia //' -e 's/[^a-z0-9]\+/-/g' -e 's/-$//')
        export PLACELAB_CUDA_LIB_DIRS="${PLACELAB_CUDA_LIB_DIRS:-$(cuda_lib_dirs)}"
    fi
    # Absolute: the cells run in notebooks/ (08 reads its data there).
    out=$PWD/target/gpu-check/notebooks-$gpu
    rm -rf "$out"
    mkdir -p "$out"
    local started=$SECONDS status=0
    PLACELAB_NOTEBOOK_RUNNER=run-notebook PLACELAB_BIN=target/release/placelab \
        PLACELAB_NOTEBOOK_OUT="$out" PLACELAB_HISTORY="$out/history.jsonl" \
        "$python" -m pytest -q -p no:cacheprovider --durations=0 tests/jupyter/test_notebooks.py \
        -k "test_0" 2>&1 | tee "$out/pytest.log" || status=1
    if [ -z "$emulated" ]; then
        python3 notebooks/keep-executed.py "$out" "notebooks/executed-$gpu" || status=1
    fi
    echo "gpu-check notebooks on $gpu: $([ "$status" = 0 ] && echo passed || echo FAILED) in $((SECONDS - started)) s (executed copies: $([ -n "$emulated" ] && echo "$out" || echo "notebooks/executed-$gpu"))"
    return "$status"
}

case "${1:-}" in
    build) shift; build "$@" ;;
    run) shift; run "$@" ;;
    notebooks) shift; notebooks "$@" ;;
    *) echo "usage: benches/gpu-check.sh build [--cuda-12] | run [OUT] | notebooks [--emulated]" >&2; exit 2 ;;
esac
