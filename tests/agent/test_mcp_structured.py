"""The MCP front door through the official ``mcp`` client (in-process): structured content that
matches the declared ``outputSchema`` (checked with jsonschema) and is capped, the prompt view as
the description within the runtime's budget, and snapshot/restore of the client's session."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Awaitable, Callable
from typing import Any

import jsonschema
from mcp import Client

from codeact import ExecutionResult, Runtime, Toolset, tool
from codeact.agent.mcp_server import build_mcp_server
from tests._configs import LOCAL


@tool
def echo(text: str) -> str:
    """Return the text."""
    return text


def serve(runtime: Runtime, check: Callable[[Client], Awaitable[None]], **options: Any) -> None:
    server, tools = build_mcp_server(runtime, **options)

    async def main() -> None:
        async with Client(server) as client:
            await check(client)

    try:
        asyncio.run(main())
    finally:
        tools.close()


def text_of(result: Any) -> str:
    return "".join(getattr(block, "text", "") for block in result.content)


def test_structured_content_matches_the_declared_output_schema() -> None:
    async def check(client: Client) -> None:
        listed = {t.name: t for t in (await client.list_tools()).tools}
        assert set(listed) == {"execute_python", "reset_session", "snapshot", "restore"}
        schema = listed["execute_python"].output_schema
        assert schema is not None and {"ok", "termination"} <= set(schema["required"])
        for code in ('print(echo("hi"))\n41 + 1', "raise KeyError('k')"):
            result = await client.call_tool("execute_python", {"code": code})
            jsonschema.validate(result.structured_content, schema)
            assert ExecutionResult.model_validate(result.structured_content).ok is not result.is_error
        assert result.is_error and "KeyError" in text_of(result)

    with Runtime([echo], LOCAL) as rt:
        serve(rt, check)


def test_structured_content_is_capped() -> None:
    code = 'for i in range(60):\n    echo("x" * 500)\nprint("y" * 5000)\n"z" * 5000'

    async def check(client: Client) -> None:
        schema = {t.name: t for t in (await client.list_tools()).tools}["execute_python"].output_schema
        result = await client.call_tool("execute_python", {"code": code})
        content = result.structured_content
        assert content is not None and not result.is_error
        jsonschema.validate(content, schema)
        assert len(json.dumps(content)) < 2 * 2000
        assert content["stdout_truncated"] and len(content["stdout"]) == 1000
        assert content["value"]["truncated"] and content["value"]["total_chars"] == 5002
        assert 0 < len(content["calls"]) < 60
        assert content["calls"][0]["result"]["truncated"]  # each result bounded too
        assert content["reason"] == f"the structured content lists the first {len(content['calls'])} of 60 tool calls"

    with Runtime([echo], LOCAL) as rt:
        serve(rt, check, max_structured_chars=2000)


def test_the_description_is_the_prompt_view_within_the_budget() -> None:
    many = Toolset([tool(name=f"tool_{i}", description=f"Tool number {i}. " * 20)(lambda x=i: x)
                    for i in range(40)])

    async def check(client: Client) -> None:
        (execute,) = [t for t in (await client.list_tools()).tools if t.name == "execute_python"]
        description = execute.description or ""
        assert "search_tools" in description and "def tool_39" not in description  # the index, not every stub
        assert len(description) < 4000

    with Runtime(many, LOCAL, prompt_budget_chars=2000) as rt:
        assert len(rt.prompt_view) <= 2000
        serve(rt, check)


def test_snapshot_and_restore_the_clients_session() -> None:
    async def check(client: Client) -> None:
        await client.call_tool("execute_python", {"code": 'x = echo("first")'})
        taken = (await client.call_tool("snapshot", {})).structured_content
        assert taken is not None
        taken = taken.get("result", taken)
        assert taken["cells"] == 1 and taken["snapshot_id"].startswith("snap_")
        await client.call_tool("execute_python", {"code": 'x = "second"'})
        restored = await client.call_tool("restore", {"snapshot_id": taken["snapshot_id"]})
        assert not restored.is_error and "1 cells replayed" in text_of(restored)
        back = await client.call_tool("execute_python", {"code": "x"})
        assert ExecutionResult.model_validate(back.structured_content).value == "first"
        # at most two kept: a third snapshot drops the first
        for _ in range(2):
            await client.call_tool("snapshot", {})
        gone = await client.call_tool("restore", {"snapshot_id": taken["snapshot_id"]})
        assert gone.is_error and "no snapshot" in text_of(gone) and "at most 2" in text_of(gone)

    with Runtime([echo], LOCAL) as rt:
        serve(rt, check, max_snapshots=2)


def _task_call(code: str) -> Any:
    import mcp_types as types

    return types.CallToolRequest(params=types.CallToolRequestParams(
        name="execute_python", arguments={"code": code}, task=types.TaskMetadata(ttl=60_000)))


async def _task_request(client: Client, method: str, task_id: str) -> Any:
    import mcp_types as types

    request, result = {
        "get": (types.GetTaskRequest, types.GetTaskResult),
        "result": (types.GetTaskPayloadRequest, types.CallToolResult),
        "cancel": (types.CancelTaskRequest, types.CancelTaskResult),
    }[method]
    params = {"get": types.GetTaskRequestParams, "result": types.GetTaskPayloadRequestParams,
              "cancel": types.CancelTaskRequestParams}[method](task_id=task_id)
    return await client.session.send_request(request(params=params), result)


def test_a_long_run_as_a_task_started_polled_and_cancelled() -> None:
    import mcp_types as types

    async def check(client: Client) -> None:
        assert client.protocol_version == "2026-07-28"
        done = await client.session.send_request(_task_call('x = echo("kept")\nx'), types.CreateTaskResult)
        assert done.task.status == "working" and done.task.poll_interval
        result = await _task_request(client, "result", done.task.task_id)
        assert ExecutionResult.model_validate(result.structured_content).value == "kept"
        assert (await _task_request(client, "get", done.task.task_id)).status == "completed"

        long = await client.session.send_request(
            _task_call("import time\nfor i in range(600):\n    time.sleep(0.1)"), types.CreateTaskResult)
        await asyncio.sleep(0.5)
        assert (await _task_request(client, "get", long.task.task_id)).status == "working"
        cancelled = await _task_request(client, "cancel", long.task.task_id)
        assert cancelled.status == "cancelled"
        assert (await _task_request(client, "get", long.task.task_id)).status == "cancelled"
        after = await client.call_tool("execute_python", {"code": "x"})  # the session is free, its state kept
        assert ExecutionResult.model_validate(after.structured_content).value == "kept"

    with Runtime([echo], LOCAL) as rt:
        serve(rt, check)


def test_running_tasks_are_capped_per_client() -> None:
    import mcp_types as types
    from mcp.shared.exceptions import MCPError

    async def check(client: Client) -> None:
        first = await client.session.send_request(_task_call("import time\ntime.sleep(30)"), types.CreateTaskResult)
        try:
            await client.session.send_request(_task_call("1"), types.CreateTaskResult)
        except MCPError as exc:
            assert "1 tasks of this session are running" in str(exc)
        else:
            raise AssertionError("a second running task was accepted past max_tasks=1")
        assert (await _task_request(client, "cancel", first.task.task_id)).status == "cancelled"
        second = await client.session.send_request(_task_call("2"), types.CreateTaskResult)  # a finished one goes
        assert (await _task_request(client, "result", second.task.task_id)).structured_content["value"] == 2

    with Runtime([echo], LOCAL) as rt:
        serve(rt, check, max_tasks=1)
