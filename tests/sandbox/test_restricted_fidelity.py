"""The restricted policy runs everyday model code with the same outcome as plain CPython.

Every snippet of tests/data/restricted_corpus.txt runs under policy="restricted" and policy="none"
(the same kernel, the same local backend); the outcomes (ok, stdout, stderr, value, error type
and message) must agree for at least 99% of them. What the policy deliberately refuses is
pinned in DELIBERATE below, each with its DENY_LIST reason.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from codeact import ExecutionResult, Runtime, SandboxConfig

CORPUS = Path(__file__).parents[1] / "data" / "restricted_corpus.txt"


def corpus() -> list[str]:
    blocks = CORPUS.read_text().split("# ---\n")
    return [b for b in blocks if any(line.strip() and not line.startswith("#") for line in b.splitlines())]


def outcome(result: ExecutionResult) -> tuple[Any, ...]:
    error = result.error
    return (
        result.ok, result.termination, result.stdout, result.stderr, result.value,
        None if error is None else (error.type, error.message),
    )


@pytest.fixture(scope="module")
def pair() -> Iterator[tuple[Runtime, Runtime]]:
    def config(policy: str) -> SandboxConfig:
        return SandboxConfig(backend="local", timeout_s=20, policy=policy, isolation="none")  # type: ignore[arg-type]

    with Runtime([], config("restricted")) as restricted, Runtime([], config("none")) as plain:
        yield restricted, plain


def test_corpus_has_a_few_hundred_snippets() -> None:
    assert len(corpus()) >= 300


def test_everyday_code_runs_as_in_cpython(pair: tuple[Runtime, Runtime]) -> None:
    restricted, plain = pair
    snippets = corpus()
    differences = []
    with restricted.session() as rs, plain.session() as ps:
        for snippet in snippets:
            got, want = outcome(rs.run(snippet)), outcome(ps.run(snippet))
            if got != want:
                differences.append(f"--- snippet:\n{snippet}\n  restricted: {got}\n  cpython:    {want}")
    same = 1 - len(differences) / len(snippets)
    assert same >= 0.99, f"{same:.1%} identical; differences:\n" + "\n".join(differences)


#: Deliberate differences: (code, what the restricted policy says). Each is on DENY_LIST.
DELIBERATE = [
    ("import os", "import of 'os' is not allowed"),
    ("import sys", "import of 'sys' is not allowed"),
    ("from pathlib import Path", "import of 'pathlib' is not allowed"),
    ("import traceback", "import of 'traceback' is not allowed"),
    ("eval('1 + 1')", "Eval calls are not allowed"),
    ("exec('x = 1')", "Exec calls are not allowed"),
    ("compile('1', 'f', 'eval')", "name 'compile' is not defined"),
    ("open('/etc/hostname')", "outside the scratch directory"),
    ("open(0)", "takes a path inside the scratch directory"),
    ("class S:\n    def __new__(cls):\n        return object.__new__(cls)\nS()", "__new__"),
    ("import json\njson.x = 1", "read-only"),
    ("import random\nrandom.Random()._randbelow(3)", "_randbelow"),
    ("try:\n    pass\nexcept* ValueError:\n    pass", "TryStar statements are not allowed"),
    ("class M(type):\n    pass\nclass K(metaclass=M):\n    pass", "metaclass"),
    ("x = 1\nglobals()['y'] = 2\ny", "name 'y' is not defined"),
    ("help(len)", "name 'help' is not defined"),
]


@pytest.mark.parametrize(("code", "needle"), DELIBERATE)
def test_deliberate_differences(pair: tuple[Runtime, Runtime], code: str, needle: str) -> None:
    restricted, _plain = pair
    result = restricted.run(code)
    assert not result.ok and result.error is not None, result
    assert needle in result.error.message, result.error


def test_deny_list_is_documented() -> None:
    from codeact.kernel import _restricted

    assert len(_restricted.DENY_LIST) >= 10
    assert all(reason.strip() for reason in _restricted.DENY_LIST.values())
