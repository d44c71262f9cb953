"""OpenTelemetry (``codeact.tracing``) with the real SDK: in-memory exporters and an OTLP/HTTP
exporter to a collector on 127.0.0.1; off, nothing is recorded and ``opentelemetry`` is never imported."""

from __future__ import annotations

import asyncio
import itertools
import json
import subprocess
import sys
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import httpx
import pytest
from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.metrics.export import InMemoryMetricReader
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import BatchSpanProcessor, SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from codeact import Runtime, SandboxConfig, ToolError, ToolPolicy, Toolset, tool, tracing
from tests._configs import LOCAL


class Otel:
    def __init__(self) -> None:
        self.exporter = InMemorySpanExporter()
        self.provider = TracerProvider()
        self.provider.add_span_processor(SimpleSpanProcessor(self.exporter))
        self.reader = InMemoryMetricReader()
        self.meters = MeterProvider(metric_readers=[self.reader])

    def spans(self) -> list[ReadableSpan]:
        return list(self.exporter.get_finished_spans())

    def named(self, prefix: str) -> list[ReadableSpan]:
        return [s for s in self.spans() if s.name.startswith(prefix)]

    def points(self, metric: str) -> list[Any]:
        data = self.reader.get_metrics_data()
        assert data is not None
        return [p for rm in data.resource_metrics for sm in rm.scope_metrics for m in sm.metrics
                if m.name == metric for p in m.data.data_points]


@pytest.fixture
def otel() -> Iterator[Otel]:
    state = Otel()
    tracing.enable(state.provider, state.meters)
    try:
        yield state
    finally:
        tracing.disable()


def three_tools() -> Toolset:
    @tool(policy=ToolPolicy(cacheable=True))
    def lookup(key: str) -> dict[str, str]:
        """Look a key up."""
        return {"key": key, "value": key.upper() * 100}

    @tool
    def broken(reason: str) -> None:
        """Always fails."""
        raise ToolError("upstream_error", f"upstream said no: {reason}")

    return Toolset([lookup, broken])


CODE = """
a = lookup("k")
b = lookup("k")
try:
    broken("nope")
except ToolError:
    pass
print(a["key"], b["key"])
"""


def test_code_action_span_tree(otel: Otel, backend: str) -> None:
    caller = otel.provider.get_tracer("test")
    config = SandboxConfig(backend=backend, policy="none", timeout_s=30)  # type: ignore[arg-type]
    with Runtime(three_tools(), config) as rt, rt.session() as s, caller.start_as_current_span("caller") as parent:
        result = s.run(CODE)
    assert result.ok and [c.cached for c in result.calls] == [False, True, False]
    (run,) = otel.named("codeact.run")
    assert run.parent is not None and run.parent.span_id == parent.get_span_context().span_id
    assert run.attributes is not None
    assert run.attributes["codeact.run.termination"] == "completed" and run.attributes["codeact.run.calls"] == 3
    assert run.attributes["codeact.run.restored"] is False and run.attributes["codeact.run.replayed"] is False
    calls = sorted(otel.named("execute_tool"), key=lambda s: s.start_time or 0)
    assert [c.name for c in calls] == ["execute_tool lookup", "execute_tool lookup", "execute_tool broken"]
    for span, record in zip(calls, result.calls, strict=True):
        attrs = dict(span.attributes or {})
        assert span.parent is not None and span.parent.span_id == run.context.span_id
        assert span.context.trace_id == parent.get_span_context().trace_id
        assert attrs["gen_ai.operation.name"] == "execute_tool" and attrs["gen_ai.tool.name"] == record.name
        assert attrs["gen_ai.tool.call.id"] == record.id
        assert "gen_ai.tool.call.arguments" not in attrs and "gen_ai.tool.call.result" not in attrs  # not opted in
        assert run.start_time is not None and span.start_time is not None and span.end_time is not None
        assert run.start_time <= span.start_time <= span.end_time <= (run.end_time or 0)
    assert "codeact.tool.cached" not in (calls[0].attributes or {})
    assert (calls[1].attributes or {})["codeact.tool.cached"] is True
    failing = dict(calls[2].attributes or {})
    assert failing["error.type"] == "upstream_error" and not calls[2].status.is_ok
    assert "upstream said no" in (calls[2].status.description or "")
    outcomes = {(p.attributes["gen_ai.tool.name"], p.attributes["codeact.tool.outcome"]): p.count
                for p in otel.points("codeact.tool.duration")}
    assert outcomes == {("lookup", "ok"): 1, ("lookup", "cached"): 1, ("broken", "upstream_error"): 1}
    (run_point,) = otel.points("codeact.run.duration")
    assert run_point.attributes == {"codeact.run.termination": "completed"} and run_point.count == 1


def test_failed_run_and_opt_in_capture() -> None:
    state = Otel()
    tracing.enable(state.provider, state.meters, capture_content=True, max_content_chars=40)
    try:
        with Runtime(three_tools(), LOCAL) as rt, rt.session() as s:
            result = s.run('lookup("abc")\nraise ValueError("x")')
    finally:
        tracing.disable()
    assert result.termination == "error"
    (call,) = state.named("execute_tool")
    attrs = dict(call.attributes or {})
    assert attrs["gen_ai.tool.call.arguments"] == '{"key": "abc"}'
    captured = attrs["gen_ai.tool.call.result"]
    assert isinstance(captured, str) and captured.startswith('{"key": "abc", "value": "ABCABC')
    assert captured.endswith(f"… [{len(json.dumps(result.calls[0].result))} characters]")  # capped at 40
    assert len(captured) < 80
    (run,) = state.named("codeact.run")
    assert (run.attributes or {})["error.type"] == "ValueError" and not run.status.is_ok
    with pytest.raises(ValueError, match="max_content_chars"):
        tracing.enable(state.provider, capture_content=True, max_content_chars=0)


def test_not_enabled_records_nothing() -> None:
    state = Otel()  # a provider exists, but codeact was not told to use it
    with Runtime(three_tools(), LOCAL) as rt, rt.session() as s:
        assert s.run(CODE).ok
    assert state.spans() == [] and not tracing.enabled()


def test_off_never_imports_opentelemetry() -> None:
    script = """
import sys
import codeact
from codeact import Runtime, SandboxConfig, tool

@tool
def add(a: int, b: int) -> int:
    return a + b

with Runtime([add], SandboxConfig(backend="local", policy="none")) as rt, rt.session() as s:
    result = s.run("print(add(1, 2))")
assert result.ok and result.stdout == "3\\n", result
print(sorted(m for m in sys.modules if m.split(".")[0] == "opentelemetry"))
"""
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "[]"


def test_context_crosses_into_tools(otel: Otel) -> None:
    """A tool's own traced HTTP request nests under its execute_tool span, on every lane: the
    inline lane, a pool thread (a tool with a policy, through the loop) and an async tool."""
    from opentelemetry.instrumentation.httpx import HTTPXClientInstrumentor

    seen: list[str] = []

    class Upstream(BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            seen.append(self.headers.get("traceparent", ""))
            self.send_response(200)
            self.send_header("Content-Length", "2")
            self.end_headers()
            self.wfile.write(b"ok")

        def log_message(self, *args: Any) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Upstream)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    url = f"http://127.0.0.1:{server.server_address[1]}/"

    @tool
    def plain_get() -> int:
        """A plain sync tool."""
        with httpx.Client() as client:
            return client.get(url).status_code

    @tool(policy=ToolPolicy(idempotent=True))
    def loop_get() -> int:
        """A sync tool the loop sends to a pool thread (it has a policy)."""
        with httpx.Client() as client:
            return client.get(url).status_code

    @tool
    async def async_get() -> int:
        """An async tool, run on the host's loop."""
        async with httpx.AsyncClient() as client:
            return (await client.get(url)).status_code

    HTTPXClientInstrumentor().instrument(tracer_provider=otel.provider)
    try:
        with Runtime([plain_get, loop_get, async_get], LOCAL) as rt, rt.session() as s:
            result = s.run("print(plain_get(), plain_get(), loop_get(), async_get())")
    finally:
        HTTPXClientInstrumentor().uninstrument()
        server.shutdown()
        server.server_close()
    assert result.ok and result.stdout == "200 200 200 200\n", result
    calls = {s.context.span_id: s for s in otel.named("execute_tool")}
    requests = [s for s in otel.spans() if s.name == "GET"]
    assert len(calls) == 4 and len(requests) == 4
    for request in requests:
        assert request.parent is not None and request.parent.span_id in calls
    assert sorted(calls[r.parent.span_id].name for r in requests if r.parent) == [
        "execute_tool async_get", "execute_tool loop_get", "execute_tool plain_get", "execute_tool plain_get"]
    # the upstream saw each request's own span in its traceparent: the context reached the wire
    assert sorted(h.split("-")[2] for h in seen) == sorted(f"{r.context.span_id:016x}" for r in requests)


def test_restore_fork_suspend_spans(otel: Otel) -> None:
    with Runtime(three_tools(), LOCAL) as rt, rt.session() as s:
        assert s.run('x = lookup("k")["key"]').ok
        (child,) = s.fork(1)
        with child:
            assert child.run("print(x)").stdout == "k\n"
        assert s.suspend()
        assert s.run("print(x)").restored
    (fork,) = otel.named("codeact.fork")
    restores = otel.named("codeact.restore")
    assert len(restores) == 2  # the fork's, and the suspended session's rebuild
    assert any(r.parent is not None and r.parent.span_id == fork.context.span_id for r in restores)
    replayed = [r for r in otel.named("codeact.run") if (r.attributes or {})["codeact.run.replayed"]]
    assert len(replayed) == 2 and {r.parent.span_id for r in replayed if r.parent} == {
        r.context.span_id for r in restores}
    replayed_calls = [c for c in otel.named("execute_tool") if (c.attributes or {}).get("codeact.tool.replayed")]
    assert len(replayed_calls) == 2
    (suspend,) = otel.named("codeact.suspend")
    assert (suspend.attributes or {})["codeact.suspend.done"] is True
    last = max(otel.named("codeact.run"), key=lambda r: r.start_time or 0)
    assert (last.attributes or {})["codeact.run.restored"] is True


def test_gauges_and_pool_acquire(otel: Otel) -> None:
    config = LOCAL.model_copy(update={"pool_size": 1})
    with Runtime(three_tools(), config) as rt:
        assert rt.pool is not None and rt.pool.wait_ready(60)
        assert [p.value for p in otel.points("codeact.pool.size")] == [1]
        with rt.session() as s:
            assert s.run("1").ok
            assert [p.value for p in otel.points("codeact.sessions.open")] == [1]
            assert s.suspend()
            assert [p.value for p in otel.points("codeact.sessions.suspended")] == [1]
        assert [p.value for p in otel.points("codeact.sessions.open")] == [0]
    (acquired,) = otel.points("codeact.pool.acquire.duration")
    assert acquired.attributes == {"codeact.pool.hit": True} and acquired.count == 1


class _Collector(BaseHTTPRequestHandler):
    bodies: list[bytes]

    def do_POST(self) -> None:
        length = int(self.headers["Content-Length"])
        self.bodies.append(self.rfile.read(length))
        self.send_response(200)
        self.send_header("Content-Type", "application/x-protobuf")
        self.send_header("Content-Length", "0")
        self.end_headers()

    def log_message(self, *args: Any) -> None:
        pass


def test_otlp_http_export_to_a_loopback_collector() -> None:
    from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
    from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest

    handler = type("Collector", (_Collector,), {"bodies": []})
    server = ThreadingHTTPServer(("127.0.0.1", 0), handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    provider = TracerProvider()
    provider.add_span_processor(BatchSpanProcessor(OTLPSpanExporter(
        endpoint=f"http://127.0.0.1:{server.server_address[1]}/v1/traces")))
    tracing.enable(provider)
    try:
        with Runtime(three_tools(), LOCAL) as rt, rt.session() as s:
            assert s.run(CODE).ok
        assert provider.force_flush(30_000)
    finally:
        tracing.disable()
        provider.shutdown()
        server.shutdown()
        server.server_close()
    spans = []
    for body in handler.bodies:
        request = ExportTraceServiceRequest()
        request.ParseFromString(body)
        spans += [span for rs in request.resource_spans for ss in rs.scope_spans for span in ss.spans]
    by_id = {span.span_id: span for span in spans}
    (run,) = [s for s in spans if s.name == "codeact.run"]
    calls = [s for s in spans if s.name.startswith("execute_tool ")]
    assert sorted(c.name for c in calls) == ["execute_tool broken", "execute_tool lookup", "execute_tool lookup"]
    assert all(by_id[c.parent_span_id] is run for c in calls)

    def attrs(span: Any) -> dict[str, Any]:
        return {a.key: getattr(a.value, a.value.WhichOneof("value")) for a in span.attributes}

    assert {attrs(c)["gen_ai.tool.name"] for c in calls} == {"lookup", "broken"}
    assert [attrs(c).get("error.type") for c in calls if c.name.endswith("broken")] == ["upstream_error"]
    assert sum(bool(attrs(c).get("codeact.tool.cached")) for c in calls) == 1
    assert attrs(run)["codeact.run.calls"] == 3


def test_arun_keeps_the_callers_span(otel: Otel) -> None:
    caller = otel.provider.get_tracer("test")

    async def main() -> Any:
        with Runtime(three_tools(), LOCAL) as rt, rt.session() as s:
            with caller.start_as_current_span("async caller") as parent:
                await s.arun('lookup("q")')
            return parent

    parent = asyncio.run(main())
    (run,) = otel.named("codeact.run")
    assert run.parent is not None and run.parent.span_id == parent.get_span_context().span_id


def test_a_run_with_a_listener_keeps_the_callers_span(otel: Otel) -> None:
    """``on_event`` runs the code on a worker thread: the caller's span still parents the run."""
    caller = otel.provider.get_tracer("test")
    events: list[Any] = []
    with Runtime(three_tools(), LOCAL) as rt, rt.session() as s, caller.start_as_current_span("caller") as parent:
        assert s.run('lookup("q")', on_event=events.append).ok
    assert [type(e).__name__ for e in events][-1] == "RunDone"
    (run,) = otel.named("codeact.run")
    assert run.parent is not None and run.parent.span_id == parent.get_span_context().span_id


def test_a_sampled_out_run_makes_no_call_spans_but_counts_its_calls() -> None:
    from opentelemetry.sdk.trace.sampling import ALWAYS_OFF

    state = Otel()
    state.provider = TracerProvider(sampler=ALWAYS_OFF)
    state.provider.add_span_processor(SimpleSpanProcessor(state.exporter))
    tracing.enable(state.provider, state.meters)
    try:
        with Runtime(three_tools(), LOCAL) as rt, rt.session() as s:
            assert s.run(CODE).ok
    finally:
        tracing.disable()
    assert state.spans() == []
    assert sum(p.count for p in state.points("codeact.tool.duration")) == 3


def test_call_spans_are_made_after_the_fact_at_the_runs_end(otel: Otel, monkeypatch: pytest.MonkeyPatch) -> None:
    """A call's round trip does no SDK work: its span is made from its record's times when the run
    ends (or once ``FLUSH_AT`` calls wait), not while the code runs."""
    @tool
    def peek() -> int:
        """How many call spans were exported so far."""
        return len(otel.named("execute_tool"))

    with Runtime([peek], LOCAL) as rt, rt.session() as s:
        result = s.run("[peek() for _ in range(4)]")
        assert result.ok and result.value == [0, 0, 0, 0]  # none yet, not even the earlier calls'
        calls = sorted(otel.named("execute_tool peek"), key=lambda span: span.start_time or 0)
        assert len(calls) == 4
        for span, nxt in itertools.pairwise(calls):  # each its own interval, in order, not the flush's
            assert (span.start_time or 0) < (span.end_time or 0) <= (nxt.start_time or 0)
        monkeypatch.setattr(tracing.RunTrace, "FLUSH_AT", 2)
        seen = s.run("[peek() for _ in range(5)]").value
        assert seen == [4, 4, 6, 6, 8], seen  # flushed each time two had ended
