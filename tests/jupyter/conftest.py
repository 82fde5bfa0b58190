"""Bounded waits for every test, and the timings table in pytest's summary.

Some library waits have no timeout (jupyter_kernel_test's `IopubWelcomeTests` reads iopub
until a message comes; `get_non_kernel_info_reply()` waits forever): a SIGALRM per test turns a
hang into a failure. `@pytest.mark.limit(seconds)` raises the default for a long test.
"""

from __future__ import annotations

import contextlib
import os
import signal

import pytest

import kernel_helpers

DEFAULT_LIMIT = float(os.environ.get("PLACELAB_TEST_LIMIT", "240"))


class TestTimeout(Exception):
    pass


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line("markers", "limit(seconds): this test's time limit")


def _limit(item: pytest.Item) -> float:
    marker = item.get_closest_marker("limit")
    return float(marker.args[0]) if marker else DEFAULT_LIMIT


@contextlib.contextmanager
def alarm(limit: float, what: str):
    """Raises TestTimeout in the test's thread if the block runs past `limit` seconds."""

    def on_alarm(signum, frame):
        raise TestTimeout(f"{what} ran past its {limit:.0f} s limit")

    previous = signal.signal(signal.SIGALRM, on_alarm)
    signal.setitimer(signal.ITIMER_REAL, limit)
    try:
        yield
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, previous)


@pytest.hookimpl(wrapper=True)
def pytest_runtest_call(item: pytest.Item):
    with alarm(_limit(item), item.nodeid):
        return (yield)


@pytest.hookimpl(wrapper=True)
def pytest_runtest_setup(item: pytest.Item):
    # Class set-up starts a kernel (and jupyter_kernel_test's waits for its first messages).
    limit = max(_limit(item), kernel_helpers.FIRST_CELL_TIMEOUT + 60)
    with alarm(limit, f"set-up of {item.nodeid}"):
        return (yield)


@pytest.hookimpl(wrapper=True)
def pytest_runtest_teardown(item: pytest.Item, nextitem):
    with alarm(60, f"tear-down of {item.nodeid}"):
        return (yield)


def pytest_terminal_summary(terminalreporter, exitstatus, config) -> None:
    if kernel_helpers.TIMINGS:
        terminalreporter.section("placelab kernel timings")
        for name, value in kernel_helpers.TIMINGS.items():
            terminalreporter.write_line(f"{name}: {value}")
