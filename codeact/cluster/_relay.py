"""Tools pinned to the caller (``@tool(where="caller")``): their calls, made on a node, are answered
in the process that made the Runtime.

A small threaded Ray actor holds the requests; the node's forwarder puts one in and waits for its
answer; a thread of the caller takes them, runs the tool there and hands the answer back. Three
Ray hops a call: for the few tools that must see the caller's process, not for the hot path.
"""

from __future__ import annotations

import concurrent.futures
import itertools
import threading
from collections.abc import Callable
from typing import Any

from ..errors import ToolError
from ..runtime import Tool

__all__ = ["CallerPump", "RelayActor", "forwarded"]

#: How long the caller's pump waits for requests in one take (it then checks it is still wanted).
_TAKE_S = 0.5


class RelayActor:
    """The meeting point (a Ray actor with many threads): ``call`` waits for ``give``."""

    def __init__(self) -> None:
        self._cond = threading.Condition()
        self._queue: list[tuple[int, str, dict[str, Any]]] = []
        self._answers: dict[int, tuple[str, Any]] = {}
        self._ids = itertools.count(1)

    def call(self, name: str, arguments: dict[str, Any], timeout_s: float) -> tuple[str, Any]:
        with self._cond:
            ident = next(self._ids)
            self._queue.append((ident, name, arguments))
            self._cond.notify_all()
            if not self._cond.wait_for(lambda: ident in self._answers, timeout_s):
                self._queue = [q for q in self._queue if q[0] != ident]
                return ("error", ("timeout", f"the caller did not answer {name!r} within {timeout_s:g} s", True))
            return self._answers.pop(ident)

    def take(self, wait_s: float) -> list[tuple[int, str, dict[str, Any]]]:
        with self._cond:
            self._cond.wait_for(lambda: bool(self._queue), wait_s)
            taken, self._queue = self._queue, []
            return taken

    def give(self, ident: int, answer: tuple[str, Any]) -> None:
        with self._cond:
            self._answers[ident] = answer
            self._cond.notify_all()


def forwarded(tool: Tool, relay: Any) -> Tool:
    """``tool`` as a node sees it: each call sent to the caller through ``relay``."""
    import ray

    name = tool.name
    timeout_s = tool.policy.timeout_s or 30.0

    def forward(**arguments: Any) -> Any:
        kind, value = ray.get(relay.call.remote(name, arguments, timeout_s))
        if kind == "error":
            code, message, retryable = value
            raise ToolError(code, message, retryable=retryable)
        return value

    return Tool(spec=tool.spec, fn=forward, policy=tool.policy, group=tool.group)


class CallerPump:
    """The caller's side: takes the requests and answers them with the real tools, in this process."""

    def __init__(self, relay: Any, tools: dict[str, Tool]) -> None:
        self.relay = relay
        self._tools = tools
        self._stop = threading.Event()
        self._pool = concurrent.futures.ThreadPoolExecutor(8, thread_name_prefix="codeact-caller-tool")
        self._thread = threading.Thread(target=self._pump, daemon=True, name="codeact-caller-relay")
        self._thread.start()

    def _pump(self) -> None:
        import ray

        while not self._stop.is_set():
            try:
                taken = ray.get(self.relay.take.remote(_TAKE_S))
            except Exception:  # Ray is shutting down, or the relay is gone
                if self._stop.wait(_TAKE_S):
                    return
                continue
            for ident, name, arguments in taken:
                self._pool.submit(self._answer, ident, name, arguments)

    def _answer(self, ident: int, name: str, arguments: dict[str, Any]) -> None:
        answer = _run(self._tools.get(name), name, arguments)
        try:
            self.relay.give.remote(ident, answer)
        except Exception:  # the relay is gone: the node's call times out
            pass

    def close(self) -> None:
        self._stop.set()
        self._thread.join(timeout=5)
        self._pool.shutdown(wait=False, cancel_futures=True)


def _run(tool: Tool | None, name: str, arguments: dict[str, Any]) -> tuple[str, Any]:
    if tool is None or tool.fn is None:
        return ("error", ("not_implemented", f"tool {name!r} has no implementation on the caller", False))
    call: Callable[..., Any] = tool.fn
    try:
        value = call(**arguments)
        if tool.is_async:
            import asyncio

            value = asyncio.run(value)
        return ("ok", value)
    except ToolError as exc:
        return ("error", (exc.code, exc.message, exc.retryable))
    except Exception as exc:
        return ("error", ("tool_exception", f"{type(exc).__name__}: {exc}"[:2000], False))
