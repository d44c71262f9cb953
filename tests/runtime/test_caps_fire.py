"""Every limit set low enough to fire, and every per-run state reset (issue 17's mutation survivors).

Each test here was written against a hand-made bug that the rest of the suite let through: a cap
never reached, a state that leaked into the next run, a dead sandbox kept around.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

from codeact import Runtime, SandboxConfig, ToolError, ToolSpec, tool
from codeact.errors import ToolArgumentsError
from codeact.runtime.sources.http import http_tool
from tests._configs import LOCAL
from tests.servers.http_app import ApiServer


@tool
def ping(n: int) -> int:
    """Echo n.

    Args:
        n: Any integer.
    """
    return n


@tool
def shout(size: int) -> str:
    """Fail with a long message.

    Args:
        size: Length of the message.
    """
    raise ToolError("tool_exception", "x" * size)


def test_max_calls_per_run_refuses_the_call_past_the_limit() -> None:
    with Runtime([ping], LOCAL, max_calls_per_run=3) as rt, rt.session() as s:
        result = s.run(
            "got = []\n"
            "for i in range(5):\n"
            "    try:\n"
            "        got.append(ping(n=i))\n"
            "    except ToolError as e:\n"
            "        got.append(e.code)\n"
            "got")
        assert result.ok, result.error
        assert result.value == [0, 1, 2, "permission_denied", "permission_denied"]
        assert [c.arguments for c in result.calls] == [{"n": 0}, {"n": 1}, {"n": 2}]
        # the count is per run: the next run may call again
        again = s.run("ping(n=7)")
        assert again.ok and again.value == 7


def test_error_messages_are_capped_in_records() -> None:
    with Runtime([shout], LOCAL) as rt:
        short = rt.run("shout(size=100)")
        long = rt.run("shout(size=20_000)")
    assert short.calls[0].error is not None and len(short.calls[0].error.message) == 100
    error = long.calls[0].error
    assert error is not None and error.code == "tool_exception"
    assert 3_000 < len(error.message) <= 4_100, len(error.message)


def test_listed_argument_problems_are_capped() -> None:
    spec = ToolSpec.from_openai({"type": "function", "function": {
        "name": "wide", "description": "Many integer fields.",
        "parameters": {"type": "object",
                       "properties": {f"f{i}": {"type": "integer"} for i in range(80)}}}})
    with pytest.raises(ToolArgumentsError) as info:
        spec.validate_arguments({f"f{i}": "not an int" for i in range(80)})
    text = str(info.value)
    assert "and 30 more problems" in text
    assert "f79" not in text or text.count("is not of type") <= 50


@pytest.mark.parametrize("backend", ["local", "docker"])
def test_final_answer_does_not_leak_into_the_next_run(backend: str, request: pytest.FixtureRequest) -> None:
    if backend == "docker":
        request.getfixturevalue("docker_image")
    config = SandboxConfig(backend=backend, policy="none", timeout_s=20)  # type: ignore[arg-type]
    with Runtime([ping], config) as rt, rt.session() as s:
        first = s.run("final_answer(None)\nprint('not reached')")
        assert first.ok and first.answered and first.final_answer is None and first.stdout == ""
        second = s.run("y = 1\ny")
        assert second.ok and second.value == 1
        assert not second.answered and second.final_answer is None
        third = s.run("final_answer({'a': 1})")
        assert third.answered and third.final_answer == {"a": 1}


@tool
def measure(text: str) -> int:
    """The length of a text.

    Args:
        text: Any text.
    """
    return len(text)


@tool
def blob(size: int) -> str:
    """A text of ``size`` characters.

    Args:
        size: Its length.
    """
    return "y" * size


@pytest.mark.parametrize("backend", ["local", "docker"])
def test_max_frame_bytes_refuses_a_larger_frame_from_the_sandbox(backend: str, request: pytest.FixtureRequest) -> None:
    if backend == "docker":
        request.getfixturevalue("docker_image")
    limit = 64 * 1024  # the smallest SandboxConfig allows
    config = SandboxConfig(backend=backend, policy="none", timeout_s=20, max_frame_bytes=limit)  # type: ignore[arg-type]
    with Runtime([measure, blob], config) as rt, rt.session() as s:
        under = s.run(f"x = 1\nmeasure(text='x' * {limit - 1000})")
        assert under.ok and under.value == limit - 1000, under
        # a call frame over the cap is refused unread (its head tells which call it is, the rest is
        # skipped): ordinary code passing a large value gets a clear error, the state stays
        over = s.run(f"measure(text='x' * {limit + 1000})")
        assert over.termination == "error" and not over.state_lost, over
        (call,) = over.calls
        assert call.name == "measure" and not call.ok and call.error is not None
        assert call.error.code == "invalid_arguments"
        assert f"exceeds the channel's limit of {limit} (max_frame_bytes)" in call.error.message
        assert call.arguments == {"truncated": True, "bytes": call.arguments["bytes"]}
        assert call.arguments["bytes"] > limit
        # over both caps (the frame's and max_argument_bytes): the usual argument-size message
        huge = s.run("measure(text='x' * 2_000_000)")
        assert huge.calls[0].error is not None and "exceed the limit of 262144" in huge.calls[0].error.message
        kept = s.run("x")
        assert kept.ok and kept.value == 1
        # the cap is on what the host reads: a result it sends (bounded by max_result_chars) may be larger
        back = s.run(f"len(blob(size={2 * limit}))")
        assert back.ok and back.value == 2 * limit, back


@pytest.fixture(scope="module")
def api() -> Iterator[ApiServer]:
    with ApiServer() as server:
        yield server


def test_http_path_parameters_cannot_climb_to_another_route(api: ApiServer) -> None:
    item = http_tool("get_item", "GET", f"{api.url}/items/{{item_id}}", description="One item.")
    with Runtime([item], LOCAL) as rt:
        result = rt.run("get_item(item_id='a/../../status/200')")
    assert len(result.calls) == 1
    seen = [path for path in api.hits if path.startswith(("/items/", "/status/"))]
    assert "/status/200" not in api.hits, seen
    assert any("%2F" in path or "a/../../status" not in path for path in seen), seen


@pytest.mark.docker
def test_a_dead_sandbox_is_discarded_at_once(docker_image: str) -> None:
    config = SandboxConfig(backend="docker", memory_mb=64, timeout_s=20)
    with Runtime([ping], config) as rt, rt.session() as s:
        s.run("x = 1")
        first_id = _container_id(s)
        dead = s.run("import os, signal\nos.kill(os.getpid(), signal.SIGKILL)")
        assert dead.state_lost, dead
        # gone before the next run starts: the session holds no driver for the dead sandbox
        assert s.sandbox_state.driver is None
        fresh = s.run("'x' in globals()")
        assert fresh.ok and fresh.value is False
        assert _container_id(s) != first_id


def _container_id(session: Any) -> str:
    sandbox = session.sandbox_state.driver.sandbox
    return str(getattr(sandbox, "container_id", None) or getattr(getattr(sandbox, "container", None), "id", ""))


@pytest.mark.parametrize("backend", ["local", "docker"])
def test_a_done_frame_over_a_low_frame_limit_is_cut_to_fit(backend: str, request: pytest.FixtureRequest) -> None:
    # max_frame_bytes below what output_cap lets the code print: the kernel cuts its report to fit
    # (output marked truncated, the value replaced by a note) instead of sending a frame the
    # host must refuse as a protocol violation (which would lose the session's state).
    if backend == "docker":
        request.getfixturevalue("docker_image")
    limit = 64 * 1024
    config = SandboxConfig(backend=backend, policy="none", timeout_s=20, max_frame_bytes=limit)  # type: ignore[arg-type]
    with Runtime([], config) as rt, rt.session() as s:
        s.run("kept = 1")
        loud = s.run("print('\\x01' * 200_000)\nprint('e' * 200_000, file=__import__('sys').stderr)\n'v' * 100_000")
        assert loud.ok and not loud.state_lost, loud
        assert loud.stdout_truncated and loud.stderr_truncated
        assert 0 < len(loud.stdout) <= limit // 36 and 0 < len(loud.stderr) <= limit // 36
        assert isinstance(loud.value, str) and f"frame limit of {limit}" in loud.value
        # an error that fits once the output is cut is kept whole ...
        fits = s.run("print('o' * 200_000)\nraise ValueError('m' * 7000)")
        assert fits.termination == "error" and fits.error is not None and fits.error.message == "m" * 7000
        assert fits.stdout_truncated
        # ... one that does not (its characters escape to 6 bytes each) is cut too
        cut = s.run("raise ValueError('\\x01' * 7000)")
        assert cut.termination == "error" and cut.error is not None and cut.error.type == "ValueError"
        assert 0 < len(cut.error.message) <= limit // 36 and set(cut.error.message) == {"\x01"}
        after = s.run("kept")
        assert after.ok and after.value == 1


@pytest.mark.parametrize("backend", ["local", "docker"])
def test_streamed_output_over_a_low_frame_limit_comes_in_frames_that_fit(backend: str,
                                                                        request: pytest.FixtureRequest) -> None:
    if backend == "docker":
        request.getfixturevalue("docker_image")
    limit = 64 * 1024
    config = SandboxConfig(backend=backend, policy="none", timeout_s=20, max_frame_bytes=limit)  # type: ignore[arg-type]
    seen: list[str] = []
    with Runtime([], config) as rt, rt.session() as s:
        s.run("kept = 1")
        loud = s.run("print('\\x01' * 300_000)\nkept", on_event=lambda e: seen.append(getattr(e, "text", "")))
        assert loud.ok and not loud.state_lost and loud.value == 1, loud
        assert sum(len(t) for t in seen) >= 300_000  # every character reached the listener


@pytest.mark.parametrize("limit", [64 * 1024, None], ids=["low-limit", "default"])
def test_interleaved_streamed_output_fits_the_frame_limits(limit: int | None) -> None:
    # Many small chunks, alternating streams: each costs bytes beyond its text, and a frame may
    # hold at most MAX_CHUNKS of them (with default settings one burst broke that limit).
    extra = {} if limit is None else {"max_frame_bytes": limit}
    config = SandboxConfig(backend="local", policy="none", timeout_s=30, **extra)
    seen: list[Any] = []
    with Runtime([], config) as rt, rt.session() as s:
        s.run("kept = 1")
        loud = s.run("import sys\nfor i in range(30000):\n    print('a')\n    print('b', file=sys.stderr)\nkept",
                     on_event=seen.append)
        assert loud.ok and not loud.state_lost and loud.value == 1, loud
        assert sum(len(getattr(e, "text", "")) for e in seen) == 120_000  # every character streamed
