#!/usr/bin/env python3
"""PyTorch (CPU, f32) peer of placelab's benchmark: the same workloads, timed the same way.

Usage: python benches/torch_peer.py [--threads 2] [--quick] [--only NAME,...]
e.g.   /root/.cache/placelab/torch-venv/bin/python benches/torch_peer.py --threads 2

Prints one JSON object per line:
  {"name": ..., "median_ms": ..., "min_ms": ..., "reps": N, "peer": "pytorch <version>"}
Each workload runs once as a warm-up, then at least 10 timed repetitions and at least ~1 s
in all (--quick: 3 repetitions). Inputs are created outside the timed region.
"""
import argparse
import json
import math
import statistics
import time

import torch

MIN_REPS = 10
MIN_TOTAL_NS = 1_000_000_000
MAX_REPS = 10_000


def workloads():
    """(name, setup) pairs; setup() builds the inputs and returns the zero-argument timed call."""

    def matmul(n):
        def setup():
            a, b = torch.randn(n, n), torch.randn(n, n)
            return lambda: a @ b
        return setup

    def ten_m(fn):
        def setup():
            a = torch.randn(10_000_000)
            return lambda: fn(a)
        return setup

    def add_10m():
        a, b = torch.randn(10_000_000), torch.randn(10_000_000)
        return lambda: a + b

    def add_10m_out():
        a, b, c = torch.randn(10_000_000), torch.randn(10_000_000), torch.empty(10_000_000)
        return lambda: torch.add(a, b, out=c)

    def softmax():
        a = torch.randn(1000, 1000)
        return lambda: torch.softmax(a, dim=1)

    def randn():
        return lambda: torch.randn(1000, 1000)

    def clone_400mb():
        a = torch.randn(100_000_000)
        return lambda: a.clone()

    def transpose_contig():
        a = torch.randn(2048, 2048)
        return lambda: a.t().contiguous()

    def mlp_step(batch, profiled=False):
        """One training step of the 784-128-10 MLP: forward, cross-entropy, backward, SGD;
        `profiled`: under torch.profiler, recording CPU ops and memory (what recording costs)."""
        def setup():
            model = torch.nn.Sequential(torch.nn.Linear(784, 128), torch.nn.ReLU(), torch.nn.Linear(128, 10))
            opt = torch.optim.SGD(model.parameters(), lr=0.01)
            loss_fn = torch.nn.CrossEntropyLoss()
            x, y = torch.randn(batch, 784), torch.randint(0, 10, (batch,))

            def step():
                opt.zero_grad()
                loss = loss_fn(model(x), y)
                loss.backward()
                opt.step()
                return loss

            def profiled_step():
                activities = [torch.profiler.ProfilerActivity.CPU]
                with torch.profiler.profile(activities=activities, profile_memory=True) as p:
                    step()
                return p.key_averages()
            return profiled_step if profiled else step
        return setup

    return [
        ("matmul_1000", matmul(1000)),
        ("matmul_2048", matmul(2048)),
        ("add_10m", add_10m),
        ("add_10m_out", add_10m_out),
        ("relu_10m", ten_m(torch.relu)),
        ("exp_10m", ten_m(torch.exp)),
        ("sum_10m", ten_m(lambda a: a.sum())),
        ("softmax_1000x1000", softmax),
        ("randn_1000x1000", randn),
        ("clone_400mb", clone_400mb),
        ("transpose_contig_2048", transpose_contig),
        ("to_f16_10m", ten_m(lambda a: a.to(torch.float16))),
        ("mlp_step_64", mlp_step(64)),
        ("mlp_step_64_profiled", mlp_step(64, profiled=True)),
        ("mlp_step_1024", mlp_step(1024)),
    ]


def time_once(fn):
    t0 = time.perf_counter_ns()
    out = fn()
    t1 = time.perf_counter_ns()
    del out  # free the result outside the timed region
    return t1 - t0


def bench(fn, quick):
    warm = time_once(fn)
    if quick:
        reps = 3
    else:
        reps = min(MAX_REPS, max(MIN_REPS, math.ceil(MIN_TOTAL_NS / max(warm, 1))))
    samples = [time_once(fn) for _ in range(reps)]
    return statistics.median(samples) / 1e6, min(samples) / 1e6, reps


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--quick", action="store_true", help="3 repetitions per workload")
    p.add_argument("--only", default="", help="comma-separated workload names")
    args = p.parse_args()
    torch.set_num_threads(args.threads)
    torch.set_num_interop_threads(args.threads)
    only = {s for s in args.only.split(",") if s}
    peer = f"pytorch {torch.__version__}"
    for name, setup in workloads():
        if only and name not in only:
            continue
        fn = setup()
        median_ms, min_ms, reps = bench(fn, args.quick)
        del fn
        print(json.dumps({"name": name, "median_ms": round(median_ms, 4), "min_ms": round(min_ms, 4),
                          "reps": reps, "peer": peer}), flush=True)


if __name__ == "__main__":
    main()
