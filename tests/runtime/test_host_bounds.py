"""The host is bounded against the code: driven from inside the sandbox, with hand-made frames
where the stubs would refuse to send what a hostile kernel can."""

from __future__ import annotations

import asyncio
import gc
import textwrap
import threading
import time
from typing import Any

import pytest

from codeact import Runtime, tool
from codeact.runtime.ledger import CallLedger
from tests._configs import LOCAL as SHARED_LOCAL
from tests.sandbox.test_channel_hostile import FORGE

#: More room than the shared one: these runs flood the host with calls and large frames on purpose.
LOCAL = SHARED_LOCAL.model_copy(update={"timeout_s": 60.0})


@tool
def echo(x: Any = None) -> Any:
    """Echo.

    Args:
        x: anything.
    """
    return x


@tool
def typed(n: int, f: float) -> list[str]:
    """Reports the types it got.

    Args:
        n: an integer.
        f: a float.
    """
    return [type(n).__name__, type(f).__name__, repr(n), repr(f)]


@tool
def deep_result(n: int) -> Any:
    """A value nesting n levels.

    Args:
        n: depth.
    """
    value: Any = []
    for _ in range(n - 1):
        value = [value]
    return value


def _rss_mb() -> float:
    with open("/proc/self/status") as status:
        for line in status:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
    raise AssertionError("no VmRSS")


@pytest.fixture(scope="module")
def rt() -> Any:
    with Runtime([echo, typed, deep_result], LOCAL) as runtime:
        yield runtime


def forged(session: Any, payload: str) -> Any:
    return session.run(textwrap.dedent(FORGE) + textwrap.dedent(payload))


def test_a_flood_of_refused_calls_keeps_the_host_small(rt: Runtime) -> None:
    # ~255 KB of [[],[],…] per call (under max_argument_bytes) parses to several MB each; refused
    # calls keep only a bounded stand-in of their arguments.
    with rt.session() as s:
        s.run("1")
        gc.collect()
        before = _rss_mb()
        result = s.run("big = [[] for _ in range(85_000)]\nfor _ in range(30):\n"
                       "    try:\n        __codeact_call__('no_such_tool', {'x': big})\n"
                       "    except ToolError as e:\n        code = e.code\ncode")
        gc.collect()
        grown = _rss_mb() - before
        assert result.ok and result.value == "unknown_tool"
        assert len(result.calls) == 30
        args = result.calls[0].arguments
        assert args["truncated"] is True and args["bytes"] > 200_000 and len(args["preview"]) <= 512
        assert len(result.model_dump_json()) < 200_000
        assert grown < 100, f"the host grew by {grown:.0f} MB"


def test_an_oversized_call_frame_is_refused_unparsed(rt: Runtime) -> None:
    with rt.session() as s:
        result = forged(s, """
            body = b'{"type":"call","seq":77,"name":"echo","arguments":{"x":[' + b'[],' * 3_000_000 + b'[]]}}'
            chan.sendall(struct.pack('!I', len(body)) + body)
            import time
            time.sleep(1)
            'sent'
        """)
        assert result.ok and result.value == "sent"
        [call] = result.calls
        assert call.error is not None and call.error.code == "invalid_arguments"
        assert call.arguments == {"truncated": True, "bytes": len(b'{"type":"call","seq":77,"name":"echo",'
                                                                 b'"arguments":{"x":[') + 9_000_000 + 5}


SHORT = LOCAL.model_copy(update={"timeout_s": 3.0, "grace_s": 1.0})


def test_an_endless_oversized_call_frame_does_not_hold_the_run() -> None:
    # A call frame claiming 2 GB, trickled in for far longer than the run may take: the host
    # refuses the call at once and skips the bytes, but keeps the run's deadline meanwhile.
    with Runtime([echo], SHORT) as runtime, runtime.session() as s:
        started = time.monotonic()
        result = forged(s, """
            import time
            head = b'{"type":"call","seq":1,"name":"echo","arguments":{"x":"'
            chan.sendall(struct.pack('!I', 2_000_000_000) + head + b'a' * 100_000)
            end = time.monotonic() + 300
            while time.monotonic() < end:
                chan.sendall(b'a' * 65536)
                time.sleep(0.05)
        """)
        took = time.monotonic() - started
        assert result.termination == "timeout" and took < 60, (result, took)  # generous: a held run takes 300 s
        [call] = result.calls
        assert call.error is not None and call.error.code == "invalid_arguments"
        assert s.run("1 + 1").value == 2


def test_a_trickled_frame_does_not_hold_the_run() -> None:
    # A frame whose bytes come one at a time, each well within the socket's read timeout.
    with Runtime([echo], SHORT) as runtime, runtime.session() as s:
        started = time.monotonic()
        result = forged(s, """
            import time
            chan.sendall(struct.pack('!I', 1000) + b'{')
            for _ in range(1500):
                time.sleep(0.2)
                chan.sendall(b' ')
        """)
        took = time.monotonic() - started
        assert result.termination == "timeout" and took < 60, (result, took)  # generous: a held run takes 300 s
        assert s.run("1 + 1").value == 2


def test_a_large_frame_of_many_containers_is_a_violation(rt: Runtime) -> None:
    with rt.session() as s:
        result = forged(s, """
            body = b'{"name":"echo","type":"call","seq":1,"arguments":{"x":[' + b'[],' * 3_000_000 + b'[]]}}'
            chan.sendall(struct.pack('!I', len(body)) + body)
            import time
            time.sleep(5)
        """)
        assert result.termination == "killed" and result.reason and "arrays and objects" in result.reason
        assert s.run("1 + 1").value == 2


@pytest.mark.parametrize("depth", [1500, 100_000])
def test_a_call_frame_too_deep_to_parse_kills_cleanly(rt: Runtime, depth: int) -> None:
    with rt.session() as s:
        result = forged(s, f"""
            body = b'{{"type":"call","seq":1,"name":"echo","arguments":{{"x":' + b'[' * {depth} + b']' * {depth} + b'}}}}'
            chan.sendall(struct.pack('!I', len(body)) + body)
            import time
            time.sleep(5)
        """)
        assert result.termination == "killed" and result.state_lost
        assert result.reason and "protocol violation" in result.reason
        after = s.run("1 + 1")  # a fresh sandbox, in step with the host
        assert after.ok and after.value == 2


def test_deep_arguments_are_invalid_and_the_result_serializes(rt: Runtime) -> None:
    with rt.session() as s:
        result = s.run("v = []\nfor _ in range(600):\n    v = [v]\n"
                       "try:\n    echo(x=v)\nexcept ToolError as e:\n    code = e.code\ncode")
        assert result.ok and result.value == "invalid_arguments"
        assert "deeper than 64" in result.calls[0].error.message  # type: ignore[union-attr]
        result.model_dump_json()
        value = s.run("v")  # the code's own deep value comes back as bounded text
        assert value.ok and isinstance(value.value, str) and value.value.startswith("[[[[")
        value.model_dump_json()
        shallow = s.run("echo(x=[[[1]]])")
        assert shallow.value == [[[1]]]
        # A tool's own deep result reaches the code whole; the record keeps it as text.
        deep = s.run("r = deep_result(n=100)\nlen(str(r))")
        assert deep.ok and deep.value == 200
        assert isinstance(deep.calls[0].result, str) and deep.calls[0].result.startswith("[[[")
        deep.model_dump_json()


@pytest.mark.parametrize("constant", ["NaN", "-Infinity", "Infinity"])
def test_nan_in_a_frame_is_a_violation(rt: Runtime, constant: str) -> None:
    with rt.session() as s:
        result = forged(s, f"""
            body = b'{{"type":"call","seq":1,"name":"echo","arguments":{{"x":{constant}}}}}'
            chan.sendall(struct.pack('!I', len(body)) + body)
            import time
            time.sleep(5)
        """)
        assert result.termination == "killed" and result.reason and constant.lstrip("-") in result.reason


def test_annotated_types_are_converted(rt: Runtime) -> None:
    # Decision: JSON Schema calls 1.0 an integer, so it is valid for ``n: int``; the tool gets 1.
    with rt.session() as s:
        result = s.run("__codeact_call__('typed', {'n': 1.0, 'f': 2})")
        assert result.ok and result.value == ["int", "float", "1", "2.0"]
        refused = s.run("try:\n    typed(n=1.5, f=2)\nexcept ToolError as e:\n    code = e.code\ncode")
        assert refused.value == "invalid_arguments"


def test_per_run_argument_bytes_are_capped() -> None:
    with Runtime([echo], LOCAL, max_run_argument_bytes=10_000) as rt, rt.session() as s:
        result = s.run("out = []\nfor i in range(5):\n    try:\n        out.append(len(echo(x='a' * 3000)))\n"
                       "    except ToolError as e:\n        out.append(e.code)\nout")
        assert result.value == [3000, 3000, 3000, "permission_denied", "permission_denied"]
        assert result.calls[3].arguments == {"truncated": True, "bytes": result.calls[3].arguments["bytes"],
                                             "preview": result.calls[3].arguments["preview"]}
        assert s.run("len(echo(x='a' * 3000))").value == 3000  # a new run has a new allowance


def test_per_session_calls_in_flight_are_capped() -> None:
    release = threading.Event()

    @tool(timeout_s=30)
    def block(i: int) -> int:
        """Blocks.

        Args:
            i: which.
        """
        release.wait(20)
        return i

    try:
        with Runtime([block], LOCAL, max_in_flight_per_session=3) as rt, rt.session() as s:
            code = ("import asyncio\nasync def one(i):\n    try:\n        return await aio.block(i=i)\n"
                    "    except ToolError as e:\n        return e.code\n"
                    "tasks = [asyncio.ensure_future(one(i)) for i in range(6)]\n"
                    "await asyncio.sleep(1)\n__codeact_call__('block', {'i': -1}) if False else None\n")
            threading.Timer(3, release.set).start()
            result = s.run(code + "await asyncio.gather(*tasks)")
            assert sorted(map(str, result.value)) == ["0", "1", "2", "rate_limited", "rate_limited", "rate_limited"]
            refused = [c for c in result.calls if c.error is not None]
            assert len(refused) == 3 and all(c.error.retryable for c in refused)  # type: ignore[union-attr]
            assert s.calls.in_flight == 0
    finally:
        release.set()


def test_session_history_is_bounded() -> None:
    with Runtime([echo], LOCAL, max_session_record_bytes=20_000) as rt, rt.session() as s:
        for _ in range(4):
            s.run("echo(x='a' * 8000)")
        assert 1 <= len(s.history) <= 2
        for _ in range(40):
            s.run("1")
        assert len(s.history) == 32


def test_a_second_session_is_not_starved() -> None:
    release = threading.Event()
    started = threading.Semaphore(0)

    @tool(timeout_s=60)
    def slow(i: int) -> int:
        """Blocks.

        Args:
            i: which.
        """
        started.release()
        release.wait(60)
        return i

    @tool
    def quick() -> str:
        """Answers."""
        return "ok"

    config = LOCAL
    try:
        with Runtime([slow, quick], config) as rt, rt.session() as flood, rt.session() as other:
            flooding = threading.Thread(target=flood.run, args=(
                "import asyncio\nawait asyncio.gather(*[aio.slow(i=i) for i in range(200)])",), daemon=True)
            flooding.start()
            for _ in range(flood.calls.gate.limit):  # the flood holds all the threads it may
                assert started.acquire(timeout=30)
            result = other.run("quick()", timeout_s=20)
            assert result.ok and result.value == "ok", result
            assert not release.is_set() and flooding.is_alive()
            release.set()  # before the sessions close: closing waits for the flood's run to end
            flooding.join(30)
    finally:
        release.set()


def test_the_json_agent_entry_has_the_same_bounds(rt: Runtime) -> None:
    deep: Any = []
    for _ in range(100):
        deep = [deep]
    ledger = CallLedger()

    async def calls() -> list[Any]:
        return [await rt.host.acall(ledger, "echo", {"x": deep}),
                await rt.host.acall(ledger, "echo", {"x": "a" * 300_000}),
                await rt.host.acall(ledger, "echo", {"x": float("nan")}),
                await rt.host.acall(ledger, "typed", {"n": 1.0, "f": 2}),
                await rt.host.acall(ledger, "nope", {})]

    records = asyncio.run(calls())
    codes = [r.error.code if r.error else None for r in records]
    assert codes == ["invalid_arguments", "invalid_arguments", "invalid_arguments", None, "unknown_tool"]
    assert records[3].result == ["int", "float", "1", "2.0"]
    assert records[1].arguments == {"truncated": True, "bytes": 300_009}
    assert [r.id for r in ledger.records()] == [r.id for r in records]
