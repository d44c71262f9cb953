"""What the generated stubs call, inside the sandbox. Standard library only.

The kernel binds a ``ToolClient`` to its channel and puts ``client.call`` into the code's
namespace as ``__codeact_call__``; every stub's body is one call to it. A call blocks the calling
thread until the host answers, so calls from several threads can be in flight at once.

Concurrency from code, three ways (the host runs the calls concurrently in each case):

* ``parallel(get_weather, ["Pittsburgh", "Beijing"])``: a thread per item, results in order;
* threads of your own (``concurrent.futures``) calling the stubs;
* ``await asyncio.gather(aio.get_weather("Pittsburgh"), aio.get_weather("Beijing"))``: ``aio``
  (made by :func:`async_stubs`) has an async variant of every stub, with the same signature,
  that waits on the event loop instead of a thread.
"""

from __future__ import annotations

import functools
import itertools
import threading
import types
from collections.abc import Callable, Iterable, Mapping

TYPE_CHECKING = False
if TYPE_CHECKING:  # typing costs every idle kernel memory; annotations are never evaluated
    from typing import Any

try:  # flat in the sandbox image; a package when imported on the host
    from .frames import RETRYABLE_CODES
except ImportError:
    from frames import RETRYABLE_CODES  # type: ignore[no-redef]

if TYPE_CHECKING:  # asyncio and concurrent.futures cost tens of ms to import: a kernel starts without them
    import asyncio


# The one implementation: the host's ``codeact.errors.ToolError`` subclasses this class (the
# sandbox cannot import the host's package), so both sides construct, default and pickle alike.
class ToolError(Exception):
    """A tool call failed on the host. ``code`` says why; ``retryable`` says if retrying may help.

    ``retryable`` defaults from the code (timeout, rate_limited and upstream_error are retryable);
    ``retry_after`` (seconds) is a hint from the upstream, when it gave one.
    """

    def __init__(self, code: str, message: str, retryable: bool | None = None, *,
                 retry_after: float | None = None, data: Any = None) -> None:
        self.code = code
        self.message = message
        self.retryable = code in RETRYABLE_CODES if retryable is None else retryable
        self.retry_after = retry_after
        self.data = data
        super().__init__(f"[{code}] {message}")

    def __reduce__(self) -> tuple[Any, ...]:
        # the default would call the class with ``args`` (the one formatted message)
        return type(self), (self.code, self.message, self.retryable), self.__dict__


class _Slot:
    """Where one call's reply lands: ``reply`` (read by a thread that reads the channel itself),
    with an Event when the thread waits on one instead, or a future on an event loop."""

    __slots__ = ("event", "future", "reply")

    def __init__(self, future: asyncio.Future[dict[str, Any]] | None = None, *, event: bool = False) -> None:
        # An Event costs a Condition and a Lock per call: made only for a thread that waits on it.
        self.event = threading.Event() if event else None
        self.future = future
        self.reply: dict[str, Any] | None = None


def _resolve(future: asyncio.Future[dict[str, Any]], message: dict[str, Any]) -> None:
    if not future.done():
        future.set_result(message)


class ToolClient:
    """Sends ``call`` frames and matches the host's ``result`` frames to the waiting caller."""

    def __init__(self, send: Callable[[dict[str, Any]], None], *, wait: Callable[[_Slot], None] | None = None,
                 on_async: Callable[[], None] | None = None) -> None:
        self._send = send
        self._seq = itertools.count(1)
        self._pending: dict[int, _Slot] = {}
        #: How a calling thread waits for its result: by default until ``deliver`` sets its slot;
        #: the kernel's reads the channel itself until the result is in (no hand-off).
        self._wait = wait or _wait_event
        self._events = wait is None  # whether a waiting thread needs its slot's Event
        #: Called once an async call's frame is sent (someone must read the channel for it).
        self._on_async = on_async
        self._async: set[int] = set()  # seqs of async calls waiting
        #: The kernel's ``flow.Flow`` while a run tracks labels (None: no labels, nothing computed).
        self.flow: Any = None

    def call(self, name: str, arguments: dict[str, Any]) -> Any:
        """Call a tool; block this thread until the host answers."""
        seq = next(self._seq)
        slot = _Slot(event=self._events)
        self._pending[seq] = slot
        flow = self.flow
        try:
            self._send_call(seq, name, arguments, flow)
            self._wait(slot)
        finally:
            self._pending.pop(seq, None)
        return _unpack(slot.reply) if flow is None else _unpack_labeled(flow, slot.reply, arguments)

    def refuse_calls(self, why: str) -> None:
        """From now on every call raises ToolError(``why``) before anything is sent."""
        def refuse(message: dict[str, Any]) -> None:
            raise ToolError("tool_exception", why)

        self._send = refuse

    def _send_call(self, seq: int, name: str, arguments: dict[str, Any], flow: Any = None) -> None:
        # The frame is encoded before anything is written, so unserializable arguments fail here,
        # in the caller's thread, with nothing sent (and JSON is produced once, not twice).
        try:
            if flow is None:
                self._send({"type": "call", "seq": seq, "name": name, "arguments": arguments})
            else:  # after the arguments: the host reads the frame's head up to them (protocol._CALL_HEAD)
                sent, labels = flow.call_labels(arguments)
                self._send({"type": "call", "seq": seq, "name": name, "arguments": sent, "labels": labels})
        except (TypeError, ValueError) as exc:
            raise TypeError(f"arguments to tool {name!r} must be JSON-serializable: {exc}") from None

    async def acall(self, name: str, arguments: dict[str, Any]) -> Any:
        """Call a tool from a coroutine; the event loop runs other tasks until the host answers."""
        seq = next(self._seq)
        import asyncio

        future: asyncio.Future[dict[str, Any]] = asyncio.get_running_loop().create_future()
        self._pending[seq] = _Slot(future)
        self._async.add(seq)
        flow = self.flow
        try:
            self._send_call(seq, name, arguments, flow)
            if self._on_async is not None:
                self._on_async()
            reply = await future
        finally:
            self._async.discard(seq)
            self._pending.pop(seq, None)
        return _unpack(reply) if flow is None else _unpack_labeled(flow, reply, arguments)

    def has_async_waiting(self) -> bool:
        """Whether an async call waits for its result (nobody reads for it but the reader thread)."""
        return bool(self._async)

    def deliver(self, message: dict[str, Any]) -> None:
        """Hand a ``result`` frame to the caller waiting for it (unknown seqs are dropped)."""
        slot = self._pending.get(message.get("seq"))  # type: ignore[arg-type]
        if slot is None:
            return
        if slot.future is not None:
            try:
                slot.future.get_loop().call_soon_threadsafe(_resolve, slot.future, message)
            except RuntimeError:  # the loop is closed: nobody waits any more
                pass
        else:
            slot.reply = message
            if slot.event is not None:
                slot.event.set()




def _wait_event(slot: _Slot) -> None:
    assert slot.event is not None
    slot.event.wait()


def _unpack(reply: dict[str, Any] | None) -> Any:
    reply = reply or {}
    if reply.get("ok"):
        return reply.get("value")
    error = reply.get("error") or {}
    retryable = error.get("retryable")
    retry_after = error.get("retry_after")
    raise ToolError(
        str(error.get("code", "tool_exception")),
        str(error.get("message", "the tool call failed")),
        None if retryable is None else bool(retryable),  # not said: from the code, as on the host
        retry_after=float(retry_after) if isinstance(retry_after, (int, float)) else None,
        data=error.get("data"),
    )


def _unpack_labeled(flow: Any, reply: dict[str, Any] | None, arguments: Any) -> Any:
    """``_unpack`` under label tracking: the result (or the ToolError) carries the result frame's
    ``labels`` and those of the arguments."""
    reply = reply or {}
    value, labels = flow.result_labels(reply.get("value") if reply.get("ok") else None, reply.get("labels"), arguments)
    if reply.get("ok"):
        return value
    try:
        return _unpack(reply)
    except ToolError as exc:
        flow.label_error(exc, labels)
        raise


def async_stubs(namespace: Mapping[str, Any], module: str = "codeact_tools",
                stubs: Mapping[str, types.FunctionType] | None = None) -> types.SimpleNamespace:
    """An object with an async variant of every tool stub in ``namespace`` (same name, signature
    and docstring): ``await aio.get_weather("Beijing")``. ``asyncio.gather`` over them runs the
    calls concurrently without threads. ``stubs``: the stubs by name, if not every one is a
    function of ``namespace`` yet (a mapping that compiles a stub when it is looked up).
    """
    call = namespace.get("__codeact_call__")
    client = getattr(call, "__self__", None)
    if not isinstance(client, ToolClient):
        raise RuntimeError("no tool client in this namespace: async_stubs needs the kernel's __codeact_call__")
    if stubs is None:
        stubs = {key: fn for key, fn in namespace.items()
                 if isinstance(fn, types.FunctionType) and fn.__module__ == module}
    return _AsyncStubs(stubs, client.acall)


class _AsyncStubs(types.SimpleNamespace):
    """``aio``: each async variant is made at its first use (a large toolset has thousands of stubs,
    and a session should not pay for wrapping them all up front)."""

    def __init__(self, stubs: Mapping[str, types.FunctionType], acall: Callable[[str, dict[str, Any]], Any]) -> None:
        object.__setattr__(self, "_stubs", stubs)
        object.__setattr__(self, "_acall", acall)

    def __getattr__(self, name: str) -> Any:
        stubs = object.__getattribute__(self, "_stubs")
        if name not in stubs:
            raise AttributeError(f"no tool named {name!r}")
        variant = _async_variant(stubs[name], object.__getattribute__(self, "_acall"))
        object.__setattr__(self, name, variant)
        return variant

    def __dir__(self) -> list[str]:
        return sorted(object.__getattribute__(self, "_stubs"))

    def __repr__(self) -> str:
        return f"<async twins of {len(object.__getattribute__(self, '_stubs'))} tools>"


def _async_variant(stub: types.FunctionType, acall: Callable[[str, dict[str, Any]], Any]) -> Callable[..., Any]:
    # The same stub body (argument handling included) with __codeact_call__ bound to acall, so
    # it returns the coroutine of the call instead of blocking for its value.
    scope = dict(stub.__globals__, __codeact_call__=acall)
    body = types.FunctionType(stub.__code__, scope, stub.__name__, stub.__defaults__, stub.__closure__)
    body.__kwdefaults__ = stub.__kwdefaults__

    @functools.wraps(stub)
    async def variant(*args: Any, **kwargs: Any) -> Any:
        return await body(*args, **kwargs)

    return variant


def parallel(fn: Callable[[Any], Any], items: Iterable[Any], max_workers: int = 32) -> list[Any]:
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

    from concurrent.futures import ThreadPoolExecutor

    with ThreadPoolExecutor(max_workers=max(1, min(max_workers, len(items) or 1))) as pool:
        return list(pool.map(guarded, items))
