"""What the generated stubs call, inside the sandbox. Standard library only.

The kernel binds a ``ToolClient`` to its channel and puts ``client.call`` into the code's
namespace as ``__codeact_call__``; every stub's body is one call to it. A call blocks the calling
thread until the host answers, so calls from several threads can be in flight at once.
"""

from __future__ import annotations

import itertools
import json
import threading
from collections.abc import Callable, Iterable
from concurrent.futures import ThreadPoolExecutor
from typing import Any


class ToolError(Exception):
    """A tool call failed on the host. ``code`` says why; ``retryable`` says if retrying may help."""

    def __init__(self, code: str, message: str, retryable: bool = False) -> None:
        super().__init__(f"[{code}] {message}")
        self.code = code
        self.message = message
        self.retryable = retryable


class _Slot:
    __slots__ = ("event", "reply")

    def __init__(self) -> None:
        self.event = threading.Event()
        self.reply: dict[str, Any] | None = None


class ToolClient:
    """Sends ``call`` frames and matches the host's ``result`` frames to the waiting caller."""

    def __init__(self, send: Callable[[dict[str, Any]], None]) -> None:
        self._send = send
        self._seq = itertools.count(1)
        self._pending: dict[int, _Slot] = {}

    def call(self, name: str, arguments: dict[str, Any]) -> Any:
        try:
            json.dumps(arguments, allow_nan=False)
        except (TypeError, ValueError) as exc:
            raise TypeError(f"arguments to tool {name!r} must be JSON-serializable: {exc}") from None
        seq = next(self._seq)
        slot = _Slot()
        self._pending[seq] = slot
        try:
            self._send({"type": "call", "seq": seq, "name": name, "arguments": arguments})
            slot.event.wait()
        finally:
            self._pending.pop(seq, None)
        reply = slot.reply or {}
        if reply.get("ok"):
            return reply.get("value")
        error = reply.get("error") or {}
        raise ToolError(
            str(error.get("code", "tool_exception")),
            str(error.get("message", "the tool call failed")),
            bool(error.get("retryable", False)),
        )

    def deliver(self, message: dict[str, Any]) -> None:
        """Hand a ``result`` frame to the thread waiting for it (unknown seqs are dropped)."""
        slot = self._pending.get(message.get("seq"))  # type: ignore[arg-type]
        if slot is not None:
            slot.reply = message
            slot.event.set()


def parallel(fn: Callable[[Any], Any], items: Iterable[Any], max_workers: int = 8) -> list[Any]:
    """Call ``fn(item)`` for every item concurrently (e.g. a tool per city); results in order.

    An item whose call raised gets its exception object in the list, so one failure never loses
    the others; check with ``isinstance(r, Exception)``.
    """
    items = list(items)

    def guarded(item: Any) -> Any:
        try:
            return fn(item)
        except Exception as exc:
            return exc

    with ThreadPoolExecutor(max_workers=max(1, min(max_workers, len(items) or 1))) as pool:
        return list(pool.map(guarded, items))
