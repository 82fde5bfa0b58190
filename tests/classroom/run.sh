#!/usr/bin/env bash
# The classroom load test (load_test.py), with everything it needs made under target/classroom:
#   venv/       JupyterHub, JupyterLab and the idle culler from PyPI, pinned in requirements.txt
#   node/       configurable-http-proxy from npm, pinned in package.json/package-lock.json
#   engine/     the engine, prebuilt and shared as an admin would (`placelab prebuild --shared`)
# and the placelab kernelspec installed into the venv. Parts already made are kept (stamps).
#
#   tests/classroom/run.sh [--learners N]
#
# The figures go to target/classroom/report.json; then check_deploy.py checks the Kubernetes
# files (kernelspec/classroom) against them.
# PLACELAB_BIN names the placelab binary (default: target/release/placelab, built if missing).
set -euo pipefail

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd -P)"
repo="$(cd "$here/../.." && pwd -P)"
out="$repo/target/classroom"
say() { echo "classroom: $*" >&2; }
# shellcheck source=../support/pinned.sh
source "$here/../support/pinned.sh"
mkdir -p "$out"

placelab="${PLACELAB_BIN:-$repo/target/release/placelab}"
if [ -z "${PLACELAB_BIN:-}" ]; then
    say "building placelab (release)"
    (cd "$repo" && cargo build --release --quiet)
fi

pinned_venv "$out/venv" "$here/requirements.txt"
pinned_npm "$out/node" "$here"

# The admin's steps (README, "Teaching a class"). The prebuild takes minutes the first time, and
# seconds when the engine is already up to date.
export CARGO_HOME="${CARGO_HOME:-$HOME/.cargo}" RUSTUP_HOME="${RUSTUP_HOME:-$HOME/.rustup}"
# The shared engine is read-only for everyone, its owner too: made writable again on the way
# out, so that `cargo clean` can remove target/ (the next prebuild marks it shared again).
trap 'chmod -R u+w "$out/engine" 2>/dev/null || true' EXIT
"$placelab" prebuild --shared "$out/engine"
"$placelab" install-kernel --prefix "$out/venv" --env "PLACELAB_ENGINE=$out/engine" \
    --env PLACELAB_SIMULATE_CUDA=1 --env PLACELAB_ANALYZER_QUIET=10 >/dev/null

run="$out/run"
if [ -d "$run" ]; then chmod -R u+w "$run"; rm -rf "$run"; fi
mkdir -p "$run"
export PATH="$out/venv/bin:$PATH" PLACELAB_ENGINE="$out/engine" PLACELAB_SIMULATE_CUDA=1
export PLACELAB_ANALYZER_QUIET=10
export PLACELAB_CHP="$out/node/node_modules/.bin/configurable-http-proxy"
"$out/venv/bin/python" "$here/load_test.py" --workdir "$run" --report "$out/report.json" "$@"
"$out/venv/bin/python" "$here/check_deploy.py" --report "$out/report.json"
