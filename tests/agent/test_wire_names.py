"""Tool names on the wire: valid for both vendors, unique, and mapped back to the real tool."""

from __future__ import annotations

import os
from typing import Any

import pytest

from codeact import FunctionCallingAgent, Runtime, Toolset, tool
from codeact.agent.json_agent import WIRE_NAME, wire_names
from codeact.testing.fake_server import FakeModelServer
from tests._configs import LOCAL
from tests.agent.test_code_agent import client_for
from tests.servers.big_openapi import big_document
from tests.servers.github_tasks import github_document

LONG = "packages/list-docker-migration-conflicting-packages-for-authenticated-user"  # 74 characters


def assert_valid(toolset: Toolset) -> dict[str, str]:
    wire = wire_names(toolset)
    assert set(wire) == set(toolset.names)
    bad = {name: w for name, w in wire.items() if not WIRE_NAME.fullmatch(w)}
    assert not bad, bad
    assert len(set(wire.values())) == len(wire), "two tools share a wire name"
    assert not {"search_tools", "read_result"} & set(wire.values())  # the agent's built-ins keep theirs
    return wire


def test_every_wire_name_of_githubs_description_is_valid_and_unique() -> None:
    path = github_document()
    if not path.is_file():
        if os.environ.get("CI") == "true":
            pytest.fail(f"CI=true and GitHub's OpenAPI description is not cached at {path}")
        pytest.skip(f"GitHub's OpenAPI description is not cached at {path} (scripts/fetch-github-openapi.sh)")
    github = Toolset.from_openapi(path, base_url="http://127.0.0.1:9")  # never contacted
    wire = assert_valid(github)
    identifiers = github.python_names
    long = [name for name in github.names if len(identifiers[name]) > 64]
    assert len(long) >= 20  # 25 in @octokit/openapi 23.0.2
    hashed = wire["packages/list-docker-migration-conflicting-packages-for-authenticated-user"]
    assert len(hashed) == 64 and hashed.startswith("packages_list_docker_migration_conflicting_packages_for")
    assert wire["issues/create-comment"] == "issues_create_comment"  # short ones stay readable


def test_every_wire_name_of_the_generated_document_is_valid_and_unique() -> None:
    assert_valid(Toolset.from_openapi(big_document()))


def test_long_invalid_and_colliding_names() -> None:
    def fn(x: int) -> int:
        return x

    names = ["ok-name", "a.b", "a_b", "x" * 64, "x" * 65, "y" * 70 + ".z", "y" * 70 + "_z", "weird name!", "search_tools",
             "émoji✓"]
    toolset = Toolset([tool(fn, name=n) for n in names])
    wire = wire_names(toolset)  # (not assert_valid: a user tool named search_tools is sent as it is)
    assert all(WIRE_NAME.fullmatch(w) for w in wire.values()) and len(set(wire.values())) == len(names)
    assert wire["ok-name"] == "ok-name" and wire["a_b"] == "a_b" and wire["x" * 64] == "x" * 64
    assert wire["a.b"] != "a_b" and wire["a.b"].startswith("a_b_")  # the valid name keeps its own
    assert wire["search_tools"] == "search_tools"  # a user tool of that name takes precedence
    assert wire == wire_names(toolset)  # stable


def test_a_long_named_tool_found_by_search_runs_under_its_real_name() -> None:
    calls: list[dict[str, Any]] = []

    @tool(name=LONG, description="List packages whose Docker migration conflicts, for the authenticated user.")
    def conflicting(visibility: str = "all") -> list[str]:
        calls.append({"visibility": visibility})
        return ["pkg-a"]

    big = Toolset([Toolset.from_openapi(big_document()), Toolset([conflicting])])
    wire = wire_names(big)[LONG]
    assert len(wire) == 64 and wire != LONG
    search = {"tool_calls": [{"name": "search_tools", "id": "s1", "arguments": {
        "query": "docker migration conflicting packages for the authenticated user", "limit": 3}}]}
    use = {"tool_calls": [{"name": wire, "arguments": {"visibility": "private"}, "id": "u1"}]}
    for vendor in ("openai", "anthropic"):
        calls.clear()
        with FakeModelServer([search, use, "pkg-a conflicts."]) as server, Runtime(big, LOCAL) as rt:
            episode = FunctionCallingAgent(client_for(server, vendor), big, runtime=rt, deferred=True).run(
                "Which of my packages have Docker migration conflicts?")
            requests = server.requests
        offered = [t["function"]["name"] if "function" in t else t["name"] for t in requests[1]["tools"]]
        assert wire in offered and LONG not in offered
        assert all(WIRE_NAME.fullmatch(n) for body in requests for n in (
            t["function"]["name"] if "function" in t else t["name"] for t in body["tools"]))
        assert episode.status == "answered" and calls == [{"visibility": "private"}]
        assert [r.name for r in episode.records] == ["search_tools", LONG]  # the record has the real name
        assert episode.records[1].ok and episode.records[1].result == ["pkg-a"]


def test_the_fake_server_rejects_what_the_vendors_reject() -> None:
    from codeact.agent.messages import Message
    from codeact.errors import ModelError

    schema = {"type": "object", "properties": {}, "required": [], "additionalProperties": False}
    cases = {
        "openai": [{"name": "x" * 65, "input_schema": schema}],
        "anthropic": [{"name": f"t{i}", "input_schema": schema, "strict": True} for i in range(21)],
    }
    for vendor, tools in cases.items():
        with FakeModelServer(["unused"]) as server:
            with pytest.raises(ModelError, match=r"pattern|too many strict tools"):
                client_for(server, vendor).complete([Message.user("Hi")], tools=tools)
