"""The front of the pipeline (bound → lookup → validate) takes every schema shape and never raises
out of the host: a type list (``["string", "null"]``, as OpenAPI's ``nullable`` and MCP/OpenAI
schemas write it) is checked like a single type, and an unexpected exception there (a bug in
codeact) fails that one call as a recorded ``tool_exception``; the run goes on, and so does the next."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

from codeact import Runtime, Tool, Toolset, ToolSpec
from codeact.runtime import _arguments, toolhost
from codeact.runtime._arguments import fast_check_for
from codeact.runtime.ledger import CallLedger
from tests._configs import LOCAL

FIND = ToolSpec(name="find", description="Find things.", input_schema={
    "type": "object",
    "properties": {"q": {"type": "string"}, "sha": {"type": ["string", "null"], "description": "A commit, or None."}},
    "required": ["q"],
    "additionalProperties": False,
})


def _find(**args: Any) -> dict[str, Any]:
    return args


@pytest.fixture(scope="module")
def runtime() -> Iterator[Runtime]:
    with Runtime(Toolset([Tool(spec=FIND, fn=_find)]), LOCAL) as rt:
        yield rt


def test_fast_check_takes_type_lists() -> None:
    check = fast_check_for(FIND.input_schema)
    assert check is not None
    assert check({"q": "a", "sha": "b"}) and check({"q": "a", "sha": None}) and check({"q": "a"})
    assert not check({"q": "a", "sha": 3}) and not check({"q": None})
    for odd in ([], ["string", "date"], [["string"]], {"string": 1}, 3):  # not vouched for: the full validator decides
        assert fast_check_for({"type": "object", "properties": {"x": {"type": odd}}}) is None
    assert fast_check_for({"type": "object", "properties": {}, "required": [["x"]]}) is None


def test_type_list_field_with_a_string_none_and_a_wrong_type(runtime: Runtime) -> None:
    code = """
out = [find(q="a", sha="abc"), find(q="a", sha=None), find(q="a")]
try:
    find(q="a", sha=3)
except ToolError as e:
    out.append(e.code)
out
"""
    with runtime.session() as session:
        result = session.run(code)
        assert result.ok, result.error
        assert result.value == [{"q": "a", "sha": "abc"}, {"q": "a", "sha": None}, {"q": "a"}, "invalid_arguments"]
        assert [c.arguments for c in result.calls] == [
            {"q": "a", "sha": "abc"}, {"q": "a", "sha": None}, {"q": "a"}, {"q": "a", "sha": 3}]
        assert result.calls[-1].error is not None and "sha" in result.calls[-1].error.message
        assert session.run("find(q='b', sha=None)").value == {"q": "b", "sha": None}  # the session lives on


def _broken(*_: Any, **__: Any) -> Any:
    raise TypeError("injected fault")


@pytest.mark.parametrize("where", ["fast_check_for", "unknown_tool_message"])
def test_an_exception_in_the_front_fails_the_call_not_the_run(
        runtime: Runtime, monkeypatch: pytest.MonkeyPatch, where: str) -> None:
    """Fault injection: the fast check (inside validate) or the unknown-tool hint (outside it) raises."""
    runtime.host._routes.clear()  # the fast check is compiled (and would raise) at a tool's first call
    monkeypatch.setattr(_arguments if where == "fast_check_for" else toolhost, where, _broken)
    call = 'find(q="a")' if where == "fast_check_for" else '__codeact_call__("nope", {"q": "a"})'
    code = f"""
try:
    {call}
except ToolError as e:
    got = (e.code, e.message)
print("still running")
got
"""
    with runtime.session() as session:
        result = session.run(code)
        assert result.ok, result.error
        assert result.stdout == "still running\n"
        code_, message = result.value
        assert code_ == "tool_exception" and "internal error" in message and "injected fault" in message
        (record,) = result.calls
        assert record.finished and not record.ok and record.error is not None
        assert record.error.code == "tool_exception"
        monkeypatch.undo()
        assert session.run("find(q='again')").value == {"q": "again"}  # the next run works


def test_a_function_calling_loop_gets_the_same_record(runtime: Runtime, monkeypatch: pytest.MonkeyPatch) -> None:
    """``ToolHost.acall`` (JSON function calling) shares the front, and its guard."""
    ledger = CallLedger()
    assert runtime.host.call(ledger, "find", {"q": "a", "sha": None}).result == {"q": "a", "sha": None}
    assert runtime.host.call(ledger, "find", {"q": "a", "sha": 3}).error.code == "invalid_arguments"  # type: ignore[union-attr]
    monkeypatch.setattr(toolhost, "unknown_tool_message", _broken)
    record = runtime.host.call(ledger, "nope", {})
    assert record.finished and record.error is not None and record.error.code == "tool_exception"
    assert [r.name for r in ledger.records()] == ["find", "find", "nope"]
