"""JSON Schema → Python annotations, literals and ``TypedDict`` classes for the stub module.

Private to :mod:`codeact.tool_stubs`. Everything here produces *source text*; nothing is evaluated.
"""

from __future__ import annotations

import builtins
import keyword
import math
import re
from dataclasses import dataclass, field
from typing import Any

from codeact._text import one_line
from codeact.tool_stubs.refs import resolve_ref

__all__ = [
    "TypeRenderer",
    "allows_null",
    "camel",
    "py_literal",
    "py_str",
    "required_keys",
]

_MAX_DEPTH = 32
_SCALARS = {"string": "str", "integer": "int", "number": "float", "boolean": "bool", "null": "None"}
#: Names a generated class must never take: it would shadow a builtin in the model's namespace.
_BUILTIN_NAMES = frozenset(dir(builtins))


def py_str(text: str) -> str:
    """A Python string literal for ``text``, double-quoted when that needs no escaping."""
    literal = repr(text)
    if literal.startswith("'") and '"' not in text:
        literal = '"' + literal[1:-1] + '"'
    return literal


def py_literal(value: Any) -> str | None:
    """Python source for a JSON value (``true`` → ``True``, ``null`` → ``None``); None if not representable."""
    if value is None or isinstance(value, bool):
        return repr(value)
    if isinstance(value, str):
        return py_str(value)
    if isinstance(value, int):
        return repr(value)
    if isinstance(value, float):
        return repr(value) if math.isfinite(value) else None
    if isinstance(value, list):
        items = [py_literal(v) for v in value]
        return None if None in items else "[" + ", ".join(i for i in items if i is not None) + "]"
    if isinstance(value, dict) and all(isinstance(k, str) for k in value):
        pairs = [(py_str(k), py_literal(v)) for k, v in value.items()]
        if any(v is None for _, v in pairs):
            return None
        return "{" + ", ".join(f"{k}: {v}" for k, v in pairs) + "}"
    return None


def camel(text: str) -> str:
    """``get_weather`` / ``get-weather`` / ``getWeather`` → ``GetWeather`` (may be empty)."""
    parts = re.split(r"[\W_]+", text)
    return "".join(p[:1].upper() + p[1:] for p in parts if p)




def required_keys(schema: dict[str, Any], props: dict[str, Any]) -> set[str]:
    declared = schema.get("required")
    names = {r for r in declared if isinstance(r, str)} if isinstance(declared, list) else set()
    # draft-3 style ``"required": true`` on the property itself
    return names | {k for k, s in props.items() if isinstance(s, dict) and s.get("required") is True}


def allows_null(schema: Any, root: Any, depth: int = 0) -> bool:
    """Whether ``schema`` accepts JSON ``null`` (an unconstrained schema does)."""
    if schema is True or schema == {} or depth > _MAX_DEPTH:
        return True
    if not isinstance(schema, dict):
        return False
    ref = schema.get("$ref")
    if isinstance(ref, str):
        target = resolve_ref(root, ref)
        return target is None or allows_null(target, root, depth + 1)
    if schema.get("nullable") is True:
        return True
    if "const" in schema:
        return schema["const"] is None
    if isinstance(schema.get("enum"), list):
        return None in schema["enum"]
    for key in ("anyOf", "oneOf"):
        if isinstance(schema.get(key), list):
            return any(allows_null(m, root, depth + 1) for m in schema[key])
    kind = schema.get("type")
    if kind is None:
        return not any(k in schema for k in ("properties", "items", "allOf"))
    return kind == "null" or (isinstance(kind, list) and "null" in kind)


@dataclass
class _Context:
    """Per-schema-root state: resolved refs and the refs being rendered (for recursion)."""

    root: Any
    done: dict[str, str] = field(default_factory=dict)
    in_progress: dict[str, str | None] = field(default_factory=dict)


class TypeRenderer:
    """Renders annotations for one stub module; collects the classes and ``typing`` names it needs."""

    def __init__(self, taken: set[str]) -> None:
        self.imports: set[str] = set()
        #: Whether what was rendered since it was last reset names ``typing`` or a class (needs the import).
        self.typed = False
        self._taken = taken | _BUILTIN_NAMES
        self._pending: list[str] = []
        self._by_body: dict[tuple[str, str], str] = {}

    def drain(self) -> list[str]:
        """The class definitions rendered since the last call, in definition order."""
        out, self._pending = self._pending, []
        return out

    def annotation(self, schema: Any, root: Any, hint: str) -> str:
        """The annotation for ``schema``; ``$ref`` resolves against ``root``; ``hint`` names classes."""
        return self._join(self._alts(schema, _Context(root), hint, 0))

    def optional(self, annotation: str) -> str:
        """``annotation | None`` unless it already admits None."""
        if annotation in ("Any", "None") or annotation.endswith(" | None"):
            return annotation
        if annotation.startswith(("'", '"')):
            return py_str(annotation[1:-1] + " | None")
        return f"{annotation} | None"

    def any(self) -> str:
        self.imports.add("Any")
        self.typed = True
        return "Any"

    # -- rendering ---------------------------------------------------------------------------------

    def _join(self, alts: list[str]) -> str:
        unique = list(dict.fromkeys(alts))
        if not unique or "Any" in unique:
            return self.any()
        unique = [a for a in unique if a != "None"] + (["None"] if "None" in unique else [])
        if len(unique) > 1 and any(a.startswith(("'", '"')) for a in unique):  # a forward reference
            bare = [a[1:-1] if a.startswith(("'", '"')) else a for a in unique]
            return py_str(" | ".join(bare))
        return " | ".join(unique)

    def _alts(self, schema: Any, ctx: _Context, hint: str, depth: int) -> list[str]:
        if depth > _MAX_DEPTH or not isinstance(schema, dict) or not schema:
            return [self.any()]
        ref = schema.get("$ref")
        if isinstance(ref, str):
            return [self._ref(ref, ctx, depth)]
        alts = self._alts_of_kind(schema, ctx, hint, depth)
        if schema.get("nullable") is True:
            alts.append("None")
        return alts

    def _alts_of_kind(self, schema: dict[str, Any], ctx: _Context, hint: str, depth: int) -> list[str]:
        if "const" in schema:
            return self._literal([schema["const"]])
        enum = schema.get("enum")
        if isinstance(enum, list) and enum:
            return self._literal(enum)
        for key in ("anyOf", "oneOf"):
            members = schema.get(key)
            if isinstance(members, list) and members:
                return [a for m in members for a in self._alts(m, ctx, hint, depth + 1)]
        all_of = schema.get("allOf")
        if isinstance(all_of, list) and len(all_of) == 1:
            return self._alts(all_of[0], ctx, hint, depth + 1)
        kind = schema.get("type")
        if isinstance(kind, list):
            return [a for k in kind for a in self._alts({**schema, "type": k}, ctx, hint, depth + 1)]
        if kind is None:
            kind = "object" if "properties" in schema else "array" if "items" in schema else None
        if isinstance(kind, str) and kind in _SCALARS:
            return [_SCALARS[kind]]
        if kind == "array":
            items = schema.get("items")
            inner = self._join(self._alts(items, ctx, hint + "Item", depth + 1)) if items else self.any()
            return [f"list[{inner}]"]
        if kind == "object":
            return [self._object(schema, ctx, hint, depth)]
        return [self.any()]

    def _literal(self, values: list[Any]) -> list[str]:
        if not all(v is None or isinstance(v, (str, int)) for v in values):  # floats, objects: no Literal
            kinds = {"str" if isinstance(v, str) else "float" if isinstance(v, (int, float)) else "" for v in values}
            return [self.any()] if "" in kinds or len(kinds) > 1 else sorted(kinds)
        shown = [py_literal(v) or "None" for v in dict.fromkeys(values) if v is not None]
        alts = []
        if shown:
            self.imports.add("Literal")
            self.typed = True
            alts.append(f"Literal[{', '.join(shown)}]")
        return alts + (["None"] if None in values else [])

    def _ref(self, ref: str, ctx: _Context, depth: int) -> str:
        if ref in ctx.done:
            return ctx.done[ref]
        if ref in ctx.in_progress:  # recursion: a quoted forward reference to the class being built
            name = ctx.in_progress[ref]
            return py_str(name) if name else self.any()
        target = resolve_ref(ctx.root, ref)
        if not isinstance(target, dict):
            return self.any()
        hint = camel(ref.rsplit("/", 1)[-1]) or "Model"
        ctx.in_progress[ref] = None
        if _has_properties(target) and "$ref" not in target:
            result = self._object(target, ctx, hint, depth + 1, ref=ref)
        else:
            result = self._join(self._alts(target, ctx, hint, depth + 1))
        del ctx.in_progress[ref]
        ctx.done[ref] = result
        return result

    def _object(self, schema: dict[str, Any], ctx: _Context, hint: str, depth: int, ref: str = "") -> str:
        props = schema.get("properties")
        if not isinstance(props, dict) or not props:
            extra = schema.get("additionalProperties")
            value = self._join(self._alts(extra, ctx, hint + "Value", depth + 1)) if extra else self.any()
            return f"dict[str, {value}]"
        reserved = self._claim(hint) if ref else None
        if ref:
            ctx.in_progress[ref] = reserved
        required = required_keys(schema, props)
        fields = []
        for key, sub in props.items():
            ann = self._join(self._alts(sub, ctx, hint + camel(key), depth + 1))
            fields.append((key, ann, key in required, _describe(sub)))
        total = all(req for _, _, req, _ in fields)
        body = _class_body(fields, total)
        existing = self._by_body.get((camel(hint), body))
        self.typed = True
        if existing and (reserved is None or py_str(reserved) not in body):
            if reserved:
                self._taken.discard(reserved)
            return existing
        name = reserved or self._claim(hint)
        self._by_body[(camel(hint), body)] = name
        self.imports.add("TypedDict")
        self._pending.append(_class_source(name, fields, total))
        return name

    def _claim(self, hint: str) -> str:
        base = camel(hint) or "Object"
        if not base.isidentifier():
            base = "T" + base
        name, n = base, 2
        while name in self._taken:
            name, n = f"{base}{n}", n + 1
        self._taken.add(name)
        return name


def _has_properties(schema: dict[str, Any]) -> bool:
    return isinstance(schema.get("properties"), dict) and bool(schema["properties"])


def _describe(schema: Any) -> str:
    if not isinstance(schema, dict):
        return ""
    text = schema.get("description") or schema.get("title") or ""
    text = text.strip() if isinstance(text, str) else ""
    limits = constraints(schema)
    text = f"{text.rstrip('.')}; {limits}" if text and limits else text or limits
    return one_line(text, 160)  # for a ``#`` comment


#: JSON Schema keywords a Python annotation cannot say, as the stub's text says them.
_LIMITS = (("minimum", ">= {}"), ("exclusiveMinimum", "> {}"), ("maximum", "<= {}"), ("exclusiveMaximum", "< {}"),
           ("multipleOf", "a multiple of {}"), ("minLength", "at least {} characters"),
           ("maxLength", "at most {} characters"), ("minItems", "at least {} items"), ("maxItems", "at most {} items"),
           ("pattern", "matching {}"))


def constraints(schema: Any) -> str:
    """The schema's limits in words (``">= 1, <= 14"``), or "" (pydantic's ``Field(ge=1, le=14)``)."""
    if not isinstance(schema, dict):
        return ""
    words = []
    for key, form in _LIMITS:
        value = schema.get(key)
        if isinstance(value, bool) or value is None or not isinstance(value, (int, float, str)):
            continue
        words.append(form.format(py_str(str(value)) if key == "pattern" else value))
    return ", ".join(words)


def _field_comment(required: bool, total: bool, description: str) -> str:
    words = [w for w in ("required" if required and not total else "", description) if w]
    return f"  # {'; '.join(words)}" if words else ""


def _class_body(fields: list[tuple[str, str, bool, str]], total: bool) -> str:
    return "\n".join(f"{key!r}: {ann}{_field_comment(req, total, d)}" for key, ann, req, d in fields)


def _plain_key(key: str) -> bool:
    return key.isidentifier() and not keyword.iskeyword(key) and not key.startswith("__")


def _class_source(name: str, fields: list[tuple[str, str, bool, str]], total: bool) -> str:
    suffix = "" if total else ", total=False"
    if all(_plain_key(key) for key, *_ in fields):
        lines = [f"class {name}(TypedDict{suffix}):"]
        lines += [f"    {key}: {ann}{_field_comment(req, total, d)}" for key, ann, req, d in fields]
        return "\n".join(lines)
    lines = [f"{name} = TypedDict({py_str(name)}, {{"]
    lines += [f"    {py_str(key)}: {ann},{_field_comment(req, total, d)}" for key, ann, req, d in fields]
    lines.append(f"}}{suffix})")
    return "\n".join(lines)
