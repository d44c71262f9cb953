"""The check's walker visits exactly what ``ast.NodeVisitor`` would: its own ``visit`` and
``generic_visit`` (a dispatch table, no generator per node) keep the standard order and coverage."""

from __future__ import annotations

import ast
from pathlib import Path
from typing import Any

import pytest

import codeact
from codeact.tool_stubs.check import _names

ROOT = Path(codeact.__file__).resolve().parent
#: Real code of every shape the walker meets: the package's own modules (scopes, try/with, match,
#: comprehensions, lambdas, annotations, decorators, async), kernel and host alike.
SOURCES = sorted(ROOT.rglob("*.py"))


class _StandardWalker(_names._Walker):
    visit = ast.NodeVisitor.visit
    generic_visit = ast.NodeVisitor.generic_visit


def _facts(walker: type[_names._Walker], tree: ast.Module) -> tuple[Any, ...]:
    facts = _names.NameFacts()
    walker(facts).visit(tree)
    return (sorted(facts.bound), [(x.name, x.node.lineno, x.node.col_offset, x.certain) for x in facts.loads],
            facts.dynamic, [(c.lineno, c.col_offset) for c in facts.calls],
            [(a.lineno, a.col_offset, a.attr) for a in facts.aio])


@pytest.mark.parametrize("path", SOURCES, ids=lambda p: str(p.relative_to(ROOT)))
def test_the_walk_finds_what_the_standard_visitor_finds(path: Path) -> None:
    tree = ast.parse(path.read_text())
    assert _facts(_names._Walker, tree) == _facts(_StandardWalker, tree)


def test_the_walk_covers_a_match_statement_and_star_handlers() -> None:
    code = ("match v:\n    case {'k': [a, *rest], **others} if a > limit:\n        use(a, rest, others)\n"
            "    case Point(x=px) as p:\n        aio.fetch(px, p)\n"
            "try:\n    f()\nexcept* ValueError as group:\n    g(group)\n")
    tree = ast.parse(code)
    found = _facts(_names._Walker, tree)
    assert found == _facts(_StandardWalker, tree)
    assert {"a", "rest", "others", "px", "p", "group"} <= set(found[0])
    assert [name for name, *_ in found[1]][:3] == ["v", "a", "limit"]
