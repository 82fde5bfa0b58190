"""The Jupyter kernel's latencies beside ipykernel's, measured the same way in one run.

    python benches/kernel_peer.py KERNEL_NAME [--peer python3] [--runs N]

For each kernel: process start to the first kernel_info_reply (a raw client polling every
5 ms), KernelManager start + wait_for_ready, the round trip of a cell that compiles nothing
(`:mem` for placelab, `None` for ipykernel), a trivial cell (`1 + 1`), and an interrupt to its
reply while a cell runs. Medians; the kernels must be installed (placelab: install-kernel).
Run it with benches/kernel-compare.sh, which also runs plain evcxr (cargo bench --bench session).
"""

from __future__ import annotations

import argparse
import statistics
import time

from jupyter_client.manager import KernelManager


def median_ms(samples: list[float]) -> str:
    return f"{statistics.median(samples) * 1e3:.2f} ms"


def started(name: str):
    """A kernel and a client with its channels open (timed from before the process starts)."""
    km = KernelManager(kernel_name=name)
    km.start_kernel()
    kc = km.client()
    kc.start_channels()
    return km, kc


def time_starts(name: str, runs: int, until_ready) -> list[float]:
    """Process start until `until_ready(kc)` returns, `runs` times, each kernel shut down."""
    out = []
    for _ in range(runs):
        t = time.perf_counter()
        km, kc = started(name)
        until_ready(kc)
        out.append(time.perf_counter() - t)
        kc.stop_channels()
        km.shutdown_kernel(now=True)
    return out


def first_kernel_info(kc) -> None:
    """Asks for kernel_info every 5 ms until one of the requests is answered (the sockets are
    up); a reply to any earlier request counts."""
    sent = set()
    while True:
        sent.add(kc.kernel_info())
        try:
            reply = kc.get_shell_msg(timeout=0.005)
            if reply["parent_header"].get("msg_id") in sent:
                return
        except Exception:
            continue


def round_trips(kc, code: str, n: int) -> list[float]:
    out = []
    for _ in range(n):
        t = time.perf_counter()
        reply = kc.execute_interactive(code, timeout=600, output_hook=lambda m: None)
        out.append(time.perf_counter() - t)
        assert reply["content"]["status"] == "ok", reply["content"]
    return out


def interrupt_latency(km, kc, code: str, runs: int) -> list[float]:
    out = []
    for _ in range(runs):
        msg_id = kc.execute(code)
        time.sleep(1.5)
        t = time.perf_counter()
        km.interrupt_kernel()
        while True:
            reply = kc.get_shell_msg(timeout=30)
            if reply["parent_header"].get("msg_id") == msg_id:
                break
        out.append(time.perf_counter() - t)
        # Let the kernel go idle before the next cell.
        kc.execute_interactive("1", timeout=120, output_hook=lambda m: None)
    return out


def measure(name: str, quick_cell: str, interrupt_cell: str, runs: int) -> dict[str, str]:
    print(f"measuring {name}…", flush=True)
    row = {
        "start → first kernel_info_reply": median_ms(time_starts(name, runs, first_kernel_info)),
        "start + wait_for_ready": median_ms(
            time_starts(name, runs, lambda kc: kc.wait_for_ready(timeout=120))
        ),
    }
    km, kc = started(name)
    kc.wait_for_ready(timeout=120)
    kc.execute_interactive("1 + 1", timeout=900, output_hook=lambda m: None)  # warm up
    row[f"round trip `{quick_cell}` (median of 200)"] = median_ms(round_trips(kc, quick_cell, 200))
    row["trivial cell `1 + 1` (median of 15)"] = median_ms(round_trips(kc, "1 + 1", 15))
    row["interrupt → execute_reply (median of 5)"] = median_ms(
        interrupt_latency(km, kc, interrupt_cell, 5)
    )
    kc.stop_channels()
    km.shutdown_kernel(now=True)
    return row


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("kernel")
    p.add_argument("--peer", default="python3")
    p.add_argument("--runs", type=int, default=5)
    a = p.parse_args()
    ours = measure(
        a.kernel,
        ":mem",
        "let mut w = Tensor::ones([1000], &Device::Cpu)?; loop { w = (&w * 1.0)?; }",
        a.runs,
    )
    peer = measure(a.peer, "None", "import time\nwhile True: time.sleep(0.01)", a.runs)
    print(f"| measure | placelab | ipykernel ({a.peer}) |")
    print("|---|---|---|")
    for key in ours:
        peer_key = key.replace("`:mem`", "`None`")
        print(f"| {key} | {ours[key]} | {peer.get(peer_key, '—')} |")


if __name__ == "__main__":
    main()
