"""Bounds of the pipeline pinned where the audit's mutants hid: each tool its own rate limiter,
``max_calls`` exact on the inline lane and the pooled one, the session's slots given back
(counted), the output cap per stream, the grace before the kill, file modes written back."""

from __future__ import annotations

import base64
import stat
import time
from pathlib import Path

import pytest

from codeact import Runtime, tool
from codeact.runtime._workspace import collect_files, lay_files
from codeact.runtime.events import OutputChunk, _Sink
from codeact.runtime.snapshot import SnapshotFile
from tests._configs import LOCAL


def test_each_tool_has_its_own_rate_limiter() -> None:
    """Two tools limited to one call per 1000 s: one call of each runs at once (a limiter shared by
    every tool would hold the second past the run's timeout)."""

    @tool(rate_limit_per_s=0.001)
    def first() -> int:
        """One."""
        return 1

    @tool(rate_limit_per_s=0.001)
    def second() -> int:
        """Two."""
        return 2

    with Runtime([first, second], LOCAL.model_copy(update={"timeout_s": 10})) as rt:
        result = rt.run("[first(), second()]")
    assert result.ok, result.error
    assert result.value == [1, 2]


def _limited(slow: bool) -> object:
    @tool(max_calls=2)
    def limited(i: int) -> int:
        """A tool allowed two calls a run."""
        if slow:
            time.sleep(0.05)  # slow enough that the host does not keep it on the inline lane
        return i

    return limited


def test_max_calls_is_exact_on_both_lanes_and_slots_come_back() -> None:
    for slow in (False, True):
        with Runtime([_limited(slow)], LOCAL) as rt, rt.session() as session:
            code = """
out = []
for i in range(4):
    try:
        out.append(limited(i))
    except ToolError as e:
        out.append(e.code)
out
"""
            for _ in range(2):  # the limit is per run: the next run has its own two calls
                result = session.run(code)
                assert result.ok, result.error
                assert result.value == [0, 1, "permission_denied", "permission_denied"], slow
                assert [c.ok for c in result.calls] == [True, True, False, False]
            store = session.calls
            assert store.gate.running == 0 and store.in_flight == 0
            # A thread lent for a call handed off the inline lane comes back once its tool returns.
            until = time.monotonic() + 30
            while store.gate.lent and time.monotonic() < until:
                time.sleep(0.01)
            assert store.gate.lent == 0


def test_max_calls_per_run_is_exact() -> None:
    @tool
    def ping() -> bool:
        """Ping."""
        return True

    with Runtime([ping], LOCAL, max_calls_per_run=3) as rt, rt.session() as session:
        code = """
out = []
for _ in range(5):
    try:
        out.append(ping())
    except ToolError as e:
        out.append(e.code)
out
"""
        result = session.run(code)
        assert result.ok, result.error
        assert result.value[:3] == [True, True, True] and all(v is not True for v in result.value[3:])
        assert session.calls.gate.running == 0 and session.calls.in_flight == 0


def test_the_streamed_output_cap_is_per_stream() -> None:
    sink = _Sink(5)
    sink.output("stdout", "abcdefg")
    sink.output("stderr", "xy")
    sink.output("stdout", "more")
    sink.output("stderr", "zzzz")
    events = []
    while not sink.queue.empty():
        event = sink.queue.get()
        assert isinstance(event, OutputChunk)
        events.append((event.type, event.text))
    assert events == [("stdout", "abcde"), ("stderr", "xy"), ("stderr", "zzz")]


def test_output_events_past_the_queue_bound_are_counted() -> None:
    sink = _Sink(1000)
    sink._max_queued = 2
    for text in ("a", "bb", "ccc"):
        sink.output("stdout", text)
    assert sink.queue.qsize() == 2 and sink.dropped == 1 and sink.dropped_chars == 3


@tool
def _slow() -> int:
    """Takes longer than the run may."""
    time.sleep(4)
    return 1


@pytest.mark.parametrize("wait", ["time.sleep(30)", "_slow()"])
def test_code_gets_its_grace_after_the_interrupt(wait: str) -> None:
    """The run's timeout interrupts the code (in its own work, or waiting for a tool: another watcher
    keeps the clock then); it may clean up for ``grace_s`` before the kill."""
    code = f"""
import time
try:
    {wait}
except KeyboardInterrupt:
    time.sleep(0.5)
    print("cleaned up")
    raise
"""
    config = LOCAL.model_copy(update={"timeout_s": 1.0, "grace_s": 5.0})
    with Runtime([_slow], config) as rt:
        result = rt.run(code)
    assert not result.ok and "cleaned up" in result.stdout


def test_file_modes_are_collected_and_written_back(tmp_path: Path) -> None:
    src = tmp_path / "src"
    src.mkdir()
    for name, mode in (("run.sh", 0o755), ("secret", 0o600), ("plain", 0o644), ("odd", 0o640)):
        (src / name).write_bytes(name.encode())
        (src / name).chmod(mode)
    files = collect_files(src, 1 << 20)
    assert {f.path: f.mode for f in files} == {"odd": 0o640, "plain": 0o644, "run.sh": 0o755, "secret": 0o600}
    dest = tmp_path / "dest"
    dest.mkdir()
    (dest / "stale").write_bytes(b"x")
    (dest / "kept").write_bytes(b"y")
    lay_files(dest, [*files, SnapshotFile(path="sub/new", data=base64.b64encode(b"n").decode(), mode=0o700)],
              keep={"kept"}, uid=None)
    modes = {p.name: stat.S_IMODE(p.stat().st_mode) for p in dest.rglob("*") if p.is_file()}
    assert modes == {"odd": 0o640, "plain": 0o644, "run.sh": 0o755, "secret": 0o600, "new": 0o700, "kept": modes["kept"]}
    assert (dest / "run.sh").read_bytes() == b"run.sh" and not (dest / "stale").exists()
