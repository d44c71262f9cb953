"""Work moved off the latency path must not change what a session reports: the kernel's warm-up
after setup, the pool's head start on the workspace snapshot, and history/cells settled while the
next run executes."""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Iterator
from typing import Any

import pytest

from codeact import Runtime, SandboxConfig
from codeact.sandbox.driver import KernelDriver
from codeact.sandbox.pool import SandboxPool, open_kernel


def test_the_kernel_warm_up_leaves_no_trace(runtime: Runtime) -> None:
    """The warm-up runs a cell in a scratch namespace: the first real cell is still cell 1, no name
    leaks into the namespace, and a traceback points at the user's cell."""
    with runtime.session() as session:
        names = session.run("sorted(k for k in globals() if not k.startswith('__'))").value
        assert "None" not in names and "_" not in names
        failed = session.run("1 / 0")
        assert failed.error is not None and failed.error.type == "ZeroDivisionError"
        assert '"<cell-2>", line 1' in failed.error.traceback, failed.error.traceback
        assert session.run("x = 5\nx").value == 5


def test_a_pooled_first_run_still_reports_the_files_it_writes(docker_image: str) -> None:
    """The pool snapshots the empty workspace ahead; the first run compares against it (one stat)
    and must still see what it wrote, and the second run what it changed."""
    config = SandboxConfig(backend="docker", pool_size=1, timeout_s=30)
    with Runtime([], config) as rt:
        assert rt.pool is not None and rt.pool.wait_ready(120)
        with rt.session() as session:
            first = session.run("open('a.txt', 'w').write('hi')")
            assert first.ok, first
            assert [f.path for f in first.files] == ["a.txt"]
            second = session.run("open('b.txt', 'w').write('yo')")
            assert [f.path for f in second.files] == ["b.txt"]


def test_a_failing_prepare_step_does_not_stop_the_pool() -> None:
    """``prepare`` is a head start only: when it raises, the kernel is still pooled and served."""
    calls: list[KernelDriver] = []

    def prepare(driver: KernelDriver) -> None:
        calls.append(driver)
        raise RuntimeError("injected")

    config = SandboxConfig(backend="local", policy="none")
    pool = SandboxPool(config, 1, "", prepare=prepare)
    try:
        assert pool.wait_ready(60), pool.last_error
        driver = pool.acquire()
        assert driver is not None and calls and calls[0] is driver and driver.prepared is None
        driver.sandbox.close()
    finally:
        pool.close()


def test_a_raising_after_send_hook_does_not_break_the_run() -> None:
    """``after_send`` runs while the kernel executes: what it raises is dropped, the run ends normally."""
    config = SandboxConfig(backend="local", policy="none")
    driver = open_kernel(config, "")
    try:
        def boom() -> None:
            raise RuntimeError("injected")

        outcome = driver.run("21 * 2", lambda *a: None, 10, output_cap=1000, output_limit=10_000,
                             grace_s=1, after_send=boom)
        assert outcome.termination == "completed" and outcome.done is not None and outcome.done.value == 42
    finally:
        driver.sandbox.close()


@pytest.mark.parametrize("look", ["history", "cells"])
def test_the_last_run_is_in_history_and_cells_as_soon_as_it_returns(runtime: Runtime, look: str) -> None:
    """Recording a run is deferred to while the next one executes, but a look at ``history`` or
    ``cells`` settles it first, from any thread, exactly once."""
    with runtime.session() as session:
        result = session.run("y = 1")
        seen: list[Any] = []
        readers = [threading.Thread(target=lambda: seen.append(list(getattr(session, look))))
                   for _ in range(4)]
        for reader in readers:
            reader.start()
        for reader in readers:
            reader.join()
        assert all(len(entries) == 1 for entries in seen), seen
        if look == "history":
            assert session.history[-1] is result
        else:
            assert session.cells[-1].code == "y = 1" and session.cells[-1].index == 1
        session.run("y += 1")
        assert len(session.history) == 2 and [c.index for c in session.cells] == [1, 2]


@pytest.mark.parametrize("where", ["caller", "leader"])
def test_a_host_bug_while_a_call_is_handled_ends_the_run_at_once(monkeypatch: pytest.MonkeyPatch, where: str) -> None:
    """Fault injection, a bug in codeact: dispatching the first call raises on the thread that
    started the run (``caller``), or building the second call's reply raises on the leader thread
    that reads frames by then (``leader``). The run ends now as ``killed`` with the reason, not at
    its deadline, and the session's next run starts a new sandbox."""
    from codeact import tool
    from codeact.runtime import toolhost

    @tool
    def echo(n: int) -> int:
        """Echo.

        Args:
            n: a number.
        """
        return n

    def broken(*_: Any, **__: Any) -> Any:
        raise RuntimeError("injected")

    real_payload = toolhost.ToolHost._payload
    seen = [0]

    def payload(self: Any, ledger: Any, record: Any) -> Any:
        seen[0] += 1
        return broken() if seen[0] > 1 else real_payload(self, ledger, record)

    config = SandboxConfig(backend="local", policy="none", timeout_s=60)
    with Runtime([echo], config) as rt, rt.session() as session:
        assert session.run("echo(n=0)").value == 0
        seen[0] = 0
        if where == "caller":
            monkeypatch.setattr(toolhost.ToolHost, "dispatch", broken)
        else:
            monkeypatch.setattr(toolhost.ToolHost, "_payload", payload)
        result = session.run("echo(n=1)\necho(n=2)")
        assert result.termination == "killed" and result.state_lost, result
        assert result.reason is not None and "injected" in result.reason
        assert result.duration_ms < 30_000  # ended now, not at the 60 s deadline
        monkeypatch.undo()
        assert session.run("echo(n=3)").value == 3


class _Clock:
    """The pool's ``time`` module with a ``monotonic()`` the test moves by hand: a refill's delay is
    then checked against the clock's readings, not against how fast a loaded machine runs."""

    def __init__(self) -> None:
        self.now = 1000.0

    def monotonic(self) -> float:
        return self.now

    def __getattr__(self, name: str) -> Any:
        import time

        return getattr(time, name)


@pytest.fixture()
def clock(monkeypatch: pytest.MonkeyPatch) -> _Clock:
    from codeact.sandbox import pool as pool_module

    fake = _Clock()
    monkeypatch.setattr(pool_module, "time", fake)
    return fake


@pytest.fixture()
def opened_at(monkeypatch: pytest.MonkeyPatch, clock: _Clock) -> list[float]:
    """The clock's reading when the pool started each kernel, in order."""
    from codeact.sandbox import pool as pool_module

    opened: list[float] = []
    real = pool_module.open_kernel

    def timed(*args: Any, **kwargs: Any) -> KernelDriver:
        opened.append(clock.now)
        return real(*args, **kwargs)

    monkeypatch.setattr(pool_module, "open_kernel", timed)
    return opened


@contextlib.contextmanager
def _ready_pool(size: int, *, delay_s: float) -> Iterator[SandboxPool]:
    """A local pool of ``size`` with refills held back ``delay_s``, filled; closed afterwards."""
    pool = SandboxPool(SandboxConfig(backend="local", policy="none"), size, "")
    pool.REFILL_DELAY_S = delay_s
    try:
        assert pool.wait_ready(60), pool.last_error
        yield pool
    finally:
        pool.close()


def _move(pool: SandboxPool, clock: _Clock, to: float) -> None:
    """Set the clock and wake the refill thread to read it."""
    with pool._cond:
        clock.now = to
        pool._cond.notify_all()


def _opened(pool: SandboxPool, opened: list[float], count: int) -> None:
    """Wait (generously) until the pool has started ``count`` kernels."""
    import time

    deadline = time.monotonic() + 60
    while len(opened) < count and time.monotonic() < deadline:
        time.sleep(0.01)
    assert len(opened) >= count, pool.last_error


def test_a_refill_starts_only_after_the_delay_and_still_fills(opened_at: list[float], clock: _Clock) -> None:
    """The pool holds a refill back ``REFILL_DELAY_S`` after an acquire (the acquiring session's
    first run goes first), and then fills."""
    opened = opened_at
    with _ready_pool(1, delay_s=0.5) as pool:
        acquired = clock.now
        driver = pool.acquire()
        assert driver is not None
        driver.sandbox.close()
        _move(pool, clock, acquired + 0.25)  # not yet due: a refill now would read 0.25
        _move(pool, clock, acquired + 0.5)
        assert pool.wait_ready(60), pool.last_error
        assert opened[1:] == [acquired + 0.5]


def test_each_refill_waits_for_its_own_acquire_only(opened_at: list[float], clock: _Clock) -> None:
    """A second acquire inside the first one's delay does not put the first one's refill off:
    with acquires coming faster than the delay, the pool would otherwise never refill."""
    opened = opened_at
    with _ready_pool(2, delay_s=1.0) as pool:
        acquired = clock.now
        first = pool.acquire()
        _move(pool, clock, acquired + 0.6)
        second = pool.acquire()
        assert first is not None and second is not None
        first.sandbox.close()
        second.sandbox.close()
        _move(pool, clock, acquired + 1.0)  # the first acquire's refill is due; the second's is not
        _opened(pool, opened, 3)  # waiting for the latest acquire's delay, it would never come
        _move(pool, clock, acquired + 1.6)
        assert pool.wait_ready(60), pool.last_error
        assert opened[2:] == [acquired + 1.0, acquired + 1.6]
