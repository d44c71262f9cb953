"""The compiled check of a flat schema (``runtime/_arguments.fast_check_for``) answers exactly as
jsonschema does, for every schema it compiles and any dict of JSON values: it only ever saves
jsonschema the work, it never decides differently."""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from codeact.errors import ToolArgumentsError
from codeact.runtime._arguments import fast_check_for
from codeact.tool_stubs import ToolSpec

_TYPES = ["string", "integer", "number", "boolean", "null"]
_NAMES = st.sampled_from(["a", "b", "c", "d"])
_DRAFTS = [None, "https://json-schema.org/draft/2020-12/schema", "http://json-schema.org/draft-07/schema#",
           "https://json-schema.org/draft/2019-09/schema", "http://json-schema.org/draft-06/schema#"]


@st.composite
def _flat_schemas(draw: st.DrawFn) -> dict[str, Any]:
    kind = st.one_of(st.sampled_from(_TYPES), st.lists(st.sampled_from(_TYPES), min_size=1, max_size=3, unique=True))
    field = st.fixed_dictionaries({"type": kind}, optional={"description": st.text(max_size=5),
                                                            "title": st.text(max_size=5),
                                                            "default": st.integers()})
    schema: dict[str, Any] = {"type": "object", "properties": draw(st.dictionaries(_NAMES, field, max_size=4))}
    optional = {"required": st.lists(_NAMES, unique=True, max_size=3), "additionalProperties": st.booleans(),
                "$schema": st.sampled_from([d for d in _DRAFTS if d]), "title": st.text(max_size=5)}
    for key, strategy in optional.items():
        if draw(st.booleans()):
            schema[key] = draw(strategy)
    return schema


_JSON = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False, allow_infinity=False)
    | st.sampled_from([0.0, 1.0, -2.0, 1e20, 0.5]) | st.text(max_size=4),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=2), inner, max_size=3),
    max_leaves=6)


def _jsonschema_valid(schema: dict[str, Any], instance: dict[str, Any]) -> bool:
    try:
        ToolSpec(name="t", input_schema=schema).validate_arguments(instance)
    except ToolArgumentsError:
        return False
    return True


@settings(max_examples=200, deadline=None)
@given(schema=_flat_schemas(), instances=st.lists(st.dictionaries(_NAMES | st.text(max_size=2), _JSON, max_size=5),
                                                  min_size=1, max_size=8))
def test_the_compiled_check_and_jsonschema_agree(schema: dict[str, Any], instances: list[dict[str, Any]]) -> None:
    check = fast_check_for(schema)
    assert check is not None, schema  # every schema drawn is one the compiled check takes
    for instance in instances:
        assert check(instance) == _jsonschema_valid(schema, instance), (schema, instance)


@pytest.mark.parametrize("draft", ["http://json-schema.org/draft-04/schema#", "http://json-schema.org/draft-03/schema#"])
def test_a_draft_that_reads_integers_otherwise_is_left_to_jsonschema(draft: str) -> None:
    schema = {"$schema": draft, "type": "object", "properties": {"n": {"type": "integer"}}}
    assert fast_check_for(schema) is None
    assert not _jsonschema_valid(schema, {"n": 2.0})  # what the compiled check would have let through
