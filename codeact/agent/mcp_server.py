"""codeact as a tool for other agents: an MCP server (official ``mcp`` SDK, ``MCPServer``).

Four tools:

- ``execute_python(code)``: runs the code in the caller's persistent session, the configured
  tools available inside as functions (their prompt view, within the runtime's prompt budget, is
  in the tool's description). Returns the rendered observation as text and the ``ExecutionResult``
  as structured content matching the declared ``outputSchema``, capped like the text view (see
  :func:`structured_view`; ``isError`` when the run failed).
- ``reset_session()``: discards the caller's session (variables, sandbox); the next run starts fresh.
- ``snapshot()`` / ``restore(snapshot_id)``: keep the caller's session state on the server (at
  most ``max_snapshots`` per client, the oldest dropped) and later replace the session with it.

Long runs as MCP tasks (``_mcp_tasks``, on the 2026-07-28 wire): ``execute_python`` with ``task`` in
its params answers at once with a task, polled with ``tasks/get``, awaited with ``tasks/result`` and
stopped with ``tasks/cancel``; elsewhere it runs as a plain call with progress notifications.

Over stdio the client is the server's own process: one session. Over HTTP each MCP session
(``Mcp-Session-Id``) gets a codeact session of its own, closed when the MCP session ends (DELETE)
or expires; the server requires a bearer token, accepts only its own Origin and caps the live
sessions (see ``_mcp_http``). Serve with :func:`serve_mcp` or
``codeact serve-mcp [--http --port N | --unix PATH] [--tools FILE]...``.
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
import os
import secrets
import sys
import threading
import weakref
from collections.abc import AsyncIterator
from typing import TYPE_CHECKING, Annotated, Any, Literal, TextIO

from mcp.server.mcpserver import Context, MCPServer
from mcp.server.mcpserver.exceptions import ToolError as MCPToolError
from mcp.types import CallToolResult, TextContent
from pydantic import Field

from .._deprecated import deprecated_alias
from ..results import ExecutionResult, bounded_value, render_observation
from ..runtime.session import Runtime, Session
from ..runtime.snapshot import Snapshot
from ._mcp_approval import elicitation_approver
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
from ._mcp_tasks import DEFAULT_MAX_TASKS, TasksExtension
from .prompts import EXECUTE_PYTHON, execute_python_tool

__all__ = ["DEFAULT_MAX_SESSIONS", "DEFAULT_SESSION_IDLE_S", "TOKEN_ENV", "CodeActMCP", "HttpOptions",
           "build_http_app", "build_mcp_server", "serve_mcp", "structured_view", "token_problem"]

Code = Annotated[str, Field(description="Python source code to run")]
SnapshotId = Annotated[str, Field(description="The snapshot_id a snapshot call returned")]

#: Snapshots kept per client at most (the oldest dropped first).
DEFAULT_MAX_SNAPSHOTS = 8


def structured_view(result: ExecutionResult, max_chars: int) -> dict[str, Any]:
    """``result`` as structured content of about ``max_chars`` characters of JSON at most: the
    streams cut (their ``*_truncated`` set), the value, the answer and each call's arguments and
    result bounded (``bounded_value``'s truncated view), and past the budget only the first calls
    kept (``reason`` says how many). Under a flow policy a call's labeled arguments and result are
    replaced by a note, as in the text. Still an ``ExecutionResult``: it validates against the schema."""
    view = result.model_copy()
    if len(view.stdout) > max_chars // 2:
        view.stdout, view.stdout_truncated = view.stdout[: max_chars // 2], True
    if len(view.stderr) > max_chars // 4:
        view.stderr, view.stderr_truncated = view.stderr[: max_chars // 4], True
    view.value = bounded_value(view.value, max_chars // 4, "value")
    view.final_answer = bounded_value(view.final_answer, max_chars // 4, "final_answer")
    if view.error is not None and len(view.error.traceback) > max_chars // 4:
        view.error = view.error.model_copy(update={"traceback": view.error.traceback[-(max_chars // 4):]})
    calls, budget = [], max_chars // 2
    for call in (c.as_shown() for c in view.calls):  # labeled values stay out of the model's view
        small = call.model_copy(update={"arguments": bounded_value(call.arguments, max_chars // 16, call.id),
                                        "result": bounded_value(call.result, max_chars // 16, call.id)})
        budget -= len(small.model_dump_json())
        if budget < 0:
            break
        calls.append(small)
    if len(calls) < len(view.calls):
        note = f"the structured content lists the first {len(calls)} of {len(view.calls)} tool calls"
        view.reason = note if view.reason is None else f"{view.reason}; {note}"
    view.calls = calls
    return view.model_dump(mode="json")


class CodeActMCP:
    """The two tools over one runtime: one (lazily opened) session, or with ``per_connection`` one
    per MCP session, each closed when its MCP session ends."""

    def __init__(self, runtime: Runtime, *, max_observation_chars: int = 8000, per_connection: bool = False,
                 max_structured_chars: int | None = None, max_snapshots: int = DEFAULT_MAX_SNAPSHOTS) -> None:
        self.runtime = runtime
        self.max_observation_chars = max_observation_chars
        #: The structured content's budget (characters of JSON): four times the text view's by default.
        self.max_structured_chars = max_structured_chars or 4 * max_observation_chars
        self.max_snapshots = max_snapshots
        self.per_connection = per_connection
        self._sessions: dict[str | None, Session] = {}  # MCP session id (None: the one shared) → session
        self._snapshots: dict[str | None, collections.OrderedDict[str, Snapshot]] = {}
        self._closing: set[Session] = set()
        self._lock = threading.Lock()
        #: One run at a time per session from here, so each run gets its own request's approver.
        self._runs: weakref.WeakKeyDictionary[Session, asyncio.Lock] = weakref.WeakKeyDictionary()

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
            connection.exit_stack.push_async_callback(self._disconnected, key)  # DELETE, expiry, crash, shutdown
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

    async def _disconnected(self, key: str | None) -> None:
        with self._lock:
            self._snapshots.pop(key, None)
        await self._end(key)

    async def execute_python(self, code: Code, ctx: Context) -> Annotated[CallToolResult, ExecutionResult]:
        session = self.session(ctx)
        async with self._approving(session, ctx):
            result = await run_with_progress(session, code, ctx)  # progress notifications when asked for
        return self._answer(result)

    async def run_task(self, code: str, ctx: Any) -> CallToolResult:
        """``execute_python`` started as an MCP task (``_mcp_tasks``): cancelling it interrupts the code.
        A task has no request to elicit through, so a call the flow policy asks about is refused."""
        session = self.session(ctx)
        async with self._approving(session, None):
            return self._answer(await session.arun(code))

    @contextlib.asynccontextmanager
    async def _approving(self, session: Session, ctx: Context | None) -> AsyncIterator[None]:
        """For one run: the flow policy's ``ask`` goes to this request's client as an elicitation
        (when it can answer one; else the call is refused, as with no approver)."""
        lock = self._runs.setdefault(session, asyncio.Lock())
        async with lock:
            session.flow_approver = None if ctx is None else elicitation_approver(ctx, session.config.timeout_s)
            try:
                yield
            finally:
                session.flow_approver = None

    def _answer(self, result: ExecutionResult) -> CallToolResult:
        text = render_observation(result, self.max_observation_chars)
        return CallToolResult(content=[TextContent(type="text", text=text)],
                              structured_content=structured_view(result, self.max_structured_chars),
                              is_error=not result.ok)

    async def snapshot(self, ctx: Context) -> dict[str, Any]:
        key = self._key(ctx)
        session = self.session(ctx)
        snap = await asyncio.to_thread(session.snapshot, allow_inexact=True)
        snapshot_id = f"snap_{secrets.token_hex(6)}"
        with self._lock:
            kept = self._snapshots.setdefault(key, collections.OrderedDict())
            kept[snapshot_id] = snap
            while len(kept) > self.max_snapshots:
                kept.popitem(last=False)
        return {"snapshot_id": snapshot_id, "cells": len(snap.cells), "files": len(snap.files or ()),
                "left_out": [c.index for c in snap.skipped]}

    async def restore(self, snapshot_id: SnapshotId, ctx: Context) -> str:
        key = self._key(ctx)
        with self._lock:
            kept = self._snapshots.get(key)
            snap = kept.get(snapshot_id) if kept is not None else None
        if snap is None:
            raise MCPToolError(f"no snapshot {snapshot_id!r} is kept for this session (at most {self.max_snapshots} "
                             "are, the oldest dropped first)")
        restored = await asyncio.to_thread(self.runtime.restore, snap)
        with self._lock:
            old, self._sessions[key] = self._sessions.get(key), restored
        if old is not None:
            await asyncio.to_thread(old.close)
        return f"The session now has the state of {snapshot_id} ({len(snap.cells)} cells replayed)."

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
    # a handler's Context, or the SDK's own request context (what an extension's handlers get)
    request_context = None if ctx is None else getattr(ctx, "request_context", ctx)
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


def build_mcp_server(runtime: Runtime, *, name: str = "codeact", per_connection: bool = False,
                     max_structured_chars: int | None = None,
                     max_snapshots: int = DEFAULT_MAX_SNAPSHOTS,
                     max_tasks: int = DEFAULT_MAX_TASKS) -> tuple[MCPServer, CodeActMCP]:
    """An ``MCPServer`` exposing ``execute_python``, ``reset_session``, ``snapshot`` and ``restore``
    over ``runtime`` (``per_connection``: a session per MCP session, as over HTTP)."""
    tools = CodeActMCP(runtime, per_connection=per_connection, max_structured_chars=max_structured_chars,
                       max_snapshots=max_snapshots)
    tasks = TasksExtension(EXECUTE_PYTHON, tools.run_task, tools._key, max_tasks=max_tasks)
    server: MCPServer = MCPServer(name, instructions=(
        f"Run Python with {EXECUTE_PYTHON}; the session persists between calls. The functions listed in "
        f"its description call tools on the host."), extensions=[tasks])
    server.add_tool(tools.execute_python, name=EXECUTE_PYTHON, description=execute_python_tool(runtime).description)
    server.add_tool(tools.reset_session, name="reset_session",
                    description="Discard the Python session (all variables); the next execute_python starts fresh.")
    server.add_tool(tools.snapshot, name="snapshot", description=(
        "Keep the Python session's state (variables rebuilt by replay, workspace files) on the server; "
        f"returns a snapshot_id for restore. At most {tools.max_snapshots} are kept, the oldest dropped."))
    server.add_tool(tools.restore, name="restore", description=(
        "Replace the Python session with the state a snapshot call kept (its snapshot_id)."))
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
