#!/usr/bin/env python3
"""Measures, with PyTorch on this CPU, the PyTorch figures the notebooks state beside placelab's.

    /root/.cache/placelab/torch-venv/bin/python benches/torch_notebook_claims.py

- 05 (the training step's memory): the peak a step of the notebook's network reaches above the
  memory held before it (`Linear(1024, 4096)`, ReLU, `Linear(4096, 10)`, a batch of 512, cross
  entropy, SGD), read from PyTorch's profiler (`profile_memory=True`): its allocations and frees
  in the order they happened, summed.
- 03 (downloads): why PyTorch's pageable `.cpu()` of 256 MiB runs at a tenth of placelab's on
  the GPU runs: its output is fresh memory at every call, whose pages the OS maps and zeroes as
  the copy first touches them. On the CPU, a copy of 256 MiB into a tensor made for it (as
  `.cpu()` makes its output) against one into a tensor made once.
- 08 (the capstone): the test accuracy of the notebook's 64-64-10 network trained with Adam
  (lr 1e-2) for 20 epochs in shuffled batches of 64, on the same digits and split sizes (1,437 to
  train, 360 to test), over ten seeds of PyTorch's own initialization, shuffling and split.

Prints one JSON line per figure.
"""

import json
import pathlib
import statistics
import time

import torch
from torch import nn

ROOT = pathlib.Path(__file__).resolve().parent.parent
MIB = 1 << 20


def step_peak_above_start() -> float:
    """05: the step's peak above the memory held before it, in MiB, from the profiler's events."""
    torch.manual_seed(0)
    net = nn.Sequential(nn.Linear(1024, 4096), nn.ReLU(), nn.Linear(4096, 10))
    batch = torch.randn(512, 1024)
    labels = torch.randint(0, 10, (512,))
    sgd = torch.optim.SGD(net.parameters(), lr=0.01)
    # One step first, as the notebook's forward pass before it: nothing lazy is counted.
    nn.functional.cross_entropy(net(batch), labels).backward()
    sgd.step()
    sgd.zero_grad(set_to_none=True)
    activities = [torch.profiler.ProfilerActivity.CPU]
    with torch.profiler.profile(activities=activities, profile_memory=True) as prof:
        loss = nn.functional.cross_entropy(net(batch), labels)
        loss.backward()
        sgd.step()
    # Every allocation and free the profiler saw (a free's size is negative), in time order: the
    # raw records, since an op's summary event counts its frees at its start.
    changes = []

    def walk(node) -> None:
        if type(node.extra_fields).__name__ == "_ExtraFields_Allocation":
            changes.append((node.start_time_ns, node.extra_fields.alloc_size))
        for child in node.children:
            walk(child)

    for root in prof.profiler.kineto_results.experimental_event_tree():
        walk(root)
    held, peak = 0, 0
    for _, nbytes in sorted(changes):
        held += nbytes
        peak = max(peak, held)
    return peak / MIB


def digits() -> tuple[torch.Tensor, torch.Tensor]:
    raw = (ROOT / "notebooks/data/digits.bin").read_bytes()
    rows = torch.frombuffer(bytearray(raw), dtype=torch.uint8).reshape(-1, 65)
    return rows[:, :64].float() / 16.0, rows[:, 64].long()


def digits_accuracy(seed: int, images: torch.Tensor, labels: torch.Tensor) -> float:
    """08: test accuracy after 20 epochs, PyTorch's init, split and shuffling from `seed`."""
    torch.manual_seed(seed)
    order = torch.randperm(len(images))
    train, test = order[:1437], order[1437:]
    model = nn.Sequential(nn.Linear(64, 64), nn.ReLU(), nn.Linear(64, 10))
    opt = torch.optim.Adam(model.parameters(), lr=1e-2)
    data = torch.utils.data.TensorDataset(images[train], labels[train])
    loader = torch.utils.data.DataLoader(data, batch_size=64, shuffle=True)
    for _ in range(20):
        for x, y in loader:
            loss = nn.functional.cross_entropy(model(x), y)
            opt.zero_grad()
            loss.backward()
            opt.step()
    with torch.no_grad():
        predicted = model(images[test]).argmax(1)
    return (predicted == labels[test]).float().mean().item()


def fresh_and_reused_copies(mib: int = 256, repeats: int = 7) -> dict:
    """03: the median GB/s of a copy of `mib` MiB into a tensor made for it (as `.cpu()` makes
    its output) and into one made once."""
    n = mib * MIB // 4
    source = torch.ones(n)
    reused = torch.empty(n)
    reused.copy_(source)

    def median_gbps(copy) -> float:
        times = []
        for _ in range(repeats):
            started = time.perf_counter()
            copy()
            times.append(time.perf_counter() - started)
        return round(mib * MIB / statistics.median(times) / 1e9, 2)

    return {
        "fresh_gbps": median_gbps(lambda: torch.empty(n).copy_(source)),
        "reused_gbps": median_gbps(lambda: reused.copy_(source)),
    }


def main() -> None:
    torch.set_num_threads(2)
    common = {"torch": torch.__version__, "threads": torch.get_num_threads()}
    print(json.dumps({
        "notebook": "03",
        "figure": "GB/s of a 256 MiB copy into fresh and into reused host memory",
        **fresh_and_reused_copies(),
        **common,
    }))
    peak = step_peak_above_start()
    print(json.dumps({"notebook": "05", "figure": "step peak above the start (MiB)", "value": round(peak, 2), **common}))
    images, labels = digits()
    accuracies = [digits_accuracy(seed, images, labels) for seed in range(10)]
    print(json.dumps({
        "notebook": "08",
        "figure": "test accuracy after 20 epochs, 10 seeds",
        "median": round(statistics.median(accuracies), 4),
        "min": round(min(accuracies), 4),
        "max": round(max(accuracies), 4),
        **common,
    }))


if __name__ == "__main__":
    main()
