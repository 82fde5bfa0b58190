"""Front ends with kernels of their own: nbclient runs a notebook, `jupyter console` answers a
cell under a pty, and the command line fails clearly on a missing connection file or a busy
port. One kernel at a time (see test_client.py).
"""

from __future__ import annotations

import json
import os
import pty
import re
import select
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import nbformat
import pytest
from nbclient import NotebookClient

from kernel_helpers import FIRST_CELL_TIMEOUT, KERNEL_NAME, PLACELAB_BIN, record


def notebook_cells() -> list:
    return [
        nbformat.v4.new_code_cell("let x = Tensor::ones([3], &Device::Cpu)?;"),
        nbformat.v4.new_code_cell("x"),
        nbformat.v4.new_code_cell("let y = x.to(&Device::Cuda(0))?;"),
        nbformat.v4.new_code_cell(":plot transfers"),
        # nbclient applies clear_output as a notebook does: only what came after it stays.
        nbformat.v4.new_code_cell('println!("gone");\nx.show();\nplacelab::show::clear_output(false);\nprintln!("done");'),
    ]


@pytest.mark.limit(400)
def test_nbclient_runs_a_notebook(tmp_path):
    nb = nbformat.v4.new_notebook()
    nb.metadata["kernelspec"] = {"name": KERNEL_NAME, "display_name": "placelab", "language": "rust"}
    nb.cells = notebook_cells()
    t0 = time.monotonic()
    client = NotebookClient(nb, timeout=int(FIRST_CELL_TIMEOUT), startup_timeout=60, kernel_name=KERNEL_NAME, record_timing=True)
    client.execute()
    record("nbclient, 5 cells incl. kernel start/stop", f"{time.monotonic() - t0:.2f} s")
    nbformat.validate(nb)
    path = tmp_path / "run.ipynb"
    nbformat.write(nb, path)
    nb = nbformat.read(path, as_version=4)
    assert nb.metadata["language_info"]["name"] == "rust", nb.metadata
    cells = nb.cells

    def outs(i, kind):
        return [o for o in cells[i].outputs if o.output_type == kind]

    card = outs(1, "execute_result")
    assert card and "placelab-tensor" in card[0].data.get("text/html", ""), cells[1].outputs
    strips_html = [o for o in outs(2, "display_data") if "placelab-memory" in o.data.get("text/html", "")]
    assert strips_html, cells[2].outputs
    assert "cuda:0 (simulated)" in strips_html[0].data.get("text/plain", ""), cells[2].outputs
    plots = [o for o in outs(3, "display_data") if "image/svg+xml" in o.data]
    assert plots, cells[3].outputs
    streams = outs(4, "stream")
    assert [o.text for o in streams] == ["done\n"], cells[4].outputs
    assert not [o for o in outs(4, "display_data") if "placelab-tensor" in o.data.get("text/html", "")], cells[4].outputs
    for cell in cells:
        assert cell.execution_count is not None, cell
        assert "shell.execute_reply" in cell.metadata.get("execution", {}), cell.metadata


def _kill_kernels_started_from(runtime_dir: Path) -> None:
    """Kills kernels whose connection file lies in `runtime_dir` (left by a killed console)."""
    for d in Path("/proc").iterdir():
        if not d.name.isdigit():
            continue
        try:
            cmdline = (d / "cmdline").read_bytes()
        except OSError:
            continue
        if str(runtime_dir).encode() in cmdline:
            try:
                os.kill(int(d.name), signal.SIGKILL)
            except OSError:
                pass


@pytest.mark.limit(400)
def test_jupyter_console_answers_a_cell(tmp_path):
    runtime = tmp_path / "runtime"
    runtime.mkdir()
    env = dict(os.environ, JUPYTER_RUNTIME_DIR=str(runtime), TERM="dumb")
    console = Path(sys.executable).with_name("jupyter-console")
    master, slave = pty.openpty()
    proc = subprocess.Popen(
        [str(console), "--kernel", KERNEL_NAME, "--simple-prompt"],
        stdin=slave, stdout=slave, stderr=slave, env=env, start_new_session=True, close_fds=True,
    )
    os.close(slave)
    seen = b""

    def read_until(pattern: bytes, timeout: float) -> bool:
        nonlocal seen
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if re.search(pattern, seen):
                return True
            r, _, _ = select.select([master], [], [], 0.2)
            if r:
                try:
                    chunk = os.read(master, 65536)
                except OSError:
                    return bool(re.search(pattern, seen))
                if not chunk:
                    return bool(re.search(pattern, seen))
                seen += chunk
        return bool(re.search(pattern, seen))

    try:
        t0 = time.monotonic()
        assert read_until(rb"In \[1\]", 90), f"no prompt from jupyter console:\n{seen.decode(errors='replace')}"
        os.write(master, b"40 + 2\n")
        assert read_until(rb"Out\[1\]: 42", FIRST_CELL_TIMEOUT), f"no `Out[1]: 42`:\n{seen.decode(errors='replace')}"
        record("jupyter console: start → Out[1]", f"{time.monotonic() - t0:.2f} s")
        assert read_until(rb"In \[2\]", 30), seen.decode(errors="replace")
        os.write(master, b"exit\n")
        try:
            code = proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            code = None
        assert code == 0, f"jupyter console did not exit on `exit` (exit {code}):\n{seen.decode(errors='replace')}"
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait(timeout=10)
        os.close(master)
        # The console shuts its kernel down; if it was killed, its kernel is an orphan.
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline and any(runtime.glob("kernel-*.json")):
            time.sleep(0.2)
        _kill_kernels_started_from(runtime)


# ---- the command line ------------------------------------------------------------------------


def _placelab(*args: str, timeout: float = 60) -> subprocess.CompletedProcess:
    assert PLACELAB_BIN, "PLACELAB_BIN is not set (tests/jupyter.rs sets it)"
    return subprocess.run([PLACELAB_BIN, *args], capture_output=True, text=True, timeout=timeout)


def test_kernel_without_its_connection_file_fails_clearly(tmp_path):
    missing = tmp_path / "no-such-connection.json"
    out = _placelab("kernel", "--connection-file", str(missing))
    assert out.returncode != 0, out
    assert str(missing) in out.stderr, f"stderr does not name the file:\n{out.stderr}"
    assert "panicked" not in out.stderr, out.stderr
    bad = tmp_path / "bad.json"
    bad.write_text("{ this is not json")
    out = _placelab("kernel", "--connection-file", str(bad))
    assert out.returncode != 0, out
    assert str(bad) in out.stderr, f"stderr does not name the file:\n{out.stderr}"
    assert "panicked" not in out.stderr, out.stderr
    out = _placelab("kernel")
    assert out.returncode != 0, out
    assert "--connection-file" in out.stderr, out.stderr


def _free_ports(n: int) -> list[int]:
    socks = []
    for _ in range(n):
        s = socket.socket()
        s.bind(("127.0.0.1", 0))
        socks.append(s)
    ports = [s.getsockname()[1] for s in socks]
    for s in socks:
        s.close()
    return ports


@pytest.mark.limit(120)
def test_kernel_on_a_port_in_use_fails_clearly(tmp_path):
    ports = _free_ports(5)
    names = ["shell_port", "iopub_port", "stdin_port", "control_port", "hb_port"]
    info = dict(zip(names, ports))
    info.update(ip="127.0.0.1", transport="tcp", key="a0436f6c-1916-498b-8eb9-e81ab9368e84",
                signature_scheme="hmac-sha256", kernel_name=KERNEL_NAME)
    conn = tmp_path / "kernel.json"
    conn.write_text(json.dumps(info))
    busy = socket.socket()
    busy.bind(("127.0.0.1", info["shell_port"]))
    busy.listen(1)
    try:
        t0 = time.monotonic()
        out = _placelab("kernel", "--connection-file", str(conn), timeout=90)
        record("port in use → exit", f"{time.monotonic() - t0:.2f} s")
    finally:
        busy.close()
    assert out.returncode != 0, out
    port = str(info["shell_port"])
    assert port in out.stderr or "in use" in out.stderr.lower(), f"stderr says nothing of the port:\n{out.stderr}"
    assert "panicked" not in out.stderr, out.stderr
