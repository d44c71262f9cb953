"""Calls left behind never hold what they took: a plain call still hung when its run ends gives its
session slot back, a sync call past its timeout lends the pool a thread, an async call that ignores
its cancellation is given up at its timeout, a tool's malformed ToolError is still recorded, and
closing a session mid-run does not wait for the run to end by itself."""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from dataclasses import replace
from typing import Any

import pytest

from codeact import Runtime, tool
from codeact.errors import ToolError
from tests._configs import LOCAL


@pytest.fixture
def release() -> Iterator[threading.Event]:
    event = threading.Event()
    yield event
    event.set()  # let the hung tools' threads end


def test_a_plain_call_hung_past_its_run_gives_its_slot_back(release: threading.Event) -> None:
    @tool(timeout_s=60)
    def hang(i: int) -> int:
        """Hangs.

        Args:
            i: anything.
        """
        release.wait(60)
        return i

    @tool
    def quick(i: int) -> int:
        """Answers.

        Args:
            i: anything.
        """
        return i

    config = LOCAL.model_copy(update={"timeout_s": 2.0, "grace_s": 0.5})
    with Runtime([hang, quick], config) as rt, rt.session() as s:
        # every call that began gets a lent thread (past the cap one keeps its slot by design, as
        # test_threads_a_session_pins_past_timeouts_are_capped shows): how many began is timing
        rt.host.limits = replace(rt.host.limits, max_lent_threads_per_session=30)
        first = s.run("parallel(hang, range(30))")
        assert first.termination == "timeout" and len(first.calls) >= 2
        assert all(not c.ok and c.finished for c in first.calls)
        deadline = time.monotonic() + 60  # calls read at the very end release their own slot soon after
        while s.calls.gate.running and time.monotonic() < deadline:
            time.sleep(0.05)
        assert s.calls.gate.running == 0
        later = s.run("quick(7)")
        assert later.ok and later.value == 7, later


def test_a_hung_sync_call_past_its_timeout_lends_the_pool_a_thread(release: threading.Event) -> None:
    @tool(timeout_s=0.5, cacheable=True)  # cacheable: through the loop, on a pool thread
    def stuck(i: int) -> int:
        """Hangs.

        Args:
            i: anything.
        """
        release.wait(60)
        return i

    @tool(cacheable=True)
    def fine(i: int) -> int:
        """Answers.

        Args:
            i: anything.
        """
        return i

    with Runtime([stuck, fine], LOCAL, max_concurrency=4) as rt:
        pool = rt.loop.pool
        workers = pool.max_workers
        with rt.session() as a, rt.session() as b:
            flood = a.run("parallel(stuck, range(4))")
            assert len(flood.calls) == 4, flood
            assert all(c.error is not None and c.error.code == "timeout" for c in flood.calls), flood.calls
            assert pool.max_workers == workers + 4  # one lent per hung call
            other = b.run("fine(3)")
            assert other.ok and other.value == 3, other
        release.set()
        deadline = time.monotonic() + 60
        while pool.max_workers != workers and time.monotonic() < deadline:
            time.sleep(0.05)
        assert pool.max_workers == workers  # given back once the tools returned


def test_an_async_tool_that_ignores_cancellation_is_given_up_at_its_timeout(release: threading.Event) -> None:
    returned = threading.Event()

    @tool(timeout_s=0.5)
    async def stubborn(i: int) -> int:
        """Ignores its cancellation: goes on until released.

        Args:
            i: anything.
        """
        import asyncio

        try:
            while not release.is_set():
                await asyncio.sleep(0.01)
        except asyncio.CancelledError:
            while not release.is_set():
                await asyncio.sleep(0.01)
        returned.set()
        return i

    with Runtime([stubborn], LOCAL) as rt, rt.session() as s:
        result = s.run("try:\n    stubborn(1)\nexcept ToolError as e:\n    code = e.code\ncode")
        assert result.ok and result.value == "timeout", result
        assert not returned.is_set()  # given up, not waited for: the tool still runs


def test_a_lazy_result_is_made_json_within_the_tools_timeout(release: threading.Event) -> None:
    drained = threading.Event()

    @tool(timeout_s=0.5, cacheable=True)
    def rows(n: int) -> Any:
        """Rows, the second one only once released.

        Args:
            n: how many.
        """
        def gen() -> Iterator[int]:
            for i in range(n):
                if i == 1:
                    release.wait(60)
                yield i
            drained.set()
        return gen()

    with Runtime([rows], LOCAL) as rt, rt.session() as s:
        result = s.run("try:\n    rows(20)\nexcept ToolError as e:\n    code = e.code\ncode")
        assert result.ok and result.value == "timeout", result
        assert not drained.is_set()  # cut at the timeout, not read to its end


@pytest.mark.parametrize("kind", ["inline", "pool", "async"])
def test_a_malformed_tool_error_is_still_recorded(kind: str) -> None:
    if kind == "async":
        async def broken(i: int) -> int:
            """Raises a ToolError without a message.

            Args:
                i: anything.
            """
            raise ToolError("not_found", None)  # type: ignore[arg-type]
    else:
        def broken(i: int) -> int:
            """Raises a ToolError without a message.

            Args:
                i: anything.
            """
            raise ToolError("not_found", None)  # type: ignore[arg-type]

    @tool(timeout_s=0.01)
    def slow() -> None:
        """Makes plain tools run on the pool for a while (it is slow)."""
        time.sleep(0.05)

    with Runtime([tool(broken), slow], LOCAL) as rt, rt.session() as s:
        s.run("kept = 41")
        if kind == "pool":
            s.run("slow()")  # a plain tool over the inline budget sends this name's calls to the pool...
            rt.host._slow.add("broken")  # ... which is what this marks for ``broken``
        result = s.run("try:\n    broken(1)\nexcept ToolError as e:\n    got = [e.code, e.message]\ngot")
        assert result.ok and result.value[0] == "not_found" and "None" in result.value[1], result
        [call] = result.calls
        assert call.finished and call.error is not None and call.error.code == "not_found"
        after = s.run("kept + 1")
        assert after.ok and after.value == 42


@pytest.mark.parametrize("closing", ["session", "runtime"])
def test_closing_mid_run_does_not_wait_for_the_run(closing: str, release: threading.Event) -> None:
    running = threading.Event()

    @tool(timeout_s=60)
    def hang() -> None:
        """Hangs."""
        running.set()
        release.wait(60)

    config = LOCAL.model_copy(update={"timeout_s": 30.0})
    rt = Runtime([hang], config)
    s = rt.session().start()
    ended: dict[str, Any] = {}

    def run() -> None:
        ended["result"] = s.run("hang()")

    runner = threading.Thread(target=run)
    runner.start()
    assert running.wait(60)
    (s.close if closing == "session" else rt.close)()
    runner.join(60)
    rt.close()
    # killed by the close: a close that waited for the run would see it end by its timeout instead
    result = ended["result"]
    assert result.termination == "killed" and len(result.calls) == 1 and not result.calls[0].ok


def test_a_call_cut_by_an_interrupt_says_so(release: threading.Event) -> None:
    running = threading.Event()

    @tool(timeout_s=60)
    def hang() -> None:
        """Hangs."""
        running.set()
        release.wait(60)

    with Runtime([hang], LOCAL) as rt, rt.session() as s:
        threading.Thread(target=lambda: running.wait(60) and s.interrupt(), daemon=True).start()
        result = s.run("hang()")
        assert result.termination == "interrupted"
        [call] = result.calls
        assert call.error is not None and "the run ended (interrupted)" in call.error.message, call.error


def test_cancelling_arun_interrupts_the_code() -> None:
    import asyncio

    running = threading.Event()

    @tool
    def started() -> None:
        """Says the code runs."""
        running.set()

    with Runtime([started], LOCAL) as rt, rt.session() as s:
        s.run("x = 41")

        async def cancel_midway() -> None:
            task = asyncio.create_task(s.arun("started()\nimport time\ntime.sleep(60)\nx = 0"))
            assert await asyncio.to_thread(running.wait, 60)
            task.cancel()
            with pytest.raises(asyncio.CancelledError):
                await task

        asyncio.run(cancel_midway())
        after = s.run("x + 1")  # the cancelled code did not go on (it would have set x = 0)
        assert after.ok and after.value == 42
        assert s.history[-2].termination == "interrupted"

        async def cancel_before_it_starts() -> None:
            task = asyncio.create_task(s.arun("x = 0"))
            await asyncio.sleep(0.3)  # its worker likely waits for the session by now (either way it must not run)
            task.cancel()
            with pytest.raises(asyncio.CancelledError):
                await task
            s._lock.release()  # only now, after the cancel, may the worker take the session

        s._lock.acquire()  # another run holds the session until after the cancel
        asyncio.run(cancel_before_it_starts())  # returns once its worker is done (asyncio.run waits)
        assert s.run("x").value == 41  # the cancelled run never started


@pytest.mark.parametrize("cacheable", [False, True])  # the plain lane's expiry, and the loop's
def test_threads_a_session_pins_past_timeouts_are_capped(release: threading.Event, cacheable: bool) -> None:
    @tool(timeout_s=0.2, cacheable=cacheable)
    def stuck(i: int) -> int:
        """Hangs.

        Args:
            i: anything.
        """
        release.wait(60)
        return i

    with Runtime([stuck], LOCAL) as rt, rt.session() as s:
        rt.host.limits = replace(rt.host.limits, max_lent_threads_per_session=2)
        pool = rt.loop.pool
        workers = pool.max_workers
        result = s.run("out = []\nfor i in range(5):\n    try:\n        stuck(i)\n"
                       "    except ToolError as e:\n        out.append(e.code)\nout")
        assert result.value[:2] == ["timeout", "timeout"], result  # two threads lent: the cap
        assert pool.max_workers == workers + 2
        # past the cap the next call keeps its slot instead; then calls are refused, retryable
        assert "rate_limited" in result.value[2:], result.value
        refused = [c.error for c in result.calls if c.error is not None and c.error.code == "rate_limited"]
        assert refused and refused[0].retryable and "hold host threads" in refused[0].message
        release.set()
        deadline = time.monotonic() + 60
        while pool.max_workers != workers and time.monotonic() < deadline:
            time.sleep(0.05)
        assert pool.max_workers == workers
        assert s.run("stuck(7)").value == 7  # all given back once the tools returned
