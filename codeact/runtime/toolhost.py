"""Dispatch of tool calls on the host: lookup → validate → permit → execute → record.

Every call, from sandboxed code or from a JSON function-calling loop, goes through
``ToolHost.handle``, so both modes share validation, policies and records. Calls run concurrently
on the host's event loop (at most ``max_concurrency`` tool executions at a time).

A result larger than ``max_result_chars`` (as JSON text) reaches the sandbox as a truncated view
``{"truncated": True, "call_id", "total_chars", "preview", "hint"}``; the host keeps the full
text for the session, and the built-in tool ``read_result(call_id, offset, limit)`` pages through it.
"""

from __future__ import annotations

import asyncio
import copy
import functools
import inspect
import random
import time
from collections.abc import Callable
from typing import Any

from pydantic_core import to_jsonable_python

from ..errors import ToolArgumentsError, ToolError
from ..results import ToolCallError, ToolCallRecord, oversized_json
from ..tool_stubs import ToolSpec
from ._loop import LoopThread
from .ledger import CallLedger, CallStore, cache_key
from .toolset import Tool, Toolset

__all__ = ["READ_RESULT", "CallDeadline", "PermissionHook", "ToolHost"]

#: (monotonic deadline, what to do then): a plain call's timeout, enforced by whoever dispatched it.
CallDeadline = tuple[float, Callable[[], None]]

#: (tool name, validated arguments) → True to allow, False or a reason string to deny (may be async).
PermissionHook = Callable[[str, dict[str, Any]], Any]

#: The built-in tool that pages through a large result kept on the host.
READ_RESULT = "read_result"
_BACKOFF_S = 0.1
#: An upstream asking to wait longer than this before a retry gets its error passed on instead.
_MAX_RETRY_WAIT_S = 30.0

_READ_RESULT_SPEC = ToolSpec(
    name=READ_RESULT,
    description=(
        "Read part of a tool result that was too large to return whole.\n\n"
        "Such a call returns {'truncated': True, 'call_id': ..., 'total_chars': ..., 'preview': ...} instead "
        "of its value. The full value is kept on the host as JSON text; this returns up to `limit` characters "
        "of it from `offset`. Join the pages' 'text' until 'next_offset' is None and json.loads the whole, "
        "or read only the part you need."
    ),
    input_schema={
        "type": "object",
        "properties": {
            "call_id": {"type": "string", "description": "The 'call_id' of the truncated result."},
            "offset": {"type": "integer", "minimum": 0, "default": 0, "description": "First character to read."},
            "limit": {"type": "integer", "minimum": 1, "description": "Most characters to read (capped by the host)."},
        },
        "required": ["call_id"],
        "additionalProperties": False,
    },
    output_schema={
        "type": "object",
        "description": "One page: 'text' from 'offset'; 'next_offset' is None after the last page.",
        "properties": {
            "call_id": {"type": "string"},
            "offset": {"type": "integer"},
            "text": {"type": "string"},
            "total_chars": {"type": "integer"},
            "next_offset": {"type": ["integer", "null"]},
        },
        "required": ["call_id", "offset", "text", "total_chars", "next_offset"],
    },
)


class _RateLimiter:
    """Lets calls of one tool start at least 1/rate seconds apart (waits; never fails the call).

    Calls pass one at a time and the next slot is measured from when a call actually started, so
    a late wake-up on a loaded machine can never bring two starts closer than the interval.
    """

    def __init__(self, per_second: float) -> None:
        self.interval = 1.0 / per_second
        self.last_start = -float("inf")
        self._lock: asyncio.Lock | None = None

    async def wait(self) -> None:  # only ever runs on the host's loop thread
        if self._lock is None:
            self._lock = asyncio.Lock()
        async with self._lock:
            delay = self.last_start + self.interval - time.monotonic()
            while delay > 0:
                await asyncio.sleep(delay)
                delay = self.last_start + self.interval - time.monotonic()
            self.last_start = time.monotonic()


class ToolHost:
    """Runs tool calls for a runtime: policies, timeouts, retries, the cache, records."""

    def __init__(self, toolset: Toolset, loop: LoopThread, *, permission: PermissionHook | None = None,
                 ask: PermissionHook | None = None, max_result_chars: int = 1_000_000,
                 max_concurrency: int = 32) -> None:
        self.toolset = toolset
        self.loop = loop
        self.permission = permission
        self.ask = ask
        self.max_result_chars = max_result_chars
        #: Tool executions in flight at once, across every session of the runtime.
        self.max_concurrency = max_concurrency
        #: Tools the host answers itself; a user tool of the same name takes precedence.
        self.builtins: dict[str, Tool] = {READ_RESULT: Tool(spec=_READ_RESULT_SPEC)}
        self._limiters: dict[str, _RateLimiter] = {}
        self._slots: asyncio.Semaphore | None = None

    @property
    def specs(self) -> list[ToolSpec]:
        """What the sandbox gets stubs for: the toolset's tools, then the built-ins it does not shadow."""
        return [*self.toolset.specs, *(t.spec for n, t in self.builtins.items() if n not in self.toolset)]

    # -- entry points ------------------------------------------------------------------------
    def dispatch(self, ledger: CallLedger, name: str, arguments: Any,
                 reply: Callable[[dict[str, Any]], None]) -> CallDeadline | None:
        """Record the call now, run it, ``reply`` with the sandbox's payload once.

        A plain sync tool (no permission hook, rate limit, cache or retries) runs straight on a pool
        thread, skipping two hops through the event loop; its timeout is then the caller's to
        enforce: call the returned deadline's callback when it passes (a late answer is dropped).
        """
        record = ledger.open(name, arguments)
        tool = self.toolset.get(name)
        if tool is not None and self._plain(tool):
            self.loop.pool.submit(self._run_plain, ledger, record, tool, reply)
            if tool.policy.timeout_s is None:
                return None
            return time.monotonic() + tool.policy.timeout_s, functools.partial(
                self._expire, ledger, record, tool, reply)
        future = self.loop.submit(self.handle(ledger, record))
        future.add_done_callback(lambda _f: reply(self._payload(ledger, record)))
        return None

    def _plain(self, tool: Tool) -> bool:
        policy = tool.policy
        # The pool's size bounds the fast path; a tighter max_concurrency needs the loop's semaphore.
        return (tool.fn is not None and not tool.is_async and policy.permission == "allow" and self.permission is None
                and not policy.rate_limit_per_s and not policy.cacheable and not policy.idempotent
                and self.max_concurrency >= self.loop.max_workers)

    def _run_plain(self, ledger: CallLedger, record: ToolCallRecord, tool: Tool,
                   reply: Callable[[dict[str, Any]], None]) -> None:
        """The fast path, on a pool thread: validate, count, run, record, reply."""
        try:
            try:
                args = tool.spec.validate_arguments(record.arguments)
            except ToolArgumentsError as exc:
                raise ToolError("invalid_arguments", "; ".join(exc.problems)) from None
            if not ledger.admit(tool.name, tool.policy.max_calls):
                raise ToolError("permission_denied",
                                f"{tool.name!r} may be called at most {tool.policy.max_calls} times per execution")
            assert tool.fn is not None
            try:
                value = tool.fn(**args)
            except ConnectionError as exc:
                raise ToolError("upstream_error", f"{type(exc).__name__}: {exc}"[:2000]) from None
            done = ledger.finish(record, result=_jsonable(tool.name, value))
        except ToolError as exc:
            done = ledger.finish(record, error=ToolCallError(code=exc.code, message=exc.message,
                                                             retryable=exc.retryable))
        except BaseException as exc:  # a bug in a tool (even sys.exit()): data, not a host crash
            done = ledger.finish(record, error=ToolCallError(code="tool_exception",
                                                             message=f"{type(exc).__name__}: {exc}"[:2000]))
        if done:
            reply(self._payload(ledger, record))

    def _expire(self, ledger: CallLedger, record: ToolCallRecord, tool: Tool,
                reply: Callable[[dict[str, Any]], None]) -> None:
        error = ToolCallError(code="timeout", message=f"{tool.name!r} did not answer within {tool.policy.timeout_s} s",
                              retryable=True)
        if ledger.finish(record, error=error):
            reply(self._payload(ledger, record))

    def call(self, ledger: CallLedger, name: str, arguments: Any) -> ToolCallRecord:
        """Run one call synchronously (from any thread but the loop's)."""
        record = ledger.open(name, arguments)
        self.loop.run(self.handle(ledger, record))
        return record

    async def acall(self, ledger: CallLedger, name: str, arguments: Any) -> ToolCallRecord:
        record = ledger.open(name, arguments)
        await asyncio.wrap_future(self.loop.submit(self.handle(ledger, record)))
        return record

    async def handle(self, ledger: CallLedger, record: ToolCallRecord) -> None:
        """The pipeline for one opened record; never raises."""
        try:
            result, cached = await self._pipeline(ledger, record.name, record.arguments)
            ledger.finish(record, result=result, cached=cached)
        except ToolError as exc:
            ledger.finish(record, error=ToolCallError(code=exc.code, message=exc.message,
                                                      retryable=exc.retryable))
        except Exception as exc:  # a bug in a tool: data, not a host crash
            message = f"{type(exc).__name__}: {exc}"[:2000]
            ledger.finish(record, error=ToolCallError(code="tool_exception", message=message))

    # -- the pipeline ------------------------------------------------------------------------
    async def _pipeline(self, ledger: CallLedger, name: str, arguments: Any) -> tuple[Any, bool]:
        tool = self.toolset.get(name)
        builtin = tool is None and name in self.builtins
        tool = tool or self.builtins.get(name)
        if tool is None:
            known = ", ".join(self.toolset.names[:20]) or "none"
            raise ToolError("unknown_tool", f"no tool named {name!r} (available: {known})")
        try:
            args = tool.spec.validate_arguments(arguments)
        except ToolArgumentsError as exc:
            raise ToolError("invalid_arguments", "; ".join(exc.problems)) from None
        if builtin:  # the host's own tools: recorded, but no user policy applies
            return (tool.fn(**args) if tool.fn is not None else self._read_result(ledger.store, args)), False
        await self._permit(tool, args)
        policy = tool.policy
        if not ledger.admit(name, policy.max_calls):
            raise ToolError("permission_denied",
                            f"{name!r} may be called at most {policy.max_calls} times per execution")
        if policy.cacheable:
            return await self._cached(ledger.store, tool, args)
        return await self._execute_with_retries(tool, args), False

    async def _cached(self, store: CallStore, tool: Tool, args: dict[str, Any]) -> tuple[Any, bool]:
        """Answer from the session's cache; an equal call already running is waited for, not repeated."""
        key = cache_key(tool.name, args)
        while True:
            if key in store.cache:
                return store.cache[key], True
            pending = store.inflight.get(key)
            if pending is None:
                break
            ok, value = await asyncio.shield(pending)
            if ok:
                return value, True
        future: asyncio.Future[tuple[bool, Any]] = asyncio.get_running_loop().create_future()
        store.inflight[key] = future
        outcome: tuple[bool, Any] = (False, None)  # a failed call is never cached
        try:
            result = await self._execute_with_retries(tool, args)
            store.cache[key] = result
            outcome = (True, result)
            return result, False
        finally:
            store.inflight.pop(key, None)
            if not future.done():
                future.set_result(outcome)

    async def _permit(self, tool: Tool, args: dict[str, Any]) -> None:
        policy = tool.policy
        verdicts: list[Any] = []
        if policy.permission == "deny":
            verdicts.append(policy.deny_reason or "this tool is not allowed")
        elif policy.permission == "ask":
            verdicts.append(await self._decide(self.ask, tool.name, args) if self.ask else
                            "this tool needs approval and no approver is configured")
        elif callable(policy.permission):
            verdicts.append(await self._decide(policy.permission, tool.name, args))
        if self.permission is not None:
            verdicts.append(await self._decide(self.permission, tool.name, args))
        for verdict in verdicts:
            if verdict is not True:
                reason = verdict if isinstance(verdict, str) and verdict else policy.deny_reason or "denied by policy"
                raise ToolError("permission_denied", f"call to {tool.name!r} denied: {reason}")

    async def _decide(self, hook: Callable[..., Any], name: str, args: dict[str, Any]) -> Any:
        """A hook's verdict. A sync hook runs on a worker thread: an approver may wait for a human."""
        mine = copy.deepcopy(args)  # the hook cannot change what the tool will get
        try:
            if inspect.iscoroutinefunction(hook) or inspect.iscoroutinefunction(type(hook).__call__):
                verdict = await hook(name, mine)
            else:
                verdict = await asyncio.get_running_loop().run_in_executor(None, hook, name, mine)
            if inspect.isawaitable(verdict):
                verdict = await verdict
        except Exception as exc:  # a broken check denies rather than allows
            return f"the permission check failed: {type(exc).__name__}: {exc}"[:500]
        return verdict

    async def _execute_with_retries(self, tool: Tool, args: dict[str, Any]) -> Any:
        """Run the tool; an idempotent tool's retryable failures are retried with backoff,
        waiting what the upstream asked for (``retry_after``) when it said."""
        policy = tool.policy
        attempts = 1 + (policy.max_retries if policy.idempotent else 0)
        for attempt in range(attempts):
            try:
                return await self._execute(tool, args)
            except ToolError as exc:
                delay = exc.retry_after if exc.retry_after is not None else _BACKOFF_S * 2**attempt
                if not exc.retryable or attempt == attempts - 1 or delay > _MAX_RETRY_WAIT_S:
                    if attempt:
                        raise ToolError(exc.code, f"{exc.message} (after {attempt + 1} attempts)", exc.retryable,
                                        retry_after=exc.retry_after) from None
                    raise
                await asyncio.sleep(max(delay, 0.0) * (1 + random.random() * 0.1))
        raise AssertionError("unreachable")

    async def _execute(self, tool: Tool, args: dict[str, Any]) -> Any:
        if tool.fn is None:
            raise ToolError("not_implemented", f"tool {tool.name!r} has no implementation on this host")
        if tool.policy.rate_limit_per_s:
            limiter = self._limiters.setdefault(tool.name, _RateLimiter(tool.policy.rate_limit_per_s))
            await limiter.wait()
        if self._slots is None:
            self._slots = asyncio.Semaphore(self.max_concurrency)
        async with self._slots:
            if tool.is_async:
                work = tool.fn(**args)
            else:
                work = asyncio.get_running_loop().run_in_executor(None, functools.partial(tool.fn, **args))
            try:
                result = await asyncio.wait_for(work, tool.policy.timeout_s)
            except asyncio.TimeoutError:
                raise ToolError("timeout", f"{tool.name!r} did not answer within {tool.policy.timeout_s} s") from None
            except ConnectionError as exc:  # a Python tool's network failure: worth retrying, like HTTP's
                raise ToolError("upstream_error", f"{type(exc).__name__}: {exc}"[:2000]) from None
        return _jsonable(tool.name, result)

    # -- large results ---------------------------------------------------------------------------
    @property
    def page_chars(self) -> int:
        """The most characters one ``read_result`` page holds (its JSON stays within about the limit)."""
        return max(1, self.max_result_chars // 2)

    def _read_result(self, store: CallStore, args: dict[str, Any]) -> dict[str, Any]:
        call_id = args["call_id"]
        text = store.kept(call_id)
        if text is None:
            raise ToolError("not_found", f"no large result is kept for call {call_id!r} in this session "
                                         "(read_result pages only through results that came back truncated)")
        offset = args.get("offset", 0)
        limit = min(args.get("limit") or self.page_chars, self.page_chars)
        chunk = text[offset:offset + limit]
        end = offset + len(chunk)
        return {"call_id": call_id, "offset": offset, "text": chunk, "total_chars": len(text),
                "next_offset": end if end < len(text) else None}

    # -- the sandbox's view ------------------------------------------------------------------
    def _payload(self, ledger: CallLedger, record: ToolCallRecord) -> dict[str, Any]:
        if not record.ok:
            error = record.error or ToolCallError(code="tool_exception", message="the call did not finish")
            return {"ok": False, "error": error.model_dump()}
        if record.name in self.builtins and record.name not in self.toolset:
            return {"ok": True, "value": record.result}  # pages are sized to fit already
        try:
            text = oversized_json(record.result, self.max_result_chars)
        except (ValueError, TypeError, RecursionError) as exc:  # e.g. circular: nothing the sandbox can use
            return {"ok": False, "error": {"code": "tool_exception", "message": f"unsendable result: {exc}",
                                           "retryable": False}}
        if text is None:
            return {"ok": True, "value": record.result}
        ledger.store.keep(record.id, text)
        return {"ok": True, "value": {
            "truncated": True, "call_id": record.id, "total_chars": len(text),
            "preview": text[: self.max_result_chars // 2],
            "hint": f"the result is too large to return whole; page through its JSON text with "
                    f"read_result({record.id!r}, offset, limit)",
        }}


def _jsonable(name: str, value: Any) -> Any:
    try:
        return to_jsonable_python(value)
    except Exception as exc:
        raise ToolError("tool_exception", f"{name!r} returned a value that is not JSON: {exc}") from None
