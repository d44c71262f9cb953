"""Large toolsets (issue 12): a prompt view within a budget, search_tools / describe_tool inside the
sandbox, every tool callable by its python name (search quality: ``test_search_quality.py``)."""

from __future__ import annotations

import textwrap
from collections.abc import Iterator
from typing import Any

import pytest

from codeact import Runtime, SandboxConfig, Toolset, tool
from codeact.tool_stubs.catalog import ToolCatalog
from tests._configs import LOCAL
from tests.servers.big_openapi import RESOURCES, big_document
from tests.servers.json_http import json_server


@pytest.fixture(scope="module")
def server() -> Iterator[tuple[str, list[dict[str, Any]]]]:
    with json_server(lambda request: {"id": 7, "name": "made"}) as served:
        yield served


@pytest.fixture(scope="module")
def big(server: tuple[str, list[dict[str, Any]]]) -> Toolset:
    return Toolset.from_openapi(big_document(server[0]))


def test_the_fixture_is_large(big: Toolset) -> None:
    assert len(big) >= 250
    assert {t.group for t in big} == {tag for tag, *_ in RESOURCES}  # OpenAPI tags are the groups


def test_prompt_view_fits_the_budget_with_an_index_of_groups(big: Toolset) -> None:
    with Runtime(big, LOCAL) as rt:  # default budget: 8,000 characters
        view = rt.prompt_view
        assert len(view) <= 8000
        assert view.startswith("# Tools.") and f"# {len(big)} tools are available" in view
        assert "search_tools(query: str, limit: int = 10)" in view and "describe_tool(name: str)" in view
        assert "#   repos (7): repos_get_repository, " in view
        assert "def " not in view  # no stub is shown whole
        assert "TypedDict" not in rt.stubs and "def repos_archive_repository(owner, repo, repo_id):" in rt.stubs
    with Runtime(big, LOCAL, prompt_budget_chars=1500) as rt:  # a budget low enough to cut groups
        view = rt.prompt_view
        assert len(view) <= 1500 and "more groups: search_tools finds their tools" in view


def test_small_toolsets_are_shown_whole_until_the_budget_fires() -> None:
    @tool(group="weather")
    def get_weather(city: str, units: str = "C") -> dict[str, Any]:
        """Current weather for a city."""
        return {"city": city, "units": units}

    with Runtime([get_weather], LOCAL) as rt:
        assert 'def get_weather(city: str, units: str = "C") -> dict[str, Any]:' in rt.prompt_view
        assert "search_tools" not in rt.prompt_view and "def read_result(" in rt.prompt_view
        assert "__codeact_default__" not in rt.prompt_view and "__codeact_default__" in rt.stubs
        assert rt.run("get_weather('Oslo')").value == {"city": "Oslo", "units": "C"}
    with Runtime([get_weather], LOCAL, prompt_budget_chars=1600) as rt:
        assert "def get_weather" not in rt.prompt_view and "#   weather (1): get_weather" in rt.prompt_view
        assert rt.run("get_weather('Oslo', units='F')").value == {"city": "Oslo", "units": "F"}
    with pytest.raises(ValueError, match="prompt_budget_chars"):
        Runtime([get_weather], LOCAL, prompt_budget_chars=0)


@pytest.mark.parametrize("backend_name", ["local", "docker"])
def test_search_describe_and_call_inside_the_sandbox(big: Toolset, server: tuple[str, list[dict[str, Any]]],
                                                     backend_name: str, request: pytest.FixtureRequest) -> None:
    if backend_name == "docker":
        request.getfixturevalue("docker_image")
    _, seen = server
    config = SandboxConfig(backend=backend_name, policy="none", timeout_s=30)  # type: ignore[arg-type]
    with Runtime(big, config) as rt:
        result = rt.run(textwrap.dedent("""
            hits = search_tools("post a comment on an issue", limit=3)
            stub = describe_tool(hits[0]["python_name"])
            same = describe_tool(hits[0]["name"]) == stub
            try:
                describe_tool("no_such_tool")
            except ToolError as e:
                missing = e.code
            made = comments_create_comment("octo", "hello", name="first!")  # never shown in the prompt
            [hits, stub, same, missing, made]
        """))
    assert result.ok, result.error
    hits, stub, same, missing, made = result.value
    assert len(hits) == 3 and set(hits[0]) == {"name", "python_name", "signature", "description", "group"}
    assert hits[0]["name"] == "comments/create-comment" and hits[0]["python_name"] == "comments_create_comment"
    assert hits[0]["signature"].startswith("def comments_create_comment(owner: str, repo: str, name: str, ")
    assert hits[0]["signature"].endswith(") -> Item:") and hits[0]["description"] == "Create a comment"
    assert "class Item(TypedDict, total=False):" in stub and '    """Create a comment' in stub
    assert 'visibility: Literal["public", "private", "internal"] = "public",' in stub
    assert same and missing == "not_found" and made == {"id": 7, "name": "made"}
    assert seen[-1] == {"method": "POST", "path": "/repos/octo/hello/comments", "query": {},
                        "body": {"name": "first!"}}  # documented defaults (visibility, notify) not sent
    assert [c.name for c in result.calls] == ["search_tools", "describe_tool", "describe_tool", "describe_tool",
                                              "comments/create-comment"]
    assert result.calls[0].arguments == {"query": "post a comment on an issue", "limit": 3}


def test_describe_and_search_edge_cases(big: Toolset) -> None:
    catalog = ToolCatalog(big.specs, big.groups)
    assert catalog.search("zzz qqq") == [] and catalog.search("", 5) == []
    assert len(catalog.search("get create delete", limit=50)) == 50
    with Runtime(big, LOCAL) as rt:
        result = rt.run("search_tools('x', limit=0)")
        too_many = rt.run("search_tools('x', limit=51)")
    for run in (result, too_many):
        assert not run.ok and run.calls[0].error is not None and run.calls[0].error.code == "invalid_arguments"


def test_describe_is_capped_and_ends_with_the_signature_not_the_plumbing(
        big: Toolset, monkeypatch: pytest.MonkeyPatch) -> None:
    from codeact.tool_stubs import catalog as catalog_module

    text = ToolCatalog(big.specs, big.groups).describe("repos/create-repository")
    assert text is not None and text.endswith('    """\n    ...\n') and "__codeact" not in text
    monkeypatch.setattr(catalog_module, "MAX_DESCRIBE_CHARS", 200)
    short = ToolCatalog(big.specs, big.groups).describe("repos/create-repository")
    assert short is not None and short.startswith(text[:200])
    assert short.endswith(f"# … [{len(text) - 200} more characters of type definitions]\n")


def test_a_user_tool_named_search_tools_takes_precedence() -> None:
    @tool
    def search_tools(query: str) -> str:
        """My own search."""
        return "mine"

    with Runtime([search_tools], LOCAL) as rt:
        assert rt.run("search_tools('x')").value == "mine"
        assert rt.run("describe_tool('search_tools')").value.startswith("def search_tools(query: str) -> str:")


def test_tool_error_for_a_broken_schema_comes_at_the_first_call() -> None:
    doc = big_document()
    op = doc["paths"]["/repos/{owner}/{repo}/labels"]["get"]
    op["parameters"].append({"name": "odd", "in": "query", "schema": {"type": "no-such-type"}})
    tools = Toolset.from_openapi(doc)  # a large document is not checked tool by tool up front
    with Runtime(tools, LOCAL) as rt:
        result = rt.run("labels_list_labels('o', 'r')")
    assert not result.ok and result.error is not None and result.error.type == "ToolError"
    error = result.calls[0].error
    assert error is not None and error.code == "tool_exception" and "not a valid JSON Schema" in error.message


def test_a_toolset_on_its_own_gives_the_same_budgeted_view(big: Toolset) -> None:
    from codeact.agent.prompts import execute_python_tool

    @tool
    def add(a: int, b: int = 1) -> int:
        """Add."""
        return a + b

    small = Toolset([add])
    assert "def add(a: int, b: int = 1) -> int:" in small.prompt_view() and "__codeact" not in small.prompt_view()
    assert small.prompt_view().endswith('    """\n    ...\n')  # bodies are plumbing: the model sees `...`
    assert "__codeact" not in execute_python_tool(small).description
    view = big.prompt_view()
    assert len(view) <= 8000 and f"# {len(big)} tools are available" in view


def test_an_unknown_tool_gets_the_closest_names_and_search_tools(big: Toolset) -> None:
    from codeact.tool_stubs.hints import unknown_tool_message

    with Runtime(big, LOCAL) as rt:
        result = rt.run("[__codeact_call__(n, {}) for n in ('comments/create-coment', 'comments_create_coment')]")
        other = rt.run("__codeact_call__('frobnicate', {})")
    assert result.error is not None and result.calls[0].error is not None
    assert result.calls[0].error.code == "unknown_tool"
    message = result.calls[0].error.message
    assert message.startswith("no tool named 'comments/create-coment'; did you mean 'comments/create-comment', ")
    assert message.endswith('? search_tools("what you want to do") finds tools by what they do')
    assert unknown_tool_message("comments_create_coment", big.names).startswith(
        "no tool named 'comments_create_coment'; did you mean 'comments/create-comment'")
    assert other.calls[0].error is not None and other.calls[0].error.message == (
        'no tool named \'frobnicate\'; search_tools("what you want to do") finds tools by what they do')
    assert unknown_tool_message("x", ["a", "b"]) == "no tool named 'x' (available: a, b)"  # small: listed whole
