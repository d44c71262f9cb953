"""The model's code runs in the kernel's process, so it can forge frames. Every forgery ends the
session as ``killed`` with a clear reason; the host's ledger stays the only source of records."""

from __future__ import annotations

import json
import textwrap
import threading
import time
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest

from codeact import Runtime, SandboxConfig, tool

FORGE = """
import json, os, socket, struct
fd = next(int(n) for n in os.listdir('/proc/self/fd')
          if os.readlink(f'/proc/self/fd/{n}').startswith('socket:'))
chan = socket.socket(fileno=os.dup(fd))
def frame(obj):
    body = json.dumps(obj).encode()
    return struct.pack('!I', len(body)) + body
"""


def forge(runtime: Runtime, payload: str) -> object:
    with runtime.session() as session:
        session.run("alive = True")
        result = session.run(textwrap.dedent(FORGE) + textwrap.dedent(payload))
        after = session.run("'alive' in globals()")
        assert after.ok and after.value is False  # a fresh sandbox replaced the killed one
        return result


@pytest.mark.parametrize(
    ("payload", "reason"),
    [
        ("chan.sendall(b'\\x00\\x00\\x00\\x05hello')", "unreadable frame"),
        ("chan.sendall(struct.pack('!I', 1 << 30) + b'{\"type\":\"output\"' + b' ' * 2000)", "exceeds the limit"),
        ("chan.sendall(frame({'type': 'done', 'id': 'not-this-run', 'termination': 'completed'}))",
         "not in progress"),
        ("chan.sendall(frame({'type': 'result', 'seq': 1, 'ok': True, 'value': 1}))", "unexpected frame type"),
        ("chan.sendall(frame({'type': 'call', 'seq': -4, 'name': 'x'}))", "malformed call"),
        ("chan.sendall(frame({'type': 'done', 'id': 5, 'termination': 'completed'}))", "malformed done"),
        ("chan.sendall(frame({'type': 'call', 'seq': 3, 'name': 'get_weather\\udc80'}))", "lone surrogate"),
    ],
)
def test_forged_frames_kill_the_session(runtime: Runtime, payload: str, reason: str) -> None:
    result = forge(runtime, payload + "\nimport time\ntime.sleep(3)\n")
    assert result.termination == "killed" and result.state_lost  # type: ignore[attr-defined]
    assert "protocol violation" in result.reason and reason in result.reason  # type: ignore[attr-defined]


def test_a_claimed_call_list_is_never_used(runtime: Runtime) -> None:
    # A well-formed done frame for the *current* run would need the run id, which the code cannot
    # see; even a forged 'calls' field would be refused by the strict frame schema.
    result = forge(runtime, """
        chan.sendall(frame({'type': 'done', 'id': 'x', 'termination': 'completed',
                            'calls': [{'id': 'call_1', 'name': 'get_weather'}]}))
        import time
        time.sleep(3)
    """)
    assert result.termination == "killed"  # type: ignore[attr-defined]
    assert result.calls == []  # type: ignore[attr-defined]
    # refused for the claimed call list itself (the strict schema), not only for the unknown run id
    assert "malformed done frame" in result.reason and "calls" in result.reason  # type: ignore[attr-defined]


def test_a_done_frame_for_another_run_is_refused(runtime: Runtime) -> None:
    result = forge(runtime, """
        chan.sendall(frame({'type': 'done', 'id': 'x', 'termination': 'completed'}))
        import time
        time.sleep(3)
    """)
    assert result.termination == "killed"  # type: ignore[attr-defined]
    assert "not in progress" in result.reason  # type: ignore[attr-defined]


def test_result_stays_bounded(runtime: Runtime) -> None:
    with runtime.session() as session:
        result = session.run("'v' * 5_000_000")
        assert result.ok
        assert isinstance(result.value, str) and len(result.value) < 400_000
        many = session.run("for i in range(20):\n    get_weather(city='x' * 300_000)\n", timeout_s=20)
        assert len(many.model_dump_json()) < 2_000_000
        assert len(many.calls) == 1 and many.calls[0].error is not None
        assert many.calls[0].error.code == "invalid_arguments"
        assert many.error is not None and many.error.type == "ToolError"


#: Code that stops every reader of the kernel and writes 2,000 call frames straight to the
#: channel: the host's answers fill the socket and stay there. Holding the lock a thread takes to
#: become the reader is not enough: a run that computed for a while has handed the channel to the
#: reader thread already, which would go on reading (and answer the interrupt); so whatever
#: thread reads also blocks on the first frame it takes.
FLOOD = """
import gc, threading, time
reading = next(o for o in gc.get_objects() if type(o).__name__ == 'Reading')
reading.mu.acquire()
reading.kernel.dispatch = lambda message: threading.Event().wait()
chan.sendall(b''.join(frame({'type': 'call', 'seq': 10_000 + i, 'name': 'blob', 'arguments': {'i': i}})
                      for i in range(2000)))
time.sleep(120)
"""


def _peak_threads(stop: threading.Event, peak: list[int]) -> None:
    while not stop.wait(0.01):
        peak[0] = max(peak[0], threading.active_count())


def test_a_kernel_that_stops_reading_under_a_call_flood_ends_at_its_deadline(backend: str) -> None:
    """Every host write has a total deadline and a failed one kills the sandbox; the deadline
    path never waits for a blocked writer; calls past their timeout pin at most the session's cap
    of host threads. Before: 133 s and 276 threads."""
    @tool
    def blob(i: int) -> str:
        """A large answer.

        Args:
            i: which.
        """
        return "x" * 20_000

    config = SandboxConfig(backend=backend, policy="none", grace_s=1)  # type: ignore[arg-type]
    with Runtime([blob], config, tool_timeout_s=0.2) as runtime, runtime.session() as session:
        runtime.host.limits = replace(runtime.host.limits, max_lent_threads_per_session=4)
        session.run("1")
        before = threading.active_count()
        stop, peak = threading.Event(), [before]
        watcher = threading.Thread(target=_peak_threads, args=(stop, peak), daemon=True)
        watcher.start()
        started = time.monotonic()
        result = session.run(textwrap.dedent(FORGE) + textwrap.dedent(FLOOD), timeout_s=3)
        took = time.monotonic() - started
        stop.set()
        watcher.join()
        assert result.termination in ("timeout", "killed") and result.state_lost, result.reason
        assert took < 3 + 1 + 2, f"the run took {took:.1f} s"
        assert peak[0] - before <= runtime.loop.max_workers + 4 + 8, f"{peak[0] - before} more host threads"
        assert session.run("2").value == 2  # a fresh sandbox


def test_every_writer_takes_text_a_host_tool_returns_with_lone_surrogates(tmp_path: Path) -> None:
    """What the ledger keeps is valid Unicode whatever a tool returns (a file name read with
    surrogateescape, say), so the result's JSON, the observation and a snapshot can be written."""
    from codeact import ToolError, render_observation

    @tool
    def odd(kind: str) -> Any:
        """Returns or raises text that is not valid Unicode.

        Args:
            kind: which.
        """
        if kind == "raise":
            raise ToolError("not_found", "no file b'\\xff' (\udcff)", data={"name": "\udcff"})
        return {"name\ud800": ["x\udc80y", "\U0001F600"]}

    config = SandboxConfig(backend="local", policy="none")
    with Runtime([odd], config) as runtime, runtime.session() as session:
        result = session.run("v = odd(kind='value')\ntry:\n    odd(kind='raise')\nexcept ToolError as e:\n"
                             "    v['error'] = [e.message, e.data]\nv")
        assert result.ok, result
        assert result.value == {"name\ufffd": ["x\ufffdy", "\U0001F600"], "error": ["no file b'\\xff' (\ufffd)",
                                                                                    {"name": "\ufffd"}]}
        assert json.loads(result.to_json())["calls"][1]["error"]["message"] == "no file b'\\xff' (\ufffd)"
        assert "\ufffd" in render_observation(result)
        session.snapshot().save(tmp_path / "s.snap", key=b"k" * 32)
