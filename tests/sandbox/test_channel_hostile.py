"""The model's code runs in the kernel's process, so it can forge frames. Every forgery ends the
session as ``killed`` with a clear reason; the host's ledger stays the only source of records."""

from __future__ import annotations

import textwrap

import pytest

from codeact import Runtime

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
