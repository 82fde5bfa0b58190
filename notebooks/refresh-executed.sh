#!/usr/bin/env bash
# Refreshes notebooks/executed/: the nine tutorials, each run top to bottom through the kernel
# by the notebook tests (which check what each teaches), kept with their outputs so that they
# can be read on GitHub or in any viewer without running anything.
#
#   notebooks/refresh-executed.sh
#
# Run it after changing a notebook or what it shows: the notebook tests fail while an executed
# copy's cells differ from its notebook's, or its outputs from what the notebook shows now
# (numbers, times and paths masked). The copies are what ran on this machine: simulated GPUs
# where it has none (each notebook's first cell decides which), its real GPU where it has one.
# Execution times and this checkout's path are left out, so a refresh changes only what the
# cells showed.
set -euo pipefail
cd "$(dirname "$0")/.."

rm -rf target/notebooks
PLACELAB_REFRESHING_EXECUTED=1 cargo test --test jupyter tutorial_notebooks_run_and_teach_their_facts -- --exact

python3 - "$PWD" <<'EOF'
import json, sys
from pathlib import Path

root = sys.argv[1]
out = Path("notebooks/executed")
out.mkdir(exist_ok=True)
for old in out.glob("*.ipynb"):
    old.unlink()
for ran in sorted(Path("target/notebooks").glob("*.ipynb")):
    nb = json.loads(ran.read_text(encoding="utf-8"))
    for cell in nb["cells"]:
        # nbclient's timestamps: they would change every cell on every refresh.
        cell.get("metadata", {}).pop("execution", None)
    text = json.dumps(nb, indent=1, ensure_ascii=False) + "\n"
    # A plot's text says where it was written: inside this checkout, said relative to it.
    text = text.replace(root + "/", "")
    (out / ran.name).write_text(text, encoding="utf-8")
    print(f"notebooks/executed/{ran.name}")
EOF
