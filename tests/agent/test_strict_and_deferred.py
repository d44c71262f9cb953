"""Strict tool schemas (constrained decoding) and the JSON agent's deferred loading (issue 12)."""

from __future__ import annotations

import copy
import json
from typing import Any

import pytest
from openai.lib._pydantic import _ensure_strict_json_schema
from openai.types.chat import ChatCompletionFunctionTool

from codeact import FunctionCallingAgent, Runtime, Toolset, ToolSpec, tool
from codeact.testing.fake_server import FakeModelServer
from codeact.tool_stubs.strict import NotStrict, drop_omitted_nulls, strict_schema
from tests._configs import LOCAL
from tests.agent.test_code_agent import client_for
from tests.servers.big_openapi import big_document
from tests.tool_stubs.test_render import ORDER_SCHEMA, specs

BFCL_LIKE: list[dict[str, Any]] = [
    ORDER_SCHEMA,
    {"type": "object", "properties": {
        "a": {"type": "integer", "description": "Count.", "default": 5, "minimum": 0, "maximum": 10},
        "b": {"type": "array", "items": {"type": "string", "minLength": 1}, "maxItems": 3},
        "c": {"type": "string", "enum": ["x", "y"], "default": "x"},
        "d": {"type": "number", "format": "float"}, "e": {"type": "boolean"}}, "required": ["a"]},
    {"type": "object", "properties": {"unit": {"type": "string", "default": "None", "description": "BFCL style"}}},
    {"type": "object", "properties": {"when": {"oneOf": [{"type": "string", "format": "date"}, {"type": "integer"}]}}},
    {"type": "object", "properties": {"p": {"allOf": [{"$ref": "#/$defs/P"}], "description": "A point."}},
     "$defs": {"P": {"type": "object", "properties": {"x": {"type": "number"}, "y": {"type": "number"}},
                     "required": ["x"]}}},
    {"type": "object", "properties": {"n": {"type": ["integer", "null"]}, "s": {"type": "string", "pattern": "^a"}},
     "required": []},
    {"type": "object", "properties": {}},
    {"type": "object", "properties": {"tree": {"$ref": "#/$defs/Node"}}, "required": ["tree"],
     "$defs": {"Node": {"type": "object", "properties": {
         "label": {"type": "string"}, "kids": {"type": "array", "items": {"$ref": "#/$defs/Node"}}}}}},
    {"type": "object", "properties": {"deep": {"type": "object", "properties": {
        "inner": {"type": "object", "properties": {"v": {"type": "integer", "default": 1}}}}}}},
]


def strict_specs() -> list[ToolSpec]:
    @tool
    def plan(city: str, days: int = 2, tags: list[str] | None = None, budget: float | None = None) -> str:
        """Plan a trip."""
        return city

    made = [ToolSpec(name=f"shape_{i}", input_schema=s) for i, s in enumerate(BFCL_LIKE)]
    return [*made, plan.spec, *specs(), *Toolset.from_openapi(big_document()).specs]


def _all_objects(node: Any) -> list[dict[str, Any]]:
    if isinstance(node, list):
        return [o for n in node for o in _all_objects(n)]
    if not isinstance(node, dict):
        return []
    here = [node] if node.get("type") == "object" or "properties" in node else []
    return here + [o for v in node.values() for o in _all_objects(v)]


def test_strict_conversion_is_accepted_by_the_openai_sdk() -> None:
    converted = skipped = 0
    for spec in strict_specs():
        tool_def = spec.to_openai(strict=True)
        ChatCompletionFunctionTool.model_validate(tool_def)  # the SDK's own type for a function tool
        params = tool_def["function"]["parameters"]
        if not tool_def["function"].get("strict"):
            skipped += 1
            assert params == spec.input_schema  # no strict form: sent as it is, without the flag
            continue
        converted += 1
        # the SDK's strict transformer finds nothing left to change: the schema is in the subset already
        assert _ensure_strict_json_schema(copy.deepcopy(params), path=(), root=copy.deepcopy(params)) == params
        for obj in _all_objects(params):
            assert obj["additionalProperties"] is False and obj["required"] == list(obj["properties"]), obj
        assert not {"oneOf", "allOf", "default", "minimum", "pattern", "format"} & set(json.dumps(params).split('"'))
        anthropic = spec.to_anthropic(strict=True)  # Anthropic's form: optional arguments stay optional
        assert anthropic["strict"] is True and anthropic["input_schema"] == spec.strict_input_schema("omit")
        for obj in _all_objects(anthropic["input_schema"]):
            assert obj["additionalProperties"] is False and set(obj["required"]) <= set(obj["properties"]), obj
        assert anthropic["input_schema"]["required"] == [
            k for k in params["properties"] if k in spec.input_schema.get("required", [])]
    assert converted >= 100 and skipped >= 1  # free-form objects (dict[str, str]) have no strict form


def test_strict_keeps_constraints_readable_and_optionals_nullable() -> None:
    out = strict_schema(BFCL_LIKE[1])
    a, b, c = out["properties"]["a"], out["properties"]["b"], out["properties"]["c"]
    assert a == {"type": "integer", "description": "Count.; default: 5; minimum: 0; maximum: 10"}
    assert b["type"] == ["array", "null"] and b["items"] == {"type": "string", "description": "minLength: 1"}
    assert c == {"anyOf": [{"type": "string", "enum": ["x", "y"]}, {"type": "null"}], "description": 'default: "x"'}
    assert out["required"] == ["a", "b", "c", "d", "e"]
    with pytest.raises(NotStrict):
        strict_schema({"type": "object", "properties": {"meta": {"type": "object"}}})


def test_nulls_for_omitted_arguments_are_dropped_and_real_nulls_kept() -> None:
    schema = BFCL_LIKE[5] | {"properties": {**BFCL_LIKE[5]["properties"], "o": BFCL_LIKE[8]["properties"]["deep"]}}
    decoded = {"n": None, "s": None, "o": {"inner": {"v": None}}}
    assert drop_omitted_nulls(schema, decoded) == {"n": None, "o": {"inner": {}}}
    tree = BFCL_LIKE[7]
    assert drop_omitted_nulls(tree, {"tree": {"label": None, "kids": [{"label": "a", "kids": None}]}}) == {
        "tree": {"kids": [{"label": "a"}]}}
    assert drop_omitted_nulls(schema, "not an object") == "not an object"


def booking(seen: list[dict[str, Any]]) -> Any:
    """A tool with a required, an optional and a nullable argument; its calls go to ``seen``."""
    @tool
    def book(city: str, nights: int = 1, note: str | None = None) -> str:
        """Book a room."""
        seen.append({"city": city, "nights": nights, "note": note})
        return "booked"

    return book


def test_json_agent_sends_strict_definitions_and_records_what_was_meant() -> None:
    seen: list[dict[str, Any]] = []
    book = booking(seen)
    call = {"tool_calls": [{"name": "book", "arguments": {"city": "Oslo", "nights": None, "note": None},
                            "id": "c1"}]}
    with FakeModelServer([call, "Done."]) as server, Runtime([book], LOCAL) as rt:
        episode = FunctionCallingAgent(client_for(server, "openai"), rt.toolset, runtime=rt).run("Book Oslo.")
        first = server.requests[0]
    fn = first["tools"][0]["function"]
    assert fn["strict"] is True and fn["parameters"]["required"] == ["city", "nights", "note"]
    assert fn["parameters"]["properties"]["nights"]["type"] == ["integer", "null"]
    assert episode.status == "answered"
    # nights' null stood for "not given"; note admits null, so its null is an explicit value
    assert [c.arguments for c in episode.records] == [{"city": "Oslo", "note": None}]
    assert seen == [{"city": "Oslo", "nights": 1, "note": None}]
    with FakeModelServer(["Nothing to do."]) as server, Runtime([book], LOCAL) as rt:
        FunctionCallingAgent(client_for(server, "openai"), rt.toolset, runtime=rt, strict=False).run("Hi")
        assert "strict" not in server.requests[0]["tools"][0]["function"]


@pytest.mark.parametrize("vendor", ["openai", "anthropic"])
def test_json_agent_defers_loading_of_a_large_toolset(vendor: str) -> None:
    big = Toolset.from_openapi(big_document())
    search = {"tool_calls": [{"name": "search_tools", "arguments": {"query": "post a comment on an issue",
                                                                      "limit": 2}, "id": "s1"}]}
    use = {"tool_calls": [{"name": "comments_create_comment", "arguments": {"owner": "o", "repo": "r", "name": "x"},
                           "id": "u1"}]}
    with FakeModelServer([search, use, "Done."]) as server, Runtime(big, LOCAL) as rt:
        agent = FunctionCallingAgent(client_for(server, vendor), big, runtime=rt)
        episode = agent.run("Comment on issue 1.")
        requests = server.requests
    def names(body: dict[str, Any]) -> list[str]:
        return [t["function"]["name"] if "function" in t else t["name"] for t in body["tools"]]

    assert names(requests[0]) == ["search_tools", "read_result"]  # not 270 schemas (read_result pages big results)
    assert names(requests[1]) == ["search_tools", "comments_create_comment", "issues_create_issue", "read_result"]
    assert names(requests[2]) == names(requests[1])
    system = requests[0]["messages"][0]["content"] if vendor == "openai" else requests[0]["system"]
    assert "270 tools" in system and "search_tools" in system
    assert [c.name for c in episode.records] == ["search_tools", "comments/create-comment"]
    assert episode.records[0].result[0]["python_name"] == "comments_create_comment"  # the record keeps the hit
    shown = requests[1]["messages"][-1]
    content = shown["content"] if vendor == "openai" else shown["content"][0]["content"]
    assert json.loads(content) == [{"name": "comments_create_comment", "description": "Create a comment"},
                                   {"name": "issues_create_issue", "description": "Create a issue"}]
    # the call itself went to the host (no server listens on the fixture's URL: an upstream error)
    assert episode.records[1].error is not None and episode.records[1].error.code == "upstream_error"


def test_anthropic_strict_tools_are_the_default_in_anthropics_form() -> None:
    seen: list[dict[str, Any]] = []
    book = booking(seen)
    call = {"tool_calls": [{"name": "book", "arguments": {"city": "Oslo"}, "id": "c1"}]}
    with FakeModelServer([call, "Done."]) as server, Runtime([book], LOCAL) as rt:
        episode = FunctionCallingAgent(client_for(server, "anthropic"), rt.toolset, runtime=rt).run("Book Oslo.")
        first, headers = server.requests[0], server.calls[0].headers
    definition = first["tools"][0]
    assert definition["strict"] is True and set(definition) == {"name", "description", "input_schema", "strict"}
    schema = definition["input_schema"]
    assert schema["required"] == ["city"] and schema["additionalProperties"] is False  # optionals stay optional
    assert schema["properties"]["nights"] == {"type": "integer", "description": "default: 1"}  # not nullable
    assert "anthropic-beta" not in headers and headers["anthropic-version"] == "2023-06-01"  # GA: no beta header
    assert episode.status == "answered" and [c.arguments for c in episode.records] == [{"city": "Oslo"}]
    assert seen == [{"city": "Oslo", "nights": 1, "note": None}]


def test_anthropic_strict_stays_within_the_per_request_limits() -> None:
    def make(i: int, optional: int) -> ToolSpec:
        props = {"q": {"type": "string"}, **{f"o{j}": {"type": "integer"} for j in range(optional)}}
        return ToolSpec(name=f"t{i}", description="A tool.", input_schema={
            "type": "object", "properties": props, "required": ["q"]})

    cases = {  # toolset → which definitions are strict (in order sent; read_result, 2 optionals, comes last)
        "25 plain tools: 20 strict": ([make(i, 0) for i in range(25)], [True] * 20 + [False] * 6),
        "5 optionals each: 4 fit in 24, then read_result's 2": (
            [make(i, 5) for i in range(6)], [True] * 4 + [False] * 2 + [True]),
    }
    for label, (specs_, expected) in cases.items():
        with FakeModelServer(["Nothing to do."]) as server, Runtime(specs_, LOCAL) as rt:
            episode = FunctionCallingAgent(client_for(server, "anthropic"), rt.toolset, runtime=rt).run("Hi")
            tools = server.requests[0]["tools"]
        assert episode.status == "answered", (label, episode.error)  # the fake server enforces the limits too
        assert [bool(t.get("strict")) for t in tools] == expected, label
        assert all(t["input_schema"] == s.input_schema for t, s in zip(tools, specs_, strict=False)
                   if not t.get("strict")), label  # past the limits: sent as it is
    nullable = {k: {"type": ["string", "null"]} for k in "abcde"}
    unions = [ToolSpec(name=f"u{i}", input_schema={"type": "object", "required": list(nullable),
                                                   "properties": nullable}) for i in range(4)]
    with FakeModelServer(["Nothing to do."]) as server, Runtime(unions, LOCAL) as rt:
        FunctionCallingAgent(client_for(server, "anthropic"), rt.toolset, runtime=rt).run("Hi")
        flags = [bool(t.get("strict")) for t in server.requests[0]["tools"]]
    assert flags[:4] == [True, True, True, False]  # 5 union-typed parameters each: 15 fit in 16


def test_strict_defaults_by_provider_and_model() -> None:
    from codeact.agent.models.anthropic import AnthropicClient
    from codeact.agent.models.openai import OpenAIClient

    assert OpenAIClient("gpt-4.1", api_key="k").supports_strict_tools is True
    for model, default in [("claude-sonnet-4-5", True), ("claude-opus-4-6", True), ("claude-haiku-4-5-20251001", True),
                           ("claude-3-5-haiku-latest", False), ("claude-sonnet-4-20250514", False),
                           ("claude-opus-4-1", False), ("anthropic.claude-3-haiku-20240307-v1:0", False)]:
        assert AnthropicClient(model, api_key="k").supports_strict_tools is default, model
    assert AnthropicClient("claude-3-5-haiku-latest", api_key="k", strict=True).supports_strict_tools is True
    assert AnthropicClient("claude-sonnet-4-5", api_key="k", strict=False).supports_strict_tools is False
