"""ToolSpec: a tool's name, description and JSON Schemas; vendor shapes in and out; argument validation."""

from __future__ import annotations

import copy
import keyword
import unicodedata
import warnings
from collections.abc import Callable, Collection, Iterable, Mapping
from typing import TYPE_CHECKING, Any

from jsonschema.exceptions import SchemaError, best_match
from jsonschema.exceptions import ValidationError as SchemaViolation
from jsonschema.protocols import Validator
from jsonschema.validators import Draft202012Validator, validator_for
from pydantic import BaseModel, ConfigDict, Field, PrivateAttr, ValidationError, field_validator
from referencing.exceptions import Unresolvable

from codeact.errors import ToolArgumentsError, ToolDefinitionError
from codeact.tool_stubs._function_schema import function_schemas
from codeact.tool_stubs.refs import resolve_ref

if TYPE_CHECKING:
    from codeact.tool_stubs.strict import OptionalForm

__all__ = ["RESERVED_NAMES", "ToolSpec", "python_identifier", "python_names"]

#: Identifiers a stub must not take: what the kernel puts in the namespace, and the typing names stubs use.
RESERVED_NAMES = frozenset(
    {"__codeact_call__", "ToolError", "parallel", "final_answer", "aio", "display", "Any", "Literal", "TypedDict"}
)
_MAX_PROBLEMS = 50
_MAX_PROBLEM_CHARS = 400


def python_identifier(name: str, reserved: Collection[str] = RESERVED_NAMES) -> str:
    """``name`` if it is a usable identifier, else a sanitized one (``.``/``-``/… → ``_``, ``1st`` → ``_1st``,
    keywords and reserved names get a trailing ``_``)."""
    text = unicodedata.normalize("NFKC", name)  # Python normalizes identifiers the same way
    if not text.isidentifier():
        text = "".join(c if ("_" + c).isidentifier() else "_" for c in text) or "_"
        if not text.isidentifier():
            text = "_" + text
    if keyword.iskeyword(text) or text in reserved or text.startswith("__codeact"):
        text += "_"
    return text


def python_names(specs: Iterable[ToolSpec | str], reserved: Collection[str] = RESERVED_NAMES) -> dict[str, str]:
    """Original name → unique Python identifier, in input order. A name that is already a usable
    identifier keeps it; sanitized names that collide get ``_2``, ``_3``… in input order."""
    names = [s if isinstance(s, str) else s.name for s in specs]
    seen: set[str] = set()
    for n in names:
        if n in seen:
            raise ToolDefinitionError(f"duplicate tool name {n!r}: tool names must be unique")
        seen.add(n)
    result = {n: n for n in names if python_identifier(n, reserved) == n}
    taken = set(result)
    for n in names:
        if n in result:
            continue
        base = candidate = python_identifier(n, reserved)
        i = 2
        while candidate in taken:
            candidate, i = f"{base}_{i}", i + 1
        result[n] = candidate
        taken.add(candidate)
    return {n: result[n] for n in names}


def _empty_object() -> dict[str, Any]:
    return {"type": "object", "properties": {}}


class ToolSpec(BaseModel):
    """What a tool is: name, description, input JSON Schema, optional output JSON Schema.

    Build one with the constructor or ``from_function`` / ``from_openai`` / ``from_anthropic`` /
    ``from_mcp`` / ``from_dict``; these raise :class:`ToolDefinitionError` for a bad definition.
    The input schema is checked and its validator compiled once, at construction.
    """

    model_config = ConfigDict(frozen=True, extra="forbid")

    name: str
    description: str = ""
    input_schema: dict[str, Any] = Field(default_factory=_empty_object)
    output_schema: dict[str, Any] | None = None
    _validator: Validator | None = PrivateAttr(default=None)

    def __init__(self, /, **data: Any) -> None:
        # Private: a converter of a large document (OpenAPI) defers the schema check and the
        # validator to the tool's first validation: checking 1,200 schemas against the meta-schema
        # takes longer than anything else a toolset does, and most tools are never called.
        lazy = bool(data.pop("_lazy", False))
        for what in ("input_schema", "output_schema"):
            schema = data.get(what, {})
            if not isinstance(schema, dict) and not (schema is None and what == "output_schema"):
                raise ToolDefinitionError(
                    f"tool {data.get('name')!r}: {what} must be a JSON Schema object (a dict), "
                    f"got {type(schema).__name__}"
                )
        try:
            super().__init__(**data)
        except ValidationError as exc:
            where = "; ".join(f"{'.'.join(map(str, e['loc'])) or 'tool'}: {e['msg']}" for e in exc.errors())
            raise ToolDefinitionError(f"invalid tool definition {data.get('name')!r}: {where}") from None
        if not self.name.strip() or not self.name.isprintable():
            raise ToolDefinitionError(f"invalid tool name {self.name!r}: use a non-empty name of printable characters")
        if lazy:
            _check_shape(self.name, self.input_schema, "input_schema")
            return
        self._validator = _validator_class(self.input_schema)(_check(self.name, self.input_schema, "input_schema"))
        if self.output_schema is not None:
            _check(self.name, self.output_schema, "output_schema")

    @field_validator("description", mode="before")
    @classmethod
    def _none_is_empty(cls, value: Any) -> Any:
        return "" if value is None else value

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, ToolSpec):
            return NotImplemented
        mine = (self.name, self.description, self.input_schema, self.output_schema)
        return mine == (other.name, other.description, other.input_schema, other.output_schema)

    def __hash__(self) -> int:
        return hash((self.name, self.description))

    def __getstate__(self) -> dict[Any, Any]:
        state = super().__getstate__()
        return {**state, "__pydantic_private__": {}}  # the compiled validator does not pickle

    def __setstate__(self, state: dict[Any, Any]) -> None:
        super().__setstate__(state)
        self._validator = None  # compiled again at the first validation

    @property
    def python_name(self) -> str:
        """The stub's identifier (see :func:`python_names` for collision handling across a set)."""
        return python_identifier(self.name)

    # -- validation --------------------------------------------------------------------------------

    def validate_arguments(self, arguments: Any) -> dict[str, Any]:
        """Check ``arguments`` against the input schema; return them as a dict.

        Raises :class:`ToolArgumentsError` listing every problem as ``path: message``.
        """
        if not isinstance(arguments, Mapping):
            kind = type(arguments).__name__
            problem = f"(root): arguments must be an object of named parameters, got {kind}"
            raise ToolArgumentsError(self.name, [problem])
        args = dict(arguments)
        if self._validator is None:  # deferred (see __init__) or unpickled: checked now
            self._validator = _validator_class(self.input_schema)(_check(self.name, self.input_schema, "input_schema"))
        try:
            errors = sorted(self._validator.iter_errors(args), key=_error_key)
        except Unresolvable as exc:
            raise ToolDefinitionError(f"tool {self.name!r}: input_schema has an unresolvable $ref: {exc}") from exc
        if errors:
            problems = [_problem(e) for e in errors[:_MAX_PROBLEMS]]
            if len(errors) > _MAX_PROBLEMS:
                problems.append(f"… and {len(errors) - _MAX_PROBLEMS} more problems")
            raise ToolArgumentsError(self.name, problems)
        return args

    # -- constructors and vendor shapes ------------------------------------------------------------

    @classmethod
    def from_function(cls, fn: Callable[..., Any], name: str | None = None, description: str | None = None) -> ToolSpec:
        """A spec from a (sync or async) function or bound method: schema from its type hints,
        description from its docstring, parameter descriptions from its ``Args:`` section."""
        fn_name, summary, input_schema, output_schema = function_schemas(fn, name)
        return cls(
            name=fn_name,
            description=summary if description is None else description,
            input_schema=input_schema,
            output_schema=output_schema,
        )

    @classmethod
    def from_openai(cls, d: Mapping[str, Any]) -> ToolSpec:
        """From ``{"type": "function", "function": {...}}`` or the bare ``{name, description, parameters}``."""
        data = _mapping(d, "OpenAI")
        if isinstance(data.get("function"), Mapping):
            data = dict(data["function"])
        elif data.get("type", "function") != "function":
            raise ToolDefinitionError(f"not an OpenAI function tool: type {data.get('type')!r}")
        params = data.get("parameters")
        return cls(
            name=data.get("name"),
            description=data.get("description"),
            input_schema=_empty_object() if params is None else copy.deepcopy(params),
        )

    def to_openai(self, strict: bool = False) -> dict[str, Any]:
        """The Chat Completions shape ``{"type": "function", "function": {name, description, parameters}}``.

        ``strict=True``: the parameters in the strict subset with ``"strict": true`` (constrained
        decoding; see :mod:`codeact.tool_stubs.strict`), or as they are, without the flag, when the
        schema has no strict form. OptionalForm arguments then arrive as null: :meth:`drop_omitted_nulls`.
        """
        return {"type": "function", "function": self._wire("parameters", strict, "nullable")}

    def _wire(self, schema_key: str, strict: bool, optional: OptionalForm) -> dict[str, Any]:
        """``{name, description?, <schema_key>: input schema, strict?}``: both vendors' tool shape."""
        out: dict[str, Any] = {"name": self.name}
        if self.description:
            out["description"] = self.description
        out[schema_key] = copy.deepcopy(self.input_schema)
        if strict and (converted := self.strict_input_schema(optional)) is not None:
            out[schema_key], out["strict"] = converted, True
        return out

    def strict_input_schema(self, optional: OptionalForm = "nullable") -> dict[str, Any] | None:
        """The input schema in the providers' strict subset, or None if it has no strict form;
        ``optional``: how an optional argument is expressed (:func:`~codeact.tool_stubs.strict.strict_schema`)."""
        from codeact.tool_stubs.strict import NotStrict, strict_schema

        try:
            return strict_schema(self.input_schema, optional)
        except NotStrict:
            return None

    def drop_omitted_nulls(self, arguments: Any) -> Any:
        """``arguments`` from strict decoding without the nulls standing for omitted optional arguments."""
        from codeact.tool_stubs.strict import drop_omitted_nulls

        return drop_omitted_nulls(self.input_schema, arguments)

    @classmethod
    def from_anthropic(cls, d: Mapping[str, Any]) -> ToolSpec:
        """From ``{name, description, input_schema}`` (``output_schema`` is read when present)."""
        data = _mapping(d, "Anthropic")
        if not isinstance(data.get("input_schema"), dict):
            raise ToolDefinitionError(
                f"Anthropic tool {data.get('name')!r} has no input_schema object "
                f"(server tools such as type {data.get('type')!r} are not supported)"
            )
        return cls(
            name=data.get("name"),
            description=data.get("description"),
            input_schema=copy.deepcopy(data["input_schema"]),
            output_schema=copy.deepcopy(data.get("output_schema")),
        )

    def to_anthropic(self, strict: bool = False) -> dict[str, Any]:
        """The Anthropic Messages shape ``{name, description, input_schema}``; ``strict=True`` as in
        :meth:`to_openai` (Anthropic's ``"strict": true`` tool flag), optional arguments left out of
        ``required`` rather than made nullable (Anthropic counts a nullable one as a union)."""
        return self._wire("input_schema", strict, "omit")

    @classmethod
    def from_mcp(cls, d: Any) -> ToolSpec:
        """From an MCP Tool: ``{name, description, inputSchema, outputSchema?}`` or an ``mcp.types.Tool``."""
        if not isinstance(d, Mapping) and hasattr(d, "model_dump"):
            d = d.model_dump(by_alias=True, exclude_none=True)
        elif not isinstance(d, Mapping) and hasattr(d, "name"):
            d = {
                "name": d.name,
                "description": getattr(d, "description", None),
                "inputSchema": getattr(d, "inputSchema", getattr(d, "input_schema", None)),
                "outputSchema": getattr(d, "outputSchema", getattr(d, "output_schema", None)),
            }
        data = _mapping(d, "MCP")
        schema = data.get("inputSchema", data.get("input_schema"))
        if not isinstance(schema, dict):
            raise ToolDefinitionError(f"MCP tool {data.get('name')!r} has no inputSchema object")
        return cls(
            name=data.get("name"),
            description=data.get("description"),
            input_schema=copy.deepcopy(schema),
            output_schema=copy.deepcopy(data.get("outputSchema", data.get("output_schema"))),
        )

    def to_mcp(self) -> dict[str, Any]:
        """The MCP Tool shape ``{name, description, inputSchema, outputSchema?}``."""
        out: dict[str, Any] = {"name": self.name}
        if self.description:
            out["description"] = self.description
        out["inputSchema"] = copy.deepcopy(self.input_schema)
        if self.output_schema is not None:
            out["outputSchema"] = copy.deepcopy(self.output_schema)
        return out

    @classmethod
    def from_dict(cls, d: Any) -> ToolSpec:
        """Any of the three shapes, detected from its keys (``inputSchema`` → MCP, ``input_schema`` →
        Anthropic, ``function``/``parameters`` → OpenAI); also an ``mcp.types.Tool``."""
        if not isinstance(d, Mapping):
            return cls.from_mcp(d)
        if "inputSchema" in d or "outputSchema" in d:
            return cls.from_mcp(d)
        if "input_schema" in d:
            return cls.from_anthropic(d)
        return cls.from_openai(d)


def _mapping(d: Any, shape: str) -> dict[str, Any]:
    if not isinstance(d, Mapping):
        raise ToolDefinitionError(f"an {shape} tool definition must be a dict, got {type(d).__name__}")
    return dict(d)


# -- schema checking ---------------------------------------------------------------------------------


def _validator_class(schema: dict[str, Any]) -> type[Validator]:
    if "$schema" in schema:
        with warnings.catch_warnings():  # an unknown $schema falls back to the latest draft
            warnings.simplefilter("ignore")
            cls: type[Validator] = validator_for(schema, default=Draft202012Validator)
            return cls
    return Draft202012Validator


def _check_shape(name: str, schema: Any, what: str) -> None:
    if not isinstance(schema, dict):
        raise ToolDefinitionError(
            f"tool {name!r}: {what} must be a JSON Schema object (a dict), got {type(schema).__name__}"
        )
    kind = schema.get("type")
    if (
        what == "input_schema"
        and kind is not None
        and kind != "object"
        and not (isinstance(kind, list) and "object" in kind)
    ):
        raise ToolDefinitionError(f"tool {name!r}: input_schema must describe an object, not type {kind!r}")


def _check(name: str, schema: Any, what: str) -> dict[str, Any]:
    """Check ``schema`` (tolerating vendor extras); return it prepared for a validator."""
    _check_shape(name, schema, what)
    prepared: dict[str, Any] = _lift_legacy_required(schema)
    try:
        _validator_class(schema).check_schema(prepared)
    except SchemaError as exc:
        at = "/".join(map(str, exc.absolute_path)) or "(root)"
        raise ToolDefinitionError(f"tool {name!r}: {what} is not a valid JSON Schema at {at}: {exc.message}") from None
    for ref in _local_refs(prepared):
        if resolve_ref(prepared, ref) is None:
            raise ToolDefinitionError(f"tool {name!r}: {what} has a $ref that does not resolve: {ref!r}")
    return prepared


def _lift_legacy_required(node: Any) -> Any:
    """A copy where draft-3 style ``"required": true`` on a property moves into the parent's list."""
    if isinstance(node, list):
        return [_lift_legacy_required(x) for x in node]
    if not isinstance(node, dict):
        return node
    out = {k: _lift_legacy_required(v) for k, v in node.items()}
    props = out.get("properties")
    if isinstance(props, dict):
        lifted = []
        for key, sub in list(props.items()):
            if isinstance(sub, dict) and isinstance(sub.get("required"), bool):
                if sub["required"]:
                    lifted.append(key)
                props[key] = {k: v for k, v in sub.items() if k != "required"}
        if lifted:
            declared = out.get("required")
            existing: list[Any] = declared if isinstance(declared, list) else []
            out["required"] = [*existing, *(k for k in lifted if k not in existing)]
    return out


def _local_refs(node: Any) -> Iterable[str]:
    if isinstance(node, dict):
        ref = node.get("$ref")
        if isinstance(ref, str) and (ref == "#" or ref.startswith("#/")):
            yield ref
        for value in node.values():
            yield from _local_refs(value)
    elif isinstance(node, list):
        for value in node:
            yield from _local_refs(value)


# -- problem messages --------------------------------------------------------------------------------


def _error_key(error: SchemaViolation) -> tuple[tuple[tuple[int, Any], ...], str]:
    path = tuple((0, p) if isinstance(p, int) else (1, str(p)) for p in error.absolute_path)
    return path, error.message


def _path(error: SchemaViolation) -> str:
    out = ""
    for part in error.absolute_path:
        if isinstance(part, int):
            out += f"[{part}]"
        elif part.replace("_", "a").replace("-", "a").isalnum():
            out += f".{part}" if out else part
        else:
            out += f"[{part!r}]"
    return out or "(root)"


def _problem(error: SchemaViolation) -> str:
    message = error.message
    if error.context:
        types = [c for c in error.context if c.validator == "type" and not c.relative_path]
        if len(types) == len(error.context):
            expected = [
                t
                for c in types
                for t in (c.validator_value if isinstance(c.validator_value, list) else [c.validator_value])
            ]
            message += f" (expected {' or '.join(map(str, dict.fromkeys(expected)))})"
        else:  # the branches that had the right type say what is wrong
            near = [c for c in error.context if not (c.validator == "type" and not c.relative_path)]
            if (best := best_match(near)) is not None:
                message += f" (closest match: {_path(best)}: {best.message})"
    if len(message) > _MAX_PROBLEM_CHARS:
        message = message[: _MAX_PROBLEM_CHARS - 1] + "…"
    return f"{_path(error)}: {message}"
