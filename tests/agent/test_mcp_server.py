"""``codeact serve-mcp`` driven by the official ``mcp`` client (the real CLI as a subprocess), and
``execute_python_tool`` in each vendor's shape."""

from __future__ import annotations

import asyncio
import os
import secrets
import socket
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import httpx
import pytest
from mcp import ClientSession, StdioServerParameters
from mcp.client.stdio import stdio_client

from codeact import ExecutionResult, Runtime, SandboxConfig
from codeact.agent import execute_python_tool
from tests.conftest import Counter, make_tools

CODEACT = str(Path(sys.executable).with_name("codeact"))

TOOLS_PY = '''\
from codeact import ToolError, tool

_WEATHER = {"Pittsburgh": (12.0, "celsius"), "Beijing": (68.0, "fahrenheit")}


@tool
def get_weather(city: str) -> dict:
    """Current weather for a city, in the unit its station reports.

    Args:
        city: City name.
    """
    if city not in _WEATHER:
        raise ToolError("not_found", f"no station for {city!r}")
    temperature, unit = _WEATHER[city]
    return {"city": city, "temperature": temperature, "unit": unit}
'''

COMPARE = """\
pit, bj = get_weather("Pittsburgh"), get_weather("Beijing")
bj_c = (bj["temperature"] - 32) * 5 / 9
print("warmer:", "Beijing" if bj_c > pit["temperature"] else "Pittsburgh")
bj_c"""


@pytest.fixture
def tools_file(tmp_path: Path) -> Path:
    path = tmp_path / "weather_tools.py"
    path.write_text(TOOLS_PY)
    return path


def text_of(result: Any) -> str:
    return "".join(getattr(block, "text", "") for block in result.content)


async def exercise(session: ClientSession) -> None:
    """The same checks over any transport."""
    listed = {t.name: t for t in (await session.list_tools()).tools}
    assert set(listed) == {"execute_python", "reset_session", "snapshot", "restore"}
    tool = listed["execute_python"]
    assert "def get_weather(city: str)" in (tool.description or "")
    assert tool.input_schema["required"] == ["code"]

    first = await session.call_tool("execute_python", {"code": COMPARE})
    assert not first.is_error and "warmer: Beijing" in text_of(first) and "get_weather" in text_of(first)
    result = ExecutionResult.model_validate(first.structured_content)
    assert result.ok and result.value == 20.0 and [c.arguments for c in result.calls] == [
        {"city": "Pittsburgh"}, {"city": "Beijing"}]

    kept = await session.call_tool("execute_python", {"code": "round(bj_c + 1)"})
    assert ExecutionResult.model_validate(kept.structured_content).value == 21  # the session persists

    failed = await session.call_tool("execute_python", {"code": "x = 1\nget_weather('Atlantis')"})
    assert failed.is_error and "not_found" in text_of(failed) and "line 2" in text_of(failed)

    await session.call_tool("reset_session", {})
    gone = await session.call_tool("execute_python", {"code": "bj_c"})
    assert gone.is_error and "NameError" in text_of(gone)


def test_stdio_server_lists_and_calls_execute_python(tools_file: Path, tmp_path: Path) -> None:
    params = StdioServerParameters(command=CODEACT,
                                   args=["serve-mcp", "--tools", str(tools_file), "--backend", "local"])

    async def main() -> None:
        with (tmp_path / "server.log").open("w") as errlog:
            async with stdio_client(params, errlog=errlog) as (read, write), ClientSession(read, write) as session:
                await session.initialize()
                await exercise(session)

    asyncio.run(asyncio.wait_for(main(), 60))


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def test_streamable_http_server(tools_file: Path, tmp_path: Path) -> None:
    from mcp import Client
    from mcp.client.streamable_http import streamable_http_client
    from mcp.shared._httpx_utils import create_mcp_http_client

    port = _free_port()
    token = "http-test-" + secrets.token_hex(16)
    with (tmp_path / "http.log").open("w") as log:
        proc = subprocess.Popen([CODEACT, "serve-mcp", "--http", "--port", str(port), "--tools", str(tools_file),
                                 "--backend", "local"], stdout=log, stderr=subprocess.STDOUT,
                                env={**os.environ, "CODEACT_MCP_TOKEN": token})
    try:
        url = f"http://127.0.0.1:{port}/mcp"
        deadline = time.monotonic() + 30
        while True:
            try:
                httpx.get(url, timeout=1)
                break
            except httpx.TransportError:
                assert proc.poll() is None and time.monotonic() < deadline, (tmp_path / "http.log").read_text()
                time.sleep(0.1)

        async def main() -> None:
            async with create_mcp_http_client(headers={"Authorization": f"Bearer {token}"}) as http, \
                    Client(streamable_http_client(url, http_client=http)) as client:
                await exercise(client.session)

        asyncio.run(asyncio.wait_for(main(), 60))
    finally:
        proc.terminate()
        proc.wait(timeout=10)


def test_execute_python_tool_shapes() -> None:
    bare = execute_python_tool()
    assert bare.name == "execute_python" and "final_answer" in bare.description
    assert bare.to_openai()["function"]["parameters"]["required"] == ["code"]
    assert bare.to_anthropic()["input_schema"]["properties"]["code"]["type"] == "string"
    toolset = make_tools(Counter())
    with_tools = execute_python_tool(toolset)
    assert "def get_weather(city: str)" in with_tools.description and "def get_weather" not in bare.description
    assert "def fetch_item" in execute_python_tool(list(toolset)).to_mcp()["description"]
    with Runtime(toolset, SandboxConfig(backend="local")) as rt:
        assert "def get_weather(city: str)" in execute_python_tool(rt).description  # the runtime's prompt view
