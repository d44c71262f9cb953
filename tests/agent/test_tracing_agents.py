"""The agents' OpenTelemetry spans against the FakeModelServer (real HTTP on 127.0.0.1) and the real
SDK: ``invoke_agent`` per episode, ``chat {model}`` per model call, ``execute_tool`` per tool call."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from codeact import Runtime, tracing
from codeact.agent import CodeActAgent, FunctionCallingAgent
from codeact.testing.fake_server import FakeModelServer
from tests._configs import LOCAL
from tests.agent.test_code_agent import WEATHER_CODE, client_for, fenced
from tests.agent.test_json_agent import PARALLEL_WEATHER
from tests.conftest import Counter, make_tools


@pytest.fixture
def spans() -> Iterator[InMemorySpanExporter]:
    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    tracing.enable(provider)
    try:
        yield exporter
    finally:
        tracing.disable()


def tree(exporter: InMemorySpanExporter) -> dict[str, list[str]]:
    """parent span name → its children's names, in start order (the root under "")."""
    found = list(exporter.get_finished_spans())
    names = {s.context.span_id: s.name for s in found}
    out: dict[str, list[str]] = {}
    for span in sorted(found, key=lambda s: s.start_time or 0):
        parent = names.get(span.parent.span_id, "?") if span.parent else ""
        out.setdefault(parent, []).append(span.name)
    return out


def only(exporter: InMemorySpanExporter, name: str) -> ReadableSpan:
    (span,) = [s for s in exporter.get_finished_spans() if s.name == name]
    return span


@pytest.mark.parametrize("vendor", ["openai", "anthropic"])
def test_json_agent_episode_spans(spans: InMemorySpanExporter, vendor: str) -> None:
    script = [PARALLEL_WEATHER, "Beijing is warmer."]
    with FakeModelServer(script) as server, Runtime(make_tools(Counter()), LOCAL) as rt:
        episode = FunctionCallingAgent(client_for(server, vendor), rt.toolset, runtime=rt).run("Warmer where?")
    assert episode.status == "answered"
    assert tree(spans) == {
        "": ["invoke_agent FunctionCallingAgent"],
        "invoke_agent FunctionCallingAgent": ["chat fake-model", "execute_tool get_weather",
                                              "execute_tool get_weather", "chat fake-model"],
    }
    agent = dict(only(spans, "invoke_agent FunctionCallingAgent").attributes or {})
    assert agent["gen_ai.operation.name"] == "invoke_agent" and agent["gen_ai.request.model"] == "fake-model"
    assert agent["gen_ai.usage.input_tokens"] == episode.tokens_in and agent["codeact.episode.status"] == "answered"
    chats = sorted((s for s in spans.get_finished_spans() if s.name == "chat fake-model"),
                   key=lambda s: s.start_time or 0)
    first = dict(chats[0].attributes or {})
    assert first["gen_ai.operation.name"] == "chat" and first["gen_ai.request.model"] == "fake-model"
    assert first["gen_ai.usage.input_tokens"] > 0 and first["gen_ai.usage.output_tokens"] > 0
    assert first["gen_ai.provider.name"] == vendor
    assert tuple(first["gen_ai.response.finish_reasons"]) == ("tool_calls" if vendor == "openai" else "tool_use",)
    assert sum(dict(c.attributes or {})["gen_ai.usage.input_tokens"] for c in chats) == episode.tokens_in
    calls = [s for s in spans.get_finished_spans() if s.name == "execute_tool get_weather"]
    assert sorted(dict(c.attributes or {})["gen_ai.tool.call.id"] for c in calls) == sorted(
        r.id for r in episode.records)


def test_code_agent_episode_spans(spans: InMemorySpanExporter) -> None:
    script = [fenced(WEATHER_CODE), "Beijing is warmer."]
    with FakeModelServer(script) as server, Runtime(make_tools(Counter()), LOCAL) as rt:
        episode = CodeActAgent(client_for(server, "openai"), rt.toolset, runtime=rt, stream=True).run("Warmer?")
    assert episode.status == "answered"
    assert tree(spans) == {
        "": ["invoke_agent CodeActAgent"],
        "invoke_agent CodeActAgent": ["chat fake-model", "codeact.run", "chat fake-model"],
        "codeact.run": ["execute_tool get_weather", "execute_tool get_weather"],
    }
    run = dict(only(spans, "codeact.run").attributes or {})
    assert run["codeact.run.termination"] == "completed" and run["codeact.run.calls"] == 2


def test_a_failed_model_call_marks_its_chat_span(spans: InMemorySpanExporter) -> None:
    with FakeModelServer([{"http_status": 400, "message": "bad request"}]) as server, \
            Runtime(make_tools(Counter()), LOCAL) as rt:
        episode = CodeActAgent(client_for(server, "openai"), rt.toolset, runtime=rt).run("Hi")
    assert episode.status == "error"
    chat = only(spans, "chat fake-model")
    assert dict(chat.attributes or {})["error.type"] == "ModelError" and not chat.status.is_ok
