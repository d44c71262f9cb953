"""Faithful arguments (issue 12): an argument the code did not pass is sent nowhere (not in the HTTP
request, not in MCP ``tools/call``, not in a Python tool's kwargs) and the record shows exactly what
the code passed; the tool's or server's own default applies."""

from __future__ import annotations

import json
import sys
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, urlsplit

import pytest

from codeact import HttpEndpoint, HttpParam, Runtime, Toolset, tool
from tests._configs import LOCAL

ECHO_SERVER = str(Path(__file__).parents[1] / "servers" / "mcp_echo.py")


class _Echo(BaseHTTPRequestHandler):
    seen: list[dict[str, Any]]

    def log_message(self, format: str, *args: Any) -> None:
        pass

    def _answer(self) -> None:
        parts = urlsplit(self.path)
        size = int(self.headers.get("Content-Length") or 0)
        body = json.loads(self.rfile.read(size)) if size else None
        self.seen.append({"path": parts.path, "query": parse_qs(parts.query), "body": body})
        data = json.dumps({"ok": True}).encode()
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    do_GET = do_POST = do_PATCH = _answer


@pytest.fixture
def echo() -> Iterator[tuple[str, list[dict[str, Any]]]]:
    seen: list[dict[str, Any]] = []
    server = ThreadingHTTPServer(("127.0.0.1", 0), type("H", (_Echo,), {"seen": seen}))
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}", seen
    finally:
        server.shutdown()
        server.server_close()


def test_http_query_and_json_body_carry_only_passed_arguments(echo: tuple[str, list[dict[str, Any]]]) -> None:
    url, seen = echo
    endpoints = [
        HttpEndpoint("list_commits", "GET", "/repos/{owner}/commits", [
            HttpParam("page", "query", {"type": "integer", "default": 1}),
            HttpParam("per_page", "query", {"type": "integer", "default": 30}),
            HttpParam("sha", "query", {"type": "string"})]),
        HttpEndpoint("create_repo", "POST", "/repos", [
            HttpParam("name", "body", required=True),
            HttpParam("private", "body", {"type": "boolean", "default": False}),
            HttpParam("has_issues", "body", {"type": "boolean", "default": True}),
            HttpParam("description", "body", {"type": "string"})]),
    ]
    with Runtime(Toolset.from_http(endpoints, base_url=url), LOCAL) as rt:
        assert "per_page: int = 30" in rt.prompt_view  # the model still sees the documented default
        result = rt.run("list_commits('octo'); list_commits('octo', per_page=5); create_repo('r'); "
                        "create_repo('r2', has_issues=True, description=None)")
    assert result.ok, result.error
    assert [s["query"] for s in seen[:2]] == [{}, {"per_page": ["5"]}]
    assert [s["body"] for s in seen[2:]] == [{"name": "r"}, {"name": "r2", "has_issues": True}]
    assert [c.arguments for c in result.calls] == [
        {"owner": "octo"}, {"owner": "octo", "per_page": 5}, {"name": "r"}, {"name": "r2", "has_issues": True}]


def test_openapi_operations_send_no_documented_defaults(echo: tuple[str, list[dict[str, Any]]]) -> None:
    url, seen = echo
    doc = {"openapi": "3.0.3", "info": {"title": "t", "version": "1"}, "servers": [{"url": url}], "paths": {
        "/search": {"get": {"operationId": "search", "parameters": [
            {"name": "q", "in": "query", "required": True, "schema": {"type": "string"}},
            {"name": "limit", "in": "query", "schema": {"type": "integer", "default": 10}}],
            "responses": {"200": {"description": "ok"}}}},
        "/notes": {"post": {"operationId": "add_note", "requestBody": {"required": True, "content": {
            "application/json": {"schema": {"type": "object", "required": ["text"], "properties": {
                "text": {"type": "string"}, "pinned": {"type": "boolean", "default": False}}}}}},
            "responses": {"201": {"description": "made"}}}},
    }}
    with Runtime(Toolset.from_openapi(doc), LOCAL) as rt:
        result = rt.run("search('x'); add_note('hi')")
    assert result.ok, result.error
    assert seen[0]["query"] == {"q": ["x"]} and seen[1]["body"] == {"text": "hi"}


NULLABLE_DOC: dict[str, Any] = {
    "openapi": "3.0.3", "info": {"title": "t", "version": "1"},
    "components": {"schemas": {"user": {"type": "object", "properties": {"login": {"type": "string"}}}}},
    "paths": {"/issues/{n}": {"patch": {"operationId": "update_issue", "parameters": [
        {"name": "n", "in": "path", "required": True, "schema": {"type": "integer"}}],
        "requestBody": {"content": {"application/json": {"schema": {"type": "object", "properties": {
            "milestone": {"oneOf": [{"type": "string"}, {"type": "integer"}], "nullable": True,
                          "description": "A milestone number, or null to remove it."},
            "reason": {"type": "string", "enum": ["done", "dropped"], "nullable": True},
            "owner": {"allOf": [{"$ref": "#/components/schemas/user"}], "nullable": True},
            "title": {"type": "string"}}}}}},
        "responses": {"200": {"description": "ok"}}}}},
}


def test_openapi_nullable_fields_send_null_for_an_explicit_none(echo: tuple[str, list[dict[str, Any]]]) -> None:
    """``nullable: true`` next to ``oneOf``/``allOf``/``enum``: ``None`` reaches the wire (and the record) as
    null, an omitted field stays omitted; a field that takes no null drops an explicit None (design notes)."""
    url, seen = echo
    with Runtime(Toolset.from_openapi(NULLABLE_DOC, base_url=url), LOCAL) as rt:
        assert "milestone: str | int | None = None" in rt.prompt_view
        result = rt.run("update_issue(1, milestone=None); update_issue(2, milestone=7); update_issue(3); "
                        "update_issue(4, reason=None, owner=None); update_issue(5, reason='done', title=None)")
        assert result.ok, result.error
        bad = rt.run("update_issue(6, milestone=True)")
    assert [s["body"] for s in seen] == [
        {"milestone": None}, {"milestone": 7}, None, {"reason": None, "owner": None}, {"reason": "done"}]
    assert [c.arguments for c in result.calls] == [
        {"n": 1, "milestone": None}, {"n": 2, "milestone": 7}, {"n": 3}, {"n": 4, "reason": None, "owner": None},
        {"n": 5, "reason": "done"}]
    assert len(seen) == 5 and bad.calls[0].error is not None and bad.calls[0].error.code == "invalid_arguments"


def test_mcp_tools_call_gets_only_passed_arguments() -> None:
    toolset = Toolset.from_mcp([sys.executable, ECHO_SERVER, "alpha"])
    with Runtime(toolset, LOCAL) as rt:
        result = rt.run("[echo_args('hi'), echo_args('hey', loud=True)]")
    assert result.ok, result.error
    assert [v["arguments"] for v in result.value] == [{"text": "hi"}, {"text": "hey", "loud": True}]
    assert [c.arguments for c in result.calls] == [{"text": "hi"}, {"text": "hey", "loud": True}]


def test_python_tool_kwargs_and_records_hold_only_passed_arguments() -> None:
    received: list[dict[str, Any]] = []

    @tool
    def book(city: str, nights: int = 1, breakfast: bool | None = None, note: str = "None") -> str:
        """Book a room."""
        received.append({"city": city, "nights": nights, "breakfast": breakfast, "note": note})
        return "ok"

    @tool
    def raw(**kwargs: Any) -> dict[str, Any]:
        """Answer with the keyword arguments received."""
        return kwargs

    with Runtime([book, raw], LOCAL) as rt:
        assert "nights: int = 1" in rt.prompt_view
        result = rt.run("book('Oslo'); book('Rome', 2, breakfast=None); raw(a=1)")
    assert result.ok, result.error
    # the function's own defaults applied; the explicit None (nullable) was passed on
    assert received == [{"city": "Oslo", "nights": 1, "breakfast": None, "note": "None"},
                        {"city": "Rome", "nights": 2, "breakfast": None, "note": "None"}]
    assert [c.arguments for c in result.calls] == [{"city": "Oslo"}, {"city": "Rome", "nights": 2, "breakfast": None},
                                                   {"a": 1}]


def test_several_mcp_servers_at_once_each_a_group() -> None:
    servers = {"alpha": [sys.executable, ECHO_SERVER, "alpha"], "beta": [sys.executable, ECHO_SERVER, "beta"]}
    from codeact.errors import ToolDefinitionError

    with pytest.raises(ToolDefinitionError, match="duplicate tool name 'echo_args'"):
        Toolset.from_mcp(servers)  # both have echo_args: prefix=True keeps them apart
    toolset = Toolset.from_mcp(servers, prefix=True)
    assert toolset.names == ["alpha_echo_args", "alpha_alpha_status", "beta_echo_args", "beta_beta_status"]
    assert toolset.groups == {n: n.split("_")[0] for n in toolset.names}
    with Runtime(toolset, LOCAL, prompt_budget_chars=1800) as rt:
        assert "#   alpha (2): " in rt.prompt_view and "#   beta (2): " in rt.prompt_view
        result = rt.run("[beta_echo_args('hi')['tool'], search_tools('beta service status', 1)[0]['name']]")
    assert result.ok, result.error
    assert result.value == ["echo_args", "beta_beta_status"]  # the server is called by its own tool name
    single = Toolset.from_mcp([sys.executable, ECHO_SERVER, "gamma"])
    try:
        assert set(single.groups.values()) == {"gamma"}  # one server: its own name (from initialize)
    finally:
        single.close()
    with pytest.raises(TypeError, match="tools"):
        Toolset.from_mcp(servers, tools=["echo_args"])
