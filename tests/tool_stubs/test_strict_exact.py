"""Strict schemas, exactly: each conversion rule on its own schema, anyOf members and allOf merges
(their ``required`` included), the nullable forms, the refusals, the counts; and, property-based,
that a converted schema accepts what the original accepts (optional arguments sent as null) and
that dropping the nulls gives the original arguments back."""

from __future__ import annotations

from typing import Any

import jsonschema
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from codeact.tool_stubs.strict import NotStrict, drop_omitted_nulls, strict_counts, strict_schema

S = {"type": "string"}
INT = {"type": "integer"}


def _obj(props: dict[str, Any], required: list[str] | None = None, **more: Any) -> dict[str, Any]:
    return {"type": "object", "properties": props, **({"required": required} if required is not None else {}), **more}


def test_optional_becomes_required_and_nullable_and_keywords_move_to_the_description() -> None:
    schema = _obj({"a": {"type": "string", "minLength": 1, "default": "x", "description": "A."}, "b": INT}, ["b"])
    assert strict_schema(schema) == {
        "type": "object", "additionalProperties": False, "required": ["a", "b"],
        "properties": {"a": {"type": ["string", "null"], "description": 'A.; minLength: 1; default: "x"'}, "b": INT}}
    assert strict_schema(schema, optional="omit") == {
        "type": "object", "additionalProperties": False, "required": ["b"],
        "properties": {"a": {"type": "string", "description": 'A.; minLength: 1; default: "x"'}, "b": INT}}
    assert schema["properties"]["a"]["minLength"] == 1  # the input is not changed


def test_nullable_forms() -> None:
    props = {"e": {"enum": ["x", "y"], "description": "E."}, "c": {"const": 3}, "l": {"type": ["string", "integer"]},
             "n": {"type": ["string", "null"]}, "r": {"type": "string", "enum": ["a"]}}
    out = strict_schema(_obj(props))["properties"]
    assert out["e"] == {"anyOf": [{"enum": ["x", "y"]}, {"type": "null"}], "description": "E."}
    assert out["c"] == {"anyOf": [{"const": 3}, {"type": "null"}]}
    assert out["l"] == {"type": ["string", "integer", "null"]}
    assert out["n"] == {"type": ["string", "null"]}  # admits null already: left as it is
    assert out["r"] == {"anyOf": [{"type": "string", "enum": ["a"]}, {"type": "null"}]}


def test_any_of_and_one_of_members_are_converted() -> None:
    member = _obj({"x": S})
    out = strict_schema(_obj({"p": {"anyOf": [member, INT]}, "q": {"oneOf": [member, S]}}, ["p", "q"]))
    strict_member = {"type": "object", "properties": {"x": {"type": ["string", "null"]}}, "required": ["x"],
                     "additionalProperties": False}
    assert out["properties"]["p"] == {"anyOf": [strict_member, INT]}
    assert out["properties"]["q"] == {"anyOf": [strict_member, S]}


def test_all_of_merges_properties_and_required() -> None:
    schema = {"$defs": {"B": _obj({"b": INT}, ["b"])},
              "allOf": [_obj({"a": S}, ["a"]), {"$ref": "#/$defs/B"}, _obj({"c": S})]}
    out = strict_schema(schema)
    assert out["properties"] == {"a": S, "b": INT, "c": {"type": ["string", "null"]}}
    assert out["required"] == ["a", "b", "c"]
    omit = strict_schema(schema, optional="omit")
    assert omit["required"] == ["a", "b"] and omit["properties"]["c"] == S
    one = strict_schema(_obj({"p": {"allOf": [_obj({"z": S}, ["z"])], "description": "P."}}, ["p"]))
    assert one["properties"]["p"] == {**_obj({"z": S}, ["z"]), "description": "P.", "additionalProperties": False}
    with pytest.raises(NotStrict, match="allOf member"):
        strict_schema({"allOf": [3]})


def test_refs_bare_kept_with_siblings_inlined_and_defs_converted() -> None:
    schema = {"type": "object", "$defs": {"T": _obj({"v": S})},
              "properties": {"bare": {"$ref": "#/$defs/T"}, "side": {"$ref": "#/$defs/T", "description": "D."}},
              "required": ["bare", "side"]}
    out = strict_schema(schema)
    strict_t = {"type": "object", "properties": {"v": {"type": ["string", "null"]}}, "required": ["v"],
                "additionalProperties": False}
    assert out["properties"]["bare"] == {"$ref": "#/$defs/T"}
    assert out["properties"]["side"] == {**strict_t, "description": "D."}
    assert out["$defs"] == {"T": strict_t}
    with pytest.raises(NotStrict, match="unresolvable"):
        strict_schema(_obj({"x": {"$ref": "#/$defs/none", "description": "d"}}))


def test_root_and_keyword_details() -> None:
    assert strict_schema(_obj({"p": {"type": "string", "pattern": "é+"}}, ["p"]))["properties"]["p"] == {
        "type": "string", "description": 'pattern: "é+"'}
    out = strict_schema({"properties": {"k": S}, "x-internal": 1, "$schema": "s", "minProperties": 1})
    assert out == {"properties": {"k": {"type": ["string", "null"]}}, "required": ["k"], "type": "object",
                   "additionalProperties": False, "description": "minProperties: 1"}
    assert strict_schema({"type": "object", "additionalProperties": False}) == {
        "type": "object", "additionalProperties": False, "properties": {}, "required": []}
    items = strict_schema(_obj({"l": {"type": "array", "items": _obj({"i": INT}), "maxItems": 3}}, ["l"]))
    assert items["properties"]["l"] == {"type": "array", "description": "maxItems: 3", "items": {
        "type": "object", "properties": {"i": {"type": ["integer", "null"]}}, "required": ["i"],
        "additionalProperties": False}}
    typed = strict_schema(_obj({"o": {"type": ["object", "null"], "properties": {"i": INT}, "required": ["i"]}}, ["o"]))
    assert typed["properties"]["o"]["additionalProperties"] is False
    implicit = strict_schema(_obj({"o": {"properties": {"i": INT}, "required": ["i"]}}, ["o"]))
    assert implicit["properties"]["o"]["additionalProperties"] is False
    assert strict_schema(_obj({"e": {"enum": [1]}, "c": {"const": 1}, "a": {"anyOf": [S]}}, ["e", "c", "a"]))[
        "properties"] == {"e": {"enum": [1]}, "c": {"const": 1}, "a": {"anyOf": [S]}}


@pytest.mark.parametrize(("schema", "reason"), [
    (_obj({"m": {"type": "object"}}), "free-form"),
    (_obj({"m": {"type": "object", "properties": {}}}), "free-form"),
    (_obj({"m": {"$ref": "#/$defs/L", "description": "d"}}, ["m"],
          **{"$defs": {"L": {"$ref": "#/$defs/L", "description": "again"}}}), "too deeply"),
    (_obj({"m": True}), "unconstrained"),
    (_obj({"m": {}}), "unconstrained"),
    (_obj({"m": "string"}), "unconstrained"),
    (_obj({"m": {"type": "array"}}), "without an items"),
    (_obj({"m": {"type": "array", "items": [S]}}), "one schema"),
    (_obj({"m": {"description": "no type"}}), "without a type"),
])
def test_what_has_no_strict_form(schema: dict[str, Any], reason: str) -> None:
    with pytest.raises(NotStrict, match=reason):
        strict_schema(schema)


def test_depth_bound() -> None:
    def nest(depth: int) -> dict[str, Any]:
        node: dict[str, Any] = S
        for _ in range(depth):
            node = {"type": "array", "items": node}
        return _obj({"x": node}, ["x"])

    strict_schema(nest(63))  # at the bound: converted
    with pytest.raises(NotStrict, match="too deeply"):
        strict_schema(nest(64))
    in_defs = {"type": "object", "properties": {}, "additionalProperties": False}
    strict_schema({**in_defs, "$defs": {"D": nest(64)["properties"]["x"]}})  # $defs start at depth 0 too
    with pytest.raises(NotStrict, match="too deeply"):
        strict_schema({**in_defs, "$defs": {"D": nest(65)["properties"]["x"]}})

    def any_of(depth: int) -> dict[str, Any]:
        node: dict[str, Any] = S
        for _ in range(depth):
            node = {"anyOf": [node]}
        return _obj({"x": node}, ["x"])

    def inlined(hops: int) -> dict[str, Any]:
        """``hops`` $refs with siblings (each inlined, one level deeper) from the property to a string."""
        defs: dict[str, Any] = {f"D{i}": {"$ref": f"#/$defs/D{i + 1}", "description": "d"} for i in range(hops)}
        defs[f"D{hops}"] = S
        return _obj({"x": {"$ref": "#/$defs/D0", "description": "d"}}, ["x"], **{"$defs": defs})

    strict_schema(inlined(62))  # from the property (depth 1), the string is at depth 64
    with pytest.raises(NotStrict, match="too deeply"):
        strict_schema(inlined(63))

    strict_schema(any_of(63))
    with pytest.raises(NotStrict, match="too deeply"):
        strict_schema(any_of(64))


def test_strict_counts() -> None:
    schema = {"type": "object", "properties": {
        "a": {"type": ["string", "null"]}, "b": S, "c": {"anyOf": [S, INT]},
        "d": {"type": "array", "items": _obj({"x": S, "y": S}, ["x"])},
        "e": {"anyOf": [_obj({"z": S}), INT]}}, "required": ["a", "c"],
        "$defs": {"D": _obj({"w": {"type": ["integer", "null"]}})}}
    # optional: b, d, e, y, z, w; unions: a, c, e, w
    assert strict_counts(schema) == (6, 4)
    assert strict_counts(_obj({"a": S}, ["a"])) == (0, 0)
    assert strict_counts(_obj({"a": S}, None)) == (1, 0)


def test_drop_omitted_nulls() -> None:
    schema = {"type": "object", "$defs": {"N": _obj({"k": S, "q": {"type": ["string", "null"]}}, ["q"])},
              "properties": {"opt": S, "req": S, "nul": {"type": ["string", "null"]}, "ref": {"$ref": "#/$defs/N"},
                             "arr": {"type": "array", "items": {"$ref": "#/$defs/N"}}, "any": {}},
              "required": ["req"]}
    given_args = {"opt": None, "req": None, "nul": None, "other": None, "any": None,
                  "ref": {"k": None, "q": None}, "arr": [{"k": None, "q": None}, {"k": "v", "q": "w"}]}
    assert drop_omitted_nulls(schema, given_args) == {
        "req": None, "nul": None, "other": None, "any": None, "ref": {"q": None}, "arr": [{"q": None}, {"k": "v", "q": "w"}]}
    assert drop_omitted_nulls(schema, [1]) == [1] and drop_omitted_nulls(schema, "x") == "x"
    assert drop_omitted_nulls({"$ref": "#/nope"}, {"a": None}) == {"a": None}
    assert drop_omitted_nulls(_obj({"a": S}, []), {"a": None}) == {}
    assert drop_omitted_nulls({"type": "object", "properties": {"a": {"type": "string", "required": True}}},
                              {"a": None}) == {"a": None}  # draft-3 style required
    deep: dict[str, Any] = S
    for _ in range(70):
        deep = _obj({"n": deep})

    def nested(levels: int, inner: Any) -> Any:
        for _ in range(levels):
            inner = {"n": inner}
        return inner

    assert drop_omitted_nulls(deep, nested(64, {"n": None})) == nested(64, {})  # at depth 64 still dropped
    # Through $ref (each level: the ref, then the property) and through array items.
    chain = {"$ref": "#/$defs/N", "$defs": {"N": _obj({"n": {"$ref": "#/$defs/N"}, "k": S})}}

    def refs(levels: int, inner: dict[str, Any]) -> Any:
        for _ in range(levels):
            inner = {"n": inner}
        return inner

    assert drop_omitted_nulls(chain, refs(31, {"k": None})) == refs(31, {})
    assert drop_omitted_nulls(chain, refs(32, {"k": None})) == refs(32, {"k": None})
    def items(levels: int) -> dict[str, Any]:
        schema: dict[str, Any] = _obj({"k": S})
        for _ in range(levels):
            schema = {"type": "array", "items": schema}
        return schema

    def lists(levels: int, inner: Any) -> Any:
        for _ in range(levels):
            inner = [inner]
        return inner

    assert drop_omitted_nulls(items(64), lists(64, {"k": None})) == lists(64, {})
    assert drop_omitted_nulls(items(65), lists(65, {"k": None})) == lists(65, {"k": None})
    assert drop_omitted_nulls(deep, nested(65, {"n": None})) == nested(65, {"n": None})  # past the bound: kept


# -- properties --------------------------------------------------------------------------------------------

_SCALARS = st.sampled_from([{"type": "string"}, {"type": "integer"}, {"type": "boolean"}, {"type": "number"},
                            {"type": ["string", "null"]}, {"enum": ["a", "b"]}, {"type": "string", "maxLength": 5}])
_NAMES = st.text(alphabet="abcxyz", min_size=1, max_size=3)


def _objects(children: st.SearchStrategy[dict[str, Any]]) -> st.SearchStrategy[dict[str, Any]]:
    return st.dictionaries(_NAMES, children, min_size=1, max_size=4).flatmap(
        lambda props: st.lists(st.sampled_from(sorted(props)), unique=True).map(
            lambda req: {"type": "object", "properties": props, "required": req}))


_SCHEMAS = st.recursive(_SCALARS, lambda inner: st.one_of(
    _objects(inner), inner.map(lambda i: {"type": "array", "items": i}),
    st.lists(_SCALARS, min_size=1, max_size=2).map(lambda m: {"anyOf": m})), max_leaves=8)
_ROOTS = _objects(_SCHEMAS)


def _instance(schema: dict[str, Any]) -> st.SearchStrategy[Any]:
    """Values valid for ``schema`` (strategies built for the generated shapes only)."""
    if "anyOf" in schema:
        return st.one_of(*[_instance(m) for m in schema["anyOf"]])
    if "enum" in schema:
        return st.sampled_from(schema["enum"])
    kind = schema["type"]
    if kind == "object":
        props, req = schema["properties"], set(schema["required"])
        return st.fixed_dictionaries({k: _instance(v) for k, v in props.items() if k in req},
                                     optional={k: _instance(v) for k, v in props.items() if k not in req})
    if kind == "array":
        return st.lists(_instance(schema["items"]), max_size=2)
    return {"string": st.text(max_size=5), "integer": st.integers(), "boolean": st.booleans(),
            "number": st.floats(allow_nan=False, allow_infinity=False)}.get(kind, st.one_of(st.none(), st.text(max_size=3))) \
        if isinstance(kind, str) else st.one_of(st.none(), st.text(max_size=3))


def _as_decoded(schema: dict[str, Any], value: Any) -> Any:
    """What strict decoding sends for ``value``: every optional property absent as null."""
    if "anyOf" in schema:
        for member in schema["anyOf"]:
            if jsonschema.Draft202012Validator(member).is_valid(value):
                return _as_decoded(member, value)
        return value
    if schema.get("type") == "object" and isinstance(value, dict):
        return {k: _as_decoded(sub, value[k]) if k in value else None for k, sub in schema["properties"].items()}
    if schema.get("type") == "array" and isinstance(value, list):
        return [_as_decoded(schema["items"], v) for v in value]
    return value


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.data())
def test_converted_schema_accepts_the_decoded_form_and_nulls_drop_back(data: st.DataObject) -> None:
    schema = data.draw(_ROOTS)
    value = data.draw(_instance(schema))
    jsonschema.Draft202012Validator(schema).validate(value)
    strict = strict_schema(schema)
    jsonschema.Draft202012Validator.check_schema(strict)
    _assert_strict_subset(strict)
    decoded = _as_decoded(schema, value)
    assert jsonschema.Draft202012Validator(strict).is_valid(decoded)
    back = drop_omitted_nulls(schema, decoded)
    assert jsonschema.Draft202012Validator(schema).is_valid(back)
    assert back == _without_absent_nulls(schema, value)
    omit = strict_schema(schema, optional="omit")
    assert jsonschema.Draft202012Validator(omit).is_valid(value)


def _without_absent_nulls(schema: dict[str, Any], value: Any) -> Any:
    """``value`` with a null for each optional property it leaves out that admits null (strict decoding's
    null for "not given" cannot be told from a given null there, so it stays)."""
    if "anyOf" in schema or not isinstance(value, (dict, list)):
        return value
    if isinstance(value, list):
        return [_without_absent_nulls(schema["items"], v) for v in value]
    out = {k: _without_absent_nulls(schema["properties"][k], v) for k, v in value.items()}
    for key, sub in schema["properties"].items():
        if key not in value and jsonschema.Draft202012Validator(sub).is_valid(None):
            out[key] = None
    return out


def _assert_strict_subset(node: Any) -> None:
    if isinstance(node, list):
        for n in node:
            _assert_strict_subset(n)
        return
    if not isinstance(node, dict):
        return
    assert not {"oneOf", "allOf", "not", "minLength", "maxLength", "default"} & set(node)
    if isinstance(node.get("properties"), dict):
        assert node["additionalProperties"] is False and node["required"] == list(node["properties"])
        _assert_strict_subset(list(node["properties"].values()))
    _assert_strict_subset(node.get("anyOf", []))
    _assert_strict_subset(node.get("items"))
