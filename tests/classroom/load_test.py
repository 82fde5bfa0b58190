"""A class logging in at once: N learners (default 8) go through a real JupyterHub
(kernelspec/classroom/jupyterhub_config.py, configurable-http-proxy in front) to the placelab
kernel, each running notebook 01's code cells, all at the same time. Then one learner's kernel is
killed, as the out-of-memory killer would, and must come back and say why.

Each learner, through the Hub's REST API and the proxy, as a browser would:
  log in (a user and a token), start their server, open a kernel over the websocket, run the
  notebook's cells in order (a cell tagged raises-exception must fail, any other must not).

Then each presses Tab once: their kernel starts rust-analyzer in a process of its own, which it
ends after a quiet spell (PLACELAB_ANALYZER_QUIET, which run.sh sets short).

Reported: time from login to the first cell's result (p50, p95, max), the Tab's time, memory per
learner (RSS of their server, and of their kernel with its cell process, with rust-analyzer's
process and after it ended) and for the whole machine, each learner's own disk, and every error.
Exits 1 on any error, or if a rust-analyzer process outlives its quiet spell.

    tests/classroom/run.sh [--learners N]     (installs JupyterHub, the proxy and the engine)
"""

import argparse
import asyncio
import json
import os
import secrets
import signal
import socket
import statistics
import subprocess
import sys
import time
import uuid
from pathlib import Path

from tornado.httpclient import AsyncHTTPClient, HTTPRequest
from tornado.websocket import websocket_connect

here = Path(__file__).resolve().parent
repo = here.parent.parent


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def rss_kib(pid):
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith("VmRSS:"):
                return int(line.split()[1])
    except OSError:
        pass
    return 0


def processes():
    """pid -> (ppid, cmdline, environ) of every process we may read."""
    found = {}
    for d in Path("/proc").iterdir():
        if not d.name.isdigit():
            continue
        try:
            stat = (d / "stat").read_text()
            ppid = int(stat.rsplit(")", 1)[1].split()[1])
            cmd = (d / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
            env = (d / "environ").read_bytes().split(b"\0")
        except OSError:
            continue
        found[int(d.name)] = (ppid, cmd, env)
    return found


def descendants(pid, procs):
    out, todo = [], [pid]
    while todo:
        p = todo.pop()
        out.append(p)
        todo += [c for c, (pp, _, _) in procs.items() if pp == p]
    return out


def learner_memory(name, procs):
    """RSS of a learner's server, and of their kernels with the cell processes, in KiB."""
    marker = f"JUPYTERHUB_USER={name}".encode()
    servers = [
        p for p, (_, cmd, env) in procs.items() if "jupyterhub-singleuser" in cmd and marker in env
    ]
    server = kernel = 0
    for s in servers:
        server += rss_kib(s)
        for p in descendants(s, procs)[1:]:
            kernel += rss_kib(p)
    return server, kernel


def analyzers(names, procs):
    """The learners' rust-analyzer processes (started with EVCXR_ANALYZER_ROOT by a kernel)."""
    markers = [f"JUPYTERHUB_USER={n}".encode() for n in names]
    return [
        p
        for p, (_, _, env) in procs.items()
        if any(v.startswith(b"EVCXR_ANALYZER_ROOT=") for v in env) and any(m in env for m in markers)
    ]


async def analyzers_ended(names, timeout):
    """Waits until no learner's rust-analyzer process is left; the pids still there if any."""
    deadline = time.monotonic() + timeout
    while (left := analyzers(names, processes())) and time.monotonic() < deadline:
        await asyncio.sleep(1)
    return left


def kernel_pid(kernel_id, procs):
    """The kernel's process: Jupyter names its connection file after the kernel's id."""
    for p, (_, cmd, _) in procs.items():
        if f"kernel-{kernel_id}.json" in cmd:
            return p
    return None


class Hub:
    def __init__(self, base, token):
        self.base, self.token = base, token
        self.http = AsyncHTTPClient(max_clients=256)

    async def call(self, method, path, body=None, token=None, ok=(200, 201, 202, 204)):
        req = HTTPRequest(
            self.base + path,
            method=method,
            headers={"Authorization": f"token {token or self.token}"},
            body=None if body is None and method == "GET" else json.dumps(body or {}),
            request_timeout=600,
        )
        resp = await self.http.fetch(req, raise_error=False)
        if resp.code not in ok:
            raise RuntimeError(f"{method} {path}: HTTP {resp.code} {resp.body[:300]!r}")
        return json.loads(resp.body) if resp.body else None


def message(msg_type, content, session):
    return {
        "header": {
            "msg_id": uuid.uuid4().hex,
            "msg_type": msg_type,
            "session": session,
            "username": "learner",
            "version": "5.3",
            "date": "",
        },
        "parent_header": {},
        "metadata": {},
        "content": content,
        "channel": "shell",
    }


class Kernel:
    """One kernel over the server's websocket, as JupyterLab talks to it."""

    def __init__(self, ws):
        self.ws, self.session = ws, uuid.uuid4().hex

    async def next_message(self, deadline):
        """The next message from the kernel; raises once the websocket closed or at `deadline`."""
        raw = await asyncio.wait_for(self.ws.read_message(), deadline - time.monotonic())
        if raw is None:
            raise RuntimeError("the kernel's websocket closed")
        return json.loads(raw)

    async def execute(self, code, timeout=600):
        """(reply status, every output's text) for one cell."""
        msg = message(
            "execute_request",
            {"code": code, "silent": False, "store_history": True, "allow_stdin": False},
            self.session,
        )
        await self.ws.write_message(json.dumps(msg))
        texts, status, idle = [], None, False
        deadline = time.monotonic() + timeout
        while status is None or not idle:
            m = await self.next_message(deadline)
            if m.get("parent_header", {}).get("msg_id") != msg["header"]["msg_id"]:
                continue
            kind, content = m["msg_type"], m["content"]
            if kind == "execute_reply":
                status = content["status"]
                if status == "error":
                    texts.append(f"{content.get('ename')}: {content.get('evalue')}")
            elif kind == "status" and content["execution_state"] == "idle":
                idle = True
            elif kind == "stream":
                texts.append(content["text"])
            elif kind in ("execute_result", "display_data"):
                texts.append(content["data"].get("text/plain", ""))
            elif kind == "error":
                texts.append("\n".join(content.get("traceback", [])))
        return status, "\n".join(texts)

    async def complete(self, code, timeout=300):
        """The completions at the end of `code`, as the text each would make (a Tab)."""
        msg = message("complete_request", {"code": code, "cursor_pos": len(code)}, self.session)
        await self.ws.write_message(json.dumps(msg))
        deadline = time.monotonic() + timeout
        while True:
            m = await self.next_message(deadline)
            if m["msg_type"] == "complete_reply" and m["parent_header"].get("msg_id") == msg["header"]["msg_id"]:
                c = m["content"]
                return {code[: c["cursor_start"]] + t + code[c["cursor_end"] :] for t in c["matches"]}

    async def wait_for_state(self, state, timeout):
        deadline = time.monotonic() + timeout
        while True:
            m = await self.next_message(deadline)
            if m["msg_type"] == "status" and m["content"]["execution_state"] == state:
                return


async def open_kernel(hub, name, token):
    kernel = await hub.call("POST", f"/user/{name}/api/kernels", {"name": "placelab"}, token)
    ws_url = hub.base.replace("http", "ws", 1) + f"/user/{name}/api/kernels/{kernel['id']}/channels"
    ws = await websocket_connect(
        HTTPRequest(ws_url, headers={"Authorization": f"token {token}"}),
        max_message_size=64 << 20,
    )
    return kernel["id"], Kernel(ws)


async def learner(hub, name, cells, results):
    r = {"name": name, "errors": []}
    results.append(r)
    t0 = time.monotonic()
    try:
        # Log in: the learner exists and holds a token of their own.
        await hub.call("POST", f"/hub/api/users/{name}", ok=(201, 409))
        token = (await hub.call("POST", f"/hub/api/users/{name}/tokens", {"note": "load test"}))[
            "token"
        ]
        r["token"] = token
        await hub.call("POST", f"/hub/api/users/{name}/server")
        while True:
            user = await hub.call("GET", f"/hub/api/users/{name}")
            server = user.get("servers", {}).get("", {})
            if server.get("ready"):
                break
            if not user.get("servers") and time.monotonic() - t0 > 10:
                raise RuntimeError(f"the server did not start: {user}")
            await asyncio.sleep(0.5)
        r["server_ready_s"] = time.monotonic() - t0
        r["kernel_id"], kernel = await open_kernel(hub, name, token)
        r["kernel"] = kernel
        for i, (code, must_fail) in enumerate(cells):
            status, text = await kernel.execute(code)
            if i == 0:
                r["first_result_s"] = time.monotonic() - t0
            if "first_rust_result_s" not in r and not code.lstrip().startswith(":"):
                # The first cell that compiles (the notebook opens with a magic).
                r["first_rust_result_s"] = time.monotonic() - t0
            if (status == "error") != must_fail:
                want = "an error" if must_fail else "ok"
                r["errors"].append(f"cell {i}: {status}, wanted {want}:\n{text[-600:]}")
        r["all_cells_s"] = time.monotonic() - t0
        # One Tab: it starts the kernel's rust-analyzer process, which ends after a quiet spell.
        t1 = time.monotonic()
        completed = await kernel.complete("Tensor::ze")
        r["tab_s"] = time.monotonic() - t1
        if "Tensor::zeros" not in completed:
            r["errors"].append(f"Tab after `Tensor::ze` offered {sorted(completed)[:10]}")
    except Exception as e:  # every failure is reported, none stops the others
        r["errors"].append(f"{type(e).__name__}: {e}")


async def killed_kernel_comes_back(hub, r):
    """The out-of-memory killer takes a learner's kernel: Jupyter restarts it, and the first cell
    after says what happened and that the variables are gone."""
    procs = processes()
    pid = kernel_pid(r["kernel_id"], procs)
    if pid is None:
        return "no kernel process found for " + r["name"]
    os.kill(pid, signal.SIGKILL)
    kernel = r["kernel"]
    try:
        # What makes JupyterLab say "Kernel Restarting".
        await kernel.wait_for_state("restarting", 60)
        # The cell waits in the shell channel's queue until the new kernel is up.
        status, text = await kernel.execute("let back = 1 + 1;\nback", timeout=300)
    except Exception as e:
        return f"the killed kernel did not come back: {type(e).__name__}: {e}"
    if status != "ok" or "2" not in text:
        return f"after the restart a cell gave {status}: {text}"
    if "previous kernel" not in text:
        return f"the restarted kernel did not say what happened:\n{text}"
    r["restart_notice"] = text
    return None


def notebook_cells(path):
    nb = json.loads(Path(path).read_text())
    return [
        ("".join(c["source"]), "raises-exception" in c.get("metadata", {}).get("tags", []))
        for c in nb["cells"]
        if c["cell_type"] == "code"
    ]


def percentile(values, p):
    values = sorted(values)
    if not values:
        return float("nan")
    k = (len(values) - 1) * p / 100
    lo, hi = int(k), min(int(k) + 1, len(values) - 1)
    return values[lo] + (values[hi] - values[lo]) * (k - lo)


def du_kib(path):
    out = subprocess.run(["du", "-sk", str(path)], capture_output=True, text=True)
    return int(out.stdout.split()[0]) if out.returncode == 0 and out.stdout else 0


async def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("--learners", type=int, default=8)
    ap.add_argument("--notebook", default=str(repo / "notebooks/01-devices-and-tensors.ipynb"))
    ap.add_argument("--workdir", required=True, help="the hub's state and the learners' homes")
    ap.add_argument("--report", help="write the figures here as JSON")
    args = ap.parse_args()

    work = Path(args.workdir).resolve()
    homes = work / "homes"
    token = secrets.token_hex(16)
    port, api_port, hub_port = free_port(), free_port(), free_port()
    env = dict(
        os.environ,
        PLACELAB_HUB_USERS="dummy",
        PLACELAB_HUB_HOMES=str(homes),
        PLACELAB_HUB_URL=f"http://127.0.0.1:{port}",
        PLACELAB_HUB_API_PORT=str(hub_port),
        PLACELAB_PROXY_API_URL=f"http://127.0.0.1:{api_port}",
        PLACELAB_HUB_STATE=str(work / "state"),
        PLACELAB_HUB_TOKEN=token,
    )
    log = open(work / "jupyterhub.log", "w")
    hub_proc = subprocess.Popen(
        [sys.executable, "-m", "jupyterhub", "-f", str(repo / "kernelspec/classroom/jupyterhub_config.py")],
        env=env,
        cwd=work,
        stdout=log,
        stderr=subprocess.STDOUT,
        start_new_session=True,
    )
    hub = Hub(f"http://127.0.0.1:{port}", token)
    results = []
    try:
        for _ in range(120):
            try:
                await hub.call("GET", "/hub/api/")
                break
            except Exception:
                if hub_proc.poll() is not None:
                    sys.exit(f"jupyterhub exited; see {work / 'jupyterhub.log'}")
                await asyncio.sleep(0.5)
        cells = notebook_cells(args.notebook)
        names = [f"learner{i:02d}" for i in range(args.learners)]
        await asyncio.gather(*(learner(hub, n, cells, results) for n in names))
        procs = processes()
        for r in results:
            _, r["kernel_loaded_rss_kib"] = learner_memory(r["name"], procs)
        loaded_total_kib = sum(rss_kib(p) for p in descendants(hub_proc.pid, procs))
        # The kernels end their rust-analyzer after PLACELAB_ANALYZER_QUIET (run.sh sets it).
        quiet = float(os.environ.get("PLACELAB_ANALYZER_QUIET", "120"))
        left = await analyzers_ended(names, quiet + 120)
        if left:
            results[0]["errors"].append(f"rust-analyzer processes outlived {quiet} s of quiet: {left}")
        procs = processes()
        for r in results:
            r["server_rss_kib"], r["kernel_rss_kib"] = learner_memory(r["name"], procs)
            r["disk_kib"] = du_kib(homes / r["name"] / ".cache")
        hub_pids = descendants(hub_proc.pid, procs)
        total_kib = sum(rss_kib(p) for p in hub_pids)
        ok = [r for r in results if not r["errors"]]
        if ok:
            err = await killed_kernel_comes_back(hub, ok[0])
            if err:
                ok[0]["errors"].append(err)
    finally:
        os.killpg(hub_proc.pid, signal.SIGTERM)
        try:
            hub_proc.wait(60)
        except subprocess.TimeoutExpired:
            os.killpg(hub_proc.pid, signal.SIGKILL)
    # Nothing a learner started outlives the hub: their kernels end with their servers.
    time.sleep(3)
    left = [
        f"{p}: {cmd[:120]}"
        for p, (_, cmd, env) in processes().items()
        if any(f"JUPYTERHUB_USER={r['name']}".encode() in env for r in results)
    ]
    if left:
        results[0]["errors"].append("still running after the hub stopped:\n" + "\n".join(left))

    firsts = [r["first_result_s"] for r in results if "first_result_s" in r]
    rust = [r["first_rust_result_s"] for r in results if "first_rust_result_s" in r]
    report = {
        "learners": args.learners,
        "cells": len(cells),
        "first_result_s": {
            "p50": percentile(firsts, 50),
            "p95": percentile(firsts, 95),
            "max": max(firsts, default=float("nan")),
        },
        "first_rust_cell_s": {
            "p50": percentile(rust, 50),
            "p95": percentile(rust, 95),
        },
        "all_cells_s_p50": percentile([r["all_cells_s"] for r in results if "all_cells_s" in r], 50),
        "tab_s": {
            "p50": percentile([r["tab_s"] for r in results if "tab_s" in r], 50),
            "max": max((r["tab_s"] for r in results if "tab_s" in r), default=float("nan")),
        },
        "per_learner_mib": {
            "server": statistics.mean(r["server_rss_kib"] for r in results) / 1024,
            # After the Tab, with rust-analyzer's process; then once it has ended.
            "kernel_with_cell_and_analyzer_processes": statistics.mean(r["kernel_loaded_rss_kib"] for r in results) / 1024,
            "kernel_with_cell_process": statistics.mean(r["kernel_rss_kib"] for r in results) / 1024,
        },
        "total_rss_mib_with_analyzers": loaded_total_kib / 1024,
        "total_rss_mib": total_kib / 1024,
        "disk_per_learner_mib": max(r["disk_kib"] for r in results) / 1024,
        "restart_notice": next((r["restart_notice"] for r in results if "restart_notice" in r), None),
        "errors": {r["name"]: r["errors"] for r in results if r["errors"]},
    }
    text = json.dumps(report, indent=2)
    print(text)
    if args.report:
        Path(args.report).write_text(text)
    sys.exit(1 if report["errors"] else 0)


if __name__ == "__main__":
    asyncio.run(main())
