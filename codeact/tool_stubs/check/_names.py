"""Which names a cell binds, which it loads and where, and whether it can make names the check
cannot see (``exec``, ``globals()``, star imports, ``builtins``): the unknown-name half of tier 1."""

from __future__ import annotations

import ast
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

__all__ = ["Load", "NameFacts", "name_facts"]

#: Calls and names through which code can bind a name no static reading sees.
_DYNAMIC_NAMES = frozenset({"exec", "eval", "globals", "locals", "vars", "__import__", "__builtins__", "builtins",
                            "__main__", "setattr", "importlib", "compile"})
#: Attributes through which code reaches a module's (or the builtins') namespace.
_DYNAMIC_ATTRIBUTES = frozenset({"modules", "__dict__", "__globals__", "__builtins__", "f_globals", "f_locals"})
#: Exception classes that never catch a NameError or a TypeError, as a handler names them.
_NARROW_HANDLERS = frozenset({
    "ToolError", "KeyError", "IndexError", "ValueError", "ZeroDivisionError", "OSError", "IOError",
    "FileNotFoundError", "PermissionError", "TimeoutError", "ConnectionError", "JSONDecodeError",
    "AttributeError", "StopIteration", "StopAsyncIteration", "UnicodeDecodeError", "UnicodeEncodeError",
    "ArithmeticError", "OverflowError", "LookupError", "AssertionError", "RuntimeError", "NotImplementedError",
    "KeyboardInterrupt", "SystemExit", "ImportError", "ModuleNotFoundError", "RecursionError", "MemoryError",
})


@dataclass(frozen=True)
class Load:
    """A name read: where, and whether a failure there is certain when the line runs at once
    (``certain`` False: in a function body run later, or under a handler that may catch it)."""

    name: str
    node: ast.Name
    certain: bool


@dataclass
class NameFacts:
    bound: set[str] = field(default_factory=set)
    loads: list[Load] = field(default_factory=list)
    dynamic: bool = False
    #: Every call, and every ``aio.<name>`` read, for the call half (one walk serves both).
    calls: list[ast.Call] = field(default_factory=list)
    aio: list[ast.Attribute] = field(default_factory=list)


def name_facts(tree: ast.Module) -> NameFacts:
    """The names ``tree`` binds anywhere (every scope: a superset, so a use is never wrongly
    unknown), every name it loads, and whether it is dynamic."""
    facts = NameFacts()
    _Walker(facts).visit(tree)
    return facts


def _import_names(node: ast.Import | ast.ImportFrom) -> list[str]:
    return [a.asname or a.name.partition(".")[0] for a in node.names if a.name != "*"]


def _may_catch(handler: ast.ExceptHandler) -> bool:
    kinds = handler.type.elts if isinstance(handler.type, ast.Tuple) else [handler.type]
    for kind in kinds:
        name = kind.id if isinstance(kind, ast.Name) else kind.attr if isinstance(kind, ast.Attribute) else None
        if name not in _NARROW_HANDLERS:
            return True
    return False


class _Walker(ast.NodeVisitor):
    """One pass: bindings are collected everywhere; a load is certain only in code that runs when
    the cell does (not a function or lambda body, an annotation, a lazy generator) and is not
    guarded by a handler that may catch it, nor by a ``with`` (its manager may suppress it)."""

    def __init__(self, facts: NameFacts) -> None:
        self.facts = facts
        self.certain = True

    # ast.NodeVisitor's own visit and generic_visit, in the same order, without building a method
    # name for every node or a generator for its fields: the check reads every cell of every run.
    def visit(self, node: ast.AST) -> None:
        method = _METHODS.get(type(node))
        if method is None:
            method = _METHODS[type(node)] = getattr(_Walker, "visit_" + type(node).__name__, _Walker.generic_visit)
        method(self, node)

    def generic_visit(self, node: ast.AST) -> None:
        for name in node._fields:
            value = getattr(node, name, None)
            if type(value) is list:
                for item in value:
                    if isinstance(item, ast.AST):
                        self.visit(item)
            elif isinstance(value, ast.AST):
                self.visit(value)

    def _later(self, nodes: list[ast.AST] | list[ast.stmt] | list[ast.expr]) -> None:
        saved, self.certain = self.certain, False
        for node in nodes:
            self.visit(node)
        self.certain = saved

    def visit_Name(self, node: ast.Name) -> None:
        if isinstance(node.ctx, ast.Load):
            self.facts.loads.append(Load(node.id, node, self.certain))
            if node.id in _DYNAMIC_NAMES:
                self.facts.dynamic = True
        else:
            self.facts.bound.add(node.id)

    def visit_Attribute(self, node: ast.Attribute) -> None:
        if node.attr in _DYNAMIC_ATTRIBUTES:
            self.facts.dynamic = True
        elif isinstance(node.value, ast.Name) and node.value.id == "aio" and isinstance(node.ctx, ast.Load):
            self.facts.aio.append(node)
        self.generic_visit(node)

    def visit_Call(self, node: ast.Call) -> None:
        self.facts.calls.append(node)
        self.generic_visit(node)

    def visit_Constant(self, node: ast.Constant) -> None:
        pass  # a leaf: nothing under it to visit

    def visit_Import(self, node: ast.Import) -> None:
        self.facts.bound.update(_import_names(node))
        if any(a.name in _DYNAMIC_NAMES for a in node.names):
            self.facts.dynamic = True

    def visit_ImportFrom(self, node: ast.ImportFrom) -> None:
        self.facts.bound.update(_import_names(node))
        if any(a.name == "*" for a in node.names) or node.module in _DYNAMIC_NAMES:
            self.facts.dynamic = True

    def visit_Global(self, node: ast.Global) -> None:
        self.facts.bound.update(node.names)

    def visit_Nonlocal(self, node: ast.Nonlocal) -> None:
        self.facts.bound.update(node.names)

    def _function(self, node: ast.FunctionDef | ast.AsyncFunctionDef | ast.Lambda) -> None:
        args = node.args
        every = [*args.posonlyargs, *args.args, *args.kwonlyargs, *filter(None, [args.vararg, args.kwarg])]
        self.facts.bound.update(a.arg for a in every)
        for default in [*args.defaults, *(d for d in args.kw_defaults if d is not None)]:
            self.visit(default)
        self._later([a.annotation for a in every if a.annotation is not None])
        if isinstance(node, ast.Lambda):
            self._later([node.body])
            return
        self.facts.bound.add(node.name)
        for decorator in node.decorator_list:
            self.visit(decorator)
        self._later([node.returns] if node.returns is not None else [])
        self._later(node.body)

    visit_FunctionDef = visit_AsyncFunctionDef = visit_Lambda = _function

    def visit_ClassDef(self, node: ast.ClassDef) -> None:
        self.facts.bound.add(node.name)
        self.generic_visit(node)

    def visit_AnnAssign(self, node: ast.AnnAssign) -> None:
        self.visit(node.target)
        self._later([node.annotation])  # evaluated or not (``from __future__ import annotations``)
        if node.value is not None:
            self.visit(node.value)

    def visit_GeneratorExp(self, node: ast.GeneratorExp) -> None:
        first, *rest = node.generators
        self.visit(first.iter)  # the rest runs only when the generator is consumed
        self._later([first.target, *first.ifs, *rest, node.elt])

    def _try(self, node: ast.Try | ast.TryStar) -> None:
        if any(_may_catch(h) if h.type is not None else True for h in node.handlers):
            self._later(node.body)
        else:
            for stmt in node.body:
                self.visit(stmt)
        for handler in node.handlers:
            if handler.name:
                self.facts.bound.add(handler.name)
            self.visit(handler)
        for stmt in [*node.orelse, *node.finalbody]:
            self.visit(stmt)

    visit_Try = visit_TryStar = _try

    def _with(self, node: ast.With | ast.AsyncWith) -> None:
        for item in node.items:
            self.visit(item)
        self._later(node.body)

    visit_With = visit_AsyncWith = _with

    def visit_MatchAs(self, node: ast.MatchAs) -> None:
        if node.name:
            self.facts.bound.add(node.name)
        self.generic_visit(node)

    def visit_MatchStar(self, node: ast.MatchStar) -> None:
        if node.name:
            self.facts.bound.add(node.name)

    def visit_MatchMapping(self, node: ast.MatchMapping) -> None:
        if node.rest:
            self.facts.bound.add(node.rest)
        self.generic_visit(node)


#: Node class → the walker's method for it (``visit_<Class>``, or ``generic_visit``).
_METHODS: dict[type, Callable[[_Walker, Any], None]] = {}
