"""Shared helpers for the Jupyter suites: starting `placelab kernel` through jupyter_client,
running cells with bounded waits, and reading what a cell sent on iopub.

Run by tests/jupyter.rs, which sets the environment (see `KERNEL_NAME` and friends below).
"""

from __future__ import annotations

import itertools
import os
import time
from pathlib import Path
from typing import Any, Iterable

import zmq
from jupyter_client.manager import KernelManager

KERNEL_NAME = os.environ.get("PLACELAB_KERNEL_NAME", "placelab")
# The `placelab` binary (the driver passes CARGO_BIN_EXE_placelab).
PLACELAB_BIN = os.environ.get("PLACELAB_BIN", "")
# A kernel's first cell waits for the engine's compile into the evaluator: seconds with a warm
# cache (the driver warms it), minutes without.
FIRST_CELL_TIMEOUT = float(os.environ.get("PLACELAB_FIRST_CELL_TIMEOUT", "300"))
CELL_TIMEOUT = 60.0
# A kernel's first completion loads rust-analyzer (the engine's and std's sources): 8-10 s of CPU,
# 19.5 s beside `.ci/test`'s other lanes here, over 60 s once in CI. A bound for a hang, not a
# speed check (the speed is `benches/RESULTS.md`'s, issue 67's target); under conftest.py's default
# per-test limit, which also bounds jupyter_kernel_test's completion (it waits with no timeout).
FIRST_COMPLETION_TIMEOUT = 200.0
READY_TIMEOUT = 60.0
# How long an interrupted cell may run before the kernel ends its process: tests/jupyter.rs sets
# it for every kernel (to the default), so a value in the developer's shell changes nothing.
INTERRUPT_GRACE = float(os.environ.get("PLACELAB_INTERRUPT_GRACE", "2"))


# ---------------------------------------------------------------------------------------------
# Kernels


def start_kernel() -> tuple[KernelManager, Any]:
    """A fresh kernel and a started, ready client."""
    km = KernelManager(kernel_name=KERNEL_NAME)
    km.start_kernel()
    kc = km.client()
    kc.start_channels()
    try:
        kc.wait_for_ready(timeout=READY_TIMEOUT)
    except BaseException:
        stop_kernel(km, kc)
        raise
    return km, kc


def start_kernel_with(env: dict[str, str | None]) -> tuple[KernelManager, Any]:
    """`start_kernel` with these variables set (None: unset) in that kernel's environment alone."""
    saved = {k: os.environ.get(k) for k in env}

    def put(values: dict[str, str | None]) -> None:
        for k, v in values.items():
            os.environ.pop(k, None)
            if v is not None:
                os.environ[k] = v

    put(env)
    try:
        return start_kernel()
    finally:
        put(saved)


def stop_kernel(km: KernelManager, kc: Any) -> None:
    """Stops the client and the kernel, whatever state they are in (never raises)."""
    try:
        kc.stop_channels()
    except Exception:
        pass
    try:
        if km.has_kernel:
            km.shutdown_kernel(now=False)
    except Exception:
        try:
            km.shutdown_kernel(now=True)
        except Exception:
            pass


def kernel_pid(km: KernelManager) -> int:
    return km.provisioner.process.pid  # type: ignore[union-attr]


def rss_bytes(pid: int) -> int:
    """VmRSS of a process, from /proc (psutil is not assumed)."""
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) * 1024
    raise AssertionError(f"no VmRSS for pid {pid}")


def descendants(pid: int) -> set[int]:
    """Every live process below `pid` (from /proc/*/stat)."""
    parents: dict[int, int] = {}
    for d in Path("/proc").iterdir():
        if not d.name.isdigit():
            continue
        try:
            stat = (d / "stat").read_text()
        except OSError:
            continue
        # pid (comm) state ppid ...: comm may hold spaces and parentheses.
        ppid = int(stat.rsplit(")", 1)[1].split()[1])
        parents[int(d.name)] = ppid
    found: set[int] = set()
    frontier = {pid}
    while frontier:
        nxt = {p for p, pp in parents.items() if pp in frontier and p not in found}
        found |= nxt
        frontier = nxt
    return found


def comm(pid: int) -> str:
    """A process's command name (from /proc/PID/comm), or "" once it is gone."""
    try:
        return Path(f"/proc/{pid}/comm").read_text().strip()
    except OSError:
        return ""


def alive(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except OSError:
        return False
    return state != "Z"


def wait_gone(pids: Iterable[int], timeout: float) -> set[int]:
    """Waits until none of `pids` is alive; returns those still alive at the deadline."""
    deadline = time.monotonic() + timeout
    left = {p for p in pids if alive(p)}
    while left and time.monotonic() < deadline:
        time.sleep(0.1)
        left = {p for p in left if alive(p)}
    return left


def own_compile_directory(cache: Path, connection_file: str) -> Path:
    """The compile directory the kernel claimed (its slot's `owner` names its connection file)."""
    for owner in (cache / "sessions").glob("session-*/owner"):
        if owner.read_text().split("\n", 1)[-1] == connection_file:
            return owner.parent / "work"
    raise AssertionError(f"no session directory under {cache} names {connection_file}")


def still_claimed(work: Path, connection_file: str) -> bool:
    """Whether the kernel's compile directory outlived it. Another session on the same cache (a
    REPL test running beside this one, as a classmate's would) may claim the slot once the
    kernel has left it: a `work` there under another owner is that session's."""
    if not work.exists():
        return False
    try:
        return (work.parent / "owner").read_text().split("\n", 1)[-1] == connection_file
    except OSError:
        return True


# ---------------------------------------------------------------------------------------------
# Cells


class Cell:
    """One request's shell reply and the iopub messages parented to it, in order."""

    def __init__(self, msg_id: str, code: str):
        self.msg_id = msg_id
        self.code = code
        self.reply: dict[str, Any] | None = None
        self.iopub: list[dict[str, Any]] = []
        self.idle = False
        self.reply_at: float | None = None
        # Arrival order of shell replies across every cell collected so far.
        self.reply_seq: int | None = None

    @property
    def status(self) -> str:
        assert self.reply is not None, f"no reply to {self.code!r}"
        return self.reply["content"]["status"]

    @property
    def count(self) -> int:
        assert self.reply is not None
        return self.reply["content"].get("execution_count")

    @property
    def outputs(self) -> list[dict[str, Any]]:
        """Iopub messages other than status and execute_input."""
        return [m for m in self.iopub if m["msg_type"] not in ("status", "execute_input")]

    def of_type(self, *types: str) -> list[dict[str, Any]]:
        return [m for m in self.iopub if m["msg_type"] in types]

    def result(self, mime: str = "text/plain") -> str | None:
        results = self.of_type("execute_result")
        assert len(results) <= 1, f"several execute_results for {self.code!r}: {results}"
        return results[0]["content"]["data"].get(mime) if results else None

    def errors(self) -> str:
        return "\n".join(
            "\n".join(
                [m["content"].get("ename", ""), m["content"].get("evalue", "")]
                + list(m["content"].get("traceback", []))
            )
            for m in self.of_type("error")
        )

    def text(self) -> str:
        """Everything a person would read: streams, text/plain of results and displays, errors."""
        parts = []
        for m in self.iopub:
            c = m["content"]
            if m["msg_type"] == "stream":
                parts.append(c["text"])
            elif m["msg_type"] in ("execute_result", "display_data", "update_display_data"):
                parts.append(c["data"].get("text/plain", ""))
            elif m["msg_type"] == "error":
                parts.append("\n".join([c.get("ename", ""), c.get("evalue", "")] + c.get("traceback", [])))
        if self.reply is not None and self.reply["content"].get("status") == "error":
            c = self.reply["content"]
            parts.append(f"[reply] {c.get('ename', '')}: {c.get('evalue', '')}")
        return "\n".join(parts)

    def describe(self) -> str:
        """For assertion messages: the reply and every iopub message, briefly."""
        lines = [f"cell {self.code!r}: reply {self.reply and self.reply['content']}"]
        for m in self.iopub:
            lines.append(f"  {m['msg_type']}: {str(m['content'])[:600]}")
        return "\n".join(lines)


_ARRIVALS = itertools.count()


def collect(kc: Any, cells: list[Cell], timeout: float) -> None:
    """Reads shell replies and iopub messages (interleaved, so a long queue never overflows a
    socket's high-water mark) until every cell has its reply and its `idle`. Raises
    AssertionError with what was seen when `timeout` passes first."""
    by_id = {c.msg_id: c for c in cells}
    deadline = time.monotonic() + timeout
    poller = zmq.Poller()
    poller.register(kc.shell_channel.socket, zmq.POLLIN)
    poller.register(kc.iopub_channel.socket, zmq.POLLIN)

    def pending() -> list[Cell]:
        return [c for c in cells if c.reply is None or not c.idle]

    while pending():
        left = deadline - time.monotonic()
        if left <= 0:
            missing = pending()
            raise AssertionError(
                f"timed out after {timeout:.0f} s waiting for {len(missing)} of {len(cells)} cells; first:\n"
                + missing[0].describe()
            )
        ready = dict(poller.poll(int(min(left, 0.2) * 1000)))
        if kc.iopub_channel.socket in ready:
            while kc.iopub_channel.msg_ready():
                m = kc.get_iopub_msg(timeout=0)
                cell = by_id.get(m["parent_header"].get("msg_id"))
                if cell is None:
                    continue
                cell.iopub.append(m)
                if m["msg_type"] == "status" and m["content"]["execution_state"] == "idle":
                    cell.idle = True
        if kc.shell_channel.socket in ready:
            while kc.shell_channel.msg_ready():
                m = kc.get_shell_msg(timeout=0)
                cell = by_id.get(m["parent_header"].get("msg_id"))
                if cell is not None:
                    cell.reply = m
                    cell.reply_at = time.monotonic()
                    cell.reply_seq = next(_ARRIVALS)


def read_until(kc: Any, cell: Cell, done: Any, timeout: float) -> bool:
    """Reads the cell's iopub messages (others are dropped) until `done()`, an `error` from the
    cell, or `timeout` seconds; returns `done()`. For a cell still running: its reply is left."""
    deadline = time.monotonic() + timeout
    while not done() and time.monotonic() < deadline:
        try:
            m = kc.get_iopub_msg(timeout=0.1)
        except Exception:  # queue.Empty
            continue
        if m["parent_header"].get("msg_id") != cell.msg_id:
            continue
        cell.iopub.append(m)
        if m["msg_type"] == "error":
            break
    return done()


def execute(kc: Any, code: str, timeout: float = CELL_TIMEOUT, **kw: Any) -> Cell:
    """Runs one cell and waits (bounded) for its reply and idle."""
    cell = Cell(kc.execute(code, **kw), code)
    collect(kc, [cell], timeout)
    return cell


def execute_ok(kc: Any, code: str, timeout: float = CELL_TIMEOUT, **kw: Any) -> Cell:
    cell = execute(kc, code, timeout, **kw)
    assert cell.status == "ok", cell.describe()
    return cell


def execute_many(kc: Any, codes: list[str], timeout: float, **kw: Any) -> list[Cell]:
    """Sends every cell at once (queued in the kernel), then collects them all."""
    cells = [Cell(kc.execute(code, **kw), code) for code in codes]
    collect(kc, cells, timeout)
    return cells


def reply_to(get: Any, msg_id: str, what: str, timeout: float) -> dict[str, Any]:
    """The reply to `msg_id` from `get` (a client's get_*_msg), skipping others (bounded)."""
    deadline = time.monotonic() + timeout
    while True:
        left = deadline - time.monotonic()
        if left <= 0:
            raise AssertionError(f"no reply to {what} within {timeout} s")
        try:
            m = get(timeout=left)
        except Exception as e:  # queue.Empty
            raise AssertionError(f"no reply to {what} within {timeout} s") from e
        if m["parent_header"].get("msg_id") == msg_id:
            return m


def shell_request(kc: Any, msg_id: str, timeout: float = CELL_TIMEOUT) -> dict[str, Any]:
    """The shell reply to `msg_id`, skipping replies to other requests (bounded)."""
    return reply_to(kc.get_shell_msg, msg_id, msg_id, timeout)


def control_request(kc: Any, msg_type: str, content: dict[str, Any], timeout: float = 10.0) -> dict[str, Any]:
    """Sends a request on the control channel and returns its reply (bounded)."""
    msg = kc.session.msg(msg_type, content)
    kc.control_channel.send(msg)
    return reply_to(kc.get_control_msg, msg["header"]["msg_id"], msg_type, timeout)


def kernel_info(kc: Any, timeout: float = 10.0) -> dict[str, Any]:
    return shell_request(kc, kc.kernel_info(), timeout)


def drain(kc: Any) -> None:
    """Drops whatever is waiting on shell and iopub."""
    for ch in (kc.shell_channel, kc.iopub_channel):
        while ch.msg_ready():
            ch.get_msg(timeout=0)


# ---------------------------------------------------------------------------------------------
# Timings, printed in pytest's summary by conftest.py

TIMINGS: dict[str, str] = {}


def record(name: str, value: str) -> None:
    TIMINGS[name] = value
