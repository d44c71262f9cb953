"""codeact as a tool for other agents: an MCP server (official ``mcp`` SDK, ``MCPServer``).

Two tools:

- ``execute_python(code)``: runs the code in the caller's persistent session, the configured
  tools available inside as functions (their prompt view is in the tool's description). Returns
  the rendered observation as text and the ``ExecutionResult`` as structured content
  (``isError`` when the run failed).
- ``reset_session()``: discards the caller's session (variables, sandbox); the next run starts fresh.

Over stdio the client is the server's own process: one session. Over HTTP each MCP session
(``Mcp-Session-Id``) gets a codeact session of its own, closed when the MCP session ends (DELETE)
or expires; the server requires a bearer token, accepts only its own Origin and caps the live
sessions (see ``_mcp_http``). Serve with :func:`serve_mcp` or
``codeact serve-mcp [--http --port N | --unix PATH] [--tools FILE]...``.
"""

from __future__ import annotations

import asyncio
import os
import sys
import threading
from typing import TYPE_CHECKING, Annotated, Any, Literal, TextIO

from mcp.server.mcpserver import Context, MCPServer
from mcp.types import CallToolResult, TextContent
from pydantic import Field

from .._deprecated import deprecated_alias
from ..results import ExecutionResult, render_observation
from ..runtime.session import Runtime, Session
from ._mcp_http import (
    DEFAULT_MAX_SESSIONS,
    DEFAULT_SESSION_IDLE_S,
    TOKEN_ENV,
    HttpOptions,
    mcp_http_app,
    resolve_token,
    serve_http,
    token_file,
    token_problem,
    written_token,
)
from ._mcp_progress import run_with_progress
from .prompts import EXECUTE_PYTHON, execute_python_tool

__all__ = ["DEFAULT_MAX_SESSIONS", "DEFAULT_SESSION_IDLE_S", "TOKEN_ENV", "CodeActMCP", "HttpOptions",
           "build_http_app", "build_mcp_server", "serve_mcp", "token_problem"]

Code = Annotated[str, Field(description="Python source code to run")]


class CodeActMCP:
    """The two tools over one runtime: one (lazily opened) session, or with ``per_connection`` one
    per MCP session, each closed when its MCP session ends."""

    def __init__(self, runtime: Runtime, *, max_observation_chars: int = 8000, per_connection: bool = False) -> None:
        self.runtime = runtime
        self.max_observation_chars = max_observation_chars
        self.per_connection = per_connection
        self._sessions: dict[str | None, Session] = {}  # MCP session id (None: the one shared) → session
        self._closing: set[Session] = set()
        self._lock = threading.Lock()

    @property
    def live_sessions(self) -> int:
        """How many codeact sessions are open (one being closed included, until it is)."""
        with self._lock:
            return sum(1 for s in self._sessions.values() if s.state != "closed") + len(self._closing)

    def session(self, ctx: Context | None = None) -> Session:
        """The caller's session, opened on first use."""
        key = self._key(ctx)
        with self._lock:
            session = self._sessions.get(key)
            if session is None or session.state == "closed":
                session = self._sessions[key] = self.runtime.session()
            return session

    def _key(self, ctx: Context | None) -> str | None:
        if not self.per_connection:
            return None
        connection = _connection(ctx)
        key = getattr(connection, "session_id", None)
        if not isinstance(key, str):
            raise RuntimeError("this server keeps one Python session per MCP session; this request has none")
        if not connection.state.get("codeact_close"):  # once per MCP session, however often it resets
            connection.state["codeact_close"] = True
            connection.exit_stack.push_async_callback(self._end, key)  # DELETE, expiry, crash, shutdown
        return key

    async def _end(self, key: str | None) -> None:
        with self._lock:
            session = self._sessions.pop(key, None)
            if session is None:
                return
            self._closing.add(session)  # still counted live until closed
        try:
            await asyncio.to_thread(session.close)
        finally:
            with self._lock:
                self._closing.discard(session)

    async def execute_python(self, code: Code, ctx: Context) -> Annotated[CallToolResult, ExecutionResult]:
        session = self.session(ctx)
        result = await run_with_progress(session, code, ctx)  # progress notifications when asked for
        text = render_observation(result, self.max_observation_chars)
        return CallToolResult(content=[TextContent(type="text", text=text)],
                              structured_content=result.model_dump(mode="json"), is_error=not result.ok)

    async def reset_session(self, ctx: Context) -> str:
        await self._end(self._key(ctx))
        return "The session was reset: a fresh Python namespace; earlier variables are gone."

    def close(self) -> None:
        with self._lock:
            sessions, self._sessions = list(self._sessions.values()), {}
        for session in sessions:
            session.close()


def _connection(ctx: Context | None) -> Any:
    """The MCP connection a request came on: its session id, state and exit stack (unwound when
    the MCP session ends however it ends). The SDK's handler context reaches it through its
    per-request ``ServerSession`` only; its newer ``Context`` has it as ``connection``."""
    request_context = None if ctx is None else ctx.request_context
    connection = getattr(request_context, "connection", None)
    if connection is None:
        connection = getattr(getattr(request_context, "session", None), "_connection", None)
    return connection


if TYPE_CHECKING:
    from starlette.types import ASGIApp

    #: Deprecated spelling of :class:`CodeActMCP`.
    CodeactMCP = CodeActMCP
else:
    def __getattr__(name: str) -> Any:
        return deprecated_alias(__name__, name, {"CodeactMCP": ("codeact.agent.mcp_server.CodeActMCP", CodeActMCP)})


def build_mcp_server(runtime: Runtime, *, name: str = "codeact",
                     per_connection: bool = False) -> tuple[MCPServer, CodeActMCP]:
    """An ``MCPServer`` exposing ``execute_python`` and ``reset_session`` over ``runtime``
    (``per_connection``: a session per MCP session, as over HTTP)."""
    tools = CodeActMCP(runtime, per_connection=per_connection)
    server: MCPServer = MCPServer(name, instructions=(
        f"Run Python with {EXECUTE_PYTHON}; the session persists between calls. The functions listed in "
        f"its description call tools on the host."))
    server.add_tool(tools.execute_python, name=EXECUTE_PYTHON, description=execute_python_tool(runtime).description)
    server.add_tool(tools.reset_session, name="reset_session",
                    description="Discard the Python session (all variables); the next execute_python starts fresh.")
    return server, tools


def build_http_app(runtime: Runtime, options: HttpOptions) -> tuple[ASGIApp, CodeActMCP]:
    """The streamable HTTP app (at ``/mcp``) serving ``runtime``, guarded as ``options`` say, and
    its tools (whose ``live_sessions`` counts the open codeact sessions). Serve it with any ASGI
    server; :func:`serve_mcp` runs it with uvicorn."""
    server, tools = build_mcp_server(runtime, per_connection=True)
    return mcp_http_app(server, options), tools


def serve_mcp(runtime: Runtime, *, transport: Literal["stdio", "http"] = "stdio", host: str = "127.0.0.1",
              port: int = 8000, unix: str | os.PathLike[str] | None = None, token: str | None = None,
              auth: bool = True, max_sessions: int = DEFAULT_MAX_SESSIONS,
              session_idle_s: float = DEFAULT_SESSION_IDLE_S, errlog: TextIO | None = None) -> None:
    """Serve until the client hangs up (stdio) or the process is interrupted (streamable HTTP at
    ``http://HOST:PORT/mcp``, or on the Unix socket ``unix``); then close the sessions. The runtime
    stays the caller's.

    Over HTTP every request needs ``Authorization: Bearer <token>``: ``token``, else
    ``$CODEACT_MCP_TOKEN``, else one minted now, written once to ``errlog`` (default stderr) and to
    a 0600 file (its path said too) removed at exit. ``auth=False`` opts out (with a warning on
    ``errlog``). At most ``max_sessions`` MCP sessions live at once; one without a request for
    ``session_idle_s`` is ended, its codeact session closed."""
    if transport == "stdio":
        if unix is not None:
            raise ValueError("unix= serves HTTP over a socket: pass transport='http'")
        server, tools = build_mcp_server(runtime)
        try:
            server.run("stdio")
        finally:
            tools.close()
        return
    errlog = errlog or sys.stderr
    required, minted = resolve_token(token, auth)
    options = HttpOptions(host=host, port=port, token=required, max_sessions=max_sessions,
                          session_idle_s=session_idle_s, unix=None if unix is None else os.fspath(unix))
    app, tools = build_http_app(runtime, options)
    try:
        if required is None:
            print("codeact serve-mcp: authentication is OFF (--no-auth): any local process or user that can "
                  "reach the server runs code with your tools and credentials", file=errlog, flush=True)
            serve_http(app, options)
        elif not minted:
            serve_http(app, options)
        else:
            with written_token(required, token_file(options)) as path:
                print(f"codeact serve-mcp: bearer token (also in {path}, mode 0600): {required}\n"
                      f"codeact serve-mcp: clients send the header 'Authorization: Bearer <token>'",
                      file=errlog, flush=True)
                serve_http(app, options)
    finally:
        tools.close()
