"""`placelab kernel` driven by jupyter_client's BlockingKernelClient: one kernel shared by the
tests of `TestSharedKernel` (its last ones restart it and shut it down), then kernels of their
own ended by SIGTERM and SIGKILL while a cell runs. nbclient, `jupyter console` and the command line are in
test_front_ends.py.

Only one kernel runs at a time: two side by side would each claim a compile directory and
rebuild the engine in it (minutes). So the shared kernel is stopped at the end of its class,
before the tests below it start theirs.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import zmq
from jupyter_client.session import Session

from kernel_helpers import (
    CELL_TIMEOUT,
    FIRST_CELL_TIMEOUT,
    FIRST_COMPLETION_TIMEOUT,
    INTERRUPT_GRACE,
    alive,
    collect,
    comm,
    Cell,
    control_request,
    descendants,
    drain,
    execute,
    execute_many,
    execute_ok,
    kernel_info,
    kernel_pid,
    own_compile_directory,
    read_until,
    record,
    rss_bytes,
    shell_request,
    start_kernel,
    start_kernel_with,
    still_claimed,
    stop_kernel,
    wait_gone,
)

MEMORY_STRIP = re.compile(r"── cuda:0 \(simulated\) allocated .* · reserved .* · free .*")


def strips(cell: Cell) -> list[dict]:
    """The cell's memory strips: display_data whose HTML is the `placelab-memory` block."""
    return [
        m
        for m in cell.of_type("display_data")
        if "placelab-memory" in m["content"]["data"].get("text/html", "")
    ]


def memory_allocated(kc) -> int:
    cell = execute_ok(kc, "cuda::memory_allocated(0)?")
    value = cell.result()
    assert value is not None and value.strip().isdigit(), cell.describe()
    return int(value)


# =============================================================================================
@contextlib.contextmanager
def busy_loops(count: int):
    """`count` processes that spin on a CPU while the block runs (a loaded machine)."""
    loops = [
        subprocess.Popen([sys.executable, "-c", "while True: pass"], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        for _ in range(count)
    ]
    try:
        yield
    finally:
        for p in loops:
            p.kill()
            p.wait()


# One kernel for every test of this class.


@pytest.fixture(scope="class")
def kernel(request):
    t0 = time.monotonic()
    km, kc = start_kernel()
    record("start_kernel + wait_for_ready", f"{time.monotonic() - t0:.2f} s")
    try:
        t1 = time.monotonic()
        execute_ok(kc, "let x = Tensor::ones([3], &Device::Cpu)?;", timeout=FIRST_CELL_TIMEOUT)
        record("first cell (waits for the engine's preload)", f"{time.monotonic() - t1:.2f} s")
        request.cls.km, request.cls.kc = km, kc
        yield km, kc
    finally:
        stop_kernel(km, kc)


@pytest.mark.usefixtures("kernel")
class TestSharedKernel:
    km = None
    kc = None

    # ---- basics -----------------------------------------------------------------------------

    def test_kernel_info_reply(self):
        c = kernel_info(self.kc)["content"]
        assert c["status"] == "ok"
        assert c["protocol_version"] == "5.3"
        li = c["language_info"]
        assert li["name"] == "rust" and li["file_extension"] == ".rs", li
        assert c.get("banner"), "kernel_info has no banner (jupyter console shows it)"

    def test_execute_result_stream_and_count(self):
        drain(self.kc)
        a = execute_ok(self.kc, "40 + 2")
        assert a.result() == "42", a.describe()
        inputs = a.of_type("execute_input")
        assert len(inputs) == 1 and inputs[0]["content"]["code"] == "40 + 2", a.describe()
        results = a.of_type("execute_result")
        assert results[0]["content"]["execution_count"] == a.count, a.describe()
        b = execute_ok(self.kc, 'println!("hello, world"); eprintln!("oops");')
        streams: dict[str, str] = {}
        for m in b.of_type("stream"):
            streams[m["content"]["name"]] = streams.get(m["content"]["name"], "") + m["content"]["text"]
        assert "hello, world" in streams.get("stdout", ""), b.describe()
        assert "oops" in streams.get("stderr", ""), b.describe()
        assert b.count == a.count + 1
        # Order on iopub: busy, execute_input, outputs, idle.
        kinds = [m["msg_type"] for m in b.iopub]
        assert kinds[0] == "status" and b.iopub[0]["content"]["execution_state"] == "busy", kinds
        assert kinds[1] == "execute_input", kinds
        assert kinds[-1] == "status", kinds

    def test_tensor_value_is_a_card(self):
        cell = execute_ok(self.kc, "x")
        results = cell.of_type("execute_result")
        assert len(results) == 1, cell.describe()
        data = results[0]["content"]["data"]
        assert '<div class="placelab-tensor"' in data.get("text/html", ""), cell.describe()
        assert data.get("text/plain", "").startswith("Tensor f32[3] · cpu · 12 B"), cell.describe()

    def test_show_displays_the_card(self):
        cell = execute_ok(self.kc, "x.show();")
        cards = [
            m
            for m in cell.of_type("display_data")
            if "placelab-tensor" in m["content"]["data"].get("text/html", "")
        ]
        assert len(cards) == 1, cell.describe()
        assert cards[0]["content"]["data"]["text/plain"].startswith("Tensor f32[3] · cpu · 12 B"), cell.describe()
        assert not cell.of_type("execute_result"), cell.describe()

    def test_clear_output_goes_out_in_order(self):
        code = (
            'println!("before"); x.show();\nplacelab::show::clear_output(true);\n'
            'println!("after"); x.narrow(0, 0, 2)?.show();'
        )
        cell = execute_ok(self.kc, code)
        kinds = [m["msg_type"] for m in cell.outputs]
        assert kinds.count("clear_output") == 1, cell.describe()
        assert cell.of_type("clear_output")[0]["content"]["wait"] is True, cell.describe()
        at = kinds.index("clear_output")

        def text(ms):
            return "".join(m["content"]["text"] for m in ms if m["msg_type"] == "stream")

        # Streamed text on its side of the clear; of the cards only the one after it is sent.
        assert text(cell.outputs[:at]) == "before\n" and text(cell.outputs[at:]) == "after\n", cell.describe()
        cards = [
            (i, m["content"]["data"]["text/plain"])
            for i, m in enumerate(cell.outputs)
            if "placelab-tensor" in m["content"].get("data", {}).get("text/html", "")
        ]
        assert len(cards) == 1 and cards[0][0] > at, cell.describe()
        assert cards[0][1].startswith("Tensor f32[2] · cpu"), cell.describe()

    def test_errors_are_named_by_what_failed(self):
        # The kind travels typed from where it is known, not guessed from the text: an error of
        # the cell's own that starts with "error:" is not a compile error.
        cases = [
            ('let a: i32 = "s";', "CompileError", "error[E0308]"),
            ("undefined_name", "CompileError", "error[E0425]"),
            ("Tensor::ones([2], &Device::Cpu)?.matmul(&Tensor::ones([3, 4], &Device::Cpu)?)?", "Error", "shape mismatch in matmul"),
            ('Err::<(), Box<dyn std::error::Error>>("error: made by the cell".into())?;', "Error", "error: made by the cell"),
            ('panic!("boom");', "Panic", "boom"),
        ]
        for code, ename, evalue in cases:
            cell = execute(self.kc, code)
            assert cell.status == "error", cell.describe()
            assert [m["msg_type"] for m in cell.outputs] == ["error"], cell.describe()
            assert cell.reply["content"]["ename"] == ename, cell.describe()
            assert cell.outputs[0]["content"]["ename"] == ename, cell.describe()
            assert cell.reply["content"]["evalue"].startswith(evalue), cell.describe()
        # The session goes on.
        assert execute_ok(self.kc, "1 + 1").result() == "2"

    def test_silent_and_no_history(self):
        before = execute_ok(self.kc, "1").count
        silent = execute(self.kc, "let s = Tensor::ones([4], &Device::Cuda(0))?;\n40 + 2", silent=True)
        assert silent.status == "ok", silent.describe()
        assert silent.outputs == [] and not silent.of_type("execute_input"), silent.describe()
        unstored = execute(self.kc, "2", store_history=False)
        assert unstored.status == "ok", unstored.describe()
        after = execute_ok(self.kc, "3")
        assert after.count == before + 1, (
            f"count went {before} → {after.count} over a silent and a store_history=False cell"
        )
        execute_ok(self.kc, ":del s")

    def test_exit_and_quit_ask_the_front_end_to_exit(self):
        for code in ["exit", "quit", "exit()", ":exit", ":quit", ":q"]:
            cell = execute(self.kc, code)
            payload = cell.reply["content"].get("payload", [])
            assert any(p.get("source") == "ask_exit" for p in payload), cell.describe()
        # The kernel itself keeps running: the front end decides.
        assert kernel_info(self.kc)["content"]["status"] == "ok"
        assert self.km.is_alive()

    def test_comm_info_is_empty(self):
        reply = shell_request(self.kc, self.kc.comm_info())
        assert reply["content"]["status"] == "ok" and reply["content"]["comms"] == {}, reply["content"]

    # ---- completion, inspection, is_complete --------------------------------------------------

    def test_completion_of_an_engine_path(self):
        code = "Tensor::ze"
        t0 = time.monotonic()
        reply = shell_request(self.kc, self.kc.complete(code, len(code)), timeout=FIRST_COMPLETION_TIMEOUT)
        record("complete_request `Tensor::ze`", f"{time.monotonic() - t0:.2f} s")
        c = reply["content"]
        assert c["status"] == "ok", c
        start, end = c["cursor_start"], c["cursor_end"]
        assert 0 <= start <= end <= len(code), c
        completed = {code[:start] + m + code[end:] for m in c["matches"]}
        assert "Tensor::zeros" in completed, c

    def test_inspect_a_variable(self):
        reply = shell_request(self.kc, self.kc.inspect("x", 1), timeout=CELL_TIMEOUT)
        c = reply["content"]
        assert c["status"] == "ok" and c["found"] is True, c
        assert "Tensor" in c["data"].get("text/plain", ""), c
        missing = shell_request(self.kc, self.kc.inspect("no_such_variable_here", 5), timeout=CELL_TIMEOUT)
        assert missing["content"]["status"] == "ok", missing["content"]
        # A wide character just before the word (cursor positions count code points).
        wide = shell_request(self.kc, self.kc.inspect("cpu→x", 5), timeout=CELL_TIMEOUT)
        assert wide["content"]["found"] is True and "Tensor" in wide["content"]["data"]["text/plain"], wide
        assert kernel_info(self.kc)["content"]["status"] == "ok", "the kernel still answers"

    def test_is_complete(self):
        def status(code):
            reply = shell_request(self.kc, self.kc.is_complete(code))
            return reply["content"]

        for code in ["fn f() {", "let v = vec!["]:
            c = status(code)
            assert c["status"] == "incomplete", (code, c)
            indent = c.get("indent")
            assert isinstance(indent, str) and indent and indent.strip() == "", (code, c)
        assert status("let x = 1;")["status"] == "complete"
        for code in ["}", "let x = (1]"]:
            assert status(code)["status"] == "invalid", (code, status(code))

    # ---- memory strip and magics -------------------------------------------------------------

    def test_memory_strip_after_a_move_to_the_gpu(self):
        cell = execute_ok(self.kc, "let y = Tensor::ones([128], &Device::Cpu)?.to(&Device::Cuda(0))?;")
        found = strips(cell)
        assert len(found) == 1, cell.describe()
        data = found[0]["content"]["data"]
        plain = data.get("text/plain", "")
        assert MEMORY_STRIP.search(plain), plain
        assert "this cell +512 B" in plain, plain
        assert "1 transfer this cell: 512 B" in plain, plain
        assert found[0]["content"].get("transient", {}).get("display_id"), found[0]["content"]
        # A strip of its own for each cell: another cell, another display id.
        again = execute_ok(self.kc, "let y2 = y.to(&Device::Cpu)?;")
        ids = [m["content"]["transient"]["display_id"] for m in strips(again)]
        assert ids and ids[0] != found[0]["content"]["transient"]["display_id"], again.describe()
        deleted = execute_ok(self.kc, ":del y")
        assert "freed y: 512 B on cuda:0 (simulated)" in deleted.text(), deleted.describe()
        execute_ok(self.kc, ":del y2")

    def test_every_cell_that_ran_ends_with_the_devices_in_use(self):
        execute_ok(self.kc, "let held_on_gpu = Tensor::ones([4], &Device::Cuda(0))?;")
        # A cell that allocates nothing still shows what each device in use holds…
        cell = execute_ok(self.kc, "1 + 2")
        assert len(strips(cell)) == 1, cell.describe()
        text = strips(cell)[0]["content"]["data"]["text/plain"]
        assert MEMORY_STRIP.search(text) and "this cell" not in text, cell.describe()
        # …while a failed cell that changed nothing shows only its error.
        cell = execute(self.kc, "let broken: i32 = \"s\";")
        assert cell.status == "error" and strips(cell) == [], cell.describe()
        execute_ok(self.kc, ":del held_on_gpu")

    @pytest.mark.limit(120)
    def test_long_cell_refreshes_its_strip(self):
        cell = execute_ok(
            self.kc,
            "let z = Tensor::ones([256], &Device::Cuda(0))?;\nstd::thread::sleep(std::time::Duration::from_millis(3000));",
        )
        updates = cell.of_type("update_display_data")
        assert updates, "no update_display_data while the cell ran 3 s:\n" + cell.describe()
        ids = {m["content"]["transient"]["display_id"] for m in updates}
        kinds = [(m["msg_type"], m["content"].get("transient", {}).get("display_id")) for m in cell.outputs]
        for display_id in ids:
            first_display = next((i for i, k in enumerate(kinds) if k == ("display_data", display_id)), None)
            first_update = next(i for i, k in enumerate(kinds) if k == ("update_display_data", display_id))
            assert first_display is not None and first_display < first_update, (
                f"update_display_data for {display_id} without an earlier display_data of it:\n" + cell.describe()
            )
        assert MEMORY_STRIP.search(updates[-1]["content"]["data"].get("text/plain", "")), cell.describe()
        execute_ok(self.kc, ":del z")

    def test_magics(self):
        # Its own transfer for `:transfers` to list, whatever ran before.
        execute_ok(self.kc, "let magics_copy = Tensor::ones([4], &Device::Cpu)?.to(&Device::Cuda(0))?;")
        timings = {}
        expect = {
            ":help": ":mem",
            ":mem": "cuda:0",
            ":devices": "cuda:0",
            ":transfers": "cpu → cuda:0",
            ":empty_cache": "released",
        }
        for magic, needle in expect.items():
            t0 = time.monotonic()
            cell = execute_ok(self.kc, magic)
            timings[magic] = time.monotonic() - t0
            assert cell.outputs, cell.describe()
            assert needle in cell.text(), f"{needle!r} not in the output of {magic}:\n" + cell.describe()
            assert strips(cell) == [], f"{magic} is not a code cell: no memory strip\n" + cell.describe()
        plot = execute_ok(self.kc, ":plot transfers")
        svgs = [m for m in plot.of_type("display_data") if "image/svg+xml" in m["content"]["data"]]
        assert len(svgs) == 1 and "<svg" in svgs[0]["content"]["data"]["image/svg+xml"], plot.describe()
        record("magics round trip", ", ".join(f"{k} {v * 1e3:.0f} ms" for k, v in timings.items()))

    def test_profile_shows_the_profile_then_the_value(self):
        """`:profile` takes any code a cell takes: the profile is an output of its own
        (display_data), then the code's value is the cell's (execute_result) below it, a product
        or a block's last value; statements show the profile alone and define nothing; code that
        fails fails the cell, under the profile up to the failure."""
        kc = self.kc
        execute_ok(kc, "let pa = Tensor::ones([2, 3], &Device::Cuda(0))?;\nlet pb = Tensor::ones([3, 2], &Device::Cuda(0))?;")

        def shown(cell: Cell) -> list[str]:
            """The cell's outputs in order: `profile`, `card` (a tensor's) or the MIME types."""
            kinds = []
            for m in cell.of_type("display_data", "execute_result"):
                html = m["content"]["data"].get("text/html", "")
                if "placelab-memory" in html:
                    continue
                kind = "profile" if "placelab-profile" in html else "card" if "placelab-tensor" in html else ",".join(m["content"]["data"])
                kinds.append(f"{m['msg_type']}:{kind}")
            return kinds

        product = execute_ok(kc, ":profile pa.matmul(&pb)?")
        assert shown(product) == ["display_data:profile", "execute_result:card"], product.describe()
        assert "matmul" in product.text() and (product.result() or "").startswith("Tensor f32[2, 2] · cuda:0"), product.describe()
        block = execute_ok(kc, ":profile { let mut w = Tensor::randn([512, 512], &Device::Cuda(0))?; for _ in 0..200 { w = w.relu()?; } w.sum_all()? }")
        assert shown(block) == ["display_data:profile", "execute_result:card"], block.describe()
        assert (block.result() or "").startswith("Tensor f32[] · cuda:0"), block.describe()
        statements = execute_ok(kc, ":profile let ploss = pa.matmul(&pb)?.sum_all()?; let _twice = (&ploss * 2.0)?;")
        assert shown(statements) == ["display_data:profile"], statements.describe()
        assert execute(kc, "ploss").status == "error", "a variable of the profiled code exists"
        failed = execute(kc, ":profile pa.matmul(&pa)?")
        assert failed.status == "error" and failed.reply["content"]["ename"] == "Error", failed.describe()
        assert shown(failed) == ["display_data:profile"] and "stops there" in failed.text(), failed.describe()
        assert "shape mismatch in matmul" in failed.errors(), failed.describe()
        execute_ok(kc, ":del pa pb")

    # ---- queueing ---------------------------------------------------------------------------

    @pytest.mark.limit(300)
    def test_100_queued_executes_answered_in_order(self):
        # Code cells (a compile each) and magics (none) interleaved: a fast magic queued behind
        # a slow cell must not overtake it.
        drain(self.kc)
        codes = [f"{i} + 1000" if i % 3 == 0 else ":mem" for i in range(100)]
        t0 = time.monotonic()
        cells = execute_many(self.kc, codes, timeout=280)
        record("100 queued executes (34 code cells, 66 :mem)", f"{time.monotonic() - t0:.1f} s")
        for i, cell in enumerate(cells):
            assert cell.status == "ok", cell.describe()
            if i % 3 == 0:
                assert cell.result() == str(i + 1000), cell.describe()
        order = sorted(cells, key=lambda c: c.reply_seq)
        assert [c.msg_id for c in order] == [c.msg_id for c in cells], "replies out of order"
        counts = [c.count for c in cells]
        assert counts == list(range(counts[0], counts[0] + 100)), counts
        inputs = [c.of_type("execute_input")[0]["content"]["execution_count"] for c in cells]
        assert inputs == counts, "execute_input counts differ from the replies'"

    def test_stop_on_error_aborts_queued_requests(self):
        drain(self.kc)
        codes = ["1", 'let a: i32 = "s";', "2", "3"]
        cells = [Cell(self.kc.execute(code, stop_on_error=True), code) for code in codes]
        # An aborted request gets a reply; its iopub busy/idle are not required.
        by_id = {c.msg_id: c for c in cells}
        deadline = time.monotonic() + CELL_TIMEOUT
        while any(c.reply is None for c in cells):
            left = deadline - time.monotonic()
            assert left > 0, "no reply within 60 s to: " + ", ".join(c.code for c in cells if c.reply is None)
            try:
                m = self.kc.get_shell_msg(timeout=left)
            except Exception:
                continue
            cell = by_id.get(m["parent_header"].get("msg_id"))
            if cell is not None:
                cell.reply = m
        statuses = [c.reply["content"]["status"] for c in cells]
        assert statuses == ["ok", "error", "aborted", "aborted"], statuses
        # Later requests run again.
        assert execute_ok(self.kc, "5").result() == "5"
        # A request sent once the failed cell's reply has come is the learner's next step (Shift-
        # Enter right after the error): it runs. Only requests already waiting were aborted. Sent
        # the moment the reply is read, ten times, since it was a race with the kernel's drain.
        for i in range(10):
            bad = self.kc.execute('let a: i32 = "s";', stop_on_error=True)
            deadline = time.monotonic() + CELL_TIMEOUT
            while True:
                m = self.kc.get_shell_msg(timeout=deadline - time.monotonic())
                if m["parent_header"].get("msg_id") == bad:
                    break
            assert m["content"]["status"] == "error", m["content"]
            after = Cell(self.kc.execute(f"{i} + 7", stop_on_error=True), f"{i} + 7")
            collect(self.kc, [after], CELL_TIMEOUT)
            assert after.status == "ok" and after.result() == str(i + 7), after.describe()
        drain(self.kc)
        # Without stop_on_error a failure aborts nothing.
        codes = ['let a: i32 = "s";', "6"]
        cells = [Cell(self.kc.execute(code, stop_on_error=False), code) for code in codes]
        collect(self.kc, cells, CELL_TIMEOUT)
        assert [c.status for c in cells] == ["error", "ok"], [c.describe() for c in cells]

    # ---- hostile and odd input ---------------------------------------------------------------

    def test_forged_and_malformed_messages_are_dropped(self, tmp_path):
        kc = self.kc
        ctx = zmq.Context.instance()
        forger = Session(key=b"not-the-kernel-key", username="mallory")
        honest = Session(key=kc.session.key, username="tester")
        marker = tmp_path / "forged-cell-ran"
        shell = ctx.socket(zmq.DEALER)
        control = ctx.socket(zmq.DEALER)
        shell.linger = control.linger = 0
        shell.connect(f"{kc.transport}://{kc.ip}:{kc.shell_port}")
        control.connect(f"{kc.transport}://{kc.ip}:{kc.control_port}")
        try:
            # Signed with another key: a cell that would leave a file, and a shutdown.
            forger.send(shell, "execute_request", {
                "code": f'std::fs::write({json.dumps(str(marker))}, "ran").unwrap();',
                "silent": False, "store_history": True, "user_expressions": {},
                "allow_stdin": False, "stop_on_error": True,
            })
            forger.send(control, "shutdown_request", {"restart": False})
            forger.send(shell, "kernel_info_request", {})
            # No signature at all.
            Session(key=b"").send(shell, "kernel_info_request", {})
            # Garbage: no delimiter, a delimiter and nothing after it, bad JSON under a good
            # signature, a truncated message, binary noise.
            shell.send_multipart([b"garbage"])
            shell.send_multipart([b"<IDS|MSG>"])
            parts = [b"{not json", b"{}", b"{}", b"{}"]
            shell.send_multipart([b"<IDS|MSG>", honest.sign(parts)] + parts)
            shell.send_multipart([b"<IDS|MSG>", b"deadbeef", b"{}"])
            shell.send_multipart([os.urandom(64) for _ in range(7)])
            control.send_multipart([b"<IDS|MSG>", b"", b"\xff\xfe"])
            # None of that is answered.
            assert not shell.poll(3000), f"the kernel answered a forged/garbage message: {shell.recv_multipart()}"
            assert not control.poll(100), f"the kernel answered on control: {control.recv_multipart()}"
        finally:
            shell.close()
            control.close()
        assert not marker.exists(), "the kernel ran a cell signed with the wrong key"
        assert self.km.is_alive(), "the kernel died on forged/garbage input"
        assert kernel_info(kc)["content"]["status"] == "ok"
        assert execute_ok(kc, "1 + 1").result() == "2"

    def test_unknown_message_type_is_survived(self):
        kc = self.kc
        msg = kc.session.msg("frobnicate_request", {"x": 1})
        kc.shell_channel.send(msg)
        # A reply to it is allowed (skipped here); kernel_info after it must be answered. Each
        # channel is read in order, so that answer comes after the unknown message was handled.
        assert kernel_info(kc)["content"]["status"] == "ok"
        assert self.km.is_alive()
        control_request_msg = kc.session.msg("frobnicate_request", {})
        kc.control_channel.send(control_request_msg)
        after = kc.session.msg("kernel_info_request", {})
        kc.control_channel.send(after)
        reply = kc.get_control_msg(timeout=30)
        while reply["parent_header"].get("msg_id") != after["header"]["msg_id"]:
            reply = kc.get_control_msg(timeout=30)
        assert reply["content"]["status"] == "ok"
        assert kernel_info(kc)["content"]["status"] == "ok"
        assert execute_ok(kc, "2 + 2").result() == "4"
        drain(kc)
        while kc.control_channel.msg_ready():
            kc.get_control_msg(timeout=0)

    # ---- interrupts and lost processes -------------------------------------------------------

    def test_interrupt_when_idle_is_harmless(self):
        reply = control_request(self.kc, "interrupt_request", {})
        assert reply["msg_type"] == "interrupt_reply" and reply["content"]["status"] == "ok", reply
        assert execute_ok(self.kc, "1 + 1").result() == "2"

    # Made before each interrupt; the loops read `kept_t`, so what the interrupt leaves of it
    # is checked value by value.
    KEPT = "let kept = 7;\nlet kept_t = tensor![1.5, -2.0, 4.25; &Device::Cuda(0)]?;"

    def _interrupt(self, code: str, name: str) -> tuple[Cell, dict, float]:
        """Defines `kept` and `kept_t`, runs `code`, interrupts it once it prints `spinning`;
        returns the cell, its one `error` message and the seconds from interrupt to reply."""
        kc = self.kc
        execute_ok(kc, self.KEPT)
        drain(kc)
        cell = Cell(kc.execute(code), code)
        # Interrupt once it runs: it prints `spinning` just before its loop (streamed while it
        # runs). The bound only detects a hang, within the test's limit: a compile on a loaded
        # machine takes seconds.
        assert read_until(kc, cell, lambda: "spinning" in cell.text(), 90), "the cell's stdout did not arrive while it ran (90 s):\n" + cell.describe()
        t0 = time.monotonic()
        self.km.interrupt_kernel()
        # A hang detector, not a latency bound: a loaded 2-core CI machine restarting the cell
        # process takes seconds; the latency is recorded in the summary.
        cell.reply = shell_request(kc, cell.msg_id, timeout=60)
        took = time.monotonic() - t0
        record(f"interrupt → execute_reply ({name})", f"{took * 1e3:.0f} ms")
        collect(kc, [cell], 10)
        assert cell.status == "error", cell.describe()
        errors = cell.of_type("error")
        assert len(errors) == 1, cell.describe()
        assert self.km.is_alive()
        return cell, errors[0]["content"], took

    @pytest.mark.limit(120)
    def test_interrupt_a_tensor_loop(self):
        kc = self.kc
        cell, error, _ = self._interrupt('println!("spinning");\nloop { let _y = (&kept_t + 1.0)?; }', "tensor loop")
        # The engine stopped the cell at its next op (a kill would be `ProcessEnded`), and says
        # that the variables survive; they do, with their values.
        assert error["ename"] == "Interrupted", cell.describe()
        assert cell.reply["content"]["ename"] == "Interrupted", cell.describe()
        assert "variables defined before this cell are kept" in cell.errors().lower(), cell.describe()
        assert execute_ok(kc, "kept").result() == "7"
        values = execute_ok(kc, "kept_t.to_vec::<f32>()?")
        assert values.result() == "[1.5, -2.0, 4.25]", values.describe()
        assert execute_ok(kc, "1 + 1").result() == "2"
        execute_ok(kc, ":del kept_t")

    @pytest.mark.limit(120)
    def test_interrupt_a_profiled_loop(self):
        """An interrupted `:profile` fails its cell as any interrupted cell does (Run All stops
        there), under the profile up to the op the interrupt stopped. (Its ops are large enough
        that the profile stays small: building one of millions of ops can take longer than the
        interrupt's grace.)"""
        kc = self.kc
        code = ':profile let big = Tensor::ones([1 << 18], &Device::Cuda(0))?; println!("spinning"); loop { let _y = big.relu()?; }'
        cell, error, _ = self._interrupt(code, ":profile")
        assert error["ename"] == "Interrupted" and cell.reply["content"]["ename"] == "Interrupted", cell.describe()
        shown = [
            "profile" if m["msg_type"] == "display_data" else m["msg_type"]
            for m in cell.of_type("display_data", "error")
            if "placelab-memory" not in m["content"].get("data", {}).get("text/html", "")
        ]
        assert shown == ["profile", "error"], cell.describe()
        assert "relu" in cell.text() and "stops there: interrupted by the user" in cell.text(), cell.describe()
        assert execute_ok(kc, "kept").result() == "7"
        execute_ok(kc, ":del kept_t")

    @pytest.mark.limit(120)
    def test_interrupt_a_loop_without_tensor_operations(self):
        kc = self.kc
        # Nothing to stop at: the kernel waits its grace period, then ends the process.
        cell, error, took = self._interrupt('println!("spinning");\nloop { std::hint::black_box(0u64); }', "plain loop")
        assert error["ename"] == "ProcessEnded", cell.describe()
        # The grace is a lower bound, which load cannot break: the cell was given its time.
        assert took >= INTERRUPT_GRACE, f"the process was ended {took:.2f} s after the interrupt, within the grace"
        message = cell.errors()
        assert f"did not stop within {INTERRUPT_GRACE:.1f} s" in message, cell.describe()
        lost = re.search(r"every variable was lost \(([^)]*)\)", message)
        assert lost and {"kept", "kept_t"} <= set(lost.group(1).split(", ")), cell.describe()
        for name in ["kept", "kept_t"]:
            assert execute(kc, name).status == "error", f"`{name}` outlived its process"
        assert execute_ok(kc, "1 + 1").result() == "2"
        execute_ok(kc, "let x = Tensor::ones([3], &Device::Cpu)?;")

    @pytest.mark.limit(120)
    def test_interrupt_while_the_cell_compiles(self):
        # Ctrl-C while a cell compiles stops the compiler: none of the cell runs, and the cell
        # process keeps every variable, however long the compile had left (before, the kill
        # after the grace ended the process, and lost them all, for a cell that never ran).
        kc = self.kc
        execute_ok(kc, self.KEPT)
        drain(kc)
        body = "\n".join(f"let _s{i} = {i}u64.wrapping_mul(3);" for i in range(1000))
        code = 'println!("the cell ran");\n' + body
        cell = Cell(kc.execute(code), code)
        # Interrupt once rustc runs for it (seen in /proc, not guessed from a delay). The compile
        # of a thousand lines takes seconds, polled every 20 ms; the deadline only detects a hang,
        # and missing it fails the test rather than interrupting whatever runs then.
        deadline = time.monotonic() + 300
        while not any(comm(p) == "rustc" for p in descendants(kernel_pid(self.km))):
            assert time.monotonic() < deadline, "rustc did not run for the cell within 300 s"
            time.sleep(0.02)
        self.km.interrupt_kernel()
        cell.reply = shell_request(kc, cell.msg_id, timeout=60)
        collect(kc, [cell], 10)
        assert cell.reply["content"]["ename"] == "Interrupted", cell.describe()
        assert "while the cell compiled: none of it ran" in cell.errors(), cell.describe()
        assert "variables defined before this cell are kept" in cell.errors().lower(), cell.describe()
        assert not any("the cell ran" in m["content"].get("text", "") for m in cell.of_type("stream")), cell.describe()
        assert execute_ok(kc, "kept").result() == "7"
        values = execute_ok(kc, "kept_t.to_vec::<f32>()?")
        assert values.result() == "[1.5, -2.0, 4.25]", values.describe()
        assert execute(kc, "_s1").status == "error", "a variable of the interrupted cell exists"
        execute_ok(kc, ":del kept_t")

    # Jupyter keeps no order between the control and shell channels: the kernel may read an
    # interrupt after the request its client sent next. Each such interrupt below is sent
    # before the next cell (`kept`) and without waiting for its reply, as jupyter_client's
    # interrupt_kernel does; the next cell must run.
    LOOP = 'println!("spin{}", "ning");\nloop { let _y = (&kept_t + 1.0)?; }'

    def _next_cell_runs(self, what: str) -> None:
        after = execute(self.kc, "kept")
        assert after.status == "ok" and after.result() == "7", f"{what}: the next cell did not run:\n" + after.describe()

    @pytest.mark.limit(900)
    def test_a_second_interrupt_never_stops_the_next_cell(self):
        """Stop clicked twice, 0, 10, 50 or 200 ms apart, once a tensor loop runs: the first
        stops it; the second stops nothing, though it may reach the kernel after the next cell
        (20 rounds a gap, every other one beside two busy loops)."""
        kc = self.kc
        execute_ok(kc, self.KEPT)
        drain(kc)
        for gap_ms in [0, 10, 50, 200]:
            for n in range(20):
                with busy_loops(2 if n % 2 else 0):
                    cell = Cell(kc.execute(self.LOOP), self.LOOP)
                    assert read_until(kc, cell, lambda: "spinning" in cell.text(), 60), cell.describe()
                    self.km.interrupt_kernel()
                    time.sleep(gap_ms / 1000)
                    self.km.interrupt_kernel()
                    cell.reply = shell_request(kc, cell.msg_id, timeout=60)
                    collect(kc, [cell], 10)
                    assert cell.reply["content"]["ename"] == "Interrupted", cell.describe()
                    self._next_cell_runs(f"two interrupts {gap_ms} ms apart, round {n}")
        execute_ok(kc, ":del kept_t")

    @pytest.mark.limit(600)
    def test_an_interrupt_after_a_cell_finished_stops_nothing(self):
        """Stop clicked 0-500 ms after a cell finished (the reply came): no cell is stopped."""
        kc = self.kc
        execute_ok(kc, self.KEPT)
        for n in range(20):
            assert execute_ok(kc, "1 + 1").result() == "2"
            time.sleep(n * 0.5 / 19)
            self.km.interrupt_kernel()
            self._next_cell_runs(f"an interrupt {n * 500 / 19:.0f} ms after a finished cell")
        execute_ok(kc, ":del kept_t")

    def test_a_cell_that_ends_its_process(self):
        cell = execute(self.kc, "std::process::exit(3);")
        assert cell.status == "error", cell.describe()
        assert "ended" in cell.text().lower(), "the error does not say the process ended:\n" + cell.describe()
        assert self.km.is_alive()
        assert execute_ok(self.kc, "1 + 1").result() == "2"
        # Variables went with the process: `x` is undefined now (it is made again for later tests).
        assert execute(self.kc, "x").status == "error"
        execute_ok(self.kc, "let x = Tensor::ones([3], &Device::Cpu)?;")

    # ---- soak --------------------------------------------------------------------------------

    @pytest.mark.limit(900)
    def test_soak_cells_and_magics_leak_nothing(self):
        kc, pid = self.kc, kernel_pid(self.km)
        # Warm up the paths the soak uses, then take the baselines.
        execute_ok(kc, "let t = Tensor::ones([64], &Device::Cuda(0))?;")
        execute_ok(kc, ":del t")
        for _ in range(20):
            execute_ok(kc, ":mem")
        baseline = memory_allocated(kc)
        rss0 = rss_bytes(pid)
        t0 = time.monotonic()
        codes = []
        for i in range(200):
            if i % 2 == 0:
                # Shadowing drops the previous `t`.
                codes.append(f"let t = Tensor::ones([{64 + i}], &Device::Cpu)?.to(&Device::Cuda(0))?;")
            else:
                codes.append("t.shape().to_vec()")
        for start in range(0, 200, 50):
            cells = execute_many(kc, codes[start : start + 50], timeout=300)
            for cell in cells:
                assert cell.status == "ok", cell.describe()
        code_s = time.monotonic() - t0
        t1 = time.monotonic()
        for _ in range(10):
            cells = execute_many(kc, [":mem"] * 100, timeout=120)
            for cell in cells:
                assert cell.status == "ok" and "cuda:0" in cell.text(), cell.describe()
        magic_s = time.monotonic() - t1
        execute_ok(kc, ":del t")
        after = memory_allocated(kc)
        rss1 = rss_bytes(pid)
        record(
            "soak",
            f"200 code cells {code_s:.1f} s, 1000 :mem {magic_s:.1f} s; kernel RSS {rss0 / 2**20:.1f} → {rss1 / 2**20:.1f} MiB",
        )
        assert after == baseline, f"memory_allocated {baseline} before the soak, {after} after"
        assert rss1 - rss0 < 20 * 2**20, f"kernel RSS grew {(rss1 - rss0) / 2**20:.1f} MiB over the soak"

    # ---- restart and shutdown (last: they replace or end the kernel) -------------------------

    @pytest.mark.limit(400)
    def test_restart(self):
        km, kc = self.km, self.kc
        old_pid = kernel_pid(km)
        old_children = descendants(old_pid)
        t0 = time.monotonic()
        km.restart_kernel(now=False)
        kc.wait_for_ready(timeout=60)
        ready = time.monotonic() - t0
        cell = execute_ok(kc, "1 + 1", timeout=FIRST_CELL_TIMEOUT)
        first = time.monotonic() - t0
        record("restart_kernel → ready; → first result", f"{ready:.2f} s; {first:.2f} s")
        assert cell.result() == "2"
        assert kernel_pid(km) != old_pid
        left = wait_gone({old_pid} | old_children, 10)
        assert not left, f"processes of the old kernel still alive after restart: {sorted(left)}"
        # A fresh session: x is gone.
        assert execute(kc, "x").status == "error"
        execute_ok(kc, "let x = Tensor::ones([3], &Device::Cpu)?;")

    def test_shutdown(self):
        km, kc = self.km, self.kc
        pid = kernel_pid(km)
        children = descendants(pid)
        work = own_compile_directory(Path(os.environ["PLACELAB_CACHE"]), km.connection_file)
        t0 = time.monotonic()
        reply = control_request(kc, "shutdown_request", {"restart": False})
        assert reply["content"]["status"] == "ok" and reply["content"]["restart"] is False, reply
        proc = km.provisioner.process
        try:
            code = proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            code = None
        record("shutdown_request → exit", f"{(time.monotonic() - t0) * 1e3:.0f} ms")
        assert code == 0, f"the kernel did not exit cleanly within 10 s of shutdown_request (exit {code})"
        left = wait_gone(children, 10)
        assert not left, f"the kernel's children outlived it: {sorted(left)}"
        assert not still_claimed(work, km.connection_file), f"the kernel's compile directory {work} outlived it"


# =============================================================================================
# Kernels of their own.


@pytest.mark.limit(400)
def test_sigterm_while_a_cell_runs_ends_the_kernel_cleanly():
    """SIGTERM is how jupyter_client ends a kernel still there 2.5 s after its shutdown_request
    (a loaded machine can take that long to delete a compile directory), and how a stopping
    server ends its kernels: the kernel stops its cell, ends the cell's process, removes its
    compile directory and exits 0."""
    km, kc, work, children = start_a_looping_cell()
    try:
        os.kill(kernel_pid(km), signal.SIGTERM)
        try:
            status = km.provisioner.process.wait(timeout=15)
        except subprocess.TimeoutExpired:
            status = None
        assert status == 0, f"the kernel did not end cleanly within 15 s of SIGTERM (exit status {status})"
        left = wait_gone(children, 10)
        assert not left, f"the kernel's children outlived it: {sorted(left)}"
        assert not still_claimed(work, km.connection_file), f"the kernel's compile directory {work} outlived it"
    finally:
        stop_kernel(km, kc)


@pytest.mark.limit(400)
def test_a_killed_kernel_takes_its_running_cell_with_it():
    """SIGKILL (jupyter_client's last resort, the OOM killer) gives the kernel no time to stop
    anything: its cell's process must still end, not loop on for ever with no one to stop it.
    (Its compile directory is left, for the next start to sweep.)"""
    km, kc, _work, children = start_a_looping_cell()
    try:
        os.kill(kernel_pid(km), signal.SIGKILL)
        km.provisioner.process.wait(timeout=15)
        left = wait_gone(children, 10)
        assert not left, f"the cell's process outlived its killed kernel: {sorted(left)}"
    finally:
        stop_kernel(km, kc)


@pytest.mark.limit(400)
def test_an_interrupted_wait_at_a_cells_end_leaves_its_checks_to_the_next_wait():
    """On a GPU (emulated here) the end of a cell waits for the work the cell queued, so that a
    bad index fails that cell. Stop clicked during that wait ends it: the cell says the device's
    checks are read at the next wait, and the next cell that waits reports the bad index as an
    earlier cell's, naming nothing of its own."""
    km, kc = start_kernel_with({"PLACELAB_SIMULATE_CUDA": None, "PLACELAB_EMULATE_CUDA": "1"})
    try:
        execute_ok(kc, "let d = Device::Cuda(0);", timeout=FIRST_CELL_TIMEOUT)
        # The gather's check, then seconds of GEMMs queued behind it: the code ends at once,
        # and the cell's end waits for the device. (Values from the host, uploads that wait for
        # the device, come first.)
        code = (
            "let a = Tensor::randn([1024, 1024], &d)?;\n"
            "let i = Tensor::from_vec(vec![0i64, 9], [2], &d)?;\n"
            "let y = Tensor::zeros([3, 2], &d)?.index_select(0, &i)?;\n"
            "let mut p = a.clone();\n"
            "for _ in 0..400 { p = p.matmul(&a)?; }\n"
            'println!("queued");'
        )
        cell = Cell(kc.execute(code), code)
        assert read_until(kc, cell, lambda: "queued" in cell.text(), 120), cell.describe()
        km.interrupt_kernel()
        cell.reply = shell_request(kc, cell.msg_id, timeout=60)
        collect(kc, [cell], 10)
        assert cell.status == "ok", cell.describe()
        assert "The wait for cuda:0 to finish this cell's work was interrupted" in cell.text() + cell.errors(), cell.describe()
        after = execute(kc, "Tensor::ones([4], &d)?.sum_all()?.item::<f32>()?", timeout=300)
        assert after.status == "error", after.describe()
        text = after.errors()
        assert "index 9 out of range in index_select" in text and "An earlier cell queued that op" in text, after.describe()
        assert "This cell defined" not in text, after.describe()
        assert execute_ok(kc, "Tensor::ones([4], &d)?.sum_all()?.item::<f32>()?").result() == "4.0"
    finally:
        stop_kernel(km, kc)


def analyzer_processes(kernel: int) -> set[int]:
    """The kernel's rust-analyzer processes: its own binary, started with EVCXR_ANALYZER_ROOT."""
    found = set()
    for pid in descendants(kernel):
        try:
            environment = Path(f"/proc/{pid}/environ").read_bytes().split(b"\0")
        except OSError:
            continue
        if any(v.startswith(b"EVCXR_ANALYZER_ROOT=") for v in environment) and alive(pid):
            found.add(pid)
    return found


@pytest.mark.limit(600)
def test_completion_gives_its_memory_back_when_quiet():
    """A completion loads rust-analyzer (hundreds of MiB) in a process of its own; after
    PLACELAB_ANALYZER_QUIET seconds without a completion or inspection the kernel ends that
    process, so the kernel holds what it held before, and the next inspection starts it again.
    (In the kernel's own process, most of that memory stayed with malloc: 417 MiB after.)"""
    quiet = 10.0
    km, kc = start_kernel_with({"PLACELAB_ANALYZER_QUIET": str(quiet)})
    try:
        execute_ok(kc, "let x = Tensor::ones([3], &Device::Cpu)?;", timeout=FIRST_CELL_TIMEOUT)
        kernel = kernel_pid(km)
        before = rss_bytes(kernel)
        code = "x.sha"
        reply = shell_request(kc, kc.complete(code, len(code)), timeout=FIRST_COMPLETION_TIMEOUT)
        c = reply["content"]
        assert "x.shape" in {code[: c["cursor_start"]] + m + code[c["cursor_end"] :] for m in c["matches"]}, c
        # Each answer through the pipe: an engine method's documentation (rust-analyzer's hover).
        code = "Tensor::zeros"
        reply = shell_request(kc, kc.inspect(code, len(code)), timeout=FIRST_COMPLETION_TIMEOUT)
        assert "zeros" in reply["content"]["data"].get("text/plain", ""), reply["content"]
        analyzers = analyzer_processes(kernel)
        assert len(analyzers) == 1, f"one rust-analyzer process, not {sorted(analyzers)}"
        left = wait_gone(analyzers, quiet + 60)
        assert not left, f"rust-analyzer's process outlived {quiet} s without a completion"
        grew = rss_bytes(kernel) - before
        assert grew < 32 << 20, f"the kernel kept {grew >> 20} MiB of the completion after it ended"
        # The next one starts it again.
        reply = shell_request(kc, kc.inspect(code, len(code)), timeout=FIRST_COMPLETION_TIMEOUT)
        assert "zeros" in reply["content"]["data"].get("text/plain", ""), reply["content"]
        assert len(analyzer_processes(kernel)) == 1
    finally:
        stop_kernel(km, kc)


def start_a_looping_cell() -> tuple:
    """A kernel of its own running a tensor loop: (km, kc, its compile directory, its children)."""
    km, kc = start_kernel()
    execute_ok(kc, "let t = Tensor::ones([3], &Device::Cpu)?;", timeout=FIRST_CELL_TIMEOUT)
    work = own_compile_directory(Path(os.environ["PLACELAB_CACHE"]), km.connection_file)
    code = 'println!("spinning");\nloop { let _y = (&t + 1.0)?; }'
    cell = Cell(kc.execute(code), code)
    assert read_until(kc, cell, lambda: "spinning" in cell.text(), CELL_TIMEOUT), cell.describe()
    children = descendants(kernel_pid(km))
    assert children, "the kernel has no cell process while a cell runs"
    return km, kc, work, children
