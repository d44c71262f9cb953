"""JSON mode pages through a large result with ``read_result``, as code mode can (issue 18)."""

from __future__ import annotations

import json
import re
from typing import Any

from codeact import Runtime, SandboxConfig, Toolset, tool
from codeact.agent import Budget, FunctionCallingAgent
from codeact.testing.fake_server import FakeModelServer
from tests.agent.test_code_agent import client_for

ROWS = [{"id": i, "name": f"row-{i:04d}", "note": "x" * 20} for i in range(600)]  # ~35,000 characters


@tool
def big_table() -> list[dict[str, Any]]:
    """All rows."""
    return ROWS


def _tool_results(body: dict[str, Any]) -> list[str]:
    return [m["content"] for m in body["messages"] if m["role"] == "tool"]


def test_json_mode_reads_a_cut_result_page_by_page() -> None:
    pages: list[str] = []

    def answer(body: dict[str, Any], vendor: str) -> Any:
        results = _tool_results(body)
        if not results:
            assert "read_result" in [t["function"]["name"] for t in body["tools"]]  # offered to the model
            return {"tool_calls": [{"name": "big_table", "arguments": {}, "id": "t0"}]}
        last = results[-1]
        if last.startswith('{"call_id"'):
            page = json.loads(last)
            pages.append(page["text"])
            if page["next_offset"] is None:
                return "ANSWER: done"
            return {"tool_calls": [{"name": "read_result", "id": f"r{len(pages)}",
                                    "arguments": {"call_id": page["call_id"], "offset": page["next_offset"]}}]}
        found = re.search(r"call read_result\(call_id='([^']+)', offset=(\d+)\)", last)
        assert found, last[-300:]
        pages.append(last.split("\n… [cut:")[0])
        return {"tool_calls": [{"name": "read_result", "id": "r0",
                                "arguments": {"call_id": found.group(1), "offset": int(found.group(2)),
                                              "limit": 10**9}}]}

    with Runtime(Toolset([big_table]), SandboxConfig(backend="local", policy="none")) as rt, \
            FakeModelServer(answer) as server:
        agent = FunctionCallingAgent(client_for(server, "openai"), rt.toolset, runtime=rt, max_observation_chars=8000,
                                     budget=Budget(max_turns=40))
        episode = agent.run("Read the whole table.")
        bodies = server.requests
    assert episode.status == "answered", episode.detail
    assert json.loads("".join(pages)) == ROWS  # every character came through, in order
    assert all(len(r) <= 8000 for b in bodies for r in _tool_results(b))  # each observation fits
    assert len(pages) > 4 and episode.tool_calls == len(pages)
