#!/usr/bin/env python3
"""Keeps a `gpu-check.sh` run as data the engine ships (`engine/src/cost/measured/`).

    benches/keep-run.py benches/gpu-runs/h200-2026-11-28-f --spec h200 \
        > engine/src/cost/measured/h200-2026-11-28-f.jsonl

then add the file to `runs()` in `engine/src/cost/measured.rs`. The first line names the run (the
folder's name), the GPU (the first line of the run's `all.log`, as nvidia-smi names it), the
date, the commit measured and PyTorch's version (from the run's `run.json`, which
`gpu-check.sh` writes, unless `--commit` and `--torch` say them); the rest are placelab's lines from
`bench_placelab.jsonl`, without the model's predictions of the day (the model is refitted on
them) and with PyTorch's time for the same work in the same run from `bench_torch.jsonl`
(`torch_event_ms` for a transfer, `torch_ms` for an op, to 10 ns), where
PyTorch measured it.
"""

import argparse
import json
import pathlib
import re
import sys


def key(line: dict) -> tuple:
    """What a line measured: the same key in both engines' files."""
    return (line["bench"], line.get("kind") or line.get("name"), line.get("bytes"))


def to_10ns(ms: float) -> float:
    """PyTorch's time to five decimals of a millisecond (10 ns), as placelab's lines are written."""
    return round(ms, 5)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("run", type=pathlib.Path, help="a folder of benches/gpu-runs/")
    parser.add_argument("--spec", required=True, help="the GPU's key in engine/src/cost/gpus.rs (h100, h200)")
    parser.add_argument("--commit", help="the commit of placelab that was measured (default: the run's run.json)")
    parser.add_argument("--torch", help="PyTorch's version in the run (default: the run's run.json)")
    args = parser.parse_args()
    described = args.run / "run.json"
    run = json.loads(described.read_text()) if described.exists() else {}
    commit = args.commit or run.get("placelab_commit")
    torch_version = args.torch or run.get("torch")
    if not commit or not torch_version:
        sys.exit(f"error: {described} does not say the commit and PyTorch's version measured: pass --commit and --torch")

    name = args.run.resolve().name
    date = re.search(r"\d{4}-\d{2}-\d{2}", name)
    if date is None:
        sys.exit(f"error: {name} does not name a date (YYYY-MM-DD), as benches/gpu-runs/ folders do")
    gpu = (args.run / "all.log").read_text().splitlines()[0].split(",")[0].strip()
    if not gpu.startswith("NVIDIA"):
        sys.exit(f"error: the first line of {args.run}/all.log should name the GPU (nvidia-smi's line), not {gpu!r}")
    torch = {}
    for line in (args.run / "bench_torch.jsonl").read_text().splitlines():
        if line.strip():
            row = json.loads(line)
            torch[key(row)] = row
    head = {
        "run": name,
        "gpu": gpu,
        "spec": args.spec,
        "date": date.group(0),
        "commit": commit,
        "torch": torch_version,
        "source": f"benches/gpu-runs/{name}/bench_placelab.jsonl and bench_torch.jsonl",
    }
    out = [head]
    for line in (args.run / "bench_placelab.jsonl").read_text().splitlines():
        if not line.strip():
            continue
        row = json.loads(line)
        row.pop("predicted_ms", None)
        peer = torch.get(key(row))
        if peer is not None and row["bench"] == "transfer":
            row["torch_event_ms"] = to_10ns(peer["event_ms"])
        elif peer is not None and row["bench"] == "op":
            row["torch_ms"] = to_10ns(peer["ms"])
        out.append(row)
    for row in out:
        print(json.dumps(row, separators=(",", ":")))
    return 0


if __name__ == "__main__":
    sys.exit(main())
