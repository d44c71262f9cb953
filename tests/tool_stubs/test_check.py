"""Tier 1 of the check: what it finds for certain (errors), what it only suspects (warnings), and
the code it must never call wrong."""

from __future__ import annotations

from typing import Any

import pytest

from codeact.tool_stubs.check import Checker
from codeact.tool_stubs.spec import ToolSpec

SEARCH = ToolSpec(name="search", description="Search.", input_schema={
    "type": "object", "required": ["query"],
    "properties": {"query": {"type": "string"}, "limit": {"type": "integer", "minimum": 1, "default": 10},
                   "kind": {"enum": ["issue", "pr"]},
                   "filters": {"type": "object", "properties": {"state": {"type": "string"}},
                               "additionalProperties": False},
                   "labels": {"type": "array", "items": {"$ref": "#/$defs/Label"}},
                   "owner": {"type": ["string", "null"]}},
    "$defs": {"Label": {"type": "string", "minLength": 1}}})
CREATE = ToolSpec(name="create-item", description="Create.", input_schema={
    "type": "object", "required": ["name"], "properties": {"name": {"type": "string"}},
    "additionalProperties": True})
CHECKER = Checker([SEARCH, CREATE])


def _found(code: str, **kwargs: Any) -> list[tuple[int, str, str]]:
    return [(d.line, d.code, d.severity) for d in CHECKER.check(code, **kwargs)]


def _errors(code: str, **kwargs: Any) -> list[tuple[int, str]]:
    return [(d.line, d.code) for d in CHECKER.check(code, **kwargs) if d.severity == "error"]


@pytest.mark.parametrize(("code", "expected"), [
    ("search(qurey='x', query='y')", [(1, "unknown-argument")]),
    ("search()", [(1, "missing-argument")]),
    ("search('a', 1, 'pr', {}, [], None, 'extra')", [(1, "too-many-positional")]),
    ("search(query=3)", [(1, "argument-type")]),
    ("search('x', kind='bug')", [(1, "argument-type")]),
    ("search('x', limit=0)", [(1, "argument-type")]),
    ("search('x', filters={'state': 1})", [(1, "argument-type")]),
    ("search('x', filters={'stat': 'open'})", [(1, "argument-type")]),
    ("search('x', labels=[''])", [(1, "argument-type")]),  # through the $ref
    ("search('x', query='y')", [(1, "duplicate-argument")]),
    ("x = 1\nr = serch('x')", [(2, "unknown-tool")]),
    ("r = await aio.search(qurey='x', query='x')", [(1, "unknown-argument")]),
    ("r = await aio.serch('x')", [(1, "unknown-tool")]),
    ("print(undefined_thing)", [(1, "undefined-name")]),
])
def test_certain_mistakes_are_errors_at_their_line(code: str, expected: list[tuple[int, str]]) -> None:
    assert _errors(code) == expected


def test_a_syntax_error_only_warns() -> None:
    """The sandbox's Python may take syntax the host's refuses; such a cell fails before it runs anyway."""
    assert _found("print(x") == [(1, "syntax", "warning")]


def test_a_misspelt_keyword_and_tool_say_what_was_meant() -> None:
    [unknown] = [d for d in CHECKER.check("search(qurey='x', query='y')") if d.code == "unknown-argument"]
    assert "did you mean 'query'" in unknown.message and (unknown.column, unknown.end_column) == (8, 17)
    [tool] = CHECKER.check("serch('x')")
    assert "did you mean the tool 'search'" in tool.message


@pytest.mark.parametrize("code", [
    "search('x')", "search(query='x', limit=5, kind='pr', labels=['a'], owner=None)",
    "search('x', limit=None)",  # an optional parameter without null: None is left out, not sent
    "search(**{'query': 3})", "args = ['x']\nsearch(*args)", "q = 3\nsearch(q)",  # not literals: not judged
    "search(f'{1}')", "create_item(name='a', anything=1)",  # the stub takes **kwargs
    "import json\nprint(json.dumps(1))", "from os import path as p\np.join('a')", "import os.path\nos.path",
    "def f(a, *b, c=1, **d):\n    return a, b, c, d\nf(1)", "class K:\n    x = 1\nK.x",
    "[y for y in range(3)]", "(z := 5)\nprint(z)", "try:\n    pass\nexcept Exception as e:\n    print(e)",
    "match 1:\n    case [a, *rest]:\n        print(a, rest)\n    case {'k': v, **others}:\n        print(v, others)",
    "def g():\n    global made\n    made = 1\ng()\nprint(made)", "del_me = 1\ndel del_me",
    "r = parallel(search, ['a', 'b'])\nraise ToolError('x', 'y')", "final_answer(1)",
    "print(__name__)", "r = await aio.search('x')",
    "search = lambda **k: k\nsearch(bogus=1)",  # shadowed: no longer the stub
])
def test_code_that_runs_has_no_error(code: str) -> None:
    assert _errors(code) == []


@pytest.mark.parametrize("code", [
    "def f():\n    return later_name\n",  # a later cell may define it before f runs
    "try:\n    maybe\nexcept NameError:\n    pass\n",
    "import contextlib\nwith contextlib.suppress(Exception):\n    nothing_here\n",
    "exec('made = 1')\nprint(made)",  # the cell can bind what no reading sees
    "globals()['g'] = 1\nprint(g)",
    "from os.path import *\nprint(join)",
    "x: SomeType = 1",  # annotations may never be evaluated
])
def test_what_may_be_defined_after_all_is_at_most_a_warning(code: str) -> None:
    assert _errors(code) == []
    assert any(severity == "warning" for _, _, severity in _found(code))


def test_names_from_earlier_cells_and_an_unknown_namespace() -> None:
    assert _errors("print(df, helper)", defined={"df", "helper"}) == []
    assert _errors("print(df, helper)", defined=None) == []  # cannot tell: no name is certainly missing
    assert _errors("search(bogus=1)", defined={"search"}) == []  # an earlier cell rebound the stub
    assert {s for _, _, s in _found("search(bogus=1)", dynamic=True)} == {"warning"}


def test_a_handler_that_cannot_catch_it_leaves_the_error() -> None:
    assert _errors("try:\n    print(nope)\nexcept ToolError:\n    pass") == [(2, "undefined-name")]


def test_columns_count_characters_not_bytes() -> None:
    [d] = CHECKER.check("é = 'ü'; print(nope)")
    assert (d.column, d.end_column) == (16, 20)


def test_only_the_tools_a_cell_names_are_read() -> None:
    checker = Checker([SEARCH, CREATE])
    checker.check("search('x')")
    assert list(checker._shapes) == ["search"]
