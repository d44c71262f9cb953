"""``execute_python`` as an MCP task, served through the SDK's extension interface
(``mcp.server.extension``, identifier ``io.modelcontextprotocol/tasks``): the installed ``mcp``
(2.3) carries the task types (``mcp_types``: ``Task``, ``CreateTaskResult``, ``tasks/get`` …) but
serves none of the ``tasks/*`` methods itself, and its client has no task API (a client sends them
with ``ClientSession.send_request``).

On a 2026-07-28 connection, a ``tools/call`` of ``execute_python`` whose params carry ``task`` is
answered at once with a ``CreateTaskResult`` (``resultType: "task"``); the run goes on in the
background in the caller's session. On an older wire (the HTTP server's sessions) the SDK would
refuse that result shape, so ``task`` is ignored there and the call runs as usual, with progress. ``tasks/get``
polls it, ``tasks/result`` waits for and returns its ``CallToolResult``, ``tasks/cancel``
interrupts the code (the run ends ``interrupted``, its records kept). A client sees only its own
tasks; at most ``max_tasks`` are kept per client (finished ones dropped first, the oldest first).
"""

from __future__ import annotations

import asyncio
import collections
import datetime
import secrets
from collections.abc import Awaitable, Callable, Sequence
from typing import Any

import mcp_types as types
from mcp.server.context import CallNext, HandlerResult, ServerRequestContext
from mcp.server.extension import Extension, MethodBinding
from mcp.shared.exceptions import MCPError
from mcp_types.version import MODERN_PROTOCOL_VERSIONS

TASKS_EXTENSION = "io.modelcontextprotocol/tasks"
DEFAULT_MAX_TASKS = 16
_POLL_MS = 200

#: Runs the code of a task in the caller's session: (code, the request's context) → the tool's result.
Runner = Callable[[str, Any], Awaitable[types.CallToolResult]]


def _now() -> str:
    return datetime.datetime.now(datetime.timezone.utc).isoformat()


class _Entry:
    def __init__(self, task_id: str, ttl: int | None) -> None:
        self.task = types.Task(task_id=task_id, status="working", created_at=_now(), last_updated_at=_now(),
                               ttl=ttl, poll_interval=_POLL_MS)
        self.work: asyncio.Task[types.CallToolResult] | None = None

    def settle(self, status: str, message: str | None = None) -> None:
        self.task = self.task.model_copy(update={"status": status, "status_message": message,
                                                 "last_updated_at": _now()})


class TasksExtension(Extension):
    """Long ``execute_python`` runs as tasks: the extension's interceptor and its three methods."""

    identifier = TASKS_EXTENSION

    def __init__(self, tool: str, run: Runner, key: Callable[[Any], str | None],
                 max_tasks: int = DEFAULT_MAX_TASKS) -> None:
        self.tool, self._run, self._key, self.max_tasks = tool, run, key, max_tasks
        self._tasks: dict[str | None, collections.OrderedDict[str, _Entry]] = {}

    def settings(self) -> dict[str, Any]:
        return {"tools": [self.tool], "methods": ["tasks/get", "tasks/result", "tasks/cancel"]}

    def methods(self) -> Sequence[MethodBinding]:
        return (MethodBinding("tasks/get", types.GetTaskRequestParams, self._get),
                MethodBinding("tasks/result", types.GetTaskPayloadRequestParams, self._result),
                MethodBinding("tasks/cancel", types.CancelTaskRequestParams, self._cancel))

    async def intercept_tool_call(self, params: types.CallToolRequestParams, ctx: ServerRequestContext[Any, Any],
                                  call_next: CallNext) -> HandlerResult:
        if params.task is None or params.name != self.tool or ctx.protocol_version not in MODERN_PROTOCOL_VERSIONS:
            return await call_next(ctx)  # a plain call (a task's result type exists on the 2026 wire only)
        code = (params.arguments or {}).get("code")
        if not isinstance(code, str):
            raise MCPError(code=types.INVALID_PARAMS, message="execute_python needs a 'code' string")
        key = self._key(ctx)
        entry = _Entry(f"task_{secrets.token_hex(8)}", params.task.ttl)
        kept = self._tasks.setdefault(key, collections.OrderedDict())
        kept[entry.task.task_id] = entry
        self._evict(kept)
        entry.work = asyncio.ensure_future(self._run(code, None if key is None else ctx))
        entry.work.add_done_callback(lambda done: self._settled(entry, done))
        # an extension's result type: the runner passes it on as it is (the core sieve would refuse it)
        return {"resultType": "task", **types.CreateTaskResult(task=entry.task).model_dump(mode="json", by_alias=True,
                                                                                        exclude_none=True)}

    def _evict(self, kept: collections.OrderedDict[str, _Entry]) -> None:
        """Past ``max_tasks``: drop finished tasks, oldest first; a client with that many running
        is refused a new one."""
        for task_id in [t for t, e in kept.items() if e.task.status != "working"]:
            if len(kept) <= self.max_tasks:
                return
            del kept[task_id]
        if len(kept) > self.max_tasks:
            newest = next(reversed(kept))
            del kept[newest]
            raise MCPError(code=types.INVALID_REQUEST,
                           message=f"{self.max_tasks} tasks of this session are running (the most kept); "
                                   "wait for one or cancel it")

    @staticmethod
    def _settled(entry: _Entry, done: asyncio.Task[types.CallToolResult]) -> None:
        if done.cancelled():
            entry.settle("cancelled", "cancelled on request")
        elif done.exception() is not None:
            entry.settle("failed", f"{type(done.exception()).__name__}: {done.exception()}")
        else:
            entry.settle("completed")

    def _entry(self, ctx: ServerRequestContext[Any, Any], task_id: str) -> _Entry:
        kept = self._tasks.get(self._key(ctx))
        entry = kept.get(task_id) if kept is not None else None
        if entry is None:
            raise MCPError(code=types.INVALID_PARAMS, message=f"no task {task_id!r} in this session")
        return entry

    async def _get(self, ctx: ServerRequestContext[Any, Any], params: types.GetTaskRequestParams) -> HandlerResult:
        return types.GetTaskResult(**self._entry(ctx, params.task_id).task.model_dump())

    async def _result(self, ctx: ServerRequestContext[Any, Any],
                      params: types.GetTaskPayloadRequestParams) -> HandlerResult:
        entry = self._entry(ctx, params.task_id)
        assert entry.work is not None
        try:
            return await asyncio.shield(entry.work)
        except asyncio.CancelledError:
            if entry.work.cancelled():
                raise MCPError(code=types.INVALID_REQUEST, message=f"task {params.task_id!r} was cancelled") from None
            raise

    async def _cancel(self, ctx: ServerRequestContext[Any, Any],
                      params: types.CancelTaskRequestParams) -> HandlerResult:
        entry = self._entry(ctx, params.task_id)
        assert entry.work is not None
        if entry.task.status == "working":
            entry.work.cancel()
            try:
                await asyncio.wait({entry.work})
            finally:
                self._settled(entry, entry.work)
        return types.CancelTaskResult(**entry.task.model_dump())
