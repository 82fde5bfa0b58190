"""The workloads of benches/gpu.rs through PyTorch on the same GPU, printed the same way."""
import json
import statistics
import time

import torch

dev = torch.device("cuda:0")


def reps(nbytes):
    return 5 if nbytes >= 256 << 20 else 15 if nbytes >= 16 << 20 else 50


def timed_copy(fn):
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    t0 = time.perf_counter()
    start.record()
    out = fn()
    end.record()
    end.synchronize()
    wall = (time.perf_counter() - t0) * 1e3
    return out, start.elapsed_time(end), wall


def transfers():
    for shift in [12, 16, 20, 24, 28, 30]:
        nbytes = 1 << shift
        x = torch.zeros(nbytes // 4)
        pinned = x.pin_memory()
        on_gpu = x.to(dev)
        pinned_out = torch.empty(nbytes // 4, pin_memory=True)
        cases = [
            ("h2d_pageable", lambda: x.to(dev)),
            ("h2d_pinned", lambda: pinned.to(dev)),
            ("d2h_pageable", lambda: on_gpu.cpu()),
            ("d2h_pinned", lambda: pinned_out.copy_(on_gpu)),
        ]
        for kind, fn in cases:
            timed_copy(fn)
            ev, wall = [], []
            for _ in range(reps(nbytes)):
                _, e, w = timed_copy(fn)
                ev.append(e)
                wall.append(w)
            e, w = statistics.median(ev), statistics.median(wall)
            print(json.dumps({"bench": "transfer", "kind": kind, "bytes": nbytes, "event_ms": e,
                              "wall_ms": w, "event_gbps": nbytes / e / 1e6, "wall_gbps": nbytes / w / 1e6}))


def non_blocking():
    for shift in [20, 26, 28]:
        nbytes = 1 << shift
        pinned = torch.zeros(nbytes // 4).pin_memory()
        call, ev = [], []
        for i in range(reps(nbytes) + 1):
            start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            t0 = time.perf_counter()
            start.record()
            pinned.to(dev, non_blocking=True)
            end.record()
            c = (time.perf_counter() - t0) * 1e3
            torch.cuda.synchronize()
            if i > 0:
                call.append(c)
                ev.append(start.elapsed_time(end))
        print(json.dumps({"bench": "non_blocking", "kind": "h2d_pinned", "bytes": nbytes,
                          "call_ms": statistics.median(call), "event_ms": statistics.median(ev)}))


def peer():
    """cuda:0 → cuda:1 directly (PyTorch enables peer access where it can) against the same
    bytes staged through pinned host memory by hand."""
    other = torch.device("cuda:1")
    for shift in [20, 24, 28, 30]:
        nbytes = 1 << shift
        x = torch.zeros(nbytes // 4, device=dev)
        host = torch.empty(nbytes // 4, pin_memory=True)

        def direct():
            t0 = time.perf_counter()
            x.to(other)
            torch.cuda.synchronize(other)
            return (time.perf_counter() - t0) * 1e3

        def staged():
            t0 = time.perf_counter()
            host.copy_(x)
            host.to(other)
            torch.cuda.synchronize(other)
            return (time.perf_counter() - t0) * 1e3

        direct(), staged()
        d = statistics.median(direct() for _ in range(reps(nbytes)))
        s = statistics.median(staged() for _ in range(reps(nbytes)))
        print(json.dumps({"bench": "peer", "kind": "d2d", "bytes": nbytes,
                          "route": "can_device_access_peer=%s" % torch.cuda.can_device_access_peer(0, 1),
                          "direct_wall_gbps": nbytes / d / 1e6, "staged_wall_gbps": nbytes / s / 1e6}))


def median_ms(fn, warmups, reps):
    """The median of `reps` runs of `fn`, each until the GPU is done, after `warmups` runs."""
    for _ in range(warmups):
        fn()
    torch.cuda.synchronize()
    ms = []
    for _ in range(reps):
        t0 = time.perf_counter()
        fn()
        torch.cuda.synchronize()
        ms.append((time.perf_counter() - t0) * 1e3)
    return statistics.median(ms)


def timed(name, flops, fn):
    m = median_ms(fn, 3, 20)
    print(json.dumps({"bench": "op", "name": name, "ms": m, "tflops": flops / m / 1e9}))


def ops():
    a, b = torch.randn(10_000_000, device=dev), torch.randn(10_000_000, device=dev)
    timed("add 10M f32", 0, lambda: a + b)
    timed("exp 10M f32", 0, lambda: a.exp())
    timed("sum 10M f32", 0, lambda: a.sum())
    timed("softmax 1x10M f32", 0, lambda: a.softmax(0))
    timed("randn 10M f32", 0, lambda: torch.randn(10_000_000, device=dev))
    s = torch.randn(4096, 4096, device=dev)
    timed("softmax 4096x4096 f32", 0, lambda: s.softmax(1))
    rows = torch.tensor([(i * 7919) % 4096 for i in range(1000)], device=dev)
    timed("index_select 1000 of 4096 rows f32", 0, lambda: s.index_select(0, rows))
    timed("transpose contiguous 4096x4096 f32", 0, lambda: s.t().contiguous())
    torch.backends.cuda.matmul.allow_tf32 = False
    for dtype, name in [(torch.float32, "f32"), (torch.bfloat16, "bf16"), (torch.float16, "f16")]:
        m = torch.randn(4096, 4096, device=dev).to(dtype)
        timed(f"matmul 4096^3 {name}", 2 * 4096.0 ** 3, lambda: m @ m)
    for dtype, name in [(torch.bfloat16, "bf16"), (torch.float32, "f32")]:
        m = torch.randn(4096, 4096, device=dev).to(dtype)
        op(f"matmul 4096^3 {name}, 20 queued", per_call_ms(20, lambda: m @ m))
    torch.backends.cuda.matmul.allow_tf32 = True
    m = torch.randn(4096, 4096, device=dev)
    timed("matmul 4096^3 f32 tf32", 2 * 4096.0 ** 3, lambda: m @ m)
    torch.backends.cuda.matmul.allow_tf32 = False


def per_call_ms(n, fn):
    """fn's wall time per call as benches/gpu.rs measures it: n calls queued back to back and
    synchronised once, the median of five such runs, after three warm-up calls."""
    for _ in range(3):
        fn()
    torch.cuda.synchronize()
    runs = []
    for _ in range(5):
        t0 = time.perf_counter()
        for _ in range(n):
            fn()
        torch.cuda.synchronize()
        runs.append((time.perf_counter() - t0) * 1e3 / n)
    return statistics.median(runs)


def op(name, ms):
    print(json.dumps({"bench": "op", "name": name, "ms": ms}))


def step_ms(layers, batch, autocast):
    torch.manual_seed(0)
    mods = []
    for i, (a, b) in enumerate(zip(layers, layers[1:])):
        if i > 0:
            mods.append(torch.nn.ReLU())
        mods.append(torch.nn.Linear(a, b))
    model = torch.nn.Sequential(*mods).to(dev)
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    x = torch.randn(batch, layers[0], device=dev)
    y = torch.randint(0, layers[-1], (batch,), device=dev)
    loss_fn = torch.nn.CrossEntropyLoss()

    def step():
        opt.zero_grad()
        with torch.autocast("cuda", dtype=torch.bfloat16, enabled=autocast):
            loss = loss_fn(model(x), y)
        loss.backward()
        opt.step()

    return per_call_ms(20, step)


def whole_steps():
    small, large = [784, 128, 10], [1024, 4096, 4096, 10]
    op("step 784-128-10 b64", step_ms(small, 64, False))
    op("step 784-128-10 b1024", step_ms(small, 1024, False))
    op("step 1024-4096-4096-10 b1024", step_ms(large, 1024, False))
    op("step 1024-4096-4096-10 b1024 bf16 autocast", step_ms(large, 1024, True))
    host = torch.zeros(16 << 20)
    op("pin_memory 64 MiB", per_call_ms(10, lambda: host.pin_memory()))
    on_gpu = torch.zeros(16 << 20, device=dev)
    op("cpu_pinned 64 MiB", per_call_ms(
        10, lambda: torch.empty(16 << 20, pin_memory=True).copy_(on_gpu)))
    data = torch.utils.data.TensorDataset(torch.randn(64 * 512, 784),
                                          torch.zeros(64 * 512, dtype=torch.int64))
    loader = torch.utils.data.DataLoader(data, batch_size=512, pin_memory=True)
    w = torch.randn(784, 128, device=dev)

    def epoch():
        for x, _ in loader:
            x.to(dev, non_blocking=True) @ w

    op("loader 64 pinned batches 512x784 + matmul", per_call_ms(1, epoch))


def sweeps():
    one = torch.ones(1, device=dev)
    op("queued add [1]", per_call_ms(10_000, lambda: one + one))
    op("add [1] + sum + item", per_call_ms(200, lambda: (one + one).sum().item()))
    for shift in [10, 14, 18, 22, 26]:
        a = torch.randn(1 << shift, device=dev)
        op(f"add 2^{shift} f32 queued", per_call_ms(50, lambda: a + a))
        op(f"sum 2^{shift} f32 queued", per_call_ms(50, lambda: a.sum()))


def overlap():
    """benches/gpu_overlap.rs in PyTorch: a 256 MiB pinned upload and a 4096^3 f32 GEMM, on one
    stream, then the upload on a side stream beside the GEMM."""
    host = torch.zeros((256 << 20) // 4).pin_memory()
    a = torch.randn(4096, 4096, device=dev)
    side = torch.cuda.Stream()

    def timed(run):
        return median_ms(run, 1, 7)

    def two_streams():
        with torch.cuda.stream(side):
            up = host.to(dev, non_blocking=True)
        a @ a

    rows = [
        ("copy_only", timed(lambda: host.to(dev, non_blocking=True))),
        ("gemm_only", timed(lambda: a @ a)),
        ("serial", timed(lambda: (host.to(dev, non_blocking=True), a @ a))),
        ("two_streams", timed(two_streams)),
    ]
    for kind, ms in rows:
        print(json.dumps({"bench": "overlap", "kind": kind, "bytes": 256 << 20, "gemm_n": 4096, "ms": ms}))


def lesson():
    """benches/gpu_overlap.rs's `lesson` in PyTorch: notebook 9's four 16 MiB pinned batches,
    each multiplied by a 2048^2 weight, on one stream and then prefetched on a side stream."""
    w = torch.randn(2048, 2048, device=dev)
    batches = [torch.randn(2048, 2048).pin_memory() for _ in range(4)]
    side = torch.cuda.Stream()

    def one_stream():
        for b in batches:
            b.to(dev, non_blocking=True) @ w

    def prefetched():
        with torch.cuda.stream(side):
            x = batches[0].to(dev, non_blocking=True)
        for i in range(len(batches)):
            torch.cuda.current_stream().wait_stream(side)
            x.record_stream(torch.cuda.current_stream())
            nxt = None
            if i + 1 < len(batches):
                with torch.cuda.stream(side):
                    nxt = batches[i + 1].to(dev, non_blocking=True)
            x @ w
            x = nxt

    for kind, run in (("one_stream", one_stream), ("prefetched", prefetched)):
        print(json.dumps({"bench": "lesson", "kind": kind, "bytes": 16 << 20, "ms": median_ms(run, 1, 7)}))


if __name__ == "__main__":
    transfers()
    non_blocking()
    if torch.cuda.device_count() >= 2:
        peer()
    ops()
    whole_steps()
    sweeps()
    overlap()
    lesson()
