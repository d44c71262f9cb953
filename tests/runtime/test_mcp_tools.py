"""MCP tools from a real MCP server (written with the official SDK), over stdio and streamable HTTP."""

from __future__ import annotations

import asyncio
import os
import signal
import subprocess
import sys
import textwrap
from collections.abc import Iterator
from pathlib import Path

import pytest
from mcp import StdioServerParameters

from codeact import Runtime, SandboxConfig, ToolError, ToolPolicy, Toolset, render_stubs
from codeact.errors import ToolDefinitionError
from codeact.runtime.ledger import CallLedger
from tests._configs import LOCAL
from tests.servers.util import free_port, process_gone, wait_for_port

SERVER = str(Path(__file__).parents[1] / "servers" / "mcp_server.py")


@pytest.fixture(scope="module")
def counter_file(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("mcp") / "calls.txt"


@pytest.fixture(scope="module")
def mcp_tools(counter_file: Path) -> Iterator[Toolset]:
    tools = Toolset.from_mcp([sys.executable, SERVER], env={"COUNTER_FILE": str(counter_file)},
                             policies={"add": ToolPolicy(cacheable=True)})
    yield tools
    tools.close()


def executions(counter_file: Path, name: str) -> int:
    return counter_file.read_text().split().count(name) if counter_file.exists() else 0


def test_listed_tools_become_specs_and_stubs(mcp_tools: Toolset) -> None:
    assert mcp_tools.names == ["add", "get_weather", "echo_text", "nap", "whoami"]
    stubs = render_stubs(mcp_tools.specs)
    compile(stubs, "<stubs>", "exec")
    assert "def add(a: int, b: int) -> AddOutput:" in stubs  # named as its output schema is and '"""Add two integers.' in stubs
    assert "def get_weather(city: str) -> dict[str, Any]:" in stubs
    assert "Current weather for a city.\n\n    Args:\n        city: City name." in stubs  # the docstring, dedented
    assert mcp_tools["add"].policy.cacheable and mcp_tools["add"].is_async


@pytest.mark.parametrize("backend_name", ["local", "docker"])
def test_called_from_sandboxed_code(mcp_tools: Toolset, backend_name: str, request: pytest.FixtureRequest) -> None:
    if backend_name == "docker":
        request.getfixturevalue("docker_image")
    config = SandboxConfig(backend=backend_name, policy="none", timeout_s=30)  # type: ignore[arg-type]
    with Runtime(list(mcp_tools), config) as rt:  # the tools, not their connection: it outlives rt
        result = rt.run(textwrap.dedent("""
            import os
            total = add(a=2, b=40)["result"]
            weather = get_weather(city="Beijing")
            try:
                get_weather(city="Atlantis")
            except ToolError as e:
                print(e.code, e.retryable, "|", e.message)
            [total, weather["temperature"], echo_text(text="hi")["result"], whoami()["pid"] != os.getpid()]
        """))
    assert result.ok, result.error
    assert result.value == [42, 68.0, "hi", True]
    assert result.stdout == "tool_exception False | Error executing tool get_weather: unknown city 'Atlantis'\n"
    assert [c.name for c in result.calls] == ["add", "get_weather", "get_weather", "echo_text", "whoami"]
    assert result.calls[2].error is not None and result.calls[2].error.code == "tool_exception"


def test_cacheable_mcp_tool_runs_once_per_session(mcp_tools: Toolset, counter_file: Path) -> None:
    before = executions(counter_file, "add")
    with Runtime(list(mcp_tools), LOCAL) as rt:
        with rt.session() as session:
            first = session.run("add(a=7, b=8)")
            again = session.run("add(a=7, b=8)")  # a revised action repeating the call
    assert first.value == again.value == {"result": 15}
    assert [c.cached for c in first.calls + again.calls] == [False, True]
    assert executions(counter_file, "add") == before + 1


def test_streamable_http_server_and_close_ends_it() -> None:
    port = free_port()
    proc = subprocess.Popen([sys.executable, SERVER, "--http", str(port)],
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        wait_for_port(port)
        tools = Toolset.from_mcp(f"http://127.0.0.1:{port}/mcp", tools=["add", "nap"], prefix="remote_")
        assert tools.names == ["remote_add", "remote_nap"]
        with Runtime(tools, LOCAL) as rt:
            result = rt.run("parallel(lambda n: remote_add(a=n, b=1)['result'], [1, 2, 3])")
        assert result.ok and result.value == [2, 3, 4]
        assert [c.name for c in result.calls] == ["remote_add"] * 3
        with pytest.raises(ToolError, match="not connected") as closed:  # closed with the runtime
            asyncio.run(tools["remote_add"](a=1, b=1))
        assert closed.value.code == "upstream_error"
    finally:
        proc.terminate()
        proc.wait(10)


def test_runtime_close_stops_the_stdio_server() -> None:
    tools = Toolset.from_mcp(StdioServerParameters(command=sys.executable, args=[SERVER]))
    with Runtime(tools, LOCAL) as rt:
        pid = rt.host.call(CallLedger(), "whoami", {}).result["pid"]
        assert not process_gone(pid, deadline_s=0)
    assert process_gone(pid)


def test_a_dead_server_fails_calls_as_upstream_error() -> None:
    tools = Toolset.from_mcp([sys.executable, SERVER])
    with Runtime(tools, LOCAL) as rt:
        ledger = CallLedger()
        pid = rt.host.call(ledger, "whoami", {}).result["pid"]
        os.kill(pid, signal.SIGKILL)
        assert process_gone(pid)
        record = rt.host.call(ledger, "add", {"a": 1, "b": 2})
    assert record.error is not None and record.error.code == "upstream_error"
    assert not record.error.retryable


def test_connection_failures_are_definition_errors() -> None:
    with pytest.raises(ToolDefinitionError, match="cannot connect to the MCP server"):
        Toolset.from_mcp([sys.executable, "-c", "import sys; sys.exit(3)"], connect_timeout_s=20)
    with pytest.raises(ToolDefinitionError, match=r"cannot connect|did not answer"):
        Toolset.from_mcp(f"http://127.0.0.1:{free_port()}/mcp", connect_timeout_s=10)
    with pytest.raises(ToolDefinitionError, match="has no tool"):
        Toolset.from_mcp([sys.executable, SERVER], tools=["nope"])
    with pytest.raises(ToolDefinitionError, match="a URL or a command"):
        Toolset.from_mcp("python server.py")


def test_a_server_that_never_answers_fails_at_its_connect_timeout_and_is_stopped() -> None:
    # initialize() was not bounded inside the connection: start gave up at the timeout, but close
    # then waited its own 10 s for a task still blocked there, and the server process was left.
    import subprocess
    import time
    import uuid

    marker = f"never-answers-{uuid.uuid4().hex}"
    started = time.monotonic()
    with pytest.raises(ToolDefinitionError, match="did not answer within 1"):
        Toolset.from_mcp([sys.executable, "-c", f"import time; time.sleep(300)  # {marker}"], connect_timeout_s=1)
    assert time.monotonic() - started < 1 + 6  # the SDK's stop: close stdin, 2 s, then the kill
    deadline = time.monotonic() + 5
    while subprocess.run(["pgrep", "-f", marker], capture_output=True).returncode == 0:
        assert time.monotonic() < deadline, "the MCP server process was left running"
        time.sleep(0.1)


def test_definitions_still_make_unimplemented_tools() -> None:
    tools = Toolset.from_mcp([{"name": "look", "inputSchema": {"type": "object"}}])
    assert tools.names == ["look"] and tools["look"].fn is None
    with pytest.raises(TypeError, match="apply to an MCP server"):
        Toolset.from_mcp([{"name": "look", "inputSchema": {"type": "object"}}], prefix="x")


def test_async_construction() -> None:
    async def main() -> list[str]:
        tools = await Toolset.afrom_mcp([sys.executable, SERVER], tools=["echo_text"])
        try:
            return tools.names
        finally:
            await asyncio.to_thread(tools.close)

    assert asyncio.run(main()) == ["echo_text"]
