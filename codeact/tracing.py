"""OpenTelemetry for codeact: spans and metrics, off (and ``opentelemetry`` never imported) until
:func:`enable` is called.

    import codeact.tracing
    codeact.tracing.enable()            # the global tracer and meter providers, set by you
    codeact.tracing.enable(provider)    # or a tracer provider of your own

What is recorded (span names and attributes follow the GenAI semantic conventions where they
define one; the rest are ``codeact.*``):

- ``codeact.run``: one per ``Session.run`` (termination, duration, calls, restored, diagnostics);
  replayed cells (restore, fork, a suspended session's rebuild) get one too, ``codeact.run.replayed``.
- ``execute_tool {name}``: one per tool call, a child of its run (or of the agent's episode for the
  JSON loop), made from the ledger's record with its own start and end times; while the tool runs,
  its span is the current context on whatever thread runs it, so a tool's own traced requests nest
  under it. Arguments and results are recorded only with ``capture_content=True``, each capped.
- ``chat {model}`` per model call and ``invoke_agent {agent}`` per episode (``codeact.agent``).
- ``codeact.restore`` / ``codeact.fork`` / ``codeact.suspend``.
- metrics: ``codeact.tool.duration`` (by tool and outcome), ``codeact.run.duration`` (by
  termination), ``codeact.pool.acquire.duration``, and the gauges ``codeact.pool.size``,
  ``codeact.sessions.open``, ``codeact.sessions.suspended``.

The parent of every top span is the caller's current span. Why explicit: finding out whether a
provider is set would mean importing ``opentelemetry`` in every program, and what may be captured
(arguments hold data people must not ship) is the user's decision, made in one call.
"""

from __future__ import annotations

import contextlib
import functools
import json
import threading
import time
import weakref
from collections.abc import Callable, Iterator, Mapping
from typing import TYPE_CHECKING, Any, Protocol

if TYPE_CHECKING:
    from opentelemetry.metrics import Meter, MeterProvider
    from opentelemetry.trace import Span, Tracer, TracerProvider

    from .results import ExecutionResult, ToolCallRecord

__all__ = ["RunTrace", "attached", "carrier", "disable", "enable", "enabled", "failed", "model_call", "pool_acquired",
           "run_trace", "span", "watch"]

#: The default cap on one captured argument or result (characters of its JSON text).
DEFAULT_CONTENT_CHARS = 2048
_SCOPE = "codeact"


class _Gauges(Protocol):
    def _otel_gauges(self) -> Mapping[str, int]: ...


#: Runtimes whose sessions and pool the gauges read (a weak set: watching keeps nothing alive).
_watched: weakref.WeakSet[Any] = weakref.WeakSet()


class _Otel:
    """The enabled state: the tracer, the instruments, what may be captured."""

    def __init__(self, tracer: Tracer, meter: Meter, capture: bool, cap: int) -> None:
        from opentelemetry import context, metrics, trace

        self.tracer, self.capture, self.cap = tracer, capture, cap
        self.context, self.trace = context, trace
        self.internal, self.client = trace.SpanKind.INTERNAL, trace.SpanKind.CLIENT
        self.error_status = trace.Status(trace.StatusCode.ERROR)
        self.tool_duration = meter.create_histogram(
            "codeact.tool.duration", unit="s", description="Tool calls, by tool and outcome")
        self.run_duration = meter.create_histogram(
            "codeact.run.duration", unit="s", description="Code actions, by termination")
        self.acquire = meter.create_histogram(
            "codeact.pool.acquire.duration", unit="s", description="Taking a sandbox from the warm pool")
        self.model_duration = meter.create_histogram(
            "gen_ai.client.operation.duration", unit="s", description="Model calls")
        self.tokens = meter.create_histogram("gen_ai.client.token.usage", unit="{token}",
                                             description="Tokens per model call")
        for name, what in (("codeact.pool.size", "Warm sandboxes waiting in the pools"),
                           ("codeact.sessions.open", "Open sessions"),
                           ("codeact.sessions.suspended", "Sessions whose sandbox is stopped until their next run")):
            meter.create_observable_gauge(name, [functools.partial(_observe, metrics, name)], description=what)

    def clip(self, value: Any) -> str:
        try:
            text = value if isinstance(value, str) else json.dumps(value, ensure_ascii=False, default=repr)
        except (TypeError, ValueError, RecursionError):
            text = repr(type(value))
        return text if len(text) <= self.cap else text[: self.cap] + f"… [{len(text)} characters]"


def _observe(metrics: Any, name: str, _options: Any) -> list[Any]:
    total = 0
    for runtime in list(_watched):
        try:
            total += runtime._otel_gauges().get(name, 0)
        except Exception:  # a runtime closing meanwhile: counted as nothing
            continue
    return [metrics.Observation(total)]


_state: _Otel | None = None


def enable(tracer_provider: TracerProvider | None = None, meter_provider: MeterProvider | None = None, *,
           capture_content: bool = False, max_content_chars: int = DEFAULT_CONTENT_CHARS) -> None:
    """Record codeact's spans and metrics from now on (needs ``pip install codeact[otel]``).

    ``None`` providers mean the global ones (``opentelemetry.trace.set_tracer_provider``), followed
    even when set later. ``capture_content`` records tool arguments and results on the call spans,
    each cut to ``max_content_chars`` characters of its JSON."""
    if isinstance(max_content_chars, bool) or not isinstance(max_content_chars, int) or max_content_chars < 1:
        raise ValueError(f"max_content_chars must be a positive int, not {max_content_chars!r}")
    try:
        from opentelemetry import metrics, trace
    except ImportError as exc:  # pragma: no cover - the extra is not installed
        raise ImportError("tracing needs opentelemetry-api: pip install 'codeact[otel]'") from exc
    tracer = (tracer_provider.get_tracer(_SCOPE) if tracer_provider is not None else trace.get_tracer(_SCOPE))
    meter = (meter_provider.get_meter(_SCOPE) if meter_provider is not None else metrics.get_meter(_SCOPE))
    global _state
    _state = _Otel(tracer, meter, capture_content, max_content_chars)


def disable() -> None:
    """Stop recording (spans already started still end)."""
    global _state
    _state = None


def enabled() -> bool:
    return _state is not None


def watch(runtime: _Gauges) -> None:
    """Count ``runtime``'s sessions and pool in the gauges (a weak reference; costs one set add)."""
    _watched.add(runtime)


def span(name: str, attributes: Mapping[str, Any] | None = None) -> contextlib.AbstractContextManager[Span | None]:
    """A span current for the ``with`` block (an exception in it is recorded); nothing when off."""
    state = _state
    if state is None:
        return contextlib.nullcontext()
    return state.tracer.start_as_current_span(name, attributes=attributes, kind=state.internal)


@contextlib.contextmanager
def model_call(model: str, provider: str | None) -> Iterator[Callable[[Any], None] | None]:
    """A ``chat {model}`` span current while the block asks the model; yields a function that
    records the response (its usage and finish reason), or None when off."""
    state = _state
    if state is None:
        yield None
        return
    attrs = {"gen_ai.operation.name": "chat", "gen_ai.request.model": model}
    if provider:
        attrs["gen_ai.provider.name"] = provider
    started = time.perf_counter()
    with state.tracer.start_as_current_span(f"chat {model}", kind=state.client, attributes=attrs) as current:
        def answered(response: Any) -> None:
            usage = response.usage
            current.set_attributes({
                "gen_ai.usage.input_tokens": usage.input_tokens, "gen_ai.usage.output_tokens": usage.output_tokens,
                "gen_ai.response.finish_reasons": [response.raw_stop_reason or response.stop_reason]})
            base = {"gen_ai.operation.name": "chat", "gen_ai.request.model": model}
            state.tokens.record(usage.input_tokens, {**base, "gen_ai.token.type": "input"})
            state.tokens.record(usage.output_tokens, {**base, "gen_ai.token.type": "output"})
        try:
            yield answered
        except BaseException as exc:
            current.set_attribute("error.type", type(exc).__name__)
            raise
        finally:
            state.model_duration.record(time.perf_counter() - started,
                                        {"gen_ai.operation.name": "chat", "gen_ai.request.model": model})


def failed(error_type: str, message: str = "") -> None:
    """Mark the current span as failed (``error.type``); nothing when off."""
    state = _state
    if state is not None:
        current = state.trace.get_current_span()
        current.set_attribute("error.type", error_type)
        current.set_status(state.trace.Status(state.trace.StatusCode.ERROR, message[: state.cap]))


def carrier() -> dict[str, str] | None:
    """The current context as W3C trace headers, to continue this trace in another process (a
    cluster's node); None when off."""
    if _state is None:
        return None
    from opentelemetry import propagate

    headers: dict[str, str] = {}
    propagate.inject(headers)
    return headers


@contextlib.contextmanager
def attached(headers: Mapping[str, str] | None) -> Iterator[None]:
    """The context ``headers`` carry (see :func:`carrier`) current for the block, when tracing is
    on in this process; else nothing."""
    if _state is None or not headers:
        yield
        return
    from opentelemetry import propagate

    token = _state.context.attach(propagate.extract(dict(headers)))
    try:
        yield
    finally:
        _state.context.detach(token)


def pool_acquired(seconds: float, hit: bool) -> None:
    """Note one take from the warm pool (``hit``: a warm sandbox was there)."""
    state = _state
    if state is not None:
        state.acquire.record(seconds, {"codeact.pool.hit": hit})


def run_trace(*, own_span: bool = True, replayed: bool = False) -> RunTrace | None:
    """The trace of one run's calls (None when off): a ``codeact.run`` span (``own_span``) whose
    children are the calls, else calls under the caller's current span (the JSON loop's turns)."""
    state = _state
    return None if state is None else RunTrace(state, own_span, replayed)


class RunTrace:
    """One run's spans. The ledger calls :meth:`opened` and :meth:`finished` for each record (from
    any thread); the tool host runs each tool through :meth:`wrap`, which makes its call's span the
    current context while it runs. The SDK's spans and metric points are made by :meth:`flush`
    (at the run's end, or once many calls wait), from each record's own times: a tool call's
    round trip then carries no SDK work, and a span exists early only if a tool's own tracing asks
    for its parent (see :class:`_CallSpan`)."""

    #: Finished calls waiting for :meth:`flush`; past this many, the call that ends next flushes.
    FLUSH_AT = 1024

    def __init__(self, state: _Otel, own_span: bool, replayed: bool) -> None:
        self._state = state
        self.replayed = replayed
        trace = state.trace
        self.span: Span | None = None
        if own_span:
            self.span = state.tracer.start_span("codeact.run", kind=state.internal,
                                                attributes={"codeact.run.replayed": replayed})
            self.parent = trace.set_span_in_context(self.span)
        else:
            self.parent = state.context.get_current()
        #: False when the sampler dropped the run (or the caller's span): its calls then make no
        #: spans at all (they would be dropped too), only their metrics.
        self.recording = trace.get_current_span(self.parent).is_recording()
        self._lock = threading.Lock()
        self._opened: dict[str, int] = {}
        self._calls: dict[str, Span] = {}
        self._done: list[tuple[ToolCallRecord, int]] = []

    # -- the calls -----------------------------------------------------------------------------
    def opened(self, record: ToolCallRecord) -> None:
        if self.recording:
            self._opened[record.id] = time.time_ns()

    def _call_span(self, record: ToolCallRecord) -> Span:
        with self._lock:
            found = self._calls.get(record.id)
            if found is not None:
                return found
            state = self._state
            attrs: dict[str, Any] = {"gen_ai.operation.name": "execute_tool", "gen_ai.tool.name": record.name,
                                     "gen_ai.tool.call.id": record.id, "gen_ai.tool.type": "function"}
            if self.replayed:
                attrs["codeact.tool.replayed"] = True
            if state.capture:
                attrs["gen_ai.tool.call.arguments"] = state.clip(record.arguments)
            made = self._calls[record.id] = state.tracer.start_span(
                f"execute_tool {record.name}", context=self.parent, kind=state.internal, attributes=attrs,
                start_time=self._opened.get(record.id) or time.time_ns())
            return made

    def wrap(self, record: ToolCallRecord, fn: Callable[..., Any], is_async: bool = False) -> Callable[..., Any]:
        """``fn`` run with the call's span as the current context (on the thread, or in the task,
        that runs it)."""
        if not self.recording:
            return fn
        context, trace = self._state.context, self._state.trace
        lazy = _call_span_type()

        if is_async:
            async def traced_async(*args: Any, **kwargs: Any) -> Any:
                token = context.attach(trace.set_span_in_context(lazy(self, record)))
                try:
                    return await fn(*args, **kwargs)
                finally:
                    context.detach(token)
            return traced_async

        def traced(*args: Any, **kwargs: Any) -> Any:
            token = context.attach(trace.set_span_in_context(lazy(self, record)))
            try:
                return fn(*args, **kwargs)
            finally:
                context.detach(token)
        return traced

    def finished(self, record: ToolCallRecord) -> None:
        """Note the call's end; its span and metric point are made by :meth:`flush`."""
        self._done.append((record, time.time_ns()))  # list.append is atomic: no lock on the call's path
        if len(self._done) >= self.FLUSH_AT:
            self.flush()

    def flush(self) -> None:
        """Make the spans (ended at their own times) and metric points of the calls ended so far."""
        with self._lock:
            done, self._done = self._done, []
        state = self._state
        for record, ended in done:
            error = record.error
            outcome = "cached" if record.cached else "ok" if error is None else error.code
            state.tool_duration.record(record.duration_ms / 1000, {"gen_ai.tool.name": record.name,
                                                                   "codeact.tool.outcome": outcome})
            if not self.recording:
                continue
            call = self._call_span(record)
            with self._lock:
                self._calls.pop(record.id, None)
                self._opened.pop(record.id, None)
            if record.cached:
                call.set_attribute("codeact.tool.cached", True)
            if error is not None:
                call.set_attribute("error.type", error.code)
                call.set_status(state.trace.Status(state.trace.StatusCode.ERROR, error.message[:state.cap]))
            elif state.capture:
                call.set_attribute("gen_ai.tool.call.result", state.clip(record.result))
            call.end(end_time=ended)

    # -- the run -------------------------------------------------------------------------------
    def ended(self, result: ExecutionResult) -> ExecutionResult:
        """Close the run's span with what the result says; returns the result."""
        self.flush()
        run = self.span
        if run is not None:
            diagnostics = getattr(result, "diagnostics", None)
            attrs: dict[str, Any] = {
                "codeact.run.termination": result.termination, "codeact.run.ok": result.ok,
                "codeact.run.duration_ms": result.duration_ms, "codeact.run.calls": len(result.calls),
                "codeact.run.restored": result.restored}
            egress = getattr(result, "egress", None)
            if egress:  # requests through the egress broker, and how many it refused; an event each
                attrs["codeact.run.egress"] = len(egress)
                attrs["codeact.run.egress_refused"] = sum(not r.allowed for r in egress)
                for r in egress:
                    run.add_event("codeact.egress", {
                        "http.request.method": r.method, "server.address": r.host, "server.port": r.port,
                        "url.path": r.path, "http.response.status_code": r.status or 0,
                        "codeact.egress.allowed": r.allowed, "codeact.egress.tunnel": r.tunnel,
                        "codeact.egress.bytes_in": r.bytes_in, "codeact.egress.bytes_out": r.bytes_out,
                        "codeact.egress.reason": r.reason or "", "codeact.egress.duration_ms": r.duration_ms})
            if diagnostics is not None:
                attrs["codeact.run.diagnostics"] = len(diagnostics)
            if result.error is not None:
                attrs["error.type"] = result.error.type
            elif not result.ok:
                attrs["error.type"] = result.termination
            run.set_attributes(attrs)
            if not result.ok:
                run.set_status(self._state.error_status)
            run.end()
            self.span = None
            self._state.run_duration.record(result.duration_ms / 1000,
                                            {"codeact.run.termination": result.termination})
        return result

    def __enter__(self) -> RunTrace:
        return self

    def __exit__(self, et: type[BaseException] | None, ev: BaseException | None, tb: Any) -> None:
        self.flush()
        run, self.span = self.span, None
        if run is not None:  # the run raised before its result was assembled
            if ev is not None:
                run.record_exception(ev)
                run.set_attribute("error.type", type(ev).__name__)
                run.set_status(self._state.error_status)
            run.end()


@functools.cache
def _call_span_type() -> Callable[[RunTrace, ToolCallRecord], Span]:
    """:class:`_CallSpan`'s class, made once (it subclasses the API's ``NonRecordingSpan``, which
    is not imported before :func:`enable`)."""
    from opentelemetry.trace import INVALID_SPAN_CONTEXT, NonRecordingSpan

    class _CallSpan(NonRecordingSpan):
        """What a running tool sees as its current span: the SDK's span is made only when
        something asks for it (a child span reads its parent's context, a tool sets an attribute),
        with the call's own start time; else :meth:`RunTrace.flush` makes it after the fact."""

        def __init__(self, run: RunTrace, record: ToolCallRecord) -> None:
            super().__init__(INVALID_SPAN_CONTEXT)
            self._run, self._record = run, record

        def _real(self) -> Span:
            return self._run._call_span(self._record)

        def get_span_context(self) -> Any:
            return self._real().get_span_context()

        def is_recording(self) -> bool:
            return True

        def set_attributes(self, attributes: Any) -> None:
            self._real().set_attributes(attributes)

        def set_attribute(self, key: str, value: Any) -> None:
            self._real().set_attribute(key, value)

        def add_event(self, name: str, attributes: Any = None, timestamp: int | None = None) -> None:
            self._real().add_event(name, attributes, timestamp)

        def set_status(self, status: Any, description: str | None = None) -> None:
            self._real().set_status(status, description)

        def record_exception(self, exception: BaseException, attributes: Any = None, timestamp: int | None = None,
                             escaped: bool = False) -> None:
            self._real().record_exception(exception, attributes, timestamp, escaped)

        def update_name(self, name: str) -> None:
            self._real().update_name(name)

        def end(self, end_time: int | None = None) -> None:
            pass  # the call's span ends with its record

    return _CallSpan
