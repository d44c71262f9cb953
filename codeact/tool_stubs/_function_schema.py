"""Python function → tool name, description and JSON Schemas (pydantic does the typing work).

Private to :mod:`codeact.tool_stubs`; used by ``ToolSpec.from_function``.
"""

from __future__ import annotations

import functools
import inspect
import re
import typing
from collections.abc import Callable
from typing import Any, Literal

from pydantic import ConfigDict, Field, TypeAdapter, create_model
from pydantic.errors import PydanticUserError
from pydantic.json_schema import GenerateJsonSchema

from codeact.errors import ToolDefinitionError

__all__ = ["function_schemas", "parse_docstring"]

_SECTION = re.compile(
    r"^\s*(args|arguments|parameters|params|keyword args|returns?|yields?|raises|examples?|notes?|"
    r"attributes|see also|warnings?|references|todo)\s*:\s*$",
    re.IGNORECASE,
)
_ARGS_SECTIONS = {"args", "arguments", "parameters", "params", "keyword args"}
_ARG_LINE = re.compile(r"^\*{0,2}(\w+)\s*(?:\([^)]*\))?\s*:\s*(.*)$")
_SPHINX_PARAM = re.compile(r"^\s*:param\s+(?:[^:]*\s)?\*{0,2}(\w+)\s*:\s*(.*)$")
_NO_OUTPUT: tuple[Any, ...] = (None, type(None), Any, inspect.Signature.empty)


class _NoFieldTitles(GenerateJsonSchema):
    """pydantic's generator without the ``"title"`` it puts on every field (noise in a prompt)."""

    def field_title_should_be_set(self, schema: Any) -> bool:
        return False


def _indent(line: str) -> int:
    return len(line) - len(line.lstrip())


def parse_docstring(doc: str) -> tuple[str, dict[str, str]]:
    """``(description, {param: description})`` from a Google-style (``Args:``) or Sphinx-style
    (``:param x:``) docstring. The description is the text before the first section."""
    intro: list[str] = []
    params: dict[str, str] = {}
    section: str | None = None
    section_indent = arg_indent = 0
    current: str | None = None
    for line in inspect.cleandoc(doc).splitlines():
        stripped = line.strip()
        if header := _SECTION.match(line):
            section, section_indent, current = header.group(1).lower(), _indent(line), None
        elif sphinx := _SPHINX_PARAM.match(line):
            section, current = "sphinx", sphinx.group(1)
            params[current] = sphinx.group(2).strip()
        elif stripped.startswith(":") and section in (None, "sphinx"):
            section, current = "sphinx", None  # :returns:, :raises X: ...
        elif section is None:
            intro.append(line)
        elif not stripped:
            continue
        elif section in _ARGS_SECTIONS:
            if _indent(line) <= section_indent:
                section, current = "done", None
            elif (arg := _ARG_LINE.match(stripped)) and (current is None or _indent(line) <= arg_indent):
                current, arg_indent = arg.group(1), _indent(line)
                params[current] = arg.group(2).strip()
            elif current is not None:
                params[current] = f"{params[current]} {stripped}".strip()
        elif section == "sphinx" and current is not None:
            params[current] = f"{params[current]} {stripped}".strip()
    return "\n".join(intro).strip(), params


def _target(fn: Callable[..., Any]) -> Any:
    """The object whose name, docstring and annotations describe ``fn``."""
    while isinstance(fn, functools.partial):
        fn = fn.func
    if inspect.isroutine(fn) or inspect.isclass(fn):
        return fn
    return type(fn).__call__  # a callable instance


def function_schemas(
    fn: Callable[..., Any], name: str | None = None
) -> tuple[str, str, dict[str, Any], dict[str, Any] | None]:
    """``(name, description, input_schema, output_schema)`` for a callable; ``name`` overrides its own."""
    if not callable(fn):
        raise ToolDefinitionError(f"a tool must be callable, got {type(fn).__name__}")
    target = _target(fn)
    name = name or getattr(fn, "__name__", None) or getattr(target, "__name__", "")
    if not isinstance(name, str) or not name or name == "<lambda>":
        raise ToolDefinitionError(f"cannot infer a tool name for {fn!r}; pass name=...")
    description, param_docs = parse_docstring(inspect.getdoc(target) or "")
    try:
        signature = inspect.signature(fn)
    except (TypeError, ValueError) as exc:
        raise ToolDefinitionError(f"cannot read the signature of tool {name!r}: {exc}") from None
    try:
        hints_of = target.__init__ if inspect.isclass(target) else target
        hints = typing.get_type_hints(hints_of, include_extras=True)
    except Exception as exc:
        raise ToolDefinitionError(f"cannot resolve the type hints of tool {name!r}: {exc}") from None
    return name, description, _input_schema(name, signature, hints, param_docs), _output_schema(hints)


def _input_schema(
    name: str, signature: inspect.Signature, hints: dict[str, Any], docs: dict[str, str]
) -> dict[str, Any]:
    fields: dict[str, Any] = {}
    extra: Literal["allow", "forbid"] = "forbid"
    for index, param in enumerate(signature.parameters.values()):
        if index == 0 and param.name in ("self", "cls"):
            continue
        if param.kind is param.VAR_POSITIONAL:
            continue
        if param.kind is param.VAR_KEYWORD:
            extra = "allow"
            continue
        if param.kind is param.POSITIONAL_ONLY:
            raise ToolDefinitionError(
                f"tool {name!r}: parameter {param.name!r} is positional-only; tools are called by keyword"
            )
        default = ... if param.default is param.empty else param.default
        info = Field(default, alias=param.name, description=docs.get(param.name))
        fields[f"p{index}"] = (hints.get(param.name, Any), info)
    try:
        model = create_model(f"{name}_arguments", __config__=ConfigDict(extra=extra), **fields)
        schema: dict[str, Any] = model.model_json_schema(by_alias=True, schema_generator=_NoFieldTitles)
    except (PydanticUserError, TypeError, ValueError) as exc:
        raise ToolDefinitionError(f"tool {name!r}: cannot build a JSON Schema for its parameters: {exc}") from None
    schema.pop("title", None)
    schema.setdefault("properties", {})
    return schema


def _output_schema(hints: dict[str, Any]) -> dict[str, Any] | None:
    returns = hints.get("return", Any)
    if any(returns is x for x in _NO_OUTPUT):
        return None
    try:
        schema = TypeAdapter(returns).json_schema(mode="serialization", schema_generator=_NoFieldTitles)
    except (PydanticUserError, TypeError, ValueError):
        return None  # a return type pydantic cannot describe: the tool still works, untyped
    return schema
