"""Tool, ToolPolicy, the @tool decorator and Toolset."""

from __future__ import annotations

import asyncio
import sys
import textwrap
from pathlib import Path
from typing import Any

import pytest

from codeact.errors import ToolDefinitionError, ToolError
from codeact.runtime.toolset import Tool, ToolPolicy, Toolset, tool
from codeact.tool_stubs import ToolSpec


@tool
def add(a: int, b: int = 1) -> int:
    """Add two numbers.

    Args:
        a: The first number.
        b: The second number.
    """
    return a + b


@tool(name="web.search", description="Search the web.", timeout_s=5, cacheable=True, max_calls=3)
async def search(query: str) -> list[str]:
    return [query]


class Counter:
    def __init__(self) -> None:
        self.n = 0

    def bump(self, by: int = 1) -> int:
        """Bump the counter."""
        self.n += by
        return self.n

    @tool
    def peek(self) -> int:
        """Read the counter."""
        return self.n


def test_decorator_builds_a_tool_that_stays_callable() -> None:
    assert isinstance(add, Tool)
    assert add.name == add.python_name == "add"
    assert add.spec.description == "Add two numbers."
    assert add.spec.input_schema["properties"]["a"]["description"] == "The first number."
    assert add(2, b=3) == 5
    assert add.is_async is False
    assert add.policy == ToolPolicy()


def test_decorator_with_options() -> None:
    assert (search.name, search.python_name, search.spec.description) == ("web.search", "web_search", "Search the web.")
    assert search.is_async
    assert (search.policy.timeout_s, search.policy.cacheable, search.policy.max_calls) == (5, True, 3)
    assert search.policy.idempotent is False and search.policy.permission == "allow"
    assert asyncio.run(search("x")) == ["x"]


def test_tool_of_a_bound_method() -> None:
    counter = Counter()
    bump = tool(counter.bump, idempotent=True)
    assert bump.name == "bump" and list(bump.spec.input_schema["properties"]) == ["by"]
    assert bump.fn is not None and bump.fn(by=2) == 2 and counter.n == 2
    assert bump.policy.idempotent


def test_tool_decorated_method_binds_to_its_instance() -> None:
    counter = Counter()
    counter.n = 7
    peek = counter.peek
    assert isinstance(peek, Tool) and peek.spec.input_schema["properties"] == {}
    assert peek.fn is not None and peek.fn() == 7
    assert Counter.peek.name == "peek"


def test_tool_policy_and_overrides() -> None:
    base = ToolPolicy(timeout_s=None, permission="ask")
    t = tool(lambda x: x, name="echo", policy=base, max_retries=0)
    assert (t.policy.timeout_s, t.policy.permission, t.policy.max_retries) == (None, "ask", 0)
    renamed = tool(add, name="plus")
    assert renamed.name == "plus" and renamed.fn is add.fn and renamed.policy is add.policy


@pytest.mark.parametrize(
    "kwargs",
    [{"timeout_s": 0}, {"permission": "maybe"}, {"max_calls": -1}, {"rate_limit_per_s": 0}, {"max_retries": -1}],
)
def test_bad_policies(kwargs: dict[str, Any]) -> None:
    with pytest.raises(ToolDefinitionError):
        ToolPolicy(**kwargs)


def test_permission_may_be_a_callable() -> None:
    def rule(name: str, arguments: dict[str, Any]) -> bool | str:
        return arguments.get("a", 0) < 10 or "too big"

    t = tool(lambda a: a, name="guarded", permission=rule)
    assert t.policy.permission is rule


def test_unknown_decorator_option() -> None:
    with pytest.raises(TypeError, match="timeout"):
        tool(name="x", timeout=3)


def test_tool_without_implementation() -> None:
    t = Tool(spec=ToolSpec(name="remote"))
    assert t.fn is None and not t.is_async
    with pytest.raises(ToolError) as info:
        t()
    assert info.value.code == "not_implemented"
    with pytest.raises(ToolDefinitionError):
        Tool(spec={"name": "x"})  # type: ignore[arg-type]


def plain(city: str) -> str:
    """Weather for a city."""
    return city


def test_toolset_accepts_every_kind_of_tool() -> None:
    spec = ToolSpec(name="spec_only")
    openai = {"type": "function", "function": {"name": "from_openai", "parameters": {"type": "object"}}}
    mcp = {"name": "from_mcp", "inputSchema": {"type": "object"}}
    ts = Toolset([add, plain, spec, openai, mcp])
    assert ts.names == ["add", "plain", "spec_only", "from_openai", "from_mcp"]
    assert len(ts) == 5 and [t.name for t in ts] == ts.names
    assert "plain" in ts and add in ts and "nope" not in ts
    assert ts.get("plain") is not None and ts.get("plain").fn is plain  # type: ignore[union-attr]
    assert ts.get("spec_only").fn is None  # type: ignore[union-attr]
    assert ts.get("nope") is None
    assert ts["add"] is add
    assert ts.specs[0] is add.spec


def test_duplicates_are_refused() -> None:
    with pytest.raises(ToolDefinitionError, match="duplicate tool name 'add'"):
        Toolset([add, add])
    ts = Toolset([add])
    with pytest.raises(ToolDefinitionError):
        ts.add(ToolSpec(name="add"))
    with pytest.raises(ToolDefinitionError):
        ts.merge([add])
    with pytest.raises(ToolDefinitionError, match="cannot make a tool"):
        Toolset([42])  # type: ignore[list-item]


def test_add_as_decorator_and_merge() -> None:
    ts = Toolset()

    @ts.add
    def ping() -> str:
        return "pong"

    assert isinstance(ping, Tool) and ts.names == ["ping"]
    merged = ts.merge(Toolset([add]))
    assert merged.names == ["ping", "add"] and ts.names == ["ping"]
    assert Toolset([ts, search]).names == ["ping", "web.search"]


def test_stubs_and_vendor_lists() -> None:
    ts = Toolset([add, search, ToolSpec(name="web-search")])
    source = ts.stubs()
    assert "def add(a: int, b: int = 1) -> int:" in source
    assert "def web_search(query: str) -> list[str]:" in source
    assert "def web_search_2() -> Any:" in source
    assert ts.python_names == {"add": "add", "web.search": "web_search", "web-search": "web_search_2"}
    compile(source, "<stubs>", "exec")
    assert [d["function"]["name"] for d in ts.to_openai()] == ts.names
    assert [d["name"] for d in ts.to_anthropic()] == ts.names
    assert [d["name"] for d in ts.to_mcp()] == ts.names
    for shape in ("openai", "anthropic", "mcp"):
        again = getattr(Toolset, f"from_{shape}")(getattr(ts, f"to_{shape}")())
        assert again.names == ts.names and all(t.fn is None for t in again)
    assert Toolset.from_mcp(ts.to_mcp()).specs == ts.specs


TOOLS_FILE = '''
    from codeact.runtime.toolset import tool, Tool
    from helper_for_tools import FACTOR

    @tool
    def double(x: int) -> int:
        """Double x."""
        return x * FACTOR

    @tool(name="triple", cacheable=True)
    def _triple(x: int) -> int:
        return x * 3

    alias = double  # the same tool twice is collected once
    _hidden = tool(lambda y: y, name="hidden")  # lambdas need a name

    def not_a_tool() -> None: ...
'''


def test_from_module_path(tmp_path: Path) -> None:
    (tmp_path / "helper_for_tools.py").write_text("FACTOR = 2\n")
    path = tmp_path / "my_tools.py"
    path.write_text(textwrap.dedent(TOOLS_FILE))
    ts = Toolset.from_module(path)
    assert ts.names == ["double", "triple", "hidden"]
    assert ts["double"](x=4) == 8
    assert ts["triple"].policy.cacheable
    assert str(tmp_path) not in sys.path
    assert Toolset.from_module(str(path)).names == ts.names


def test_from_module_object_and_dotted_name() -> None:
    this = sys.modules[__name__]
    names = Toolset.from_module(this).names
    assert names == ["add", "web.search"]
    assert Toolset.from_module(__name__).names == names


def test_from_module_errors(tmp_path: Path) -> None:
    with pytest.raises(ToolDefinitionError, match="no such tools file"):
        Toolset.from_module(tmp_path / "missing.py")
    broken = tmp_path / "broken.py"
    broken.write_text("raise RuntimeError('boom')\n")
    with pytest.raises(ToolDefinitionError, match="RuntimeError: boom"):
        Toolset.from_module(broken)
    with pytest.raises(ToolDefinitionError, match="cannot import"):
        Toolset.from_module("no_such_module_for_codeact_tests")
