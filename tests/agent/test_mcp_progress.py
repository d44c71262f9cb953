"""``codeact serve-mcp``: a client that asks for progress gets the run's live events as
``notifications/progress`` while ``execute_python`` runs (the real CLI, the official client)."""

from __future__ import annotations

import asyncio
from pathlib import Path

from mcp import ClientSession, StdioServerParameters
from mcp.client.stdio import stdio_client

from codeact import ExecutionResult
from tests.agent.test_mcp_server import CODEACT, TOOLS_PY


def test_execute_python_reports_progress(tmp_path: Path) -> None:
    tools = tmp_path / "weather_tools.py"
    tools.write_text(TOOLS_PY)
    params = StdioServerParameters(command=CODEACT, args=["serve-mcp", "--tools", str(tools), "--backend", "local"])
    code = "print('checking')\nw = get_weather('Beijing')\ntry:\n    get_weather('Atlantis')\nexcept ToolError:\n" \
           "    pass\nw['temperature']"
    progress: list[tuple[float, float | None, str | None]] = []

    async def on_progress(value: float, total: float | None, message: str | None) -> None:
        progress.append((value, total, message))

    async def main() -> tuple[ExecutionResult, ExecutionResult]:
        with (tmp_path / "server.log").open("w") as errlog:
            async with stdio_client(params, errlog=errlog) as (read, write), ClientSession(read, write) as session:
                await session.initialize()
                reported = await session.call_tool("execute_python", {"code": code}, progress_callback=on_progress)
                quiet = await session.call_tool("execute_python", {"code": "print('again')\n1"})
                return (ExecutionResult.model_validate(reported.structured_content),
                        ExecutionResult.model_validate(quiet.structured_content))

    reported, quiet = asyncio.run(asyncio.wait_for(main(), 60))
    assert reported.ok and reported.value == 68.0 and quiet.ok and quiet.stdout == "again\n"
    messages = [m for _, _, m in progress]
    assert messages[0] == "stdout: checking\n"
    assert messages[1].startswith("call call_1 get_weather(") and messages[1].endswith("started")
    assert messages[2].startswith("call call_1 get_weather ok")
    assert "call call_2 get_weather not_found" in messages[4]
    assert [v for v, _, _ in progress] == list(range(1, len(progress) + 1)) and len(progress) == 5
    assert all(total is None for _, total, _ in progress)
