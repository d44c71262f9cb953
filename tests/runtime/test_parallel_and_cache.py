"""Concurrent calls from code (threads, ``parallel``, ``asyncio.gather`` over async stubs) and reuse
of cacheable calls across the runs of a session. Concurrency is shown by a max-in-flight counter in
the tool, never by the clock."""

from __future__ import annotations

import textwrap
import threading
import time
from collections.abc import Iterator
from dataclasses import replace
from typing import Any

import pytest

from codeact import Runtime, SandboxConfig, ToolError, Toolset, tool
from tests.conftest import Counter

#: What a cell does to get the async stubs: the kernel's ``aio`` when it provides one, else made here.
AIO = ""  # the kernel provides ``aio`` (async twins of the stubs) in every namespace


def make_tools(counter: Counter) -> Toolset:
    @tool
    def slow(seconds: float, fail: bool = False) -> float:
        """Sleep, then answer (or fail).

        Args:
            seconds: How long.
            fail: Fail instead of answering.
        """
        with counter.lock:
            counter.in_flight += 1
            counter.max_in_flight = max(counter.max_in_flight, counter.in_flight)
        try:
            time.sleep(seconds)
        finally:
            with counter.lock:
                counter.in_flight -= 1
        counter.hit("slow")
        if fail:
            raise ToolError("upstream_error", "failed on purpose")
        return seconds

    @tool(cacheable=True)
    def get_weather(city: str) -> dict[str, Any]:
        """Current weather (read-only, so cacheable).

        Args:
            city: City name.
        """
        counter.hit("get_weather")
        time.sleep(0.1)
        if city == "Atlantis" and counter.count("get_weather") == 1:
            raise ToolError("upstream_error", "the first lookup of Atlantis fails")
        return {"city": city, "temperature": 20.0}

    @tool
    def now_playing(city: str) -> str:
        """Not cacheable: the answer changes.

        Args:
            city: City name.
        """
        counter.hit("now_playing")
        return f"song in {city}"

    return Toolset([slow, get_weather, now_playing])


@pytest.fixture
def counter() -> Counter:
    return Counter()


@pytest.fixture(params=["local", "docker"])
def rt(request: pytest.FixtureRequest, counter: Counter) -> Iterator[Runtime]:
    if request.param == "docker":
        request.getfixturevalue("docker_image")
    config = SandboxConfig(backend=request.param, policy="none", timeout_s=30)
    with Runtime(make_tools(counter), config) as runtime:
        yield runtime


@pytest.fixture
def local_rt(counter: Counter) -> Iterator[Runtime]:
    with Runtime(make_tools(counter), SandboxConfig(backend="local", policy="none", timeout_s=30)) as runtime:
        yield runtime


def run(runtime: Runtime, code: str) -> Any:
    with runtime.session() as session:
        return session.run(textwrap.dedent(code))


def test_gather_over_async_stubs_runs_calls_concurrently(rt: Runtime, counter: Counter) -> None:
    result = run(rt, AIO + textwrap.dedent("""
        import asyncio
        pit, bj = await asyncio.gather(aio.slow(1.0), aio.slow(seconds=1.0))
        [pit, bj]
    """))
    assert result.ok, result.error
    assert result.value == [1.0, 1.0]
    assert counter.max_in_flight == 2  # both were running at once: max(t1, t2), not t1 + t2
    assert len({c.id for c in result.calls}) == 2 and all(c.ok for c in result.calls)


def test_parallel_helper_keeps_every_result(local_rt: Runtime, counter: Counter) -> None:
    result = run(local_rt, """
        out = parallel(lambda args: slow(*args), [(0.3, False), (0.3, True), (0.3, False), (0.3, False)])
        [o if not isinstance(o, Exception) else o.code for o in out]
    """)
    assert result.ok, result.error
    assert result.value == [0.3, "upstream_error", 0.3, 0.3]  # one failure loses nothing else
    assert counter.max_in_flight >= 2
    assert len({c.id for c in result.calls}) == 4
    assert sorted(c.ok for c in result.calls) == [False, True, True, True]


def test_gather_keeps_failures_apart_and_async_stubs_match_the_sync_ones(local_rt: Runtime) -> None:
    result = run(local_rt, AIO + textwrap.dedent("""
        import asyncio, inspect
        out = await asyncio.gather(aio.slow(0.1), aio.slow(0.1, fail=True), return_exceptions=True)
        same = inspect.signature(aio.slow) == inspect.signature(slow) and aio.slow.__doc__ == slow.__doc__
        async def one():
            try:
                await aio.slow(0, True)
            except ToolError as e:
                return e.code
        [out[0], type(out[1]).__name__, out[1].code, same, await one(), inspect.iscoroutinefunction(aio.slow)]
    """))
    assert result.ok, result.error
    assert result.value == [0.1, "ToolError", "upstream_error", True, "upstream_error", True]


def test_the_host_bounds_concurrency(local_rt: Runtime, counter: Counter) -> None:
    local_rt.host.limits = replace(local_rt.host.limits, max_concurrency=2)
    result = run(local_rt, "parallel(lambda _: slow(0.2), range(6))")
    assert result.ok and result.value == [0.2] * 6
    assert counter.max_in_flight == 2


def test_revised_action_reuses_a_cacheable_call(rt: Runtime, counter: Counter) -> None:
    with rt.session() as session:
        first = session.run("w = get_weather('Beijing')\nnow_playing('Beijing')")
        revised = session.run("w = get_weather('Beijing')\nsong = now_playing('Beijing')\n[w, song]")
    assert first.ok and revised.ok, (first.error, revised.error)
    assert revised.value == [{"city": "Beijing", "temperature": 20.0}, "song in Beijing"]
    assert [(c.name, c.cached) for c in revised.calls] == [("get_weather", True), ("now_playing", False)]
    assert revised.calls[0].result == first.calls[0].result
    assert counter.count("get_weather") == 1  # the tool's own view: it ran once
    assert counter.count("now_playing") == 2  # not cacheable: it ran twice
    assert revised.calls[0].id != first.calls[0].id  # ids are unique within the session


def test_failed_calls_other_arguments_and_other_sessions_are_not_reused(local_rt: Runtime, counter: Counter) -> None:
    with local_rt.session() as session:
        failed = session.run("get_weather('Atlantis')")
        retried = session.run("get_weather('Atlantis')")
        other = session.run("get_weather(city='Pittsburgh')")
    with local_rt.session() as fresh:
        elsewhere = fresh.run("get_weather('Atlantis')")
    assert failed.calls[0].error is not None and not failed.calls[0].cached
    assert retried.ok and not retried.calls[0].cached  # a failure is never cached
    assert not other.calls[0].cached
    assert elsewhere.ok and not elsewhere.calls[0].cached  # the cache is per session
    assert counter.count("get_weather") == 4


def test_equal_cacheable_calls_in_flight_run_once(local_rt: Runtime, counter: Counter) -> None:
    result = run(local_rt, "parallel(lambda _: get_weather('Beijing'), range(5))")
    assert result.ok and len(result.value) == 5
    assert counter.count("get_weather") == 1
    assert sorted(c.cached for c in result.calls) == [False, True, True, True, True]


def test_threads_of_the_code_run_calls_concurrently(local_rt: Runtime, counter: Counter) -> None:
    result = run(local_rt, """
        import asyncio, threading
        out = []
        threads = [threading.Thread(target=lambda: out.append(slow(0.3))) for _ in range(3)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        viathread = await asyncio.gather(asyncio.to_thread(slow, 0.3), asyncio.to_thread(slow, 0.3))
        [sorted(out), viathread]
    """)
    assert result.ok, result.error
    assert result.value == [[0.3] * 3, [0.3, 0.3]]
    assert counter.max_in_flight >= 2


def test_async_stubs_need_the_kernel_client() -> None:
    from codeact.kernel.client import ToolClient, async_stubs

    with pytest.raises(RuntimeError, match="no tool client"):
        async_stubs({})
    sent: list[dict[str, Any]] = []
    client = ToolClient(sent.append)
    namespace = {"__codeact_call__": client.call}
    exec("def f(x: int = 1):\n    return __codeact_call__('f', {'x': x})", namespace)
    namespace["f"].__module__ = "codeact_tools"
    aio = async_stubs(namespace)

    import asyncio

    async def main() -> Any:
        task = asyncio.ensure_future(aio.f())
        while not sent:
            await asyncio.sleep(0.01)
        threading.Thread(target=client.deliver, args=({"seq": sent[0]["seq"], "ok": True, "value": 5},)).start()
        return await task

    assert asyncio.run(main()) == 5
    assert sent[0]["arguments"] == {"x": 1}
