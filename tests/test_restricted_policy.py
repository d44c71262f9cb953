"""The local backend's RestrictedPython policy refuses the classic escapes, each with a clear error."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from codeact import Runtime, SandboxConfig


@pytest.fixture(scope="module")
def restricted() -> Iterator[Runtime]:
    with Runtime([], SandboxConfig(backend="local", timeout_s=5)) as rt:
        assert rt.config.effective_policy() == "restricted"
        yield rt


@pytest.mark.parametrize(
    ("code", "needle"),
    [
        ("().__class__.__base__.__subclasses__()", "__class__"),
        ("__import__('os')", "__import__"),
        ("x = 1\ngetattr(x, '__globals__')", "__globals__"),
        ("def g():\n    yield 1\n\nf = g().gi_frame\nf.f_back", "gi_frame"),
        ("import os", "'os' is not allowed"),
        ("import subprocess", "'subprocess' is not allowed"),
        ("import typing\ntyping.sys", "'sys' is not allowed"),
        ("open('/etc/passwd')", "open"),
    ],
)
def test_escapes_refused(restricted: Runtime, code: str, needle: str) -> None:
    result = restricted.run(code)
    assert not result.ok and result.error is not None
    text = f"{result.error.type}: {result.error.message}"
    assert needle in text, text
    assert result.error.type in ("PolicyViolation", "NameError", "SyntaxError")


def test_ordinary_code_still_works(restricted: Runtime) -> None:
    code = (
        "import math, json, collections\n"
        "class Point:\n    def __init__(self, x):\n        self.x = x\n"
        "counts = collections.Counter('abca')\n"
        "total = 0\nfor i in range(5):\n    total += i\n"
        "a, *rest = [1, 2, 3]\n"
        "print(json.dumps({'t': total}))\n"
        "[Point(3).x, counts['a'], math.sqrt(16), rest, max(rest), sorted({3, 1})]"
    )
    result = restricted.run(code)
    assert result.ok, result.error
    assert result.stdout == '{"t": 10}\n'
    assert result.value == [3, 2, 4.0, [2, 3], 3, [1, 3]]


def test_policy_errors_have_line_numbers(restricted: Runtime) -> None:
    result = restricted.run("a = 1\nb = 2\nc = a.__class__\n")
    assert result.error is not None and result.error.lineno == 3
