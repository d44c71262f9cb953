"""The host reads a kernel's channel from exactly one thread at a time, whatever the thread
scheduling: a leader thread that starts late must not make the watch start a second reader (which
then eats the answer to the next ``reset``/``bind`` or run, and the session stalls)."""

from __future__ import annotations

import contextlib
import threading
import time
from collections.abc import Callable, Iterator
from typing import Any

import pytest

from codeact import Runtime, SandboxConfig, tool
from codeact.sandbox import _leader
from codeact.sandbox import driver as driver_module


@tool
def price(sku: str) -> float:
    """Unit price of a product.

    Args:
        sku: Product code.
    """
    return float(len(sku))


class _LateFirstLeader:
    """The driver's leader threads, with the first leader's start held back (as an overloaded
    machine does): long enough for the watch to take it for a busy leader and start another."""

    def __init__(self, real: Any, delay_s: float) -> None:
        self.real = real
        self.delay_s = delay_s
        self.started = 0
        self.lock = threading.Lock()

    def start(self, fn: Callable[[], None]) -> None:
        with self.lock:
            self.started += 1
            first = self.started == 1
        if not first:
            self.real.start(fn)
            return

        def late() -> None:
            time.sleep(self.delay_s)
            fn()

        self.real.start(late)


@pytest.fixture()
def late_leaders(monkeypatch: pytest.MonkeyPatch) -> Iterator[_LateFirstLeader]:
    late = _LateFirstLeader(_leader.LEADERS, delay_s=40 * _leader.WATCH_S)
    monkeypatch.setattr(_leader, "LEADERS", late)
    yield late


def test_a_late_first_leader_leaves_one_reader(late_leaders: _LateFirstLeader) -> None:
    """The run hands its plain call to a leader that starts late; the watch starts a second one.
    Once the first has run its call, no third reader may start while the second reads: the reset
    that follows the run gets its answer (before the fix a stale reader ate it: 30 s, then killed)."""
    config = SandboxConfig(backend="local", policy="none", timeout_s=20)
    with Runtime([price], config) as rt, rt.session() as session:
        result = session.run("import time\np = price(sku='abc')\ntime.sleep(0.3)\np")
        assert result.ok and result.value == 3.0, result
        assert late_leaders.started == 2, "a third reader was started while the second read"
        kernel = session.sandbox_state.driver
        assert kernel is not None
        for _ in range(20):
            kernel.reset(timeout_s=3)  # raises SandboxError (kernel killed) when a stale reader ate 'ready'
        again = session.run("p = price(sku='abcd')\np")
        assert again.ok and again.value == 4.0, again


def test_a_kernel_that_stops_reading_does_not_hold_a_host_writer(monkeypatch: pytest.MonkeyPatch) -> None:
    """The driver's socket blocks (one recv per frame) but every write has a total deadline: with
    the kernel stopped (SIGSTOP: alive, reading nothing), a reply larger than the socket's buffers
    is given up after ``SEND_TIMEOUT_S`` instead of holding the thread that writes it, and the
    kernel is killed (the frame is half written)."""
    import os
    import signal

    from codeact.sandbox.pool import open_kernel

    monkeypatch.setattr(driver_module, "SEND_TIMEOUT_S", 0.3)
    kernel = open_kernel(SandboxConfig(backend="local", policy="none"), "")
    pid = kernel.sandbox._proc.pid  # type: ignore[attr-defined]
    try:
        assert kernel.run("1", lambda *a: None, 10, output_cap=100, output_limit=1000, grace_s=1).termination == "completed"
        os.kill(pid, signal.SIGSTOP)
        writer = threading.Thread(target=kernel.reply, args=(1, {"ok": True, "value": "x" * 20_000_000}), daemon=True)
        writer.start()  # the kernel reads none of it
        writer.join(10)
        assert not writer.is_alive(), "the write was not bounded"
        assert kernel.dead, "a frame half written was left on a live channel"  # the kernel is killed
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGCONT)
        kernel.sandbox.close()


def test_a_frame_read_by_a_stale_reader_kills_rather_than_stalls(
        late_leaders: _LateFirstLeader, monkeypatch: pytest.MonkeyPatch) -> None:
    """Defense in depth: with the stale busy marker put back (the leaders' ``busy`` before the
    fix), two threads read. Whichever frame the stale one reads (its run's ``done``, or the
    answer to the reset after it), the sandbox is killed at once: the run or the reset fails now,
    never after waiting out a timeout for a frame that was dropped."""
    from codeact import SandboxError

    real_busy = _leader.busy

    def stale_busy(run: Any, me: int, timer: Any) -> bool:
        run.busy = timer  # the marker before the fix: set even when this thread no longer leads
        return real_busy(run, me, timer)

    monkeypatch.setattr(_leader, "busy", stale_busy)
    config = SandboxConfig(backend="local", policy="none", timeout_s=20)
    with Runtime([price], config) as rt, rt.session() as session:
        result = session.run("import time\np = price(sku='abc')\ntime.sleep(0.3)\np")
        assert late_leaders.started == 3, "the scenario needs a stale second reader"
        if not result.ok:  # the stale reader read this run's own done frame
            assert result.termination == "killed" and result.state_lost, result
            assert result.duration_ms < 10_000, "killed at once, not at the run's deadline"
            return
        kernel = session.sandbox_state.driver
        assert kernel is not None
        try:  # the stale reader is still waiting: it may eat an answer to these
            for _ in range(20):
                kernel.reset(timeout_s=30)
        except SandboxError as exc:
            assert "did not answer" not in str(exc) and kernel.dead, exc