"""Tier 1's call half: a call of a tool stub against the stub's signature and the tool's input
schema. Only what is certain is an error: an unknown keyword, a missing required argument, too
many positional ones, a literal the host's validation of the same schema refuses."""

from __future__ import annotations

import ast
import difflib
import math
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

from jsonschema.exceptions import best_match
from jsonschema.protocols import Validator
from jsonschema.validators import Draft202012Validator, validator_for

from codeact.tool_stubs.render import StubParameter, stub_signature
from codeact.tool_stubs.spec import ToolSpec

__all__ = ["CallProblem", "ToolShape", "call_problems", "literal_value"]

_NOT_LITERAL = object()


@dataclass(frozen=True)
class CallProblem:
    node: ast.AST
    code: str
    message: str


class ToolShape:
    """What a call of one stub must look like (built the first time a cell names the tool)."""

    def __init__(self, spec: ToolSpec, stub: str) -> None:
        self.stub = stub
        self.params, self.kwargs = stub_signature(spec, stub)
        self.by_name = {p.name: p for p in self.params}
        schema = spec.input_schema
        props = schema.get("properties")
        self.props: dict[str, Any] = props if isinstance(props, dict) else {}
        kind: type[Validator] = Draft202012Validator
        if "$schema" in schema:
            kind = validator_for(schema, default=Draft202012Validator)
        self._root = kind(schema)
        self._validators: dict[str, Validator | None] = {}

    def literal_problem(self, param: StubParameter, value: Any) -> str | None:
        """What the host's validation would say of ``value`` for ``param``, or None."""
        if param.key not in self._validators:
            sub = self.props.get(param.key, True)
            # evolve keeps the root's resolver: a $ref in the property resolves as the host's does
            self._validators[param.key] = None if sub is True or sub == {} else self._root.evolve(schema=sub)
        validator = self._validators[param.key]
        if validator is None or validator.is_valid(value):
            return None
        error = best_match(validator.iter_errors(value))
        return None if error is None else error.message


def literal_value(node: ast.expr) -> Any:
    """The JSON value a literal argument is sent as, or ``_NOT_LITERAL`` when the check cannot
    know it exactly (a name, a call, bytes, a set, a non-string key, a non-finite float)."""
    if isinstance(node, ast.Constant):
        value = node.value
        if value is None or isinstance(value, (bool, int, str)):
            return value
        if isinstance(value, float) and math.isfinite(value):
            return value
        return _NOT_LITERAL
    if isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.USub) and isinstance(node.operand, ast.Constant):
        inner = literal_value(node.operand)
        return -inner if isinstance(inner, (int, float)) and not isinstance(inner, bool) else _NOT_LITERAL
    if isinstance(node, (ast.List, ast.Tuple)):
        items = [literal_value(e) for e in node.elts]
        return _NOT_LITERAL if any(i is _NOT_LITERAL for i in items) else items
    if isinstance(node, ast.Dict):
        out: dict[str, Any] = {}
        for key, entry in zip(node.keys, node.values, strict=True):
            if not (isinstance(key, ast.Constant) and isinstance(key.value, str)):
                return _NOT_LITERAL
            item = literal_value(entry)
            if item is _NOT_LITERAL:
                return _NOT_LITERAL
            out[key.value] = item
        return out
    return _NOT_LITERAL


def _suggest(word: str, choices: list[str]) -> str:
    close = difflib.get_close_matches(word, choices, n=1, cutoff=0.6)
    return f"; did you mean {close[0]!r}?" if close else ""


def call_problems(call: ast.Call, shape: ToolShape) -> Iterator[CallProblem]:
    """The certain problems of ``call``, a call of ``shape``'s stub."""
    stub = shape.stub
    starred = any(isinstance(a, ast.Starred) for a in call.args)
    spread = any(k.arg is None for k in call.keywords)
    given: dict[str, ast.expr] = {}
    if not starred:
        if len(call.args) > len(shape.params):
            extra = call.args[len(shape.params)]
            yield CallProblem(extra, "too-many-positional",
                              f"{stub}() takes {len(shape.params)} positional argument"
                              f"{'s' if len(shape.params) != 1 else ''} but {len(call.args)} were given")
        given.update((p.name, a) for p, a in zip(shape.params, call.args, strict=False))
    names = [p.name for p in shape.params]
    for keyword in call.keywords:
        if keyword.arg is None:
            continue
        if keyword.arg in given:
            yield CallProblem(keyword, "duplicate-argument",
                              f"{stub}() got multiple values for argument {keyword.arg!r}")
        elif keyword.arg not in shape.by_name and not shape.kwargs:
            yield CallProblem(keyword, "unknown-argument", f"{stub}() got an unexpected keyword argument "
                              f"{keyword.arg!r}{_suggest(keyword.arg, names)}")
            continue
        given[keyword.arg] = keyword.value
    if not starred and not spread:
        missing = [p.name for p in shape.params if p.required and p.name not in given]
        if missing:
            listed = ", ".join(repr(m) for m in missing)
            yield CallProblem(call, "missing-argument",
                              f"{stub}() is missing required argument{'s' if len(missing) > 1 else ''} {listed}")
    for name, node in given.items():
        param = shape.by_name.get(name)
        value = literal_value(node)
        if param is None or value is _NOT_LITERAL or (value is None and param.omit_if_none):
            continue
        problem = shape.literal_problem(param, value)
        if problem is not None:
            yield CallProblem(node, "argument-type", f"{stub}() argument {name!r}: {problem}")
