"""OpenAIClient against the fake server: real HTTP on 127.0.0.1, streamed and not."""

from __future__ import annotations

import asyncio
import json
import socket
import time
from collections.abc import Iterator, Sequence
from typing import Any

import pytest

from codeact.agent.messages import Message, ModelResponse, ToolCall, ToolResult
from codeact.agent.models import HTTPOptions, OpenAIClient
from codeact.agent.models._http import SSEEvent
from codeact.agent.models.openai import _ChunkAccumulator
from codeact.errors import ModelError
from codeact.testing.fake_server import FakeModelServer

WEATHER = {
    "name": "get_weather",
    "description": "Current weather of a city.",
    "input_schema": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]},
}
FAST = HTTPOptions(timeout=5.0, max_retries=3, backoff_base=0.01, backoff_max=0.05)
KEY = "sk-test-secret-0123456789"
STREAMING = pytest.mark.parametrize("stream", [False, True], ids=["json", "sse"])


@pytest.fixture
def make() -> Iterator[Any]:
    servers: list[FakeModelServer] = []
    clients: list[OpenAIClient] = []

    def factory(script: Any, **kw: Any) -> tuple[FakeModelServer, OpenAIClient]:
        server = FakeModelServer(script, **kw).start()
        client = OpenAIClient("gpt-test", base_url=server.openai_base_url, api_key=KEY, options=FAST)
        servers.append(server)
        clients.append(client)
        return server, client

    yield factory
    for client in clients:
        client.close()
    for server in servers:
        server.stop()


def ask(client: OpenAIClient, stream: bool, **kw: Any) -> ModelResponse:
    kw.setdefault("tools", [WEATHER])
    return client.complete([Message.user("Weather in Beijing and Pittsburgh?")], stream=stream, **kw)


@STREAMING
def test_text_answer(make: Any, stream: bool) -> None:
    server, client = make(
        [{"text": "It is sunny in Beijing today.", "usage": {"input_tokens": 12, "output_tokens": 7}}]
    )
    r = ask(client, stream)
    assert r.text == "It is sunny in Beijing today."
    assert (r.stop_reason, r.raw_stop_reason, r.truncated, r.tool_calls) == ("end_turn", "stop", False, [])
    assert (r.usage.input_tokens, r.usage.output_tokens) == (12, 7)
    body = server.requests[0]
    assert body["model"] == "gpt-test" and body["messages"] == [
        {"role": "user", "content": "Weather in Beijing and Pittsburgh?"}
    ]
    assert body["tools"] == [
        {
            "type": "function",
            "function": {
                "name": "get_weather",
                "description": WEATHER["description"],
                "parameters": WEATHER["input_schema"],
            },
        }
    ]
    if stream:
        assert body["stream"] is True and body["stream_options"] == {"include_usage": True}
    else:
        assert "stream" not in body
    assert server.calls[0].headers["authorization"] == f"Bearer {KEY}"


@STREAMING
def test_two_parallel_tool_calls(make: Any, stream: bool) -> None:
    calls = [
        {"name": "get_weather", "arguments": {"city": "Beijing"}},
        {"name": "get_weather", "arguments": {"city": "Pittsburgh"}},
    ]
    _, client = make([{"text": "", "tool_calls": calls}])
    r = ask(client, stream)
    assert (r.stop_reason, r.raw_stop_reason) == ("tool_use", "tool_calls")
    assert [(c.id, c.name, c.arguments) for c in r.tool_calls] == [
        ("call_0_0", "get_weather", {"city": "Beijing"}),
        ("call_0_1", "get_weather", {"city": "Pittsburgh"}),
    ]
    assert all(c.executable for c in r.tool_calls) and r.text == ""


def test_streamed_arguments_reassemble_exactly(make: Any) -> None:
    args = {
        "city": 'São Paulo "centro"',
        "notes": "line1\nline2\t{not: json}",
        "nested": {"days": [1, 2, 3], "units": "C", "emoji": "☀️"},
    }
    entry = {
        "text": "Checking the weather for you, one moment please.",
        "tool_calls": [
            {"name": "get_weather", "arguments": args},
            {"name": "get_weather", "arguments": {"city": "Oslo"}},
        ],
    }
    _, client = make([entry, entry])
    plain, streamed = ask(client, False), ask(client, True)
    assert streamed.text == plain.text
    assert [(c.name, c.arguments, c.arguments_raw) for c in streamed.tool_calls] == [
        (c.name, c.arguments, c.arguments_raw) for c in plain.tool_calls
    ]
    assert streamed.tool_calls[0].arguments == args


@STREAMING
def test_truncated_stream_has_no_executable_calls(make: Any, stream: bool) -> None:
    entry = {"text": "Let me check.", "tool_calls": [{"name": "get_weather", "arguments": {"city": "Beijing"}}]}
    if not stream:  # a dropped connection mid-body is retried, then the next entry answers
        server, client = make([{**entry, "truncate_stream": True}, entry])
        r = ask(client, stream)
        assert not r.truncated and len(server.requests) == 2
        return
    _, client = make([{**entry, "truncate_stream": True}])
    r = ask(client, stream)
    assert r.truncated and r.stop_reason == "error"
    assert r.tool_calls and not any(c.executable for c in r.tool_calls)
    assert all(c.arguments is None and c.parse_error for c in r.tool_calls)


@STREAMING
def test_length_is_max_tokens(make: Any, stream: bool) -> None:
    server, client = make([{"text": "The weather in Bei", "stop_reason": "max_tokens"}])
    r = ask(client, stream, max_tokens=5)
    assert (r.stop_reason, r.raw_stop_reason, r.truncated) == ("max_tokens", "length", False)
    assert server.requests[0]["max_tokens"] == 5


@STREAMING
def test_429_with_retry_after_then_success(make: Any, stream: bool) -> None:
    server, client = make([{"http_status": 429, "retry_after": 0.2}, "ok"])
    started = time.monotonic()
    r = ask(client, stream)
    assert r.text == "ok" and len(server.requests) == 2
    assert time.monotonic() - started >= 0.2  # waited as told, not the 0.01 s backoff


@STREAMING
def test_500_then_success(make: Any, stream: bool) -> None:
    server, client = make([{"http_status": 500}, "ok"])
    assert ask(client, stream).text == "ok" and len(server.requests) == 2


@STREAMING
def test_400_raises_at_once_with_the_provider_message(make: Any, stream: bool) -> None:
    server, client = make([{"http_status": 400, "message": "Invalid schema for function 'x':\n bad"}, "unused"])
    with pytest.raises(ModelError) as info:
        ask(client, stream)
    assert info.value.status == 400 and not info.value.retryable and len(server.requests) == 1
    assert "Invalid schema for function 'x': bad" in str(info.value) and "\n" not in str(info.value)


def test_x_should_retry_false_is_final(make: Any) -> None:
    server, client = make([{"http_status": 500, "headers": {"x-should-retry": "false"}}, "unused"])
    with pytest.raises(ModelError) as info:
        ask(client, False)
    assert info.value.status == 500 and len(server.requests) == 1


def test_retries_exhausted(make: Any) -> None:
    server, client = make([{"http_status": 503}] * 5)
    with pytest.raises(ModelError) as info:
        ask(client, False)
    assert info.value.status == 503 and info.value.retryable and len(server.requests) == 4
    assert "after 4 attempts" in str(info.value)


@STREAMING
def test_retries_exhausted_async(make: Any, stream: bool) -> None:
    server, client = make([{"http_status": 503}] * 5)
    with pytest.raises(ModelError) as info:  # the bound: a loop that never counts its attempts times out
        asyncio.run(asyncio.wait_for(client.acomplete([Message.user("Oslo?")], stream=stream), 20))
    assert info.value.status == 503 and info.value.retryable and len(server.requests) == 4
    assert "after 4 attempts" in str(info.value)


def test_error_never_leaks_the_key(make: Any) -> None:
    _, client = make([{"http_status": 401, "message": f"Incorrect API key provided: {KEY}."}])
    with pytest.raises(ModelError) as info:
        ask(client, False)
    assert info.value.status == 401 and KEY not in str(info.value) and KEY not in repr(client)


def test_read_timeout_is_retried(make: Any) -> None:
    server, _ = make([{"text": "slow", "delay": 1.0}, "fast"])
    opts = HTTPOptions(timeout=0.3, max_retries=1, backoff_base=0.01)
    with OpenAIClient("m", base_url=server.openai_base_url, options=opts) as client:
        assert ask(client, False).text == "fast" and len(server.requests) == 2
    server.script.append({"text": "slow", "delay": 1.0})
    opts = HTTPOptions(timeout=0.3, max_retries=0)
    with (
        OpenAIClient("m", base_url=server.openai_base_url, options=opts) as client,
        pytest.raises(ModelError) as info,
    ):
        ask(client, True)
    assert info.value.retryable and "ReadTimeout" in str(info.value)


def test_connect_error_is_retried_then_raised() -> None:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    opts = HTTPOptions(timeout=2.0, max_retries=1, backoff_base=0.01)
    client = OpenAIClient("m", base_url=f"http://127.0.0.1:{port}/v1", api_key=KEY, options=opts)
    with pytest.raises(ModelError) as info:
        ask(client, False)
    assert info.value.retryable and info.value.status is None and "after 2 attempts" in str(info.value)


@pytest.mark.parametrize(
    ("choice", "wire"),
    [
        ("auto", "auto"),
        ("none", "none"),
        ("required", "required"),
        ({"name": "get_weather"}, {"type": "function", "function": {"name": "get_weather"}}),
    ],
)
def test_tool_choice_serialized(make: Any, choice: Any, wire: Any) -> None:
    server, client = make(["ok"])
    ask(client, False, tool_choice=choice)
    assert server.requests[0]["tool_choice"] == wire


def test_no_tools_sends_no_tool_choice(make: Any) -> None:
    server, client = make(["ok"])
    ask(client, False, tools=[])
    assert "tools" not in server.requests[0] and "tool_choice" not in server.requests[0]


def conversation() -> list[Message]:
    calls = [
        ToolCall.from_arguments("call_a", "get_weather", {"city": "Beijing"}),
        ToolCall.from_raw("call_b", "get_weather", '{"city": "Pitts'),
    ]
    return [
        Message.user("Weather in Beijing and Pittsburgh?"),
        Message.assistant("Let me look.", calls),
        Message.tool(
            [
                ToolResult(call_id="call_a", content='{"temp": 20}'),
                ToolResult(call_id="call_b", content="invalid_arguments: not JSON", is_error=True),
            ]
        ),
    ]


def test_tool_results_one_message_per_call(make: Any) -> None:
    server, client = make(["Beijing is 20°C."])
    r = client.complete(conversation(), system="Be brief.", tools=[WEATHER])
    assert r.text == "Beijing is 20°C."  # the fake server accepted the history as the real API would
    assert server.requests[0]["messages"] == [
        {"role": "system", "content": "Be brief."},
        {"role": "user", "content": "Weather in Beijing and Pittsburgh?"},
        {
            "role": "assistant",
            "content": "Let me look.",
            "tool_calls": [
                {
                    "id": "call_a",
                    "type": "function",
                    "function": {"name": "get_weather", "arguments": '{"city": "Beijing"}'},
                },
                {
                    "id": "call_b",
                    "type": "function",
                    "function": {"name": "get_weather", "arguments": '{"city": "Pitts'},
                },
            ],
        },
        {"role": "tool", "tool_call_id": "call_a", "content": '{"temp": 20}'},
        {"role": "tool", "tool_call_id": "call_b", "content": "invalid_arguments: not JSON"},
    ]


def test_history_the_real_api_rejects_is_a_400(make: Any) -> None:
    _, client = make(["unused"])
    bad = [Message.user("hi"), Message.tool([ToolResult(call_id="nope", content="x")])]
    with pytest.raises(ModelError) as info:
        client.complete(bad, tools=[WEATHER])
    assert info.value.status == 400 and "role 'tool'" in str(info.value)


@STREAMING
def test_unparseable_arguments_give_a_parse_error(make: Any, stream: bool) -> None:
    _, client = make([{"tool_calls": [{"name": "get_weather", "arguments": '{"city": "Beijing",'}]}])
    (call,) = ask(client, stream).tool_calls
    assert call.arguments is None and call.parse_error and not call.executable
    assert call.arguments_raw == '{"city": "Beijing",'


@STREAMING
def test_usage_computed_when_not_scripted(make: Any, stream: bool) -> None:
    _, client = make(["abcdefgh"])
    r = ask(client, stream)
    assert r.usage.output_tokens == 2 and r.usage.input_tokens > 0


def test_stream_error_event_raises(make: Any) -> None:
    _, client = make([{"text": "a long enough answer to cut", "stream_error": "server_error"}])
    with pytest.raises(ModelError, match="stream error"):
        ask(client, True)


@STREAMING
def test_async(make: Any, stream: bool) -> None:
    server, client = make(
        [
            {"http_status": 429, "retry_after": 0},
            {"tool_calls": [{"name": "get_weather", "arguments": {"city": "Oslo"}}]},
        ]
    )
    r = asyncio.run(client.acomplete([Message.user("Oslo?")], tools=[WEATHER], stream=stream))
    assert r.tool_calls[0].arguments == {"city": "Oslo"} and len(server.requests) == 2


def test_env_configuration(make: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    server, _ = make(["ok"])
    monkeypatch.setenv("OPENAI_BASE_URL", server.openai_base_url)
    monkeypatch.setenv("OPENAI_API_KEY", "sk-env")
    client = OpenAIClient("gpt-env", options=FAST)
    assert client.complete([Message.user("hi")]).text == "ok"
    assert server.calls[0].headers["authorization"] == "Bearer sk-env"
    assert server.calls[0].path == "/v1/chat/completions"
    monkeypatch.delenv("OPENAI_BASE_URL")
    assert OpenAIClient("gpt-x").max_tokens_param == "max_completion_tokens"


def feed(acc: _ChunkAccumulator, chunks: Sequence[dict[str, Any] | str]) -> ModelResponse:
    for chunk in chunks:
        acc.feed(SSEEvent("message", chunk if isinstance(chunk, str) else json.dumps(chunk)))
    return acc.result()


def test_parallel_calls_sharing_index_zero_are_kept_apart() -> None:
    """Some servers (Ollama) send every call of a parallel batch at index 0, told apart by id."""

    def tc(ident: dict[str, str], **fn: str) -> dict[str, Any]:
        return {"choices": [{"index": 0, "delta": {"tool_calls": [{"index": 0, **ident, "function": fn}]}}]}

    r = feed(
        _ChunkAccumulator(),
        [
            tc({"id": "a"}, name="f", arguments='{"x":'),
            tc({}, arguments="1}"),
            tc({"id": "b"}, name="g", arguments='{"y": 2}'),
            {"choices": [{"index": 0, "delta": {}, "finish_reason": "tool_calls"}]},
            "[DONE]",
        ],
    )
    assert [(c.id, c.name, c.arguments) for c in r.tool_calls] == [("a", "f", {"x": 1}), ("b", "g", {"y": 2})]


def test_finish_reason_stop_with_calls_is_tool_use() -> None:
    call = {"index": 0, "id": "a", "function": {"name": "f", "arguments": "{}"}}
    r = feed(
        _ChunkAccumulator(),
        [
            {"choices": [{"index": 0, "delta": {"tool_calls": [call]}, "finish_reason": "stop"}]},
        ],
    )
    assert (r.stop_reason, r.raw_stop_reason, r.truncated) == ("tool_use", "stop", False)
