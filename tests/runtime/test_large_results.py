"""A result over ``max_result_chars`` stays on the host; the sandbox gets a truncated view and pages
through the full JSON text with the built-in ``read_result`` tool."""

from __future__ import annotations

import json
import textwrap
from collections.abc import Iterator
from typing import Any

import pytest

from codeact import Runtime, SandboxConfig, render_observation, tool
from codeact.runtime.ledger import CallLedger
from codeact.runtime.toolhost import READ_RESULT

LIMIT = 2000
BIG = [{"row": i, "text": "é\"\\ " * 10} for i in range(400)]  # escapes and non-ASCII in the JSON


@tool
def big_table() -> list[dict[str, Any]]:
    """A result far over the limit."""
    return BIG


@tool
def small() -> str:
    """A result under the limit."""
    return "fits"


def runtime_for(backend: str) -> Runtime:
    config = SandboxConfig(backend=backend, policy="none", timeout_s=30)  # type: ignore[arg-type]
    rt = Runtime([big_table, small], config, max_result_chars=LIMIT)
    assert "def read_result(" in rt.stubs  # the host's built-ins are part of the sandbox's stubs
    return rt


@pytest.fixture(params=["local", "docker"])
def rt(request: pytest.FixtureRequest) -> Iterator[Runtime]:
    if request.param == "docker":
        request.getfixturevalue("docker_image")
    with runtime_for(request.param) as runtime:
        yield runtime


PAGE_THROUGH = """
    view = big_table()
    pages, offset = [], 0
    while offset is not None:
        page = read_result(view["call_id"], offset=offset)
        pages.append(page["text"])
        offset = page["next_offset"]
    full = json.loads("".join(pages))
"""


def test_large_result_is_kept_on_the_host_and_paged(rt: Runtime) -> None:
    with rt.session() as session:
        result = session.run(textwrap.dedent("""
            import json
            print(small())
        """) + textwrap.dedent(PAGE_THROUGH) + textwrap.dedent("""
            [view["truncated"], view["total_chars"], len(view["preview"]), "read_result" in view["hint"],
             len(pages), len(full), full[7]]
        """))
    assert result.ok, result.error
    total = len(json.dumps(BIG, ensure_ascii=False))
    truncated, total_chars, preview, hinted, n_pages, rows, row7 = result.value
    assert (truncated, total_chars, preview, hinted, rows, row7) == (True, total, LIMIT // 2, True, 400, BIG[7])
    assert n_pages == -(-total // rt.host.page_chars)
    assert result.stdout == "fits\n"
    big_call = result.calls[1]
    assert big_call.name == "big_table" and big_call.ok
    assert [c.name for c in result.calls[2:]] == [READ_RESULT] * n_pages and all(c.ok for c in result.calls)
    assert len(render_observation(result)) <= 8000


def test_paging_in_a_later_run_and_errors() -> None:
    with runtime_for("local") as rt, rt.session() as session:
        first = session.run("v = big_table()\nv['call_id']")
        later = session.run(textwrap.dedent("""
            import json
            page = read_result(v["call_id"], offset=10, limit=50)
            try:
                read_result("call_999")
            except ToolError as e:
                print(e.code)
            [page["offset"], len(page["text"]), page["next_offset"]]
        """))
        assert "read_result" in rt.prompt_view
    assert first.value.startswith("call_")
    assert later.ok, later.error
    assert later.value == [10, 50, 60]
    assert later.stdout == "not_found\n"
    assert later.calls[0].arguments == {"call_id": first.value, "offset": 10, "limit": 50}


def test_read_result_is_a_builtin_not_a_user_tool() -> None:
    with runtime_for("local") as rt:
        assert READ_RESULT not in rt.toolset and rt.toolset.names == ["big_table", "small"]
        assert [s.name for s in rt.host.specs] == ["big_table", "small", READ_RESULT, "search_tools", "describe_tool"]
        ledger = CallLedger()
        record = rt.host.call(ledger, READ_RESULT, {"call_id": "nope"})
        assert record.error is not None and record.error.code == "not_found"
        bad = rt.host.call(ledger, READ_RESULT, {"offset": -1})
        assert bad.error is not None and bad.error.code == "invalid_arguments"

    @tool(name=READ_RESULT)
    def mine(call_id: str) -> str:
        """A user tool of the same name wins."""
        return "user's"

    with Runtime([mine], SandboxConfig(backend="local")) as rt:
        assert [s.name for s in rt.host.specs] == [READ_RESULT, "search_tools", "describe_tool"]
        assert rt.host.call(CallLedger(), READ_RESULT, {"call_id": "x"}).result == "user's"
