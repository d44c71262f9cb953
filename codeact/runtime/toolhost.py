"""Dispatch of tool calls on the host: lookup → validate → permit → execute → record.

Every call, from sandboxed code or from a JSON function-calling loop, goes through
``ToolHost.handle``, so both modes share validation, policies and records.
"""

from __future__ import annotations

import asyncio
import functools
import inspect
import random
import time
from collections.abc import Callable
from typing import Any

from pydantic_core import to_jsonable_python

from ..errors import ToolArgumentsError, ToolError
from ..results import ToolCallError, ToolCallRecord
from ._loop import LoopThread
from .ledger import CallLedger, cache_key
from .toolset import Tool, Toolset

__all__ = ["PermissionHook", "ToolHost"]

#: (tool name, validated arguments) → True to allow, False or a reason string to deny.
PermissionHook = Callable[[str, dict[str, Any]], "bool | str"]


class _RateLimiter:
    """Spaces calls of one tool at least 1/rate seconds apart (waits; never fails the call)."""

    def __init__(self, per_second: float) -> None:
        self.interval = 1.0 / per_second
        self.next_free = 0.0

    async def wait(self) -> None:
        now = time.monotonic()
        slot = max(now, self.next_free)
        self.next_free = slot + self.interval
        if slot > now:
            await asyncio.sleep(slot - now)


class ToolHost:
    """Runs tool calls for a runtime: policies, timeouts, retries, the cache, records."""

    def __init__(self, toolset: Toolset, loop: LoopThread, *, permission: PermissionHook | None = None,
                 ask: PermissionHook | None = None, max_result_chars: int = 1_000_000) -> None:
        self.toolset = toolset
        self.loop = loop
        self.permission = permission
        self.ask = ask
        self.max_result_chars = max_result_chars
        self._limiters: dict[str, _RateLimiter] = {}

    # -- entry points ------------------------------------------------------------------------
    def dispatch(self, ledger: CallLedger, name: str, arguments: Any,
                 reply: Callable[[dict[str, Any]], None]) -> None:
        """Record the call now, run it on the loop, ``reply`` with the sandbox's payload."""
        record = ledger.open(name, arguments)
        future = self.loop.submit(self.handle(ledger, record))
        future.add_done_callback(lambda _f: reply(self._payload(record)))

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
        if tool is None:
            known = ", ".join(self.toolset.names[:20]) or "none"
            raise ToolError("unknown_tool", f"no tool named {name!r} (available: {known})")
        try:
            args = tool.spec.validate_arguments(arguments)
        except ToolArgumentsError as exc:
            raise ToolError("invalid_arguments", "; ".join(exc.problems)) from None
        await self._permit(tool, args)
        policy = tool.policy
        if policy.max_calls is not None and ledger.count(name) > policy.max_calls:
            raise ToolError("permission_denied",
                            f"{name!r} may be called at most {policy.max_calls} times per execution")
        key = cache_key(name, args) if policy.cacheable else None
        if key is not None and key in ledger.cache:
            return ledger.cache[key], True
        result = await self._execute_with_retries(tool, args)
        if key is not None:
            ledger.cache[key] = result
        return result, False

    async def _permit(self, tool: Tool, args: dict[str, Any]) -> None:
        verdicts: list[Any] = []
        rule = tool.policy.permission
        if rule == "deny":
            verdicts.append(tool.policy.deny_reason or False)
        elif rule == "ask":
            verdicts.append(await self._decide(self.ask, tool.name, args) if self.ask else
                            "this tool needs approval and no approver is configured")
        elif callable(rule):
            verdicts.append(await self._decide(rule, tool.name, args))
        if self.permission is not None:
            verdicts.append(await self._decide(self.permission, tool.name, args))
        for verdict in verdicts:
            if verdict is not True:
                reason = verdict if isinstance(verdict, str) and verdict else "denied by policy"
                raise ToolError("permission_denied", f"call to {tool.name!r} denied: {reason}")

    async def _decide(self, hook: Callable[..., Any], name: str, args: dict[str, Any]) -> Any:
        verdict = hook(name, args)
        if inspect.isawaitable(verdict):
            verdict = await verdict
        return verdict

    async def _execute_with_retries(self, tool: Tool, args: dict[str, Any]) -> Any:
        policy = tool.policy
        attempts = 1 + (policy.max_retries if policy.idempotent else 0)
        for attempt in range(attempts):
            try:
                return await self._execute(tool, args)
            except ToolError as exc:
                if not exc.retryable or attempt == attempts - 1:
                    raise
                delay = exc.retry_after if exc.retry_after is not None else 0.1 * 2**attempt
                await asyncio.sleep(min(delay, 30.0) * (1 + random.random() * 0.1))
        raise AssertionError("unreachable")

    async def _execute(self, tool: Tool, args: dict[str, Any]) -> Any:
        if tool.fn is None:
            raise ToolError("not_implemented", f"tool {tool.name!r} has no implementation on this host")
        if tool.policy.rate_limit_per_s:
            limiter = self._limiters.setdefault(tool.name, _RateLimiter(tool.policy.rate_limit_per_s))
            await limiter.wait()
        if tool.is_async:
            work = tool.fn(**args)
        else:
            work = asyncio.get_running_loop().run_in_executor(None, functools.partial(tool.fn, **args))
        try:
            result = await asyncio.wait_for(work, tool.policy.timeout_s)
        except asyncio.TimeoutError:
            raise ToolError("timeout", f"{tool.name!r} did not answer within {tool.policy.timeout_s} s") from None
        try:
            return to_jsonable_python(result)
        except Exception as exc:
            raise ToolError("tool_exception", f"{tool.name!r} returned a value that is not JSON: {exc}") from None

    # -- the sandbox's view ------------------------------------------------------------------
    def _payload(self, record: ToolCallRecord) -> dict[str, Any]:
        if not record.ok:
            error = record.error or ToolCallError(code="tool_exception", message="the call did not finish")
            return {"ok": False, "error": error.model_dump()}
        return {"ok": True, "value": _bounded(record.result, self.max_result_chars, record.id)}


def _bounded(value: Any, limit: int, call_id: str) -> Any:
    """A result larger than ``limit`` JSON characters reaches the sandbox as a documented view:
    ``{"truncated": True, "call_id", "total_chars", "preview"}``; the ledger keeps all of it.
    """
    import json

    text = json.dumps(value, ensure_ascii=False, default=repr)
    if len(text) <= limit:
        return value
    return {"truncated": True, "call_id": call_id, "total_chars": len(text), "preview": text[: limit // 2]}
