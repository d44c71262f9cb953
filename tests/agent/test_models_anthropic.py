"""AnthropicClient against the fake server: real HTTP on 127.0.0.1, streamed and not."""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import Iterator
from typing import Any

import pytest

from codeact.agent.messages import Message, ModelResponse, ToolCall, ToolResult
from codeact.agent.models import AnthropicClient, HTTPOptions
from codeact.agent.models._http import SSEEvent
from codeact.agent.models.anthropic import _EventAccumulator
from codeact.errors import ModelError
from codeact.testing.fake_server import FakeModelServer

WEATHER = {
    "name": "get_weather",
    "description": "Current weather of a city.",
    "input_schema": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]},
}
FAST = HTTPOptions(timeout=5.0, max_retries=3, backoff_base=0.01, backoff_max=0.05)
KEY = "sk-ant-test-secret-0123456789"
STREAMING = pytest.mark.parametrize("stream", [False, True], ids=["json", "sse"])


@pytest.fixture
def make() -> Iterator[Any]:
    servers: list[FakeModelServer] = []
    clients: list[AnthropicClient] = []

    def factory(script: Any, **kw: Any) -> tuple[FakeModelServer, AnthropicClient]:
        server = FakeModelServer(script, **kw).start()
        client = AnthropicClient("claude-test", base_url=server.anthropic_base_url, api_key=KEY, options=FAST)
        servers.append(server)
        clients.append(client)
        return server, client

    yield factory
    for client in clients:
        client.close()
    for server in servers:
        server.stop()


def ask(client: AnthropicClient, stream: bool, **kw: Any) -> ModelResponse:
    kw.setdefault("tools", [WEATHER])
    return client.complete([Message.user("Weather in Tokyo and Oslo?")], stream=stream, **kw)


@STREAMING
def test_text_answer(make: Any, stream: bool) -> None:
    usage = {"input_tokens": 31, "output_tokens": 9}
    server, client = make([{"text": "Tokyo is 18°C with rain.", "usage": usage}])
    r = ask(client, stream, system="Be brief.", max_tokens=300)
    assert r.text == "Tokyo is 18°C with rain."
    assert (r.stop_reason, r.raw_stop_reason, r.truncated, r.tool_calls) == ("end_turn", "end_turn", False, [])
    assert (r.usage.input_tokens, r.usage.output_tokens) == (31, 9)
    body = server.requests[0]
    assert body["system"] == "Be brief." and body["max_tokens"] == 300 and body["model"] == "claude-test"
    assert body["messages"] == [{"role": "user", "content": [{"type": "text", "text": "Weather in Tokyo and Oslo?"}]}]
    assert body["tools"] == [WEATHER]
    assert body.get("stream", False) is stream
    headers = server.calls[0].headers
    assert headers["x-api-key"] == KEY and headers["anthropic-version"] == "2023-06-01"
    assert server.calls[0].path == "/v1/messages"


@STREAMING
def test_two_parallel_tool_calls(make: Any, stream: bool) -> None:
    calls = [
        {"name": "get_weather", "arguments": {"city": "Tokyo"}},
        {"name": "get_weather", "arguments": {"city": "Oslo"}},
    ]
    _, client = make([{"text": "Checking both.", "tool_calls": calls}])
    r = ask(client, stream)
    assert (r.stop_reason, r.raw_stop_reason, r.text) == ("tool_use", "tool_use", "Checking both.")
    assert [(c.id, c.name, c.arguments) for c in r.tool_calls] == [
        ("toolu_0_0", "get_weather", {"city": "Tokyo"}),
        ("toolu_0_1", "get_weather", {"city": "Oslo"}),
    ]
    assert all(c.executable for c in r.tool_calls)


def test_streamed_arguments_reassemble_exactly(make: Any) -> None:
    args = {"city": 'Zürich "HB"', "notes": "a\nb\\c {}", "nested": {"days": [1, 2, 3], "emoji": "🌧️"}}
    calls = [{"name": "get_weather", "arguments": args}, {"name": "get_weather", "arguments": {}}]
    entry = {"text": "A longer preamble before the calls arrive.", "tool_calls": calls}
    _, client = make([entry, entry])
    plain, streamed = ask(client, False), ask(client, True)
    assert streamed.text == plain.text
    assert [(c.name, c.arguments) for c in streamed.tool_calls] == [(c.name, c.arguments) for c in plain.tool_calls]
    assert streamed.tool_calls[0].arguments == args and streamed.tool_calls[1].arguments == {}
    assert json.loads(streamed.tool_calls[0].arguments_raw) == args


def test_truncated_stream_has_no_executable_calls(make: Any) -> None:
    entry = {"text": "Let me check.", "tool_calls": [{"name": "get_weather", "arguments": {"city": "Tokyo"}}]}
    _, client = make([{**entry, "truncate_stream": True}])
    r = ask(client, True)
    assert r.truncated and r.stop_reason == "error"
    assert r.tool_calls and not any(c.executable for c in r.tool_calls)
    assert all(c.arguments is None and c.parse_error for c in r.tool_calls)


def test_stream_without_message_stop_is_truncated(make: Any) -> None:
    """Even when every block completed, a missing message_stop means the answer is not trusted."""
    entry = {"tool_calls": [{"name": "get_weather", "arguments": {"city": "Tokyo"}}]}
    _, client = make([{**entry, "truncate_stream": True, "truncate_after": -1}])  # only message_stop cut
    r = ask(client, True)
    assert r.truncated and r.raw_stop_reason == "tool_use" and r.stop_reason == "error"
    assert r.tool_calls[0].arguments is None and r.tool_calls[0].arguments_raw == '{"city": "Tokyo"}'


@pytest.mark.parametrize(
    ("raw", "neutral"),
    [
        ("end_turn", "end_turn"),
        ("max_tokens", "max_tokens"),
        ("stop_sequence", "stop_sequence"),
        ("refusal", "refusal"),
        ("pause_turn", "other"),
        ("model_context_window_exceeded", "max_tokens"),
    ],
)
@STREAMING
def test_every_stop_reason(make: Any, stream: bool, raw: str, neutral: str) -> None:
    _, client = make([{"text": "partial", "stop_reason": raw}])
    r = ask(client, stream)
    assert (r.stop_reason, r.raw_stop_reason, r.truncated) == (neutral, raw, False)


def test_cut_before_message_stop() -> None:
    acc = _EventAccumulator()
    events: list[dict[str, Any]] = [
        {"type": "message_start", "message": {"id": "m", "usage": {"input_tokens": 5, "output_tokens": 1}}},
        {"type": "content_block_start", "index": 0, "content_block": {"type": "tool_use", "id": "t", "name": "f"}},
        {"type": "content_block_delta", "index": 0, "delta": {"type": "input_json_delta", "partial_json": '{"a": 1}'}},
        {"type": "content_block_stop", "index": 0},
        {"type": "message_delta", "delta": {"stop_reason": "tool_use"}, "usage": {"output_tokens": 7}},
    ]
    for event in events:
        acc.feed(SSEEvent(event["type"], json.dumps(event)))
    r = acc.result()
    assert r.truncated and r.stop_reason == "error" and r.raw_stop_reason == "tool_use"
    assert not r.tool_calls[0].executable and r.tool_calls[0].arguments_raw == '{"a": 1}'
    assert (r.usage.input_tokens, r.usage.output_tokens) == (5, 7)


@STREAMING
def test_429_with_retry_after_then_success(make: Any, stream: bool) -> None:
    server, client = make([{"http_status": 429, "retry_after": 0.2}, "ok"])
    started = time.monotonic()
    assert ask(client, stream).text == "ok" and len(server.requests) == 2
    assert time.monotonic() - started >= 0.2


@pytest.mark.parametrize("status", [500, 529])
@STREAMING
def test_5xx_and_overloaded_then_success(make: Any, stream: bool, status: int) -> None:
    server, client = make([{"http_status": status}, "ok"])
    assert ask(client, stream).text == "ok" and len(server.requests) == 2


@STREAMING
def test_400_raises_at_once_with_the_provider_message(make: Any, stream: bool) -> None:
    server, client = make([{"http_status": 400, "message": "max_tokens: Field required"}, "unused"])
    with pytest.raises(ModelError) as info:
        ask(client, stream)
    assert info.value.status == 400 and len(server.requests) == 1
    assert "invalid_request_error: max_tokens: Field required" in str(info.value)


def test_error_never_leaks_the_key(make: Any) -> None:
    _, client = make([{"http_status": 403, "message": f"key {KEY} may not use this model"}])
    with pytest.raises(ModelError) as info:
        ask(client, False)
    assert KEY not in str(info.value) and "***" in str(info.value) and KEY not in repr(client)


def test_stream_error_event_raises(make: Any) -> None:
    _, client = make([{"text": "some text to get going", "stream_error": "overloaded_error"}])
    with pytest.raises(ModelError, match="overloaded_error") as info:
        ask(client, True)
    assert info.value.retryable


@pytest.mark.parametrize(
    ("choice", "wire"),
    [
        ("auto", {"type": "auto"}),
        ("none", {"type": "none"}),
        ("required", {"type": "any"}),
        ({"name": "get_weather"}, {"type": "tool", "name": "get_weather"}),
    ],
)
def test_tool_choice_serialized(make: Any, choice: Any, wire: Any) -> None:
    server, client = make(["ok"])
    ask(client, False, tool_choice=choice)
    assert server.requests[0]["tool_choice"] == wire


def test_tool_results_one_user_message_with_blocks(make: Any) -> None:
    server, client = make(["Tokyo is 18°C; Oslo failed."])
    calls = [
        ToolCall.from_arguments("toolu_a", "get_weather", {"city": "Tokyo"}),
        ToolCall.from_arguments("toolu_b", "get_weather", {"city": "Oslo"}),
    ]
    history = [
        Message.system("Be brief."),
        Message.user("Weather in Tokyo"),
        Message.user("and Oslo?"),
        Message.assistant("", calls),
        Message.tool([ToolResult(call_id="toolu_a", content="18°C rain")]),
        Message.tool([ToolResult(call_id="toolu_b", content="timeout: upstream slow", is_error=True)]),
        Message.user("Answer in one line."),
    ]
    r = client.complete(history, system="You are a weather bot.", tools=[WEATHER])
    assert r.text == "Tokyo is 18°C; Oslo failed."  # the fake server accepted it as the real API would
    body = server.requests[0]
    assert body["system"] == "You are a weather bot.\n\nBe brief."
    assert body["messages"] == [
        {
            "role": "user",
            "content": [{"type": "text", "text": "Weather in Tokyo"}, {"type": "text", "text": "and Oslo?"}],
        },
        {
            "role": "assistant",
            "content": [
                {"type": "tool_use", "id": "toolu_a", "name": "get_weather", "input": {"city": "Tokyo"}},
                {"type": "tool_use", "id": "toolu_b", "name": "get_weather", "input": {"city": "Oslo"}},
            ],
        },
        {
            "role": "user",
            "content": [
                {"type": "tool_result", "tool_use_id": "toolu_a", "content": "18°C rain", "is_error": False},
                {
                    "type": "tool_result",
                    "tool_use_id": "toolu_b",
                    "content": "timeout: upstream slow",
                    "is_error": True,
                },
                {"type": "text", "text": "Answer in one line."},
            ],
        },
    ]


def test_unanswered_tool_use_is_a_400(make: Any) -> None:
    _, client = make(["unused"])
    call = ToolCall.from_arguments("toolu_a", "get_weather", {"city": "Tokyo"})
    history = [Message.user("hi"), Message.assistant("", [call]), Message.user("well?")]
    with pytest.raises(ModelError, match="without tool_result") as info:
        client.complete(history, tools=[WEATHER])
    assert info.value.status == 400


@STREAMING
def test_unparseable_arguments_give_a_parse_error(make: Any, stream: bool) -> None:
    _, client = make([{"tool_calls": [{"name": "get_weather", "arguments": '{"city": "Tok'}]}])
    (call,) = ask(client, stream).tool_calls
    assert call.arguments is None and call.parse_error and not call.executable


@STREAMING
def test_usage_computed_when_not_scripted(make: Any, stream: bool) -> None:
    _, client = make(["abcdefghijkl"])
    r = ask(client, stream)
    assert r.usage.output_tokens == 3 and r.usage.input_tokens > 0


def test_cached_input_tokens_are_counted() -> None:
    from codeact.agent.models.anthropic import parse_message

    usage = {"input_tokens": 3, "cache_read_input_tokens": 100, "cache_creation_input_tokens": 20, "output_tokens": 4}
    r = parse_message({"content": [], "stop_reason": "end_turn", "usage": usage})
    assert (r.usage.input_tokens, r.usage.output_tokens) == (123, 4)


@STREAMING
def test_async(make: Any, stream: bool) -> None:
    entry = {"tool_calls": [{"name": "get_weather", "arguments": {"city": "Oslo"}}]}
    server, client = make([{"http_status": 529, "retry_after": 0}, entry])
    r = asyncio.run(client.acomplete([Message.user("Oslo?")], tools=[WEATHER], stream=stream))
    assert r.tool_calls[0].arguments == {"city": "Oslo"} and len(server.requests) == 2


def test_env_configuration(make: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    server, _ = make(["ok"])
    monkeypatch.setenv("ANTHROPIC_BASE_URL", server.anthropic_base_url)
    monkeypatch.setenv("ANTHROPIC_API_KEY", "sk-ant-env")
    with AnthropicClient("claude-env", options=FAST) as client:
        assert client.complete([Message.user("hi")]).text == "ok"
    assert server.calls[0].headers["x-api-key"] == "sk-ant-env"
