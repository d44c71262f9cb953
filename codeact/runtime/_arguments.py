"""A tool call's arguments checked, in one place: :func:`check_arguments`.

In the order a call meets them: under strict decoding, the nulls standing for omitted optional
arguments dropped (the JSON agent's); the size and nesting depth of arguments that came without a
frame (a frame's were measured by ``kernel/protocol.py``'s ``decode_bounded``); the bound on one
call's argument bytes; the schema; the conversion to a Python tool's annotated types.

The schema's validator is jsonschema's (``ToolSpec.validate_arguments``). A flat schema (an object
of string/integer/number/boolean/null fields) also gets a compiled check, decided once per schema
(:func:`fast_check_for`): only for a schema jsonschema itself accepts, under a draft whose types
the compiled check reads the same way; on JSON values it answers exactly as jsonschema does
(``tests/runtime/test_fast_check_property.py``), and a False from it still goes to jsonschema,
for its list of problems.
"""

from __future__ import annotations

import inspect
import json
import typing
from collections.abc import Callable
from typing import Any

from jsonschema import Draft6Validator, Draft7Validator, Draft201909Validator, Draft202012Validator, SchemaError
from jsonschema.validators import validator_for
from pydantic import BaseModel, ConfigDict, ValidationError, create_model

from .._text import valid_text
from ..errors import ToolArgumentsError, ToolDefinitionError, ToolError
from ..kernel.protocol import MAX_DEPTH, RefusedArguments, too_deep
from ..tool_stubs import ToolSpec
from ._calls import _describe

__all__ = ["ArgumentCheck", "ArgumentConverter", "ArgumentsRefused", "check_arguments", "converter_for",
           "fast_check_for", "measure"]

#: Draft validators whose ``integer`` accepts an integral float, as the compiled check does.
_SAME_TYPES = (Draft202012Validator, Draft201909Validator, Draft7Validator, Draft6Validator)


class ArgumentCheck:
    """What checking one tool's arguments needs, worked out once per tool (its route's)."""

    __slots__ = ("convert", "fast", "spec")

    def __init__(self, spec: ToolSpec, fn: Callable[..., Any] | None) -> None:
        self.spec = spec
        self.fast = fast_check_for(spec.input_schema)
        self.convert = converter_for(fn) if fn is not None else None


class ArgumentsRefused(Exception):
    """Why a call's arguments are refused: ``error``; ``early`` when it was their size or form
    (decided before the run's bounds, and the record keeps only their size), with ``size`` and the
    ``arguments`` as they would be recorded."""

    def __init__(self, error: ToolError, size: int, arguments: Any, early: bool = False) -> None:
        super().__init__(error.message)
        self.error, self.size, self.arguments, self.early = error, size, arguments, early


def check_arguments(check: ArgumentCheck | None, arguments: Any, size: int | None, max_bytes: int, *,
                    omitted_nulls: bool = False) -> tuple[dict[str, Any], int, Any]:
    """``arguments`` checked for a call of the tool ``check`` is for (None: no such tool, only
    their size is checked): (what the tool gets, their size in bytes, what the record keeps), or
    :class:`ArgumentsRefused`. ``size``: the call frame's, None to measure them here;
    ``omitted_nulls``: they come from strict decoding."""
    if omitted_nulls and check is not None:
        arguments = check.spec.drop_omitted_nulls(arguments)
    if size is None:
        size, refused = measure(arguments)
    elif type(arguments) is dict:  # the usual case, told apart first: one check on the hot path
        refused = None
    else:
        refused = arguments if isinstance(arguments, RefusedArguments) else None
    if refused is not None or size > max_bytes:
        raise ArgumentsRefused(ToolError("invalid_arguments", refused.reason if refused is not None and refused.reason
                                         else f"arguments of {size} bytes exceed the limit of {max_bytes}; "
                                         "pass large data through files in the workspace"), size, arguments, True)
    if check is None:
        return {}, size, arguments
    try:
        fast = check.fast
        if fast is not None and type(arguments) is dict and fast(arguments):
            args = dict(arguments)
        else:
            args = check.spec.validate_arguments(arguments)
        convert = check.convert
        return (args if convert is None or not args else convert(args)), size, arguments
    except ToolArgumentsError as exc:
        error = ToolError("invalid_arguments", "; ".join(exc.problems))
    except ToolDefinitionError as exc:  # the tool's own schema is broken: not the caller's fault
        error = ToolError("tool_exception", str(exc))
    except ValueError as exc:  # a conversion's problems
        error = ToolError("invalid_arguments", str(exc))
    except Exception as exc:  # a bug in codeact (the validator, the converter): this call fails, not the run
        error = ToolError("tool_exception", f"internal error checking the arguments: {_describe(exc)}")
    raise ArgumentsRefused(error, size, arguments)


def measure(arguments: Any) -> tuple[int, RefusedArguments | None]:
    """The JSON size of arguments given as Python objects, and why they are refused, if they are."""
    if too_deep(arguments, MAX_DEPTH):
        return 0, RefusedArguments(f"arguments nest deeper than {MAX_DEPTH} levels")
    try:
        text = json.dumps(arguments, ensure_ascii=False, allow_nan=False, default=_no_json)
    except (TypeError, ValueError, RecursionError) as exc:
        return 0, RefusedArguments(f"arguments are not JSON: {exc}"[:300])
    if valid_text(text) is not text:  # as the frame decoder refuses them (kernel/protocol.py)
        return len(text), RefusedArguments("arguments hold a lone surrogate (text that is not valid Unicode)")
    return len(text), None


def _no_json(value: Any) -> Any:
    raise TypeError(f"a {type(value).__name__} is not JSON")


# -- the compiled check of a flat schema ---------------------------------------------------------
#: Keywords a flat schema may use and still be checked by :func:`fast_check_for`'s checker.
_FLAT_KEYS = {"type", "properties", "required", "additionalProperties", "description", "title", "$schema"}
_FIELD_KEYS = {"type", "description", "title", "default"}


def _is_integer(v: Any) -> bool:
    return (type(v) is int) or (type(v) is float and v.is_integer())


_TYPE_CHECKS: dict[str, Callable[[Any], bool]] = {
    "string": lambda v: type(v) is str,
    "integer": _is_integer,
    "number": lambda v: type(v) in (int, float),
    "boolean": lambda v: type(v) is bool,
    "null": lambda v: v is None,
}


def _type_check(kind: Any) -> Callable[[Any], bool] | None:
    """The check for a field's ``type``: one name, or a list of them (``["string", "null"]``, as
    OpenAPI's ``nullable`` and MCP/OpenAI schemas write it); None for any other value."""
    if isinstance(kind, str):
        return _TYPE_CHECKS.get(kind)
    if not isinstance(kind, list) or not kind or not all(isinstance(k, str) and k in _TYPE_CHECKS for k in kind):
        return None
    tests = tuple(_TYPE_CHECKS[k] for k in dict.fromkeys(kind))
    return tests[0] if len(tests) == 1 else lambda v: any(test(v) for test in tests)


def _valid_for_jsonschema(schema: dict[str, Any]) -> bool:
    """Whether jsonschema reads ``schema`` as the compiled check does: a valid schema under a draft
    whose ``integer`` takes integral floats (draft 6 on; no ``$schema``: 2020-12, as the spec's)."""
    cls = validator_for(schema, default=Draft202012Validator) if "$schema" in schema else Draft202012Validator
    if cls not in _SAME_TYPES:
        return False
    try:
        cls.check_schema(schema)
    except SchemaError:
        return False
    return True


def fast_check_for(schema: Any) -> Callable[[dict[str, Any]], bool] | None:
    """A compiled check for the common flat schema (an object of string/integer/number/boolean/null
    fields, or a list of those types), answering as jsonschema does on a dict of JSON values; None
    for any other schema (jsonschema alone then checks it). A False answer means "ask
    jsonschema", which lists the problems (so messages never change)."""
    if not isinstance(schema, dict) or set(schema) - _FLAT_KEYS or schema.get("type") != "object":
        return None
    props = schema.get("properties", {})
    if not isinstance(props, dict) or schema.get("additionalProperties", True) not in (True, False):
        return None
    checks: dict[str, Callable[[Any], bool]] = {}
    for name, sub in props.items():
        test = _type_check(sub.get("type")) if isinstance(sub, dict) and not set(sub) - _FIELD_KEYS else None
        if test is None:
            return None
        checks[name] = test
    listed = schema.get("required", [])
    if not isinstance(listed, list) or not all(isinstance(key, str) for key in listed):
        return None
    if not _valid_for_jsonschema(schema):
        return None
    required = frozenset(listed)
    closed = schema.get("additionalProperties", True) is False

    def check(args: dict[str, Any]) -> bool:
        if not required.issubset(args):
            return False
        for key, value in args.items():
            test = checks.get(key)
            if test is None:
                if closed:
                    return False
            elif not test(value):
                return False
        return True

    return check


# -- the conversion to a Python tool's annotated types -----------------------------------------------
class ArgumentConverter:
    """Converts validated JSON arguments to a Python function's annotated parameter types with
    pydantic in lax mode: ``1.0`` → ``1`` for ``int``, ``2`` → ``2.0`` for ``float``, a dict → a
    model for a pydantic-model parameter. Only the arguments given are returned (the function's
    own defaults fill the rest)."""

    def __init__(self, model: type[BaseModel] | None, numbers: dict[str, type]) -> None:
        self._model = model
        self._numbers = numbers  # parameters annotated plain int/float: converted without pydantic

    def __call__(self, args: dict[str, Any]) -> dict[str, Any]:
        """Raises ``ValueError`` with one line per problem when a value cannot be converted."""
        if self._model is None:
            out = args
            for key, want in self._numbers.items():
                value: Any = args.get(key)
                if type(value) is not want and type(value) in (int, float):
                    if out is args:
                        out = dict(args)
                    out[key] = want(value) if want is float or value.is_integer() else value
            return out
        try:
            converted = self._model.model_validate(args)
        except ValidationError as exc:
            problems = [f"{'.'.join(map(str, e['loc'])) or '(root)'}: {e['msg']}" for e in exc.errors()[:20]]
            raise ValueError("; ".join(problems)) from None
        fields = converted.__dict__
        return {k: fields[k] if k in fields else v for k, v in args.items()}


_SIMPLE = (str, bool, type(None))


def converter_for(fn: Callable[..., Any]) -> ArgumentConverter | None:
    """A converter for ``fn``'s annotated parameters, or None when nothing would change (no
    annotations, only ``str``/``bool``/``Any``, or hints that cannot be resolved)."""
    try:
        hints = typing.get_type_hints(fn)
        params = inspect.signature(fn).parameters
    except Exception:  # unresolvable forward references, builtins without signatures
        return None
    fields: dict[str, Any] = {}
    numbers: dict[str, type] = {}
    for name, param in params.items():
        hint = hints.get(name)
        if hint is None or hint is Any or hint in _SIMPLE:
            continue
        if param.kind in (param.VAR_POSITIONAL, param.VAR_KEYWORD, param.POSITIONAL_ONLY):
            continue
        fields[name] = (hint, None)
        if hint in (int, float):
            numbers[name] = hint
    if not fields:
        return None
    if len(numbers) == len(fields):  # the common case, and the hot path: no pydantic needed
        return ArgumentConverter(None, numbers)
    try:
        model = create_model(
            f"_{getattr(fn, '__name__', 'tool')}_args",
            __config__=ConfigDict(arbitrary_types_allowed=True, extra="ignore"), **fields)
    except Exception:
        return None
    return ArgumentConverter(model, numbers)
