"""engine/tests/cuda_gpu_memory.rs's allocation sequence through PyTorch: the numbers placelab must match."""
import json
import sys

import torch

dev = torch.device("cuda:0")
steps = []


def snap(step):
    steps.append({"step": step, "allocated": torch.cuda.memory_allocated(0),
                  "reserved": torch.cuda.memory_reserved(0),
                  "max_allocated": torch.cuda.max_memory_allocated(0)})


a = torch.zeros(1, device=dev); snap("zeros(1)")
x = torch.randn(1000, 1000, device=dev); snap("x = randn(1000, 1000)")
y = torch.randn(1000, 1000, device=dev); snap("y = randn(1000, 1000)")
del x; torch.cuda.empty_cache(); snap("del x; empty_cache()")
torch.cuda.reset_peak_memory_stats(0); snap("reset_peak_memory_stats()")
del y; torch.cuda.empty_cache(); snap("del y; empty_cache()")
big = torch.zeros(3 << 28, device=dev); snap("zeros(3 GiB / 4)")
del big; torch.cuda.empty_cache(); snap("del big; empty_cache()")
mib = torch.zeros(1 << 18, device=dev); snap("zeros(1 MiB / 4)")
over = torch.zeros((1 << 18) + 1, device=dev); snap("zeros(1 MiB / 4 + 1)")
m = torch.randn(64, 64, device=dev); p = m @ m; snap("first matmul (cuBLAS workspace)")
del a, mib, over, m, p; torch.cuda.empty_cache(); snap("del all; empty_cache()")
side = torch.cuda.Stream()
with torch.cuda.stream(side):
    q = torch.zeros(1000, 1000, device=dev)
snap("on a side stream: q = zeros(1000, 1000)")
r = torch.zeros(1000, 1000, device=dev); snap("r = zeros(1000, 1000)")
r.record_stream(side); del r; snap("r.record_stream(side); del r")
del q; torch.cuda.empty_cache(); snap("del q; empty_cache()")
json.dump(steps, open(sys.argv[1], "w"), indent=2)
