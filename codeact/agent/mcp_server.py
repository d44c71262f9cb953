"""codeact as a tool for other agents: an MCP server (official ``mcp`` SDK, ``MCPServer``).

Two tools:

- ``execute_python(code)``: runs the code in the server's persistent session, the configured
  tools available inside as functions (their prompt view is in the tool's description). Returns
  the rendered observation as text and the ``ExecutionResult`` as structured content
  (``isError`` when the run failed).
- ``reset_session()``: discards the session (variables, sandbox); the next run starts fresh.

One session serves every client of the server (over HTTP, clients share the namespace). Serve
with :func:`serve_mcp` or ``codeact serve-mcp [--http --port N] [--tools FILE]...``.
"""

from __future__ import annotations

import asyncio
import threading
from typing import TYPE_CHECKING, Annotated, Any, Literal

from mcp.server.mcpserver import Context, MCPServer
from mcp.types import CallToolResult, TextContent
from pydantic import Field

from .._deprecated import deprecated_alias
from ..results import ExecutionResult, render_observation
from ..runtime.session import Runtime, Session
from ._mcp_progress import run_with_progress
from .prompts import EXECUTE_PYTHON, execute_python_tool

__all__ = ["CodeActMCP", "build_mcp_server", "serve_mcp"]

Code = Annotated[str, Field(description="Python source code to run")]


class CodeActMCP:
    """The two tools over one runtime and its (lazily opened) session."""

    def __init__(self, runtime: Runtime, *, max_observation_chars: int = 8000) -> None:
        self.runtime = runtime
        self.max_observation_chars = max_observation_chars
        self._session: Session | None = None
        self._lock = threading.Lock()

    def session(self) -> Session:
        with self._lock:
            if self._session is None or self._session.state == "closed":
                self._session = self.runtime.session()
            return self._session

    async def execute_python(self, code: Code, ctx: Context) -> Annotated[CallToolResult, ExecutionResult]:
        session = self.session()
        result = await run_with_progress(session, code, ctx)  # progress notifications when asked for
        text = render_observation(result, self.max_observation_chars)
        return CallToolResult(content=[TextContent(type="text", text=text)],
                              structured_content=result.model_dump(mode="json"), is_error=not result.ok)

    async def reset_session(self) -> str:
        with self._lock:
            session, self._session = self._session, None
        if session is not None:
            await asyncio.to_thread(session.close)
        return "The session was reset: a fresh Python namespace; earlier variables are gone."

    def close(self) -> None:
        with self._lock:
            session, self._session = self._session, None
        if session is not None:
            session.close()


if TYPE_CHECKING:
    #: Deprecated spelling of :class:`CodeActMCP`.
    CodeactMCP = CodeActMCP
else:
    def __getattr__(name: str) -> Any:
        return deprecated_alias(__name__, name, {"CodeactMCP": ("codeact.agent.mcp_server.CodeActMCP", CodeActMCP)})


def build_mcp_server(runtime: Runtime, *, name: str = "codeact") -> tuple[MCPServer, CodeActMCP]:
    """An ``MCPServer`` exposing ``execute_python`` and ``reset_session`` over ``runtime``."""
    tools = CodeActMCP(runtime)
    server: MCPServer = MCPServer(name, instructions=(
        f"Run Python with {EXECUTE_PYTHON}; the session persists between calls. The functions listed in "
        f"its description call tools on the host."))
    server.add_tool(tools.execute_python, name=EXECUTE_PYTHON, description=execute_python_tool(runtime).description)
    server.add_tool(tools.reset_session, name="reset_session",
                    description="Discard the Python session (all variables); the next execute_python starts fresh.")
    return server, tools


def serve_mcp(runtime: Runtime, *, transport: Literal["stdio", "http"] = "stdio", host: str = "127.0.0.1",
              port: int = 8000) -> None:
    """Serve until the client hangs up (stdio) or the process is interrupted (streamable HTTP at
    ``http://HOST:PORT/mcp``); then close the session. The runtime stays the caller's."""
    server, tools = build_mcp_server(runtime)
    try:
        if transport == "stdio":
            server.run("stdio")
        else:
            server.run("streamable-http", host=host, port=port)
    finally:
        tools.close()
