"""Live events of one run: output as it is written, each tool call as it starts and ends, the result.

    session.run(code, on_event=print)                 # the callback runs on the calling thread
    async for event in session.stream(code): ...      # the same events, asynchronously

Events, in order (``t``: seconds since the run started)::

    stdout / stderr   text                 chunks as the code writes them, batched (the kernel's ``_LIVE_PERIOD``);
                                           together exactly the result's (capped) stream, less
                                           what was dropped (see ``done``)
    call_started      id, name, arguments  when the host receives the call
    call_finished     id, name, ok, result | error, duration_ms, cached
    egress            record               a request through the egress broker, allowed or
                                           refused, as it completes (``SandboxConfig(egress=...)``)
    done              result, dropped,     the ExecutionResult, the same as without events; the
                      dropped_chars        output events (and their characters) left out

A run with no listener takes the plain path: the kernel streams nothing, the ledger observes
nothing. With a listener the run goes on a worker thread and events are handed over in order
through a queue, so a slow listener never stalls a tool call or the channel.

What a flood costs the host is bounded: output comes as at most one event per stream per frame
the kernel sends (within one frame the order between stdout and stderr is not kept), and while
:data:`MAX_QUEUED_EVENTS` events wait for the listener, further output events are dropped and
counted in ``done`` (their text is still in ``done.result``): the run never waits for a listener.
Call events are never dropped (a run has at most ``max_calls_per_run`` calls), nor are egress events
(a run has at most ``Egress.max_requests_per_run`` allowed requests, and refusals are rate-limited).
"""

from __future__ import annotations

import asyncio
import contextvars
import queue
import threading
import time
from collections.abc import AsyncIterator, Callable
from typing import Annotated, Any, Literal

from pydantic import BaseModel, Field, TypeAdapter

from ..results import EgressRecord, ExecutionResult, ToolCallError, ToolCallRecord
from ..sandbox.driver import KernelDriver
from .ledger import CallLedger, CallStore

__all__ = ["EVENT_ADAPTER", "MAX_QUEUED_EVENTS", "CallFinished", "CallStarted", "EgressFinished", "EventHook",
           "ObservedLedger",
           "OutputChunk", "RunDone", "RunEvent"]


class _Event(BaseModel):
    t: float = 0.0


class OutputChunk(_Event):
    """Text the code wrote to stdout or stderr (a chunk of the final stream, in order)."""

    type: Literal["stdout", "stderr"]
    text: str


class CallStarted(_Event):
    """The host received a tool call (its record is open)."""

    type: Literal["call_started"] = "call_started"
    id: str
    name: str
    arguments: Any = None

    @classmethod
    def of(cls, record: ToolCallRecord, t: float) -> CallStarted:
        return cls(id=record.id, name=record.name, arguments=record.arguments, t=t)


class CallFinished(_Event):
    """A tool call ended (answered, failed, refused, cut off, or answered from the cache)."""

    type: Literal["call_finished"] = "call_finished"
    id: str
    name: str
    ok: bool
    result: Any = None
    error: ToolCallError | None = None
    duration_ms: float = 0.0
    cached: bool = False

    @classmethod
    def of(cls, record: ToolCallRecord, t: float) -> CallFinished:
        return cls(id=record.id, name=record.name, ok=record.ok, result=record.result, error=record.error,
                   duration_ms=record.duration_ms, cached=record.cached, t=t)


class EgressFinished(_Event):
    """A request through the egress broker ended (answered, refused, cut or answered from the record);
    ``record`` is the entry the result's ``egress`` will hold (its kept response left out)."""

    type: Literal["egress"] = "egress"
    record: EgressRecord


class RunDone(_Event):
    """The run ended; ``result`` is what ``run`` returns. ``dropped``: output events left out
    (and ``dropped_chars``, their characters) because the listener had fallen behind by
    :data:`MAX_QUEUED_EVENTS` events; the text is in ``result`` all the same."""

    type: Literal["done"] = "done"
    result: ExecutionResult
    dropped: int = 0
    dropped_chars: int = 0


RunEvent = Annotated[OutputChunk | CallStarted | CallFinished | EgressFinished | RunDone, Field(discriminator="type")]
#: Validates (or parses, with ``validate_json``) one event of any type.
EVENT_ADAPTER: TypeAdapter[RunEvent] = TypeAdapter(RunEvent)
EventHook = Callable[[RunEvent], None]
#: Events of one run waiting for its listener, at most, before output events are dropped (counted).
MAX_QUEUED_EVENTS = 10_000


class _Sink:
    """Collects one run's events from every thread, in order, into a queue; ends with ``None``."""

    #: Whether the kernel streams the run's output here as it is written.
    streams = True

    def __init__(self, output_cap: int) -> None:
        self.started = time.monotonic()
        self.queue: queue.SimpleQueue[RunEvent | None] = queue.SimpleQueue()
        self.driver: KernelDriver | None = None
        self.cancelled = False
        self._cap = output_cap
        self._sent = {"stdout": 0, "stderr": 0}
        self._lock = threading.Lock()
        self._max_queued = MAX_QUEUED_EVENTS
        #: Output events (and characters) left out while the listener was behind.
        self.dropped = self.dropped_chars = 0

    def now(self) -> float:
        return round(time.monotonic() - self.started, 6)

    def output(self, name: str, text: str) -> None:
        """From the driver: streamed output, bounded by the cap however much the kernel sends."""
        room = self._cap - self._sent[name]
        text = text[: max(room, 0)]
        if not text:
            return
        self._sent[name] += len(text)
        if self._behind():  # the listener is behind: the run never waits for it
            self.dropped += 1
            self.dropped_chars += len(text)
            return
        self._put(OutputChunk(type=name, text=text, t=self.now()))

    def started_call(self, record: ToolCallRecord) -> None:
        self._put(CallStarted.of(record, self.now()))

    def finished_call(self, record: ToolCallRecord) -> None:
        self._put(CallFinished.of(record, self.now()))

    def egress(self, record: EgressRecord) -> None:
        """From the egress broker's thread: one request, as it completes."""
        self._put(EgressFinished(record=record, t=self.now()))

    def _put(self, event: RunEvent) -> None:
        self.queue.put(event)

    def _behind(self) -> bool:
        return self.queue.qsize() >= self._max_queued

    def ledger(self, store: CallStore) -> CallLedger:
        return ObservedLedger(store, self.started_call, self.finished_call)

    def cancel(self) -> None:
        """Stop the run: interrupt the code (the run then ends as usual, with its result)."""
        with self._lock:
            self.cancelled = True
            driver = self.driver
        if driver is not None:
            driver.interrupt()

    def refuse_start(self) -> None:
        """A run that has not started yet never will (non-blocking: safe on an event loop)."""
        with self._lock:
            self.cancelled = True

    def attach(self, driver: KernelDriver) -> None:
        """The run starts on ``driver``: ``cancel`` interrupts it from now until :meth:`detach`.
        A run cancelled already does not start."""
        with self._lock:
            if self.cancelled:
                raise _Cancelled
            self.driver = driver

    def detach(self) -> None:
        with self._lock:
            self.driver = None

    def stop(self, thread: threading.Thread) -> None:
        """Cancel and wait for the run to end. The interrupt is repeated: one that reaches the
        kernel before it has begun running the cell is ignored there."""
        while thread.is_alive():
            self.cancel()
            thread.join(_INTERRUPT_EVERY_S)


class _Guard(_Sink):
    """A run's cancel and start-refusal without a listener (``Session.arun``): no events, no
    streamed output, a plain ledger."""

    streams = False

    def ledger(self, store: CallStore) -> CallLedger:
        return CallLedger(store)


def _interrupt_until(sink: _Sink, done: Callable[[], bool]) -> None:
    """Cancel the run now and again until ``done()``, from a daemon thread (see :meth:`_Sink.stop`)."""
    def repeat() -> None:
        while not done():
            sink.cancel()
            time.sleep(_INTERRUPT_EVERY_S)

    threading.Thread(target=repeat, name="codeact-cancel", daemon=True).start()


class _Cancelled(Exception):
    """The listener went away before the run started."""


_INTERRUPT_EVERY_S = 0.5


class ObservedLedger(CallLedger):
    """A ledger that reports each call when it opens (``on_open``) and when it ends (``on_finish``).

    ``opened`` (called by ``arrive``, the one way a call comes in) runs on the thread that received
    the call before the call is dispatched, so a call's start is always reported before its end.
    ``on_finish`` may run on any thread.
    """

    def __init__(self, cache: CallStore | dict[str, Any] | None, on_open: Callable[[ToolCallRecord], None],
                 on_finish: Callable[[ToolCallRecord], None], prefix: str = "call") -> None:
        super().__init__(cache, prefix)
        self._on_open, self._on_finish = on_open, on_finish

    def opened(self, record: ToolCallRecord) -> None:
        super().opened(record)
        self._on_open(record)

    def finish(self, record: ToolCallRecord, *, result: Any = None, error: ToolCallError | None = None,
               cached: bool = False) -> bool:
        ended = super().finish(record, result=result, error=error, cached=cached)
        if ended:
            self._on_finish(record)
        return ended


class _InlineSink(_Sink):
    """Hands each event to the hook on the thread that makes it: no queue, no listener thread, so a
    call costs the run no thread switch (the hook must be thread-safe and quick: keep, not act)."""

    def __init__(self, output_cap: int, hook: EventHook) -> None:
        super().__init__(output_cap)
        self._hook = hook

    def _put(self, event: RunEvent) -> None:
        self._hook(event)

    def _behind(self) -> bool:
        return False


def run_inline(run: RunWith, output_cap: int, on_event: EventHook) -> ExecutionResult:
    """``Session.run(..., inline_events=True)``: the run on this thread, each event handed to
    ``on_event`` where it is made (see :class:`_InlineSink`); no ``done`` event (the result is returned)."""
    return run(_InlineSink(output_cap, on_event))


class _CallsSink(_Sink):
    """Keeps each call's record as it arrives, in place (it finishes there); no event is made and
    no output streamed: for a caller that only needs the calls of a run cut short."""

    streams = False

    def __init__(self, output_cap: int, into: list[ToolCallRecord]) -> None:
        super().__init__(output_cap)
        self._into = into

    def started_call(self, record: ToolCallRecord) -> None:
        self._into.append(record)  # list.append is atomic: calls arrive on several threads

    def finished_call(self, record: ToolCallRecord) -> None:
        pass

    def egress(self, record: EgressRecord) -> None:
        pass


def run_keeping_calls(run: RunWith, output_cap: int, into: list[ToolCallRecord]) -> ExecutionResult:
    """``Session.run(..., keep_calls=into)``: the run on this thread, each call's live record
    appended to ``into`` as the call arrives (see :class:`_CallsSink`)."""
    return run(_CallsSink(output_cap, into))


#: Runs the session's run with a sink (the session's ``_run`` of one cell, on the worker thread).
RunWith = Callable[["_Sink"], ExecutionResult]


def _start(run: RunWith, output_cap: int) -> tuple[_Sink, threading.Thread, list[Any]]:
    """Start the run on a worker thread; its events go to the sink's queue, ``done`` last."""
    sink = _Sink(output_cap)
    box: list[Any] = []

    def work() -> None:
        try:
            result = run(sink)
            box.append(result)
            sink.queue.put(RunDone(result=result, dropped=sink.dropped, dropped_chars=sink.dropped_chars,
                                   t=sink.now()))
        except BaseException as exc:  # e.g. SandboxUnavailable, SessionClosed: raised to the listener
            box.append(exc)
        finally:
            sink.detach()
            sink.queue.put(None)

    # in a copy of the caller's context: its current span (``codeact.tracing``) is the run's parent
    thread = threading.Thread(target=contextvars.copy_context().run, args=(work,), name="codeact-run-events",
                              daemon=True)
    thread.start()
    return sink, thread, box


def _outcome(box: list[Any]) -> ExecutionResult:
    if box and isinstance(box[0], BaseException):
        raise box[0]
    result: ExecutionResult = box[0]
    return result


def run_with_events(run: RunWith, output_cap: int, on_event: EventHook) -> ExecutionResult:
    """``Session.run`` with a listener: events are delivered on this thread, in order
    (``output_cap``: the session's, bounding what the sink streams).

    A listener that raises stops the run (the code is interrupted) and the exception propagates
    once the run has ended.
    """
    sink, thread, box = _start(run, output_cap)
    failure: BaseException | None = None
    try:
        while (event := sink.queue.get()) is not None:
            try:
                on_event(event)
            except BaseException as exc:
                failure = exc
                break
    finally:
        sink.stop(thread)  # at once if the run ended; else (listener failed, Ctrl-C) interrupt it first
    if failure is not None:
        raise failure
    return _outcome(box)


async def stream(run: RunWith, output_cap: int) -> AsyncIterator[RunEvent]:
    """The events of one run as an async iterator. Leaving early (``break``, cancellation,
    ``aclose()``) interrupts the code and waits for the run to end, so the session is free again."""
    sink, thread, box = _start(run, output_cap)
    finished = False
    try:
        while True:
            try:
                event = sink.queue.get_nowait()
            except queue.Empty:
                event = await asyncio.to_thread(sink.queue.get)
            if event is None:
                finished = True
                break
            yield event
        _outcome(box)  # a run that could not start raises here
    finally:
        if not finished:
            sink.refuse_start()  # at once: the hop to a thread below may come after the session frees up
            await asyncio.shield(asyncio.to_thread(sink.stop, thread))
