"""Nothing a tool does stalls or kills the host: any BaseException is a ``tool_exception`` record
on either executor (pool thread or event loop), later calls in the same runtime succeed, and a
hung tool never holds a run, a runtime's close or the ``codeact exec`` process past its bound."""

from __future__ import annotations

import json
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

import pytest

from codeact import Runtime, tool
from codeact.runtime.ledger import CallLedger
from tests._configs import LOCAL

ROOT = Path(__file__).resolve().parents[2]


class _Custom(BaseException):
    pass


RAISERS: dict[str, Any] = {
    "SystemExit": lambda: sys.exit(3),
    "KeyboardInterrupt": lambda: (_ for _ in ()).throw(KeyboardInterrupt()),
    "GeneratorExit": lambda: (_ for _ in ()).throw(GeneratorExit()),
    "custom": lambda: (_ for _ in ()).throw(_Custom("mine")),
}


def _tools(kind: str, *, is_async: bool, cacheable: bool) -> list[Any]:
    raise_it = RAISERS[kind]
    if is_async:
        async def boom(x: int) -> int:
            """Raises a BaseException.

            Args:
                x: anything.
            """
            raise_it()
            return x
    else:
        def boom(x: int) -> int:
            """Raises a BaseException.

            Args:
                x: anything.
            """
            raise_it()
            return x

    @tool
    def fine(x: int) -> int:
        """Answers.

        Args:
            x: a number.
        """
        return x + 1

    @tool(cacheable=True)
    def fine_cached(x: int) -> int:
        """Answers, cacheably.

        Args:
            x: a number.
        """
        return x + 2

    return [tool(boom, cacheable=cacheable), fine, fine_cached]


@pytest.mark.parametrize("kind", list(RAISERS))
@pytest.mark.parametrize("is_async", [False, True], ids=["sync", "async"])
@pytest.mark.parametrize("cacheable", [False, True], ids=["plain", "cacheable"])
def test_base_exception_from_a_tool_is_a_record(kind: str, is_async: bool, cacheable: bool) -> None:
    with Runtime(_tools(kind, is_async=is_async, cacheable=cacheable), LOCAL) as rt, rt.session() as s:
        result = s.run("try:\n    boom(1)\nexcept ToolError as e:\n    err = e.code\nerr")
        assert result.ok and result.value == "tool_exception", result
        assert result.calls[0].error is not None and result.calls[0].error.code == "tool_exception"
        name = "_Custom" if kind == "custom" else kind
        assert name in result.calls[0].error.message
        # The runtime still works on both executors (pool thread and event loop), in a new run too.
        again = s.run("[fine(x=1), fine_cached(x=1), fine(x=2)]")
        assert again.ok and again.value == [2, 3, 3], again
        # ...and for the JSON agent's entry, on the same host.
        record = rt.loop.run(rt.host.acall(CallLedger(), "boom", {"x": 1}))
        assert record.error is not None and record.error.code == "tool_exception"
        assert rt.loop.run(rt.host.acall(CallLedger(), "fine", {"x": 5})).result == 6


def test_every_tool_has_a_timeout_by_default() -> None:
    release = threading.Event()

    @tool(timeout_s=None)
    def hang() -> None:
        """Hangs until released."""
        release.wait(30)

    try:
        with Runtime([hang], LOCAL, tool_timeout_s=0.3) as rt, rt.session() as s:
            assert rt.host.timeout_of(rt.toolset.get("hang")) == 0.3  # type: ignore[arg-type]
            result = s.run("try:\n    hang()\nexcept ToolError as e:\n    err = e.code\nerr")
            assert result.ok and result.value == "timeout"
            assert result.calls[0].error is not None and "0.3 s" in result.calls[0].error.message
    finally:
        release.set()


def test_a_hung_plain_tool_run_inline_does_not_hold_other_calls() -> None:
    """A plain tool's first call runs on the thread that reads the sandbox's frames; when it hangs,
    another thread takes over the reading: other calls are answered meanwhile and its timeout fires."""
    release = threading.Event()

    @tool(timeout_s=5)
    def hang() -> None:
        """Hangs until released."""
        release.wait(30)

    @tool
    def quick(x: int) -> int:
        """Answers.

        Args:
            x: a number.
        """
        return x

    code = ("import asyncio, time\n"
            "h = asyncio.ensure_future(aio.hang())\n"
            "await asyncio.sleep(0.1)\n"
            "t = time.monotonic()\n"
            "got = [quick(x=i) for i in range(20)]\n"
            "took = time.monotonic() - t\n"
            "try:\n    await h\nexcept ToolError as e:\n    err = e.code\n"
            "[got == list(range(20)), took, err]")
    try:
        with Runtime([hang, quick], LOCAL) as rt, rt.session() as s:
            result = s.run(code)
            assert result.ok, result
            same, took, err = result.value
            assert same and err == "timeout"
            assert took < 3.0, took  # answered while hang() still held its thread (its timeout: 5 s)
            assert result.calls[0].name == "hang" and not result.calls[0].ok
            assert s.run("quick(x=7)").value == 7
    finally:
        release.set()


def test_a_queued_call_of_an_ended_run_never_runs() -> None:
    started: list[int] = []
    release = threading.Event()

    @tool(timeout_s=60)
    def slow(i: int) -> int:
        """Blocks until released.

        Args:
            i: which call.
        """
        started.append(i)
        release.wait(30)
        return i

    config = LOCAL.model_copy(update={"timeout_s": 2.0})
    try:
        with Runtime([slow], config) as rt, rt.session() as s:
            share = s.calls.gate.limit
            # No threads in the sandbox: the async stubs put every call in flight at once.
            result = s.run(f"import asyncio\nawait asyncio.gather(*[aio.slow(i=i) for i in range({share + 8})])")
            assert result.termination == "timeout", (result.error, result.calls[:2])
            assert len(result.calls) == share + 8
            assert all(not c.ok and c.error is not None for c in result.calls)
            not_run = [c for c in result.calls if "not run" in c.error.message]  # type: ignore[union-attr]
            assert len(not_run) == 8
            release.set()
            # The session's slots come back; the queued calls are dropped, not run late.
            deadline = time.monotonic() + 20
            while s.calls.gate.running and time.monotonic() < deadline:
                time.sleep(0.05)
            assert s.calls.gate.running == 0
            assert len(started) == share
            assert s.run("slow(i=99)").value == 99
    finally:
        release.set()


def test_closing_a_runtime_does_not_wait_for_a_hung_tool() -> None:
    release = threading.Event()

    running = threading.Semaphore(0)

    @tool(timeout_s=120)
    async def hang_async() -> None:
        """Hangs."""
        import asyncio

        running.release()
        await asyncio.sleep(120)

    @tool(timeout_s=120, cacheable=True)
    def hang_sync() -> None:
        """Hangs."""
        running.release()
        release.wait(120)

    try:
        rt = Runtime([hang_async, hang_sync], LOCAL)
        for name in ("hang_async", "hang_sync"):
            rt.loop.submit(rt.host.acall(CallLedger(), name, {}))
        assert running.acquire(timeout=60) and running.acquire(timeout=60)  # both hang now
        started = time.monotonic()
        rt.close()
        assert time.monotonic() - started < 60  # generous: waiting for the tools would take 120 s
    finally:
        release.set()


def test_exec_with_a_hung_tool_exits_at_its_timeout_and_leaves_no_container(
        tmp_path: Path, docker_image: str) -> None:
    tools = tmp_path / "hang.py"
    tools.write_text("import time\nfrom codeact import tool\n\n@tool(timeout_s=600)\n"
                     "def hang() -> int:\n    \"\"\"Hangs.\"\"\"\n    time.sleep(600)\n    return 1\n")
    proc = subprocess.Popen([sys.executable, "-m", "codeact.cli", "exec", "-", "--tools", str(tools),
                             "--backend", "docker", "--timeout", "2", "--json"], cwd=ROOT,
                            stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    started = time.monotonic()
    out, err = proc.communicate("print('before')\nhang()\n", timeout=120)
    elapsed = time.monotonic() - started
    assert proc.returncode == 1, err
    result = json.loads(out)
    assert result["termination"] == "timeout"
    assert result["calls"][0]["name"] == "hang" and result["calls"][0]["ok"] is False
    assert result["calls"][0]["error"]["code"] == "timeout"
    # The bound: the run's timeout + its grace + process start and container removal, far below 600 s.
    assert elapsed < 60, elapsed
    left = subprocess.run(["docker", "ps", "-aq", "--filter", f"label=codeact.owner.pid={proc.pid}"],
                          capture_output=True, text=True, timeout=60)
    assert left.stdout.strip() == ""


@pytest.mark.parametrize("ends", ["run_timeout", "tool_timeout"])
def test_a_late_result_after_a_timeout_changes_no_record(ends: str) -> None:
    """The call's record ended (the run's timeout, or the tool's own on the fast path) while the tool
    still ran; when the tool answers later, nothing recorded changes and no late value appears."""
    release, returned = threading.Event(), threading.Event()

    @tool(timeout_s=60 if ends == "run_timeout" else 0.5)
    def hang() -> str:
        """Hangs until released, then answers."""
        try:
            release.wait(30)
            return "late value"
        finally:
            returned.set()

    code = "hang()" if ends == "run_timeout" else "try:\n    hang()\nexcept ToolError as e:\n    err = e.code\nerr"
    config = LOCAL.model_copy(update={"timeout_s": 1.5})
    try:
        with Runtime([hang], config) as rt, rt.session() as s:
            assert rt.host._route(rt.toolset.get("hang")).plain  # type: ignore[arg-type]  # the fast path
            result = s.run(code)
            if ends == "run_timeout":
                assert result.termination == "timeout", result
            else:
                assert result.ok and result.value == "timeout", result
            seen = [result.calls[0].model_dump(), s.history[-1].calls[0].model_dump(),
                    s.cells[-1].calls[0].model_dump()]
            assert seen[0]["finished"] and not seen[0]["ok"] and seen[0]["result"] is None
            assert seen[0]["error"]["code"] == "timeout"
            assert not returned.is_set()  # the tool is still running
            release.set()
            assert returned.wait(10)
            time.sleep(0.3)  # the pool thread records (or, correctly, does not record) the late answer
            assert [result.calls[0].model_dump(), s.history[-1].calls[0].model_dump(),
                    s.cells[-1].calls[0].model_dump()] == seen
            assert s.calls.in_flight == 0  # the call ended once, not twice
            again = s.run("1 + 1")
            assert again.ok and again.value == 2 and again.calls == []
            assert "late value" not in json.dumps([r.model_dump(mode="json") for r in s.history])
    finally:
        release.set()


UNSENDABLE: dict[str, Any] = {
    "nan": lambda: float("nan"),
    "infinity": lambda: -float("inf"),
    "nan_inside": lambda: {"rows": [1.0, float("nan")]},
    "cycle": lambda: (lambda d: (d.__setitem__("me", d), d)[1])({}),
    "huge_int": lambda: 10 ** 5000,  # past Python's int-to-text digit limit
}


@pytest.mark.parametrize("kind", list(UNSENDABLE))
@pytest.mark.parametrize("cacheable", [False, True], ids=["inline", "loop"])
def test_a_result_that_is_not_json_fails_the_call_at_once(kind: str, cacheable: bool) -> None:
    """NaN, Infinity (at the top or deep inside) and cycles have no JSON: the call fails as a
    ``tool_exception``, recorded as such, and the code gets the error at once (it used to wait
    for an answer that could not be sent until the run's timeout)."""
    make = UNSENDABLE[kind]

    @tool(cacheable=cacheable)
    def compute(x: int) -> Any:
        """Returns what JSON cannot hold.

        Args:
            x: anything.
        """
        return make()

    config = LOCAL.model_copy(update={"timeout_s": 30})
    with Runtime([compute], config) as rt, rt.session() as session:
        result = session.run("try:\n    compute(x=1)\nexcept ToolError as e:\n    got = e.code\ngot")
        assert result.ok and result.value == "tool_exception", result
        (record,) = result.calls
        assert record.finished and not record.ok and record.error is not None
        assert record.error.code == "tool_exception" and "not JSON" in record.error.message
        assert session.run("1 + 1").value == 2


def test_a_payload_the_host_cannot_encode_is_answered_with_an_error() -> None:
    """The driver's last line: whatever handler answers a call with a payload that is not JSON,
    the code gets an error result instead of waiting for one."""
    from codeact.sandbox.pool import open_kernel

    kernel = open_kernel(LOCAL, "")
    try:
        def on_call(seq: int, name: str, arguments: Any, size: int) -> None:
            kernel.reply(seq, {"ok": True, "value": float("nan")})

        code = "try:\n    __codeact_call__('x', {})\nexcept ToolError as e:\n    got = (e.code, e.message)\ngot"
        outcome = kernel.run(code, on_call, 30, output_cap=1000, output_limit=10_000, grace_s=1)
        assert outcome.termination == "completed" and outcome.done is not None, outcome
        code_, message = outcome.done.value
        assert code_ == "tool_exception" and "could not send" in message
    finally:
        kernel.sandbox.close()
