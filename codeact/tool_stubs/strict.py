"""Tool schemas in the providers' *strict* subset (constrained decoding), and back.

OpenAI's ``strict: true`` functions and Anthropic's ``strict`` tools decode arguments under a
grammar built from the schema, which needs a subset of JSON Schema: every object lists all its
properties in ``required`` and has ``additionalProperties: false``; no ``oneOf``/``allOf``/``not``,
no ``$ref`` beside other keywords, no string/number/array bounds or defaults. :func:`strict_schema`
converts a schema:

* an optional property becomes required but nullable (``null`` means "not given"), OpenAI's rule;
  with ``optional="omit"`` it stays optional (Anthropic's strict tools allow that, and count a
  nullable property as a costly union: see :func:`strict_counts`);
* ``oneOf`` becomes ``anyOf``; a one-member ``allOf`` is merged, a larger one of objects is merged;
* every keyword outside the subset (``minimum``, ``pattern``, ``default``, ``format``…) moves into the
  property's description, so the model still reads it (``default: 30; maximum: 100``);
* a free-form object (``additionalProperties`` not false and no properties) cannot be expressed:
  :class:`NotStrict` is raised and the caller sends that tool non-strict.

:func:`drop_omitted_nulls` undoes the nullability on the way back: a ``null`` for a property that was
optional and does not itself admit null is removed before validation, so the record shows what the
model meant (the argument was not given), as a stub call would.
"""

from __future__ import annotations

import copy
import json
from typing import Any, Literal

from codeact.tool_stubs._schema_to_py import allows_null, required_keys
from codeact.tool_stubs.refs import resolve_ref

__all__ = ["NotStrict", "OptionalForm", "drop_omitted_nulls", "strict_counts", "strict_schema"]

#: How a strict schema says an argument is optional: required but nullable, or left out of ``required``.
OptionalForm = Literal["nullable", "omit"]

#: Keywords the strict subset keeps; the others go into the description.
_KEPT = frozenset({"type", "properties", "required", "additionalProperties", "items", "enum", "const", "anyOf",
                   "$ref", "$defs", "description", "title"})
_MAX_DEPTH = 64


class NotStrict(ValueError):
    """The schema has a part the strict subset cannot express (a free-form object)."""


def strict_schema(schema: dict[str, Any], optional: OptionalForm = "nullable") -> dict[str, Any]:
    """A strict-subset copy of an input schema (see the module docstring); raises :class:`NotStrict`."""
    root = copy.deepcopy(schema)
    nullable = optional == "nullable"
    out = _convert(root, root, 0, nullable)
    defs = root.get("$defs")
    if isinstance(defs, dict):
        out["$defs"] = {k: _convert(v, root, 0, nullable) for k, v in defs.items()}
    if out.get("type") != "object":
        out["type"] = "object"
    out.setdefault("properties", {})
    out.setdefault("required", [])
    out["additionalProperties"] = False
    return out


def _convert(node: Any, root: dict[str, Any], depth: int, nullable: bool) -> dict[str, Any]:
    if depth > _MAX_DEPTH:
        raise NotStrict("the schema nests too deeply")
    if node is True or node == {} or not isinstance(node, dict):
        raise NotStrict("an unconstrained value (any JSON) has no strict form")
    node = dict(node)
    node.pop("$defs", None)
    node.pop("$schema", None)
    if "$ref" in node:
        ref = node.pop("$ref")
        if node:  # siblings beside $ref: inline the target (the subset allows a bare $ref only)
            target = resolve_ref(root, ref)
            if not isinstance(target, dict):
                raise NotStrict(f"unresolvable $ref {ref!r}")
            return _convert({**target, **node}, root, depth + 1, nullable)
        return {"$ref": ref}
    if "oneOf" in node:
        node["anyOf"] = node.pop("oneOf")
    if isinstance(node.get("allOf"), list):
        node = {**_merge_all_of(node.pop("allOf"), root), **node}
    out = _kept(node)
    if isinstance(out.get("anyOf"), list):
        out["anyOf"] = [_convert(m, root, depth + 1, nullable) for m in out["anyOf"]]
    if isinstance(out.get("items"), dict):
        out["items"] = _convert(out["items"], root, depth + 1, nullable)
    elif "items" in out:
        raise NotStrict("array items must be one schema")
    kind = out.get("type")
    if kind == "object" or (isinstance(kind, list) and "object" in kind) or "properties" in out:
        _object(out, root, depth, nullable)
    elif kind == "array" and "items" not in out:
        raise NotStrict("an array without an items schema has no strict form")
    elif kind is None and not any(k in out for k in ("anyOf", "enum", "const")):
        raise NotStrict("a schema without a type has no strict form")
    return out


def _merge_all_of(members: list[Any], root: dict[str, Any]) -> dict[str, Any]:
    merged: dict[str, Any] = {}
    for member in members:
        member = resolve_ref(root, member["$ref"]) if isinstance(member, dict) and "$ref" in member else member
        if not isinstance(member, dict):
            raise NotStrict("an allOf member is not a schema object")
        props = {**merged.get("properties", {}), **member.get("properties", {})}
        req = [*merged.get("required", []), *member.get("required", [])]
        merged = {**merged, **member, **({"properties": props} if props else {}), **({"required": req} if req else {})}
    return merged


def _kept(node: dict[str, Any]) -> dict[str, Any]:
    """The keywords of the subset; the others, as text, appended to the description."""
    out: dict[str, Any] = {}
    notes = []
    for key, value in node.items():
        if key in _KEPT:
            out[key] = value
        elif not key.startswith("x-"):
            notes.append(f"{key}: {json.dumps(value, ensure_ascii=False, default=str)}")
    if notes:
        out["description"] = "; ".join([*([str(out["description"])] if out.get("description") else []), *notes])
    return out


def _object(out: dict[str, Any], root: dict[str, Any], depth: int, nullable: bool) -> None:
    props = out.get("properties")
    extra = out.get("additionalProperties")
    if not isinstance(props, dict) or not props:
        if extra is False:
            out["properties"], out["required"] = {}, []
            return
        raise NotStrict("a free-form object (no properties) has no strict form")
    required = required_keys(out, props)
    converted = {}
    for key, sub in props.items():
        prop = _convert(sub, root, depth + 1, nullable)
        kept = key in required or allows_null(sub, root) or not nullable
        converted[key] = prop if kept else _nullable(prop)
    out["properties"] = converted
    out["required"] = list(converted) if nullable else [k for k in converted if k in required]
    out["additionalProperties"] = False


def _nullable(prop: dict[str, Any]) -> dict[str, Any]:
    kind = prop.get("type")
    if isinstance(kind, str) and "enum" not in prop and "const" not in prop:
        return {**prop, "type": [kind, "null"]}
    if isinstance(kind, list) and "enum" not in prop and "const" not in prop:
        return {**prop, "type": [*kind, "null"]}
    outer = {"anyOf": [{k: v for k, v in prop.items() if k != "description"}, {"type": "null"}]}
    if "description" in prop:
        outer["description"] = prop["description"]
    return outer


def strict_counts(schema: dict[str, Any]) -> tuple[int, int]:
    """``(optional, unions)`` of a strict schema as Anthropic's limits count them: the properties not in
    their object's ``required``, and those whose schema is an ``anyOf`` or a list of types (nested
    objects, array items and ``$defs`` included)."""
    optional = unions = 0
    todo: list[Any] = [schema]
    while todo:
        node = todo.pop()
        if not isinstance(node, dict):
            continue
        props = node.get("properties")
        if isinstance(props, dict):
            required = set(node.get("required") or ())
            for key, sub in props.items():
                optional += key not in required
                unions += isinstance(sub, dict) and ("anyOf" in sub or isinstance(sub.get("type"), list))
            todo.extend(props.values())
        todo.extend(node.get("anyOf") or [])
        todo.extend((node.get("$defs") or {}).values())
        todo.append(node.get("items"))
    return optional, unions


def drop_omitted_nulls(schema: dict[str, Any], arguments: Any, root: dict[str, Any] | None = None,
                       depth: int = 0) -> Any:
    """``arguments`` without the nulls that strict decoding put for optional, non-nullable properties
    (recursively through objects, arrays and local ``$ref``s)."""
    root = schema if root is None else root
    if depth > _MAX_DEPTH or not isinstance(schema, dict):
        return arguments
    ref = schema.get("$ref")
    if isinstance(ref, str):
        target = resolve_ref(root, ref)
        return drop_omitted_nulls(target, arguments, root, depth + 1) if isinstance(target, dict) else arguments
    if isinstance(arguments, list) and isinstance(schema.get("items"), dict):
        return [drop_omitted_nulls(schema["items"], a, root, depth + 1) for a in arguments]
    props = schema.get("properties")
    if not isinstance(arguments, dict) or not isinstance(props, dict):
        return arguments
    required = required_keys(schema, props)
    out = {}
    for key, value in arguments.items():
        sub = props.get(key)
        if value is None and key not in required and sub is not None and not allows_null(sub, root):
            continue
        out[key] = drop_omitted_nulls(sub, value, root, depth + 1) if isinstance(sub, dict) else value
    return out
