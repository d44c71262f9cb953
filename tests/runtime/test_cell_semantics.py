"""A cell compiles as CPython compiles a module: it inherits no ``from __future__`` flag from the
kernel's own modules (they all postpone annotations), under every compile path of the kernel."""

from __future__ import annotations

import pytest

from codeact import FlowPolicy, Runtime, SandboxConfig
from tests._configs import LOCAL

ANNOTATED = "def f(x: int) -> str:\n    return str(x)\n"
EVALUATED = "f.__annotations__ == {'x': int, 'return': str}"


@pytest.mark.parametrize("last", ["an expression", "a statement"])
@pytest.mark.parametrize("policy", ["none", "restricted"])
def test_annotations_are_evaluated_as_in_cpython(policy: str, last: str) -> None:
    code = ANNOTATED + (EVALUATED if last == "an expression" else f"same = {EVALUATED}")
    with Runtime([], SandboxConfig(backend="local", policy=policy)) as rt, rt.session() as s:  # type: ignore[arg-type]
        result = s.run(code)
        value = result.value if last == "an expression" else s.run("same").value
        assert (result.ok, value) == (True, True), result


def test_annotations_under_a_flow_policy_and_in_exec() -> None:
    with Runtime([], LOCAL, flow=FlowPolicy()) as rt, rt.session() as s:
        result = s.run(ANNOTATED + EVALUATED)
        assert (result.ok, result.value) == (True, True), result
        executed = s.run(f"exec({ANNOTATED!r})\n" + EVALUATED)
        assert (executed.ok, executed.value) == (True, True), executed


def test_a_cell_may_still_postpone_its_own_annotations() -> None:
    with Runtime([], LOCAL) as rt, rt.session() as s:
        result = s.run("from __future__ import annotations\n" + ANNOTATED + "f.__annotations__['x']")
        assert (result.ok, result.value) == (True, "int"), result
