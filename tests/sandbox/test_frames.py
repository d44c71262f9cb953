"""The frame schema (``kernel/frames.py``) is the one declaration of the channel: every frame
either side builds is declared there, and the host refuses every frame the kernel sends that
does not fit it (unknown keys, missing keys, wrong types, oversized values, bad choices)."""

from __future__ import annotations

import ast
from pathlib import Path
from typing import Any

import pytest

from codeact.kernel.frames import FRAMES, FROM_HOST, FROM_KERNEL, problem
from codeact.sandbox._outcome import call_problem
from codeact.sandbox.driver import DoneFrame

INSIDE = Path(__file__).resolve().parents[2] / "codeact" / "kernel"
DRIVER = INSIDE.parent / "sandbox" / "driver.py"


def _frames_built(path: Path) -> list[tuple[str, set[str], int]]:
    """(type, literal keys, line) of every dict literal with a constant ``"type"`` key in ``path``."""
    found = []
    for node in ast.walk(ast.parse(path.read_text())):
        if not isinstance(node, ast.Dict):
            continue
        keys = {k.value for k in node.keys if isinstance(k, ast.Constant) and isinstance(k.value, str)}
        for key, value in zip(node.keys, node.values, strict=True):
            if isinstance(key, ast.Constant) and key.value == "type" and isinstance(value, ast.Constant):
                found.append((value.value, keys, node.lineno))
    return found


@pytest.mark.parametrize("path", [INSIDE / "kernel.py", INSIDE / "_live.py", INSIDE / "client.py"], ids=lambda p: p.name)
def test_every_frame_the_kernel_builds_is_declared(path: Path) -> None:
    built = _frames_built(path)
    assert built, f"no frame literal found in {path.name}"
    for kind, keys, line in built:
        assert kind in FROM_KERNEL, f"{path.name}:{line} sends an undeclared frame type {kind!r}"
        assert keys <= set(FROM_KERNEL[kind]), f"{path.name}:{line}: undeclared keys {keys - set(FROM_KERNEL[kind])}"


def test_every_frame_the_host_sends_is_declared() -> None:
    built = _frames_built(DRIVER)
    assert {kind for kind, _, _ in built} >= {"setup", "run", "result", "interrupt"}
    for kind, keys, line in built:
        assert kind in FROM_HOST, f"driver.py:{line} sends an undeclared frame type {kind!r}"
        assert keys <= set(FROM_HOST[kind]), f"driver.py:{line}: undeclared keys {keys - set(FROM_HOST[kind])}"


def test_the_host_sends_every_frame_declared_for_it() -> None:
    # A frame declared and handled but never sent (``shutdown`` was) is dead protocol: a graceful
    # close is the channel's EOF instead (see test_a_closed_channel_ends_the_kernel).
    assert {kind for kind, _, _ in _frames_built(DRIVER)} == set(FROM_HOST)


def test_a_closed_channel_ends_the_kernel() -> None:
    from codeact import SandboxConfig
    from codeact.sandbox.pool import open_kernel

    kernel = open_kernel(SandboxConfig(backend="local", policy="none"), "")
    try:
        assert kernel.run("import threading, time\nthreading.Thread(target=time.sleep, args=(60,)).start()",
                          lambda *a: None, 10, output_cap=100, output_limit=1000, grace_s=1).termination == "completed"
        kernel.sandbox.channel.sock.close()
        assert kernel.sandbox._proc.wait(10) == 0  # type: ignore[attr-defined]  # by itself, not killed
    finally:
        kernel.sandbox.close()


def test_the_kernel_handles_every_host_frame() -> None:
    source = (INSIDE / "kernel.py").read_text()
    for kind in FROM_HOST:
        assert f'"{kind}"' in source, f"the kernel does not handle {kind!r} frames"


GOOD: dict[str, dict[str, Any]] = {
    "hello": {"type": "hello", "v": 1, "pid": 7, "policy": "none"},
    "ready": {"type": "ready"},
    "bound": {"type": "bound", "error": None},
    "call": {"type": "call", "seq": 1, "name": "echo", "arguments": {"x": 1}},
    "output": {"type": "output", "id": "r", "chunks": [["stdout", "hi\n"], ["stderr", ""]]},
    "done": {"type": "done", "id": "r", "termination": "error", "stdout": "", "stderr": "",
             "stdout_truncated": False, "stderr_truncated": True, "value": None,
             "error": {"type": "ValueError", "message": "m", "lineno": 3, "traceback": "tb"},
             "final": {"value": [1, 2]}},
}

BAD: dict[str, list[tuple[dict[str, Any], str]]] = {
    "hello": [({"v": "1"}, "v"), ({"pid": True}, "pid"), ({"extra": 1}, "extra"), ({"policy": None}, "policy")],
    "ready": [({"error": 5}, "error"), ({"stubs": ""}, "stubs")],
    "bound": [({"error": ["x"]}, "error"), ({"values": {}}, "values")],
    "call": [({"seq": 0}, "seq"), ({"seq": True}, "seq"), ({"name": "x" * 513}, "name"),
             ({"name": 5}, "name"), ({"calls": []}, "calls")],
    "output": [({"chunks": [["stdin", "x"]]}, "chunks"), ({"chunks": [["stdout"]]}, "chunks"),
               ({"chunks": [["stdout", "a"]] * 10_001}, "chunks"), ({"id": 5}, "id"),
               ({"chunks": {"stdout": "x"}}, "chunks")],
    "done": [({"termination": "timeout"}, "termination"), ({"id": 5}, "id"), ({"stdout": None}, "stdout"),
             ({"stdout_truncated": 1}, "stdout_truncated"), ({"calls": [{"id": "call_1"}]}, "calls"),
             ({"error": {"type": "E", "message": "m", "extra": 1}}, "extra"),
             ({"error": {"type": "E" * 1001, "message": "m"}}, "type"),
             ({"error": {"type": "E", "message": "m", "lineno": "3"}}, "lineno"),
             ({"error": {"type": "E"}}, "message"), ({"error": "boom"}, "error"), ({"final": [1]}, "final")],
}


def test_the_good_frames_pass() -> None:
    assert set(GOOD) == set(FROM_KERNEL)
    for frame in GOOD.values():
        assert problem(frame) is None, frame
    assert call_problem(GOOD["call"]) is None
    done = DoneFrame.of(GOOD["done"])
    assert done.error is not None and done.error.lineno == 3 and done.final == {"value": [1, 2]}
    assert DoneFrame.of({"type": "done", "id": "r", "termination": "completed"}).stdout == ""


@pytest.mark.parametrize("kind", sorted(BAD))
def test_malformed_frames_are_refused(kind: str) -> None:
    for change, named in BAD[kind]:
        frame = {**GOOD[kind], **change}
        issue = problem(frame)
        assert issue is not None and named in issue, (kind, change, issue)
        if kind == "call":
            assert call_problem(frame) is not None
    for required in (name for name, field in FROM_KERNEL[kind].items() if field.required):
        frame = {k: v for k, v in GOOD[kind].items() if k != required}
        issue = problem(frame, FROM_KERNEL[kind])
        assert issue is not None and required in issue


def test_unknown_and_untyped_frames_are_refused() -> None:
    assert problem({"type": "result", "seq": 1, "ok": True}, FROM_KERNEL["done"]) is not None
    assert problem({"type": "nope"}) is not None and problem({"kind": "done"}) is not None
    assert problem([1]) is not None
    assert set(FRAMES) == set(FROM_KERNEL) | set(FROM_HOST)
