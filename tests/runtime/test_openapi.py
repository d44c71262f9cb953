"""OpenAPI documents → HTTP tools with correct stubs, called from sandboxed code against a local server."""

from __future__ import annotations

import copy
import json
import logging
import secrets
import textwrap
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from codeact import Runtime, SandboxConfig, Toolset, render_stubs
from codeact.errors import ToolArgumentsError, ToolDefinitionError
from codeact.runtime.ledger import CallLedger
from codeact.runtime.sources.http import HttpAuth
from codeact.runtime.sources.openapi import openapi_endpoints, openapi_tools
from tests.servers.http_app import ApiServer
from tests.servers.openapi_doc import OPENAPI

TOKEN_ENV = "CODEACT_TEST_OPENAPI_TOKEN"
TOKEN = "oa-" + secrets.token_hex(12)


@pytest.fixture(scope="module")
def api() -> Iterator[ApiServer]:
    with ApiServer(token=TOKEN) as server:
        yield server


@pytest.fixture(autouse=True)
def token_env(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(TOKEN_ENV, TOKEN)


def test_document_from_url_gives_tools_with_typed_stubs(api: ApiServer) -> None:
    tools = Toolset.from_openapi(f"{api.url}/openapi.json", auth=HttpAuth.bearer(TOKEN_ENV))
    assert tools.names == ["getWeather", "listItems", "createItem", "get_trace"]
    stubs = render_stubs(tools.specs)
    compile(stubs, "<stubs>", "exec")
    assert "class Weather(TypedDict):" in stubs
    assert 'def getWeather(city: str, units: Literal["C", "F"] | None = None) -> Weather:' in stubs
    assert "Current weather for a city.\n\n    Temperatures in the city's own unit" in stubs
    assert 'units: Temperature unit. One of: "C", "F".' in stubs
    assert 'children: list["Tag"]' in stubs  # a recursive component schema
    assert "    note: str | None = None," in stubs  # nullable
    assert "def get_trace(X_Trace_Id: str) -> Any:" in stubs and "Accept" not in stubs
    weather = tools["getWeather"]
    assert weather.policy.idempotent and not tools["createItem"].policy.idempotent
    assert tools["createItem"].spec.input_schema["required"] == ["name"]


@pytest.mark.parametrize("backend_name", ["local", "docker"])
def test_calls_from_sandboxed_code(api: ApiServer, backend_name: str, request: pytest.FixtureRequest) -> None:
    if backend_name == "docker":
        request.getfixturevalue("docker_image")
    tools = Toolset.from_openapi(f"{api.url}/openapi.json", auth=HttpAuth.bearer(TOKEN_ENV))
    config = SandboxConfig(backend=backend_name, policy="none", timeout_s=30)  # type: ignore[arg-type]
    with Runtime(tools, config) as rt:
        result = rt.run(textwrap.dedent("""
            w = getWeather("Beijing", units="C")
            made = createItem(name="pen", price=1.5, tags=[{"label": "a", "children": [{"label": "b"}]}])
            try:
                getWeather("Atlantis")
            except ToolError as e:
                print(e.code)
            try:
                createItem(name="x", price=-3)
            except ToolError as e:
                print(e.code, e.message)
            [w["temperature"], made["tags"][0]["children"][0]["label"], get_trace(X_Trace_Id="t9")["trace"]]
        """))
    assert result.ok, result.error
    assert result.value == [20.0, "b", "t9"]
    lines = result.stdout.splitlines()
    assert lines[0] == "not_found"
    assert lines[1].startswith("invalid_arguments price: ")  # the host's schema check: never sent
    assert [c.name for c in result.calls] == ["getWeather", "createItem", "getWeather", "createItem", "get_trace"]
    assert api.hits["/weather/Atlantis"] >= 1


def test_dict_document_with_base_url_and_chosen_operations(api: ApiServer) -> None:
    tools = Toolset.from_openapi(OPENAPI, operations=["getWeather", "GET /items"], base_url=api.url,
                                 auth=HttpAuth.bearer(TOKEN_ENV))
    assert tools.names == ["getWeather", "listItems"]
    with Runtime(tools, SandboxConfig(backend="local", policy="none")) as rt:
        record = rt.host.call(CallLedger(), "getWeather", {"city": "Pittsburgh"})
    assert record.ok and record.result == {"city": "Pittsburgh", "temperature": 12.0, "unit": "C"}
    with pytest.raises(ToolDefinitionError, match="no operation"):
        Toolset.from_openapi(OPENAPI, operations=["deletePet"], base_url=api.url)


def test_servers_url_yaml_files_and_refusals(tmp_path: Path) -> None:
    doc = copy.deepcopy(OPENAPI)
    doc["servers"] = [{"url": "http://127.0.0.1:{port}/v1", "variables": {"port": {"default": "8123"}}}]
    endpoints = openapi_endpoints(doc)
    assert endpoints[0].url == "http://127.0.0.1:8123/v1/weather/{city}"
    yaml = pytest.importorskip("yaml")
    path = tmp_path / "api.yaml"
    path.write_text(yaml.safe_dump(doc, sort_keys=False))
    assert [e.name for e in openapi_endpoints(path)] == ["getWeather", "listItems", "createItem", "get_trace"]
    with pytest.raises(ToolDefinitionError, match="no absolute server URL"):
        openapi_endpoints(OPENAPI)
    with pytest.raises(ToolDefinitionError, match="only OpenAPI 3"):
        openapi_endpoints({"swagger": "2.0", "paths": {}})
    external = copy.deepcopy(OPENAPI)
    external["paths"]["/items"]["get"]["parameters"] = [{"$ref": "other.yaml#/Limit"}]
    with pytest.raises(ToolDefinitionError, match="only local references"):
        openapi_endpoints(external, base_url="http://127.0.0.1:1")


def test_non_json_bodies_and_composed_bodies() -> None:
    doc = {"openapi": "3.1.0", "info": {"title": "t", "version": "1"}, "paths": {
        "/upload": {"post": {"operationId": "upload", "requestBody": {"content": {"multipart/form-data": {}}},
                             "responses": {}}},
        "/merge": {"post": {"operationId": "merge", "requestBody": {"required": True, "content": {
            "application/json": {"schema": {"oneOf": [{"type": "object"}, {"type": "array"}]}}}},
            "responses": {}}},
        "/n/{n}": {"get": {"operationId": "bounded", "parameters": [
            {"name": "n", "in": "path", "required": True,
             "schema": {"type": "integer", "minimum": 1, "exclusiveMinimum": True}}], "responses": {}}},
    }}
    endpoints = {e.name: e for e in openapi_endpoints(doc, base_url="http://127.0.0.1:1")}
    assert sorted(endpoints) == ["bounded", "merge"]  # the multipart upload is left out
    merge = endpoints["merge"].spec().input_schema
    assert merge["required"] == ["body"] and "oneOf" in merge["properties"]["body"]
    assert endpoints["bounded"].spec().input_schema["properties"]["n"] == {"type": "integer", "exclusiveMinimum": 1}
    with pytest.raises(ToolDefinitionError, match="no JSON request body"):
        openapi_endpoints(doc, operations=["upload"], base_url="http://127.0.0.1:1")
    json.dumps([e.spec().input_schema for e in endpoints.values()])


def test_nullable_accepts_null_beside_any_schema() -> None:
    """OpenAPI 3.0's ``nullable: true`` becomes "or null" whatever the schema is made of."""
    user = {"type": "object", "properties": {"login": {"type": "string"}}}
    fields: dict[str, Any] = {
        "plain": {"type": "string", "nullable": True},
        "listed": {"type": "string", "enum": ["a", "b"], "nullable": True},
        "either": {"oneOf": [{"type": "string"}, {"type": "integer"}], "nullable": True, "description": "Either."},
        "any": {"anyOf": [{"type": "string"}, {"type": "integer"}], "nullable": True},
        "all": {"allOf": [{"$ref": "#/components/schemas/user"}], "nullable": True},
        "ref": {"$ref": "#/components/schemas/user", "nullable": True},
        "strict": {"type": "string"},
    }
    doc = {"openapi": "3.0.3", "info": {"title": "t", "version": "1"}, "components": {"schemas": {"user": user}},
           "paths": {"/x": {"post": {"operationId": "x", "requestBody": {"content": {"application/json": {
               "schema": {"type": "object", "properties": fields}}}}, "responses": {}}}}}
    (endpoint,) = openapi_endpoints(doc, base_url="http://127.0.0.1:1")
    spec = endpoint.spec()
    props = spec.input_schema["properties"]
    assert props["plain"] == {"type": ["string", "null"]}
    assert props["listed"] == {"type": ["string", "null"], "enum": ["a", "b", None]}
    assert props["either"] == {"anyOf": [{"oneOf": [{"type": "string"}, {"type": "integer"}]}, {"type": "null"}],
                               "description": "Either."}
    assert props["ref"] == {"anyOf": [{"$ref": "#/$defs/user"}, {"type": "null"}]}
    for name in fields:
        if name != "strict":
            assert spec.validate_arguments({name: None}) == {name: None}
    assert spec.validate_arguments({"either": 3, "listed": "a", "all": {"login": "o"}})
    for wrong in ({"either": 1.5}, {"listed": "c"}, {"ref": 3}, {"strict": None}):
        with pytest.raises(ToolArgumentsError):
            spec.validate_arguments(wrong)


def test_operations_left_out_are_listed_and_logged(caplog: pytest.LogCaptureFixture) -> None:
    doc = {"openapi": "3.0.3", "info": {"title": "t", "version": "1"}, "paths": {
        "/markdown/raw": {"post": {"operationId": "markdown/render-raw", "requestBody": {"content": {
            "text/plain": {"schema": {"type": "string"}}}}, "responses": {}}},
        "/assets": {"post": {"operationId": "upload_asset", "requestBody": {"content": {
            "application/octet-stream": {"schema": {"type": "string", "format": "binary"}}}}, "responses": {}}},
        "/notes": {"post": {"operationId": "add_note", "requestBody": {"content": {"application/json": {
            "schema": {"type": "object", "properties": {"text": {"type": "string"}}}}}}, "responses": {}}},
    }}
    with caplog.at_level(logging.WARNING, logger="codeact.runtime.sources.openapi"):
        tools = Toolset.from_openapi(doc, base_url="http://127.0.0.1:1")
    assert tools.names == ["add_note"]
    assert tools.skipped == [("markdown/render-raw", "takes no JSON request body (text/plain)"),
                             ("upload_asset", "takes no JSON request body (application/octet-stream)")]
    (line,) = [r.getMessage() for r in caplog.records]
    assert line.startswith("left out 2 of 3 OpenAPI operations (see Toolset.skipped): markdown/render-raw: ")
    assert Toolset([tools, Toolset()]).skipped == tools.skipped  # a toolset of toolsets lists theirs
    skipped: list[tuple[str, str]] = []
    assert [e.name for e in openapi_endpoints(doc, base_url="http://127.0.0.1:1", skipped=skipped)] == ["add_note"]
    assert [name for name, _ in skipped] == ["markdown/render-raw", "upload_asset"]
    caplog.clear()
    assert Toolset.from_openapi(doc, operations=["add_note"], base_url="http://127.0.0.1:1").skipped == []
    assert not caplog.records  # nothing left out of what was asked for: nothing said


def _doc(paths: Any) -> dict[str, Any]:
    return {"openapi": "3.0.0", "info": {"title": "t", "version": "1"},
            "servers": [{"url": "http://127.0.0.1:9/"}], "paths": paths}


def _deep(levels: int) -> dict[str, Any]:
    schema: dict[str, Any] = {"type": "string"}
    for _ in range(levels):
        schema = {"type": "object", "properties": {"x": schema}}
    return schema


MALFORMED = {
    "paths is a list": (_doc([]), "'paths' is not an object"),
    "content is a list": (_doc({"/a": {"post": {"operationId": "a", "requestBody": {"content": ["application/json"]}}}}),
                          "operation 'a'"),
    "responses is a list": (_doc({"/a": {"get": {"operationId": "a", "responses": ["200"]}}}), "operation 'a'"),
    "parameters is a number": (_doc({"/a": {"get": {"operationId": "a", "parameters": 5}}}), "operation 'a'"),
    "a schema is a string": (_doc({"/a": {"get": {"operationId": "a", "parameters": [
        {"name": "q", "in": "query", "schema": "string"}]}}}), "operation 'a'"),
    "schemas nested 3,000 deep": (_doc({"/a": {"post": {"operationId": "a", "requestBody": {
        "content": {"application/json": {"schema": _deep(3000)}}}}}}), "nests too deep"),
}


@pytest.mark.parametrize("case", list(MALFORMED))
def test_a_malformed_document_is_a_definition_error(case: str) -> None:
    # Not the AttributeError, TypeError or RecursionError reading it raised.
    document, said = MALFORMED[case]
    with pytest.raises(ToolDefinitionError, match=said):
        openapi_tools(document)


ITEMS_DOC = {
    "openapi": "3.1.0", "info": {"title": "tenants", "version": "1"},
    "paths": {"/tenants/acme/items/{item_id}": {"get": {
        "operationId": "get_item",
        "parameters": [{"name": "item_id", "in": "path", "required": True, "schema": {"type": "string"}}],
        "responses": {"200": {"description": "the item"}}}}},
}


def test_a_dot_segment_path_argument_never_leaves_the_operation(api: ApiServer) -> None:
    # get_item(item_id="..") reached /tenants/acme/ with the bearer token (httpx removes dot segments).
    tools = Toolset.from_openapi(ITEMS_DOC, base_url=api.url, auth=HttpAuth.bearer(TOKEN_ENV))
    with Runtime(tools, SandboxConfig(backend="local", policy="none", timeout_s=20)) as rt:
        result = rt.run(textwrap.dedent("""
            seen = []
            for value in ["..", ".", ""]:
                try:
                    seen.append(get_item(item_id=value))
                except ToolError as e:
                    seen.append(e.code)
            seen + [get_item(item_id="../..")["item"]]
        """))
    assert result.ok, result.error
    assert result.value == ["invalid_arguments"] * 3 + ["..%2F.."]
    with api.lock:
        reached = [path for path in api.hits if path.startswith("/tenants")]
    assert reached == ["/tenants/acme/items/..%2F.."]
