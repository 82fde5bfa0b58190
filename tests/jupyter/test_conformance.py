"""jupyter_kernel_test's protocol conformance suite against `placelab kernel`.

Every message is checked against the 5.x schemas. The kernel spec name comes from
PLACELAB_KERNEL_NAME (tests/jupyter.rs installs it and sets JUPYTER_PATH).
"""

from __future__ import annotations

import unittest

import jupyter_kernel_test

from kernel_helpers import FIRST_CELL_TIMEOUT, KERNEL_NAME, execute_ok


class PlacelabIopubWelcomeTests(jupyter_kernel_test.IopubWelcomeTests):
    """JEP 65: the first iopub message after subscribing is `iopub_welcome`."""

    kernel_name = KERNEL_NAME
    support_iopub_welcome = True


class PlacelabKernelTests(jupyter_kernel_test.KernelTests):
    kernel_name = KERNEL_NAME

    @classmethod
    def setUpClass(cls) -> None:
        super().setUpClass()
        # The first cell waits for the engine's compile into the evaluator (seconds when the
        # cache is warm), longer than the suite's 15 s per cell; it also defines the variable
        # `test_inspect` looks up.
        try:
            execute_ok(cls.kc, "let x = Tensor::ones([3], &Device::Cpu)?;", timeout=FIRST_CELL_TIMEOUT)
        except BaseException:
            cls.tearDownClass()
            raise

    language_name = "rust"
    file_extension = ".rs"

    code_hello_world = 'println!("hello, world");'
    code_stderr = 'eprintln!("oops");'
    # A compile error: exactly one `error` message on iopub, nothing else.
    code_generate_error = 'let a: i32 = "s";'

    code_execute_result = [
        {"code": "40 + 2", "result": "42"},
        # A tensor value: a card, as HTML (and text/plain).
        {"code": "Tensor::ones([3], &Device::Cpu)?", "mime": "text/html"},
    ]

    code_display_data = [
        # `.show()` displays the card; the move also gives `:plot transfers` a transfer to draw.
        {"code": "Tensor::ones([3], &Device::Cpu)?.to(&Device::Cuda(0))?.show();", "mime": "text/html"},
        {"code": ":plot transfers", "mime": "image/svg+xml"},
    ]

    complete_code_samples = ["let x = 1;", "40 + 2", 'println!("hello, world");', "fn f() {}"]
    incomplete_code_samples = ["fn f() {", "let v = vec![", "let s = (1,"]
    invalid_code_samples = ["}", "let x = (1]"]

    # Matches are checked for content by test_client.py (`zeros` among them); here the reply's
    # shape is validated.
    completion_samples = [{"text": "Tensor::ze"}]

    code_inspect_sample = "x"

    supported_history_operations = ("tail", "range", "search")
    # A glob over whole inputs, as IPython's history search: matches only `40 + 2`.
    code_history_pattern = "40 + *"

    # IPython's `clear_output()`; test_client.py checks its order and what it takes back.
    code_clear_output = "placelab::show::clear_output(false);"

    def test_pager(self) -> None:
        # The suite skips it when `code_page_something` is empty, with a reason that names no cause.
        raise unittest.SkipTest(
            "the kernel sends no `page` payloads: `:help` answers as cell output and documentation "
            "comes through inspect_request (test_client.py tests both)"
        )
