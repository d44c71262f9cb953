"""The viewer reads an OTLP JSON export of codeact's spans (issue 33): two agent episodes exported
over OTLP/HTTP by the real SDK to a collector on 127.0.0.1, written as the Collector's file exporter
writes them (one JSON request per line), shown as timelines."""

from __future__ import annotations

import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any, ClassVar

import pytest
from google.protobuf.json_format import MessageToJson
from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import BatchSpanProcessor

from codeact import Runtime, ToolError, tool, tracing
from codeact.agent import CodeActAgent, FunctionCallingAgent
from codeact.testing.fake_server import FakeModelServer
from codeact.viewer import write_view
from codeact.viewer._otlp import is_otlp, load_otlp
from tests._configs import LOCAL
from tests.agent.test_code_agent import client_for, fenced
from tests.agent.test_json_agent import PARALLEL_WEATHER
from tests.conftest import Counter, make_tools


class _FileCollector(BaseHTTPRequestHandler):
    lines: ClassVar[list[str]] = []

    def do_POST(self) -> None:
        request = ExportTraceServiceRequest()
        request.ParseFromString(self.rfile.read(int(self.headers["Content-Length"])))
        self.lines.append(MessageToJson(request, indent=None))
        self.send_response(200)
        self.send_header("Content-Length", "0")
        self.end_headers()

    def log_message(self, *args: Any) -> None:
        pass


@tool
def lookup(key: str) -> str:
    """Look a key up.

    Args:
        key: the key.
    """
    if key == "bad":
        raise ToolError("not_found", "no such key")
    return key.upper()


@pytest.fixture(scope="module")
def export(tmp_path_factory: pytest.TempPathFactory) -> Path:
    server = ThreadingHTTPServer(("127.0.0.1", 0), _FileCollector)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    provider = TracerProvider()
    provider.add_span_processor(BatchSpanProcessor(OTLPSpanExporter(
        endpoint=f"http://127.0.0.1:{server.server_address[1]}/v1/traces")))
    tracing.enable(provider)
    code = "a = lookup('x')\ntry:\n    lookup('bad')\nexcept ToolError:\n    pass\nprint(a)"
    try:
        with FakeModelServer([fenced(code), "X."]) as fake, Runtime([lookup], LOCAL) as rt:
            assert CodeActAgent(client_for(fake, "openai"), rt.toolset, runtime=rt).run("Look x up").status == "answered"
        with FakeModelServer([PARALLEL_WEATHER, "Beijing."]) as fake, Runtime(make_tools(Counter()), LOCAL) as rt:
            assert FunctionCallingAgent(client_for(fake, "openai"), rt.toolset, runtime=rt).run("Warmer?").status \
                == "answered"
        assert provider.force_flush(30_000)
    finally:
        tracing.disable()
        provider.shutdown()
        server.shutdown()
        server.server_close()
    path = tmp_path_factory.mktemp("otlp") / "spans.otlp.jsonl"
    path.write_text("\n".join(_FileCollector.lines) + "\n")
    return path


def test_an_otlp_export_becomes_one_timeline_per_episode(export: Path) -> None:
    assert is_otlp(export)
    code, json_mode = load_otlp(export)
    assert (code.mode, json_mode.mode) == ("code", "json") and code.model == "fake-model"
    assert [s.kind for s in code.spans] == ["model", "exec", "model"]
    (run,) = [s for s in code.spans if s.kind == "exec"]
    assert run.info["termination"] == "completed"
    assert [(c.name, c.ok) for c in run.calls] == [("lookup", True), ("lookup", False)]
    assert run.calls[1].error is not None and run.calls[1].error["code"] == "not_found"
    assert all(run.start <= c.start and c.start + c.duration <= run.start + run.duration + 1e-6 for c in run.calls)
    assert code.tokens_in > 0 and code.tool_calls == 2 and code.tool_errors == 1
    # the JSON loop's calls (children of the episode, not of a run) become one tool turn between the chats
    assert [s.kind for s in json_mode.spans] == ["model", "exec", "model"]
    assert [c.name for c in json_mode.spans[1].calls] == ["get_weather", "get_weather"]
    assert json_mode.spans[1].start >= json_mode.spans[0].start + json_mode.spans[0].duration - 1e-6


def test_write_view_renders_the_export_and_a_trace_stays_a_trace(export: Path, tmp_path: Path) -> None:
    html = write_view(export, tmp_path / "spans.html").read_text()
    assert html.count("CodeActAgent") >= 1 and "lookup" in html and "get_weather" in html
    trace = tmp_path / "t.jsonl"
    trace.write_text('{"event": "episode_start", "t": 0, "task": "t", "mode": "code"}\n')
    assert not is_otlp(trace)
    assert "episode" in write_view(trace).read_text()


def test_malformed_entries_of_an_export_are_skipped(tmp_path: Path) -> None:
    bad = tmp_path / "bad.json"
    bad.write_text('{"resourceSpans": [{"scopeSpans": [{"spans": [{"name": 3}, "x", {"name": "codeact.run", '
                   '"traceId": "t", "spanId": "s", "startTimeUnixNano": "10", "endTimeUnixNano": "nan"}, '
                   '{"name": "codeact.run", "traceId": "t", "spanId": "r", "startTimeUnixNano": "1000000000", '
                   '"endTimeUnixNano": "3000000000", "attributes": [{"key": "codeact.run.termination", '
                   '"value": {"stringValue": "timeout"}}], "status": {"code": 2}}]}]}, 7]}\n')
    (tl,) = load_otlp(bad)
    (run,) = tl.spans
    assert run.kind == "exec" and not run.ok and run.duration == 2.0 and run.info["termination"] == "timeout"
