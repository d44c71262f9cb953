"""What OpenTelemetry costs: the tool call round trip and a warm run with ``codeact.tracing``
enabled (the SDK's ``TracerProvider`` with a ``BatchSpanProcessor`` exporting OTLP/HTTP to a sink
on 127.0.0.1) against the same session with tracing off, alternating chunk by chunk.

The tool call is timed inside the code as in ``toolcall.py`` (each call then makes an
``execute_tool`` span); the warm run (``x = 1``) from the host (a ``codeact.run`` span each).
Needs the SDK and the OTLP exporter (the ``dev`` extra); without them the rows read n/a.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from codeact import Runtime, tracing

from ._common import Baseline, Context, Row, echo, interleave, med_p90, na, ratio
from .toolcall import _chunk

TARGET = 1.10
ROWS = [("tracing_tool_call", "tool call round trip, tracing on vs off", "µs", f"≤ {TARGET:g}× off"),
        ("tracing_warm_run", "warm `x = 1`, tracing on vs off", "µs", "report"),
        ("tracing_call_run", "a run of 1,000 calls, whole, tracing on vs off", "ms", "report")]


class _Sink(BaseHTTPRequestHandler):
    """An OTLP/HTTP collector that takes the spans and drops them."""

    def do_POST(self) -> None:
        self.rfile.read(int(self.headers.get("Content-Length", 0)))
        self.send_response(200)
        self.send_header("Content-Length", "0")
        self.end_headers()

    def log_message(self, *args: Any) -> None:
        pass


def _provider(port: int) -> Any:
    from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import BatchSpanProcessor

    provider = TracerProvider()
    provider.add_span_processor(BatchSpanProcessor(OTLPSpanExporter(endpoint=f"http://127.0.0.1:{port}/v1/traces")))
    return provider


def measure(ctx: Context) -> list[Row]:
    try:
        import opentelemetry.exporter.otlp.proto.http
        import opentelemetry.sdk  # noqa: F401
    except ImportError as exc:
        reason = f"needs opentelemetry-sdk and the OTLP/HTTP exporter ({exc.name})"
        return [na(key, label, unit, reason, target) for key, label, unit, target in ROWS]
    chunks, per_chunk = ctx.n(10, 2), ctx.n(1000, 150)
    warm_per = ctx.n(100, 20)
    calls: dict[str, list[float]] = {"on": [], "off": []}
    warm: dict[str, list[float]] = {"on": [], "off": []}
    whole: dict[str, list[float]] = {"on": [], "off": []}  # the call spans are made at the run's end
    run_calls = ctx.n(1000, 100)
    server = ThreadingHTTPServer(("127.0.0.1", 0), _Sink)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    provider = _provider(server.server_address[1])
    try:
        with Runtime([echo], ctx.subject) as rt, rt.session() as session:
            _chunk(session, 200)  # warm-up: imports, caches, the first frames

            def step(mode: str) -> Callable[[int], None]:
                def run(_round: int) -> None:
                    if mode == "on":
                        tracing.enable(provider)
                    try:
                        calls[mode] += _chunk(session, per_chunk)["lat_us"]
                        for _ in range(warm_per):
                            start = time.perf_counter()
                            session.run("x = 1")
                            warm[mode].append((time.perf_counter() - start) * 1e6)
                        start = time.perf_counter()
                        session.run(f"for i in range({run_calls}):\n    echo(i)")
                        whole[mode].append((time.perf_counter() - start) * 1e3)
                    finally:
                        tracing.disable()
                return run

            interleave(chunks, step("off"), step("on"))
        provider.force_flush(30_000)
    finally:
        provider.shutdown()
        server.shutdown()
        server.server_close()
    off, on = med_p90(calls["off"]), med_p90(calls["on"])
    w_off, w_on = med_p90(warm["off"]), med_p90(warm["on"])
    r_off, r_on = med_p90(whole["off"]), med_p90(whole["on"])
    call_ratio, warm_ratio, run_ratio = ratio(on[0], off[0]), ratio(w_on[0], w_off[0]), ratio(r_on[0], r_off[0])
    note = "TracerProvider + BatchSpanProcessor + OTLP/HTTP exporter to a loopback sink; chunks alternate on/off"
    return [
        Row(key="tracing_tool_call", measure=f"tool call round trip, tracing on ({ctx.subject_label})", unit="µs",
            median=on[0], p90=on[1], samples=len(calls["on"]),
            baselines=[Baseline("the same session, tracing off", off[0], off[1])],
            ratio=call_ratio, ratio_label="× off", target=f"≤ {TARGET:g}× off",
            met=call_ratio is not None and call_ratio <= TARGET, note=note,
            extra={"overhead_pct": None if call_ratio is None else round((call_ratio - 1) * 100, 1)}),
        Row(key="tracing_warm_run", measure=f"warm `x = 1`, tracing on ({ctx.subject_label})", unit="µs",
            median=w_on[0], p90=w_on[1], samples=len(warm["on"]),
            baselines=[Baseline("the same session, tracing off", w_off[0], w_off[1])],
            ratio=warm_ratio, ratio_label="× off", target="report", note=note,
            extra={"overhead_pct": None if warm_ratio is None else round((warm_ratio - 1) * 100, 1)}),
        Row(key="tracing_call_run", measure=f"a run of {run_calls:,} calls, whole, tracing on ({ctx.subject_label})",
            unit="ms", median=r_on[0], p90=r_on[1], samples=len(whole["on"]),
            baselines=[Baseline("the same session, tracing off", r_off[0], r_off[1])],
            ratio=run_ratio, ratio_label="× off", target="report",
            note=note + "; the call spans are made from the records when the run ends, so this row carries them",
            extra={"overhead_pct": None if run_ratio is None else round((run_ratio - 1) * 100, 1)}),
    ]
