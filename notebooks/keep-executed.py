"""Keeps executed notebooks: copies each SRC/*.ipynb into DEST (emptied first) as the executed
copies are kept, with no cell timestamps (they would change every cell on every run) and this
checkout's path left out of what the cells showed (a plot's text says where it was written).

    python3 notebooks/keep-executed.py SRC DEST

Used by notebooks/refresh-executed.sh (notebooks/executed/, simulated GPUs) and
benches/gpu-check.sh notebooks (notebooks/executed-GPU/, a real one)."""

import json
import sys
from pathlib import Path

src, dest = Path(sys.argv[1]), Path(sys.argv[2])
here = Path(__file__).resolve().parent
root = str(here.parent) + "/"
dest.mkdir(parents=True, exist_ok=True)
for old in dest.glob("*.ipynb"):
    old.unlink()
# The tutorials' runs only (SRC may hold other runs, such as the run-notebook test's).
for ran in (src / tutorial.name for tutorial in sorted(here.glob("[0-9][0-9]-*.ipynb"))):
    if not ran.exists():
        sys.exit(f"{ran} is missing: every tutorial must have run")
    nb = json.loads(ran.read_text(encoding="utf-8"))
    for cell in nb["cells"]:
        cell.get("metadata", {}).pop("execution", None)
    text = json.dumps(nb, indent=1, ensure_ascii=False) + "\n"
    (dest / ran.name).write_text(text.replace(root, ""), encoding="utf-8")
    print(dest / ran.name)
