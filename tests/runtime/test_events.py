"""Live run events (``Session.run(on_event=...)``, ``Session.stream``) on every backend."""

from __future__ import annotations

import asyncio
import contextlib
import textwrap
import threading
from collections.abc import Iterator
from typing import Any

import pytest

from codeact import Runtime, SandboxConfig, ToolCallRecord, tool
from codeact.runtime.events import EVENT_ADAPTER, CallFinished, CallStarted, OutputChunk, RunDone, RunEvent
from tests.sandbox.test_channel_hostile import FORGE


class Gate:
    """A tool that answers only once the listener has seen what it waits for (no wall-clock bounds)."""

    def __init__(self) -> None:
        self.seen = threading.Event()
        self.timed_out = False


@pytest.fixture
def gate() -> Gate:
    return Gate()


@pytest.fixture
def rt(backend: str, gate: Gate) -> Iterator[Runtime]:
    @tool
    def wait_for_listener() -> bool:
        """Blocks until the test's listener has seen the call start."""
        ok = gate.seen.wait(60)
        gate.timed_out = not ok
        return ok

    @tool(cacheable=True)
    def lookup(key: str) -> str:
        """A cacheable lookup."""
        return key.upper()

    @tool
    def broken() -> None:
        """Always fails."""
        raise ValueError("broken on purpose")

    config = SandboxConfig(backend=backend, timeout_s=30, grace_s=2, policy="none")  # type: ignore[arg-type]
    with Runtime([wait_for_listener, lookup, broken], config) as runtime:
        yield runtime


def _merged(events: list[Any]) -> list[tuple[str, str]]:
    out: list[tuple[str, str]] = []
    for e in events:
        if isinstance(e, OutputChunk):
            if out and out[-1][0] == e.type:
                out[-1] = (e.type, out[-1][1] + e.text)
            else:
                out.append((e.type, e.text))
    return out


def test_events_arrive_while_a_slow_tool_runs(rt: Runtime, gate: Gate) -> None:
    events: list[RunEvent] = []

    def listen(event: RunEvent) -> None:
        events.append(event)
        # The tool is blocked until this listener has seen both the output before it and its start.
        if isinstance(event, CallStarted) and any(isinstance(e, OutputChunk) for e in events):
            gate.seen.set()

    with rt.session() as session:
        result = session.run("print('before')\nok = wait_for_listener()\nprint('after', ok)", on_event=listen)
    assert result.ok and result.stdout == "before\nafter True\n" and not gate.timed_out
    kinds = [e.type for e in events]
    assert kinds == ["stdout", "call_started", "call_finished", "stdout", "done"]
    started, finished, done = events[1], events[2], events[-1]
    assert isinstance(started, CallStarted) and isinstance(finished, CallFinished) and isinstance(done, RunDone)
    assert started.name == "wait_for_listener" and started.arguments == {} and started.id == finished.id
    assert finished.ok and finished.result is True and not finished.cached and finished.duration_ms > 0
    times = [e.t for e in events]
    assert times == sorted(times) and started.t <= finished.t <= done.t
    assert done.result is result  # the very result run returns


def test_stdout_chunks_in_order(rt: Runtime) -> None:
    code = textwrap.dedent("""
        import os, sys, time
        for i in range(4):
            print(f"out {i}")
            print(f"err {i}", file=sys.stderr)
            time.sleep(0.06)
        for i in range(3000):
            print(i)
        sys.stdout.flush()
        os.write(1, b"raw bytes\\n")
        time.sleep(0.2)
        print("end")
    """)
    events: list[RunEvent] = []
    with rt.session() as session:
        result = session.run(code, on_event=events.append)
        plain = session.run(code)
    chunks = [e for e in events if isinstance(e, OutputChunk)]
    assert "".join(c.text for c in chunks if c.type == "stdout") == result.stdout == plain.stdout
    assert "".join(c.text for c in chunks if c.type == "stderr") == result.stderr == "".join(
        f"err {i}\n" for i in range(4))
    # Output is coalesced per stream per frame: each stream's order is exact (above); between the
    # streams, only the order of frames is kept (a frame's stdout comes before its stderr).
    merged = _merged(events)
    assert merged[0][0] == "stdout" and merged[0][1].startswith("out 0\n")
    assert 2 <= len(chunks) < 300  # coalesced, not one event per print
    assert isinstance(events[-1], RunDone) and sum(isinstance(e, RunDone) for e in events) == 1


def test_streamed_output_is_capped_like_the_result(backend: str) -> None:
    config = SandboxConfig(backend=backend, output_cap=1000, policy="none")  # type: ignore[arg-type]
    events: list[RunEvent] = []
    with Runtime([], config) as runtime, runtime.session() as session:
        result = session.run("print('x' * 5000)\nprint('y' * 50)", on_event=events.append)
    streamed = "".join(e.text for e in events if isinstance(e, OutputChunk))
    assert result.stdout_truncated and streamed == result.stdout == "x" * 1000


def test_cached_and_failed_calls(rt: Runtime) -> None:
    events: list[RunEvent] = []
    with rt.session() as session:
        session.run("lookup('a')")
        result = session.run("lookup('a')\nlookup('b')\ntry:\n    broken()\nexcept ToolError as e:\n    print(e)",
                             on_event=events.append)
    finished = [e for e in events if isinstance(e, CallFinished)]
    assert [(f.name, f.ok, f.cached, f.result) for f in finished] == [
        ("lookup", True, True, "A"), ("lookup", True, False, "B"), ("broken", False, False, None)]
    assert finished[2].error is not None and finished[2].error.code == "tool_exception"
    assert [c.cached for c in result.calls] == [True, False, False]
    started = [e for e in events if isinstance(e, CallStarted)]
    assert [s.id for s in started] == [f.id for f in finished] == [c.id for c in result.calls]


def test_inline_events_are_handed_over_on_the_threads_that_make_them(rt: Runtime) -> None:
    events: list[tuple[RunEvent, str]] = []
    with rt.session() as session:
        result = session.run("print('hi')\nlookup('a')\nlookup('b')", inline_events=True,
                             on_event=lambda e: events.append((e, threading.current_thread().name)))
    kinds = [e.type for e, _ in events]
    assert kinds.count("call_started") == kinds.count("call_finished") == 2 and "stdout" in kinds
    assert "done" not in kinds and result.ok  # the result is returned, not sent as an event
    assert [e.id for e, _ in events if isinstance(e, CallFinished)] == [c.id for c in result.calls]
    assert {t for _, t in events} != {threading.current_thread().name}  # no listener thread in between


def test_keep_calls_holds_each_calls_live_record_and_makes_no_event(rt: Runtime) -> None:
    """What a cluster's node agent reads while a run may be cut short: the records themselves,
    appended as the calls arrive (from the reading thread) and finished in place; no events."""
    kept: list[ToolCallRecord] = []
    with rt.session() as session:
        result = session.run("lookup('a')\nprint('out')\nlookup('b')", keep_calls=kept)
        with pytest.raises(ValueError, match="keep_calls"):
            session.run("1", keep_calls=[], on_event=lambda e: None)
    assert result.ok and result.stdout == "out\n"
    assert [r.id for r in kept] == [c.id for c in result.calls] and len(kept) == 2
    assert all(r.finished and r.ok for r in kept) and [r.result for r in kept] == ["A", "B"]
    assert kept[0] is not result.calls[0]  # the ledger's own records, the result has copies


def test_stream_async(rt: Runtime) -> None:
    async def main() -> list[RunEvent]:
        with rt.session() as session:
            return [event async for event in session.stream("print('hi')\nlookup('q')\n40 + 2")]

    events = asyncio.run(main())
    assert [e.type for e in events] == ["stdout", "call_started", "call_finished", "done"]
    done = events[-1]
    assert isinstance(done, RunDone) and done.result.value == 42 and done.result.stdout == "hi\n"
    # Events are plain JSON with a type discriminator: they round-trip through the adapter.
    for event in events:
        assert EVENT_ADAPTER.validate_json(event.model_dump_json()) == event


LOOP_FOREVER = "x = 41\nprint('started')\nimport time\nwhile True:\n    time.sleep(0.05)\n"


def _no_event_threads() -> bool:
    return not any(t.name == "codeact-run-events" for t in threading.enumerate())


def test_a_stream_left_early_stops_the_run(rt: Runtime) -> None:
    async def main(session: Any) -> list[RunEvent]:
        seen: list[RunEvent] = []
        async with contextlib.aclosing(session.stream(LOOP_FOREVER)) as events:
            async for event in events:
                seen.append(event)
                break
        return seen

    with rt.session() as session:
        seen = asyncio.run(main(session))
        assert [e.type for e in seen] == ["stdout"]
        assert _no_event_threads()
        stopped = session.history[-1]  # interrupted on request: a cell a snapshot cannot replay exactly
        assert stopped.termination == "interrupted" and stopped.error is not None
        assert stopped.error.type == "KeyboardInterrupt"
        assert session.cells[-1].status == "inexact"
        after = session.run("x + 1")  # the session is free and kept its state
        assert after.ok and after.value == 42


def test_a_cancelled_stream_task_stops_the_run(rt: Runtime) -> None:
    async def main(session: Any) -> None:
        started = asyncio.Event()

        async def consume() -> None:
            async for _event in session.stream(LOOP_FOREVER):
                started.set()

        task = asyncio.create_task(consume())
        await started.wait()
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task

    with rt.session() as session:
        asyncio.run(main(session))
        assert _no_event_threads()
        assert session.history[-1].error is not None and session.history[-1].error.type == "KeyboardInterrupt"
        assert session.history[-1].termination == "interrupted" and session.cells[-1].status == "inexact"
        assert session.run("x").value == 41


def test_a_listener_that_raises_stops_the_run(rt: Runtime) -> None:
    def listen(event: RunEvent) -> None:
        if isinstance(event, OutputChunk):
            raise RuntimeError("listener gave up")

    with rt.session() as session:
        with pytest.raises(RuntimeError, match="listener gave up"):
            session.run(LOOP_FOREVER, on_event=listen)
        assert _no_event_threads()
        assert session.history[-1].termination == "interrupted"
        assert session.cells[-1].status == "inexact"  # a snapshot refuses it (or leaves it out), a suspend too
        assert session.suspend() is False
        assert session.run("x").value == 41


def test_a_run_that_cannot_start_raises_to_the_listener(rt: Runtime) -> None:
    session = rt.session()
    session.close()
    from codeact.errors import SessionClosed

    with pytest.raises(SessionClosed):
        session.run("1", on_event=lambda e: None)


@pytest.mark.parametrize(("frame", "reason"), [
    ("{'type': 'output', 'id': 'nope', 'chunks': [['stdout', 'x']]}", "not in progress"),
    ("{'type': 'output', 'id': 'nope', 'chunks': [['stdin', 'x']]}", "malformed output frame"),
])
def test_forged_output_frames_kill_a_streaming_run(rt: Runtime, frame: str, reason: str) -> None:
    code = textwrap.dedent(FORGE) + f"chan.sendall(frame({frame}))\nimport time\ntime.sleep(5)\n"
    events: list[RunEvent] = []
    with rt.session() as session:
        result = session.run(code, on_event=events.append)
    assert result.termination == "killed" and "protocol violation" in (result.reason or "")
    assert reason in (result.reason or "")
    assert isinstance(events[-1], RunDone)


def test_output_frames_are_refused_when_nobody_listens(rt: Runtime) -> None:
    code = textwrap.dedent(FORGE) + ("chan.sendall(frame({'type': 'output', 'id': 'x', 'chunks': []}))\n"
                                     "import time\ntime.sleep(5)\n")
    with rt.session() as session:
        result = session.run(code)
    assert result.termination == "killed" and "did not ask for streaming" in (result.reason or "")


def test_exec_events_prints_json_lines(backend: str, tmp_path: Any) -> None:
    from tests.cli.test_cli_exec import codeact

    code = tmp_path / "action.py"
    code.write_text("print('hi')\nw = get_weather(city='Beijing')\nprint(w['city'])\n1 / 0\n")
    proc = codeact("exec", str(code), "--tools", "examples/weather_tools.py", "--backend", backend, "--events")
    assert proc.returncode == 1, proc.stderr  # the code raised: exit 1, result still printed
    events = [EVENT_ADAPTER.validate_json(line) for line in proc.stdout.splitlines()]  # every line parses
    assert [e.type for e in events] == ["stdout", "call_started", "call_finished", "stdout", "done"]
    done = events[-1]
    assert isinstance(done, RunDone) and done.result.error is not None and done.result.error.type == "ZeroDivisionError"
    assert done.result.stdout == "hi\nBeijing\n" and done.result.calls[0].name == "get_weather"


def test_live_printer_shows_output_and_calls(rt: Runtime) -> None:
    import io

    from rich.console import Console

    from codeact.cli._live import LivePrinter, not_yet_shown

    buffer = io.StringIO()
    printer = LivePrinter(Console(file=buffer, width=200, color_system=None))
    with rt.session() as session:
        result = session.run("print('hello')\nlookup('k')\ntry:\n    broken()\nexcept ToolError:\n    pass",
                             on_event=printer)
    text = buffer.getvalue()
    assert text.index("hello") < text.index("→ call_") < text.index("ok \"K\"") < text.index("tool_exception")
    assert not_yet_shown(result, printer).stdout == "" and not_yet_shown(result, None).stdout == "hello\n"


def test_both_agents_put_live_events_in_the_trace(backend: str) -> None:
    from codeact.agent import CodeActAgent, FunctionCallingAgent, ScriptedModel
    from tests.conftest import Counter, make_tools

    config = SandboxConfig(backend=backend, policy="none")  # type: ignore[arg-type]
    with Runtime(make_tools(Counter()), config) as runtime:
        seen: list[dict[str, Any]] = []
        code = "```python\nprint('looking')\nget_weather(city='Beijing')\n```"
        CodeActAgent(ScriptedModel([code, "done"]), runtime.toolset, runtime=runtime, on_event=seen.append).run("?")
        kinds = [e["event"] for e in seen]
        assert kinds.index("code") < kinds.index("stdout") < kinds.index("call_started") < kinds.index(
            "call_finished") < kinds.index("execution")
        assert next(e for e in seen if e["event"] == "call_started")["arguments"] == {"city": "Beijing"}

        seen.clear()
        asks = {"text": "", "tool_calls": [{"name": "get_weather", "arguments": {"city": "Beijing"}},
                                           {"name": "get_weather", "arguments": {"city": "Nowhere"}}]}
        FunctionCallingAgent(ScriptedModel([asks, "done"]), runtime.toolset, runtime=runtime,
                             on_event=seen.append).run("?")
        kinds = [e["event"] for e in seen]
        assert kinds.count("call_started") == 2 and kinds.count("call_finished") == 2
        assert kinds.index("model_response") < kinds.index("call_started") < kinds.index("tool_results")
        assert max(i for i, k in enumerate(kinds) if k == "call_finished") < kinds.index("tool_results")
        failed = [e for e in seen if e["event"] == "call_finished" and not e["ok"]]
        assert len(failed) == 1 and failed[0]["error"]["code"] == "not_found"


def test_agents_without_listeners_take_the_plain_path(backend: str) -> None:
    from codeact.agent import CodeActAgent, ScriptedModel
    from tests.conftest import Counter, make_tools

    config = SandboxConfig(backend=backend, policy="none")  # type: ignore[arg-type]
    with Runtime(make_tools(Counter()), config) as runtime:
        code = "```python\nget_weather(city='Beijing')\n```"
        episode = CodeActAgent(ScriptedModel([code, "done"]), runtime.toolset, runtime=runtime).run("?")
    assert episode.status == "answered" and episode.tool_calls == 1
    assert _no_event_threads()


def test_a_stream_cancelled_before_its_run_starts_never_runs(rt: Runtime, gate: Gate) -> None:
    with rt.session() as session:
        busy = threading.Event()

        def first_listener(event: RunEvent) -> None:
            if isinstance(event, CallStarted):
                busy.set()

        first = threading.Thread(target=session.run, args=("wait_for_listener()",),
                                 kwargs={"on_event": first_listener})
        first.start()
        assert busy.wait(60)  # the first run holds the session; a second one waits for it

        async def main() -> None:
            async def consume() -> None:
                async for _event in session.stream("ran_second = True"):
                    pass

            task = asyncio.create_task(consume())
            for _ in range(600):  # until the stream's run is waiting for the session
                await asyncio.sleep(0.05)
                if sum(t.name == "codeact-run-events" for t in threading.enumerate()) == 2:
                    break
            task.cancel()
            # cancel() only schedules the CancelledError; one pass of the loop delivers it into the
            # stream's generator (its finally refuses the start at once). Without it the first run
            # could end and the stream's run start before the cancellation ever reached it.
            await asyncio.sleep(0)
            gate.seen.set()  # now let the first run finish
            with pytest.raises(asyncio.CancelledError):
                await task

        asyncio.run(main())
        first.join(60)
        assert _no_event_threads() and len(session.history) == 1
        assert session.run("'ran_second' in globals()").value is False


def test_the_host_caps_streamed_output_whatever_the_kernel_sends(backend: str) -> None:
    # Code that finds the run id can forge output frames; the host still keeps at most output_cap.
    code = textwrap.dedent(FORGE) + textwrap.dedent("""
        import gc
        kernel = next(o for o in gc.get_objects() if type(o).__name__ == 'Kernel')
        for _ in range(3):
            chan.sendall(frame({'type': 'output', 'id': kernel.live.run_id, 'chunks': [['stdout', 'z' * 700]]}))
        print('real')
    """)
    config = SandboxConfig(backend=backend, output_cap=1000, policy="none")  # type: ignore[arg-type]
    events: list[RunEvent] = []
    with Runtime([], config) as runtime, runtime.session() as session:
        result = session.run(code, on_event=events.append)
    assert result.ok and result.stdout == "real\n"
    streamed = "".join(e.text for e in events if isinstance(e, OutputChunk) and e.type == "stdout")
    assert len(streamed) == 1000 and streamed == "z" * 1000  # forged text counted against the cap


#: Two million one-character writes, alternating stdout and stderr (each stream exactly at the cap).
ALTERNATING = """
import sys
out, err = sys.stdout.write, sys.stderr.write
for _ in range(1_000_000):
    out('o')
    err('e')
"""
#: What the host may allocate at its peak (tracemalloc) for that run with a slow listener: the
#: result's two 1 MB streams and the frames in flight. Before coalescing: ~900 MB.
FLOOD_PEAK_BYTES = 32 * 2**20


def test_a_flood_of_alternating_writes_with_a_slow_listener_stays_bounded(backend: str) -> None:
    import time
    import tracemalloc

    config = SandboxConfig(backend=backend, timeout_s=120, policy="none")  # type: ignore[arg-type]
    events: list[RunEvent] = []

    def slow(event: RunEvent) -> None:
        events.append(event)
        time.sleep(0.005)

    with Runtime([], config) as runtime, runtime.session() as session:
        session.run("1")
        tracemalloc.start()
        try:
            result = session.run(ALTERNATING, on_event=slow)
            _, peak = tracemalloc.get_traced_memory()
        finally:
            tracemalloc.stop()
    assert result.ok, result
    assert (result.stdout, result.stderr) == ("o" * 1_000_000, "e" * 1_000_000)
    done = events[-1]
    assert isinstance(done, RunDone) and (done.dropped, done.dropped_chars) == (0, 0)
    chunks = [e for e in events if isinstance(e, OutputChunk)]
    assert len(chunks) < 5_000, len(chunks)  # at most one per stream per frame, not one per write
    for name in ("stdout", "stderr"):  # every character in its event, none lost, none twice
        assert "".join(c.text for c in chunks if c.type == name) == getattr(result, name)
    print(f"{len(chunks)} output events, host peak {peak / 2**20:.1f} MiB")
    assert peak < FLOOD_PEAK_BYTES, f"peak {peak / 2**20:.0f} MiB"


def test_output_events_past_the_queue_bound_are_dropped_and_counted(monkeypatch: pytest.MonkeyPatch) -> None:
    import time

    from codeact.runtime import events as events_module

    monkeypatch.setattr(events_module, "MAX_QUEUED_EVENTS", 3)
    events: list[RunEvent] = []

    def slow(event: RunEvent) -> None:
        events.append(event)
        time.sleep(0.1)

    code = "import time\nfor i in range(40):\n    print(i)\n    time.sleep(0.06)\n"
    config = SandboxConfig(backend="local", timeout_s=60, policy="none")
    with Runtime([], config) as runtime, runtime.session() as session:
        result = session.run(code, on_event=slow)
    assert result.ok, result
    done = events[-1]
    assert isinstance(done, RunDone) and done.dropped > 0, done.dropped
    streamed = "".join(e.text for e in events if isinstance(e, OutputChunk))
    assert len(streamed) + done.dropped_chars == len(result.stdout)  # counted to the character
    assert sum(isinstance(e, OutputChunk) for e in events) + done.dropped >= 3
