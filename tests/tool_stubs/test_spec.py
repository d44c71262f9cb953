"""ToolSpec: vendor shapes, from_function, schema checking and argument validation."""

from __future__ import annotations

from typing import Any, Literal

import mcp.types
import pytest
from pydantic import BaseModel

from codeact.errors import ToolArgumentsError, ToolDefinitionError
from codeact.tool_stubs import ToolSpec, python_names

WEATHER_SCHEMA: dict[str, Any] = {
    "type": "object",
    "properties": {
        "city": {"type": "string", "description": "City name"},
        "unit": {"type": "string", "enum": ["celsius", "fahrenheit"], "default": "celsius"},
        "days": {"anyOf": [{"type": "integer", "minimum": 1}, {"type": "null"}]},
        "where": {"$ref": "#/$defs/Point"},
        "tags": {"type": "array", "items": {"type": "string"}},
    },
    "required": ["city"],
    "additionalProperties": False,
    "$defs": {
        "Point": {
            "type": "object",
            "properties": {"lat": {"type": "number"}, "lon": {"type": "number"}},
            "required": ["lat", "lon"],
        }
    },
}


def weather_spec(**extra: Any) -> ToolSpec:
    return ToolSpec(name="get_weather", description="Get the weather.", input_schema=WEATHER_SCHEMA, **extra)


# -- vendor shapes -------------------------------------------------------------------------------------


def test_openai_round_trip() -> None:
    spec = weather_spec()
    d = spec.to_openai()
    assert d == {
        "type": "function",
        "function": {"name": "get_weather", "description": "Get the weather.", "parameters": WEATHER_SCHEMA},
    }
    assert ToolSpec.from_openai(d) == spec


def test_openai_bare_and_responses_shapes() -> None:
    bare = {"name": "f", "description": "d", "parameters": {"type": "object", "properties": {}}}
    responses = {"type": "function", "strict": True, **bare}
    assert ToolSpec.from_openai(bare) == ToolSpec.from_openai(responses)
    assert ToolSpec.from_openai(bare).description == "d"
    no_params = ToolSpec.from_openai({"type": "function", "function": {"name": "ping"}})
    assert no_params.input_schema == {"type": "object", "properties": {}}
    assert ToolSpec.from_openai(no_params.to_openai()) == no_params


def test_anthropic_round_trip() -> None:
    spec = weather_spec()
    d = spec.to_anthropic()
    assert d == {"name": "get_weather", "description": "Get the weather.", "input_schema": WEATHER_SCHEMA}
    assert ToolSpec.from_anthropic(d) == spec
    with_cache = {**d, "cache_control": {"type": "ephemeral"}, "type": "custom"}
    assert ToolSpec.from_anthropic(with_cache) == spec


def test_mcp_round_trip_keeps_output_schema() -> None:
    spec = weather_spec(output_schema={"type": "object", "properties": {"temp": {"type": "number"}}})
    d = spec.to_mcp()
    assert d["inputSchema"] == WEATHER_SCHEMA and d["outputSchema"] == spec.output_schema
    assert ToolSpec.from_mcp(d) == spec
    assert "outputSchema" not in weather_spec().to_mcp()


def test_mcp_tool_object() -> None:
    obj = mcp.types.Tool(name="search", description=None, inputSchema={"type": "object"})
    spec = ToolSpec.from_mcp(obj)
    assert (spec.name, spec.description, spec.input_schema) == ("search", "", {"type": "object"})
    assert ToolSpec.from_mcp(spec.to_mcp()) == spec


def test_from_dict_detects_the_shape() -> None:
    spec = weather_spec()
    for shape in (spec.to_openai(), spec.to_anthropic(), spec.to_mcp()):
        assert ToolSpec.from_dict(shape) == spec


def test_to_shapes_are_copies() -> None:
    spec = weather_spec()
    spec.to_openai()["function"]["parameters"]["properties"].clear()
    assert spec.input_schema["properties"]


def test_vendor_shape_errors() -> None:
    with pytest.raises(ToolDefinitionError, match="input_schema"):
        ToolSpec.from_anthropic({"type": "web_search_20250305", "name": "web_search"})
    with pytest.raises(ToolDefinitionError, match="inputSchema"):
        ToolSpec.from_mcp({"name": "x"})
    with pytest.raises(ToolDefinitionError, match="not an OpenAI function"):
        ToolSpec.from_openai({"type": "code_interpreter", "name": "x"})
    with pytest.raises(ToolDefinitionError, match="must be a dict"):
        ToolSpec.from_openai(["not", "a", "dict"])  # type: ignore[arg-type]


# -- names ---------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("name", "expected"),
    [
        ("get_weather", "get_weather"),
        ("get-weather", "get_weather"),
        ("math.factorial", "math_factorial"),
        ("search the web", "search_the_web"),
        ("1st", "_1st"),
        ("class", "class_"),
        ("None", "None_"),
        ("max", "max"),
        ("天气", "天气"),
        ("__codeact_call__", "__codeact_call___"),
        ("ToolError", "ToolError_"),
    ],
)
def test_python_name(name: str, expected: str) -> None:
    spec = ToolSpec(name=name)
    assert spec.python_name == expected
    assert spec.python_name.isidentifier()


def test_python_names_resolve_collisions_deterministically() -> None:
    specs = [ToolSpec(name=n) for n in ("get-weather", "get.weather", "get_weather", "x")]
    expected = {"get-weather": "get_weather_2", "get.weather": "get_weather_3", "get_weather": "get_weather", "x": "x"}
    assert python_names(specs) == expected
    assert python_names(specs) == python_names(list(specs))
    with pytest.raises(ToolDefinitionError, match="duplicate"):
        python_names([ToolSpec(name="a"), ToolSpec(name="a")])


@pytest.mark.parametrize("name", ["", "   ", "a\nb", None, 3])
def test_invalid_names(name: Any) -> None:
    with pytest.raises(ToolDefinitionError):
        ToolSpec(name=name)


# -- schema checking -----------------------------------------------------------------------------------


def test_vendor_extras_are_tolerated() -> None:
    schema = {
        "properties": {
            "when": {"type": "string", "format": "no-such-format", "optional": True, "default": "now"},
            "n": {"type": "integer", "x-vendor": {"anything": 1}, "examples": [1]},
            "legacy": {"type": "string", "required": True},
        },
        "additionalProperties": True,
    }
    spec = ToolSpec(name="t", input_schema=schema)
    assert spec.validate_arguments({"when": "not a date at all", "legacy": "x"}) == {
        "when": "not a date at all",
        "legacy": "x",
    }
    with pytest.raises(ToolArgumentsError, match="'legacy' is a required property"):
        spec.validate_arguments({"when": "x"})


@pytest.mark.parametrize("schema", [{}, {"type": "object"}, {"properties": {}}])
def test_minimal_schemas_are_objects(schema: dict[str, Any]) -> None:
    spec = ToolSpec(name="t", input_schema=schema)
    assert spec.validate_arguments({}) == {}
    with pytest.raises(ToolArgumentsError, match=r"\(root\): arguments must be an object"):
        spec.validate_arguments(["x"])


def test_draft7_schema_is_checked_by_its_own_draft() -> None:
    schema = {
        "$schema": "http://json-schema.org/draft-07/schema#",
        "properties": {"n": {"type": "number", "exclusiveMaximum": 5}},
    }
    spec = ToolSpec(name="t", input_schema=schema)
    with pytest.raises(ToolArgumentsError, match="n: 7 is greater than or equal to the maximum of 5"):
        spec.validate_arguments({"n": 7})


@pytest.mark.parametrize(
    ("schema", "message"),
    [
        ("not a schema", "must be a JSON Schema object"),
        ({"type": "string"}, "must describe an object"),
        ({"properties": {"a": {"type": "strin"}}}, "not a valid JSON Schema at properties/a/type"),
        ({"properties": {"a": {"$ref": "#/$defs/Missing"}}}, "does not resolve"),
        ({"required": "a"}, "not a valid JSON Schema"),
    ],
)
def test_invalid_schemas_fail_at_construction(schema: Any, message: str) -> None:
    with pytest.raises(ToolDefinitionError, match=message):
        ToolSpec(name="t", input_schema=schema)


def test_invalid_output_schema() -> None:
    with pytest.raises(ToolDefinitionError, match="output_schema"):
        ToolSpec(name="t", output_schema={"type": 5})


# -- validation ----------------------------------------------------------------------------------------


def test_valid_arguments_are_returned() -> None:
    args = {"city": "Paris", "days": None, "where": {"lat": 1.5, "lon": 2}, "tags": ["a"]}
    assert weather_spec().validate_arguments(args) == args


def test_every_problem_is_listed_with_its_path() -> None:
    bad = {"unit": "kelvin", "days": "3", "where": {"lat": "north"}, "tags": ["ok", 5], "extra": 1}
    with pytest.raises(ToolArgumentsError) as info:
        weather_spec().validate_arguments(bad)
    err = info.value
    assert err.tool == "get_weather"
    assert err.problems == [
        "(root): 'city' is a required property",
        "(root): Additional properties are not allowed ('extra' was unexpected)",
        "days: '3' is not valid under any of the given schemas (expected integer or null)",
        "tags[1]: 5 is not of type 'string'",
        "unit: 'kelvin' is not one of ['celsius', 'fahrenheit']",
        "where: 'lon' is a required property",
        "where.lat: 'north' is not of type 'number'",
    ]
    assert isinstance(err, ValueError)
    assert "get_weather" in str(err) and "'kelvin' is not one of" in str(err)


def test_nested_arrays_of_objects_and_anyof_refs() -> None:
    schema = {
        "properties": {
            "items": {"type": "array", "items": {"$ref": "#/$defs/Item"}},
            "ship_to": {"anyOf": [{"$ref": "#/$defs/Address"}, {"type": "null"}]},
        },
        "$defs": {
            "Item": {"type": "object", "properties": {"sku": {"type": "string"}}, "required": ["sku"]},
            "Address": {"type": "object", "properties": {"street": {"type": "string"}}, "required": ["street"]},
        },
    }
    spec = ToolSpec(name="order", input_schema=schema)
    assert spec.validate_arguments({"items": [{"sku": "a"}], "ship_to": None})
    with pytest.raises(ToolArgumentsError) as info:
        spec.validate_arguments({"items": [{"sku": "a"}, {}], "ship_to": {"city": "x"}})
    problems = info.value.problems
    assert problems[0] == "items[1]: 'sku' is a required property"
    assert problems[1].startswith("ship_to: {'city': 'x'} is not valid under any of the given schemas")
    assert "closest match: ship_to: 'street' is a required property" in problems[1]


def test_validator_is_compiled_once() -> None:
    spec = weather_spec()
    validator = spec._validator
    spec.validate_arguments({"city": "x"})
    assert spec._validator is validator


# -- from_function -------------------------------------------------------------------------------------


class Point(BaseModel):
    lat: float
    lon: float


def forecast(
    city: str, unit: Literal["celsius", "fahrenheit"] = "celsius", where: Point | None = None
) -> dict[str, float]:
    """Forecast the weather.

    Works for any city on Earth.

    Args:
        city (str): The city name,
            in English.
        unit: Temperature unit.
        where: Exact location, if known.

    Returns:
        Temperatures by hour.
    """
    return {}


async def async_search(query: str, limit: int = 5) -> list[str]:
    """Search the web.

    :param query: what to look for
    :param int limit: at most this many results
    :returns: titles
    """
    return []


class Store:
    def lookup(self, sku: str, *, fresh: bool = False) -> None:
        """Look up a product."""


def test_from_function_sync() -> None:
    spec = ToolSpec.from_function(forecast)
    assert spec.name == "forecast"
    assert spec.description == "Forecast the weather.\n\nWorks for any city on Earth."
    props = spec.input_schema["properties"]
    assert props["city"] == {"type": "string", "description": "The city name, in English."}
    assert props["unit"]["enum"] == ["celsius", "fahrenheit"] and props["unit"]["default"] == "celsius"
    assert props["unit"]["description"] == "Temperature unit."
    assert spec.input_schema["required"] == ["city"]
    assert spec.input_schema["additionalProperties"] is False
    assert "Point" in spec.input_schema["$defs"]
    assert spec.output_schema == {"type": "object", "additionalProperties": {"type": "number"}}
    assert spec.validate_arguments({"city": "Oslo", "where": {"lat": 1, "lon": 2}})
    with pytest.raises(ToolArgumentsError, match=r"where\.lat"):
        spec.validate_arguments({"city": "Oslo", "where": {"lat": "x", "lon": 2}})


def test_from_function_async_with_sphinx_docstring() -> None:
    spec = ToolSpec.from_function(async_search, name="web.search", description="Find pages.")
    assert (spec.name, spec.description) == ("web.search", "Find pages.")
    props = spec.input_schema["properties"]
    assert props["query"]["description"] == "what to look for"
    assert props["limit"] == {"type": "integer", "default": 5, "description": "at most this many results"}
    assert spec.output_schema == {"type": "array", "items": {"type": "string"}}


def test_from_function_bound_and_unbound_method_skip_self() -> None:
    bound = ToolSpec.from_function(Store().lookup)
    unbound = ToolSpec.from_function(Store.lookup)
    assert bound == unbound
    assert list(bound.input_schema["properties"]) == ["sku", "fresh"]
    assert bound.description == "Look up a product."
    assert bound.output_schema is None


def test_from_function_errors() -> None:
    def positional(a: int, /) -> None: ...

    with pytest.raises(ToolDefinitionError, match="positional-only"):
        ToolSpec.from_function(positional)
    with pytest.raises(ToolDefinitionError, match="name"):
        ToolSpec.from_function(lambda x: x)
    with pytest.raises(ToolDefinitionError, match="callable"):
        ToolSpec.from_function(42)  # type: ignore[arg-type]


def test_specs_pickle_and_copy() -> None:
    import copy
    import pickle

    spec = weather_spec()
    for clone in (pickle.loads(pickle.dumps(spec)), copy.deepcopy(spec), copy.copy(spec)):
        assert clone == spec
        with pytest.raises(ToolArgumentsError, match="'city' is a required property"):
            clone.validate_arguments({})
