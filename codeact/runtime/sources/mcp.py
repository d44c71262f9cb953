"""MCP tools: an MCP server's tools, listed once and called over one connection (official ``mcp`` SDK).

    tools = Toolset.from_mcp(["python", "server.py"])          # stdio: a command line
    tools = Toolset.from_mcp("http://127.0.0.1:8000/mcp")      # streamable HTTP
    tools = Toolset.from_mcp({"github": [...], "docs": "http://127.0.0.1:8001/mcp"})   # several

Each server's tools are one group (the name given for it, else the server's own name), which
is how a large toolset's prompt index lists them. Several servers connect at once.

The connection lives in one asyncio task on a dedicated event-loop thread for its whole life (the
SDK's anyio cancel scopes must be entered and left by the same task). The tools' functions are
async and submit each call to that loop, so calls from any loop run concurrently over the one
connection. ``toolset.close()`` (the runtime calls it) ends the connection and the server process.
A connection that breaks is not reopened: its calls fail with ``upstream_error``.

This source builds ``Tool``s and hands back the connection with them (:class:`MCPTools`);
``Toolset.from_mcp`` makes the toolset that closes it. It never imports ``Toolset``.

Results: ``structuredContent`` when the server gives it, else the text content parsed as JSON,
else the text (several content blocks: a list). ``isError`` → ToolError("tool_exception", text).
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import inspect
import json
import sys
from collections.abc import AsyncIterator, Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, TextIO, TypeAlias, TypeGuard

import anyio
from mcp import ClientSession, StdioServerParameters
from mcp.client.stdio import stdio_client

from ...errors import ToolDefinitionError, ToolError
from ...tool_stubs import ToolSpec
from .._loop import LoopThread
from .._tool import Tool, ToolPolicy

__all__ = ["MCPConnection", "MCPServerRef", "MCPTools", "aconnect", "connect", "connect_all", "is_mcp_server"]

#: How a server is named: a streamable-HTTP URL, a stdio command line (a list of strings), or the
#: SDK's ``StdioServerParameters``. (Not ``MCPServer``: that is the SDK's server class.)
MCPServerRef: TypeAlias = "str | Sequence[str] | StdioServerParameters"
_WRAP_MARK = "x-fastmcp-wrap-result"  # mcp 1.x wraps non-object results as {"result": value}
_MAX_PAGES = 100


def is_mcp_server(source: object) -> TypeGuard[MCPServerRef]:
    """Whether ``source`` names a server (rather than being a list of tool definitions)."""
    if isinstance(source, str | StdioServerParameters):
        return True
    return isinstance(source, list | tuple) and bool(source) and all(isinstance(s, str) for s in source)


class MCPConnection:
    """One client session to one MCP server, owned by a task on its own event-loop thread."""

    def __init__(self, server: MCPServerRef, *, headers: Mapping[str, str] | None = None,
                 env: Mapping[str, str] | None = None, cwd: str | None = None,
                 connect_timeout_s: float = 30.0, errlog: TextIO | None = None) -> None:
        self.url: str | None = None
        self.params: StdioServerParameters | None = None
        if isinstance(server, StdioServerParameters):
            self.params = server
        elif isinstance(server, str) and server.startswith(("http://", "https://")):
            self.url = server
        elif isinstance(server, str):
            raise ToolDefinitionError(f"an MCP server is a URL or a command as a list of strings, not {server!r}")
        else:
            command = list(server)
            self.params = StdioServerParameters(command=command[0], args=command[1:],
                                                env=dict(env) if env else None, cwd=cwd)
        self.label = self.url or " ".join([self.params.command, *self.params.args])  # type: ignore[union-attr]
        self.headers = dict(headers or {})
        self.connect_timeout_s = connect_timeout_s
        self.errlog = errlog
        self._thread: LoopThread | None = None
        self._task: concurrent.futures.Future[None] | None = None
        self._stop: asyncio.Event | None = None
        self._session: ClientSession | None = None
        self._failure: BaseException | None = None
        self.server_name: str | None = None  # what the server calls itself (from initialize)

    # -- lifetime --------------------------------------------------------------------------------
    def _begin(self) -> concurrent.futures.Future[list[Any]]:
        if self._thread is not None:
            raise RuntimeError("this MCP connection was already started")
        self._thread = LoopThread(max_workers=2, name="codeact-mcp")
        self._stop = asyncio.Event()
        ready: concurrent.futures.Future[list[Any]] = concurrent.futures.Future()
        self._task = self._thread.submit(self._serve(ready))
        return ready

    def start(self) -> list[Any]:
        """Connect, initialize and list the tools (``mcp.types.Tool`` objects); blocks."""
        ready = self._begin()
        try:
            return ready.result(self.connect_timeout_s)
        except BaseException as exc:
            self.close()
            raise self._start_error(exc) from exc

    async def astart(self) -> list[Any]:
        """:meth:`start` for async callers (the connection still lives on its own thread)."""
        ready = self._begin()
        try:
            return await asyncio.wait_for(asyncio.wrap_future(ready), self.connect_timeout_s)
        except BaseException as exc:
            await asyncio.to_thread(self.close)
            raise self._start_error(exc) from exc

    def _start_error(self, exc: BaseException) -> ToolDefinitionError:
        if isinstance(exc, concurrent.futures.TimeoutError | asyncio.TimeoutError):
            return ToolDefinitionError(
                f"the MCP server {self.label!r} did not answer within {self.connect_timeout_s} s")
        return ToolDefinitionError(f"cannot connect to the MCP server {self.label!r}: {_describe(exc)}")

    async def _serve(self, ready: concurrent.futures.Future[list[Any]]) -> None:
        """The connection's one task: open, list the tools, wait for the stop, close."""
        assert self._stop is not None
        try:
            async with contextlib.AsyncExitStack() as stack:
                streams = await stack.enter_async_context(self._transport())
                session = await stack.enter_async_context(ClientSession(streams[0], streams[1]))
                # Bounded in here, where the transport then closes as after any failure (the server
                # process stopped): else a silent server held close() for its whole timeout.
                with anyio.fail_after(self.connect_timeout_s):
                    init = await session.initialize()
                    info = getattr(init, "server_info", None) or getattr(init, "serverInfo", None)
                    self.server_name = getattr(info, "name", None) or None
                    tools = await _list_tools(session)
                self._session = session
                ready.set_result(tools)
                await self._stop.wait()
        except BaseException as exc:  # kept for the calls' error messages; re-raised if not an Exception
            self._failure = exc
            if not ready.done():
                ready.set_exception(exc)
            if not isinstance(exc, Exception):
                raise
        finally:
            self._session = None

    @contextlib.asynccontextmanager
    async def _transport(self) -> AsyncIterator[Sequence[Any]]:
        if self.params is not None:
            async with stdio_client(self.params, errlog=self.errlog or sys.stderr) as streams:
                yield streams
            return
        from mcp.client import streamable_http

        assert self.url is not None
        modern = getattr(streamable_http, "streamable_http_client", None)
        if modern is None:  # mcp 1.x
            legacy = streamable_http.streamablehttp_client  # type: ignore[attr-defined]
            async with legacy(self.url, headers=self.headers) as streams:
                yield streams
            return
        async with contextlib.AsyncExitStack() as stack:
            options: dict[str, Any] = {}
            if self.headers:  # mcp 2.x takes headers through its own HTTP client
                from mcp.shared._httpx_utils import create_mcp_http_client

                options["http_client"] = await stack.enter_async_context(create_mcp_http_client(headers=self.headers))
            yield await stack.enter_async_context(modern(self.url, **options))

    def close(self, timeout_s: float = 10.0) -> None:
        """End the session and the server (stdio: its process). Idempotent."""
        thread, self._thread = self._thread, None
        if thread is None:
            return
        if self._stop is not None:
            thread.loop.call_soon_threadsafe(self._stop.set)
        if self._task is not None:
            with contextlib.suppress(BaseException):
                self._task.result(timeout_s)
        thread.close()

    @property
    def connected(self) -> bool:
        return self._session is not None

    # -- calls -----------------------------------------------------------------------------------
    async def call_tool(self, name: str, arguments: dict[str, Any], *, unwrap: bool = False) -> Any:
        """Call a tool from any event loop; the result as described in the module docstring."""
        session, thread = self._session, self._thread
        if session is None or thread is None:
            why = f": {_describe(self._failure)}" if self._failure is not None else ""
            raise ToolError("upstream_error", f"the MCP server {self.label!r} is not connected{why}", retryable=False)
        future = asyncio.run_coroutine_threadsafe(self._call(session, name, arguments), thread.loop)
        result = await asyncio.wrap_future(future)
        if unwrap and isinstance(result, dict) and set(result) == {"result"}:
            return result["result"]
        return result

    async def _call(self, session: ClientSession, name: str, arguments: dict[str, Any]) -> Any:
        try:
            result = await session.call_tool(name, arguments)
        except Exception as exc:
            raise _call_error(exc, self.label) from None
        return _result(result.model_dump(by_alias=True, mode="json", exclude_none=True))


async def _list_tools(session: ClientSession) -> list[Any]:
    tools: list[Any] = []
    cursor: str | None = None
    for _ in range(_MAX_PAGES):
        if cursor is None:
            page = await session.list_tools()
        else:
            from mcp.types import PaginatedRequestParams

            page = await session.list_tools(params=PaginatedRequestParams(cursor=cursor))
        tools.extend(page.tools)
        cursor = getattr(page, "next_cursor", None) or getattr(page, "nextCursor", None)
        if not cursor:
            break
    return tools


def _result(data: dict[str, Any]) -> Any:
    content = data.get("content") or []
    if data.get("isError"):
        text = "\n".join(c.get("text", "") for c in content if c.get("type") == "text").strip()
        raise ToolError("tool_exception", text or "the MCP tool reported an error", retryable=False)
    if "structuredContent" in data:
        return data["structuredContent"]
    blocks = [_block(c) for c in content]
    return None if not blocks else blocks[0] if len(blocks) == 1 else blocks


def _block(content: dict[str, Any]) -> Any:
    if content.get("type") != "text":
        return content  # images, audio, resources: as the server sent them
    text = str(content.get("text", ""))
    try:
        return json.loads(text)
    except ValueError:
        return text


def _call_error(exc: Exception, label: str) -> ToolError:
    error = getattr(exc, "error", None)
    code = getattr(error, "code", None)
    message = str(getattr(error, "message", "") or exc)
    if code == -32602:  # JSON-RPC invalid params
        return ToolError("invalid_arguments", message)
    if code == -32601:  # method not found
        return ToolError("unknown_tool", message)
    if isinstance(code, int) and code != -32000:  # -32000: the SDK's "connection closed"
        return ToolError("tool_exception", f"the MCP server answered with error {code}: {message}")
    return ToolError("upstream_error", f"the MCP server {label!r} failed: {_describe(exc)}", retryable=False)


def _describe(exc: BaseException) -> str:
    """One line for an exception; an exception group is described by its first leaf."""
    while isinstance(getattr(exc, "exceptions", None), tuple) and exc.exceptions:  # type: ignore[attr-defined]
        exc = exc.exceptions[0]  # type: ignore[attr-defined]
    text = " ".join(str(exc).split())[:500]
    return f"{type(exc).__name__}: {text}" if text else type(exc).__name__


# -- tools -----------------------------------------------------------------------------------------
@dataclass(frozen=True)
class MCPTools:
    """One server's tools and the connection they call over: whoever holds them closes it
    (``Toolset.from_mcp`` hands it to the toolset's :meth:`~codeact.runtime.Toolset.close`)."""

    connection: MCPConnection
    tools: list[Tool]


def connect(server: MCPServerRef, *, tools: Sequence[str] | None = None, prefix: str = "",
            policy: ToolPolicy | None = None, policies: Mapping[str, ToolPolicy] | None = None,
            **connection: Any) -> MCPTools:
    """The server's tools (all, or those named in ``tools``), connected now.

    ``prefix`` goes before each tool's name (the server is called with its own name). ``policy`` is
    every tool's policy, ``policies`` per tool name; by default a tool the server marks read-only or
    idempotent is idempotent. ``connection``: :class:`MCPConnection`'s keywords.
    """
    conn = MCPConnection(server, **connection)
    return _tools(conn, conn.start(), tools, prefix, policy, policies)


async def aconnect(server: MCPServerRef, *, tools: Sequence[str] | None = None, prefix: str = "",
                   policy: ToolPolicy | None = None, policies: Mapping[str, ToolPolicy] | None = None,
                   **connection: Any) -> MCPTools:
    """:func:`connect` for async callers."""
    conn = MCPConnection(server, **connection)
    return _tools(conn, await conn.astart(), tools, prefix, policy, policies)


def connect_all(servers: Mapping[str, MCPServerRef], *, prefix: bool = False, **options: Any) -> list[MCPTools]:
    """Several servers' tools, ``{group name: server}``, connected at once; each server's tools are
    that group. ``prefix=True`` puts ``"<group>_"`` before each tool's name. ``options``: as for
    :func:`connect` (but ``tools``), shared by all servers. A failure closes every connection made."""
    if not servers:
        raise ToolDefinitionError("no MCP servers given")
    unknown = set(options) - _CONNECTION - {"policy", "policies"}
    if unknown:
        raise TypeError(f"options {sorted(unknown)} do not apply to several MCP servers")
    tool_options = {k: v for k, v in options.items() if k not in _CONNECTION}
    connection = {k: v for k, v in options.items() if k in _CONNECTION}
    conns = {group: MCPConnection(server, **connection) for group, server in servers.items()}
    parts: list[MCPTools] = []
    try:
        pending = {group: conn._begin() for group, conn in conns.items()}  # all connect concurrently
        for group, ready in pending.items():
            conn = conns[group]
            try:
                listed = ready.result(conn.connect_timeout_s)
            except BaseException as exc:
                raise conn._start_error(exc) from exc
            parts.append(_tools(conn, listed, None, f"{group}_" if prefix else "",
                                tool_options.get("policy"), tool_options.get("policies"), group=group))
    except BaseException:
        for conn in conns.values():
            conn.close()
        raise
    return parts


_CONNECTION = frozenset({"headers", "env", "cwd", "connect_timeout_s", "errlog"})


def _tools(conn: MCPConnection, listed: list[Any], wanted: Sequence[str] | None, prefix: str,
           policy: ToolPolicy | None, policies: Mapping[str, ToolPolicy] | None,
           group: str | None = None) -> MCPTools:
    group = group or conn.server_name or conn.label
    try:
        by_name = {t.name: t for t in listed}
        missing = sorted(set(wanted or ()) - set(by_name))
        if missing:
            raise ToolDefinitionError(f"the MCP server {conn.label!r} has no tool(s) {missing} "
                                      f"(it has: {', '.join(by_name)})")
        made = [_tool(conn, by_name[n], prefix, policy, policies or {}, group) for n in (wanted or list(by_name))]
    except BaseException:
        conn.close()
        raise
    return MCPTools(conn, made)


def _tool(conn: MCPConnection, listed: Any, prefix: str, policy: ToolPolicy | None,
          policies: Mapping[str, ToolPolicy], group: str) -> Tool:
    data = listed.model_dump(by_alias=True, exclude_none=True, mode="json")
    output = data.get("outputSchema")
    unwrap = isinstance(output, dict) and output.get(_WRAP_MARK) is True
    if unwrap:  # show the stub the value the call will return, not the wrapper
        data["outputSchema"] = (output.get("properties") or {}).get("result")
    if isinstance(data.get("description"), str):  # servers often send a raw, indented docstring
        data["description"] = inspect.cleandoc(data["description"])
    spec = ToolSpec.from_mcp({**data, "name": prefix + data["name"]})
    hints = data.get("annotations") or {}
    chosen = (policies.get(spec.name) or policies.get(data["name"]) or policy
              or ToolPolicy(idempotent=bool(hints.get("readOnlyHint") or hints.get("idempotentHint"))))
    return Tool(spec=spec, fn=_caller(conn, data["name"], unwrap), policy=chosen, group=group.strip() or None)


def _caller(conn: MCPConnection, name: str, unwrap: bool) -> Callable[..., Any]:
    async def call(**arguments: Any) -> Any:
        return await conn.call_tool(name, arguments, unwrap=unwrap)

    call.__qualname__ = call.__name__ = f"mcp:{name}"
    return call
