"""ScriptedModel, make_model and the neutral message model."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path

import pytest

from codeact.agent.messages import Message, ModelResponse, ToolCall, ToolResult, Usage
from codeact.agent.models import (
    AnthropicClient,
    ModelClient,
    OpenAIClient,
    ScriptedModel,
    ScriptedRequest,
    make_model,
)
from codeact.errors import ModelError
from codeact.testing.fake_server import FakeModelServer


def test_scripted_model_answers_in_order_and_records() -> None:
    given = ModelResponse(text="given", usage=Usage(input_tokens=1, output_tokens=2))
    model = ScriptedModel(
        ["plain", {"tool_calls": [{"name": "f", "arguments": {"x": 1}}, {"name": "g", "arguments": "{bad"}]}, given]
    )
    assert isinstance(model, ModelClient)
    first = model.complete([Message.user("hi")], system="sys", tools=[{"name": "f"}], max_tokens=9)
    assert (first.text, first.stop_reason, first.tool_calls) == ("plain", "end_turn", [])
    second = asyncio.run(model.acomplete([Message.user("again")], tool_choice="required"))
    assert second.stop_reason == "tool_use"
    assert [(c.name, c.arguments, c.executable) for c in second.tool_calls] == [
        ("f", {"x": 1}, True),
        ("g", None, False),
    ]
    assert model.complete([]) is given and model.remaining == 0
    with pytest.raises(ModelError, match="exhausted"):
        model.complete([])
    req = model.requests[0]
    assert (req.system, req.tools, req.max_tokens, req.messages[0].text) == ("sys", [{"name": "f"}], 9, "hi")
    assert model.requests[1].tool_choice == "required" and len(model.requests) == 4


def test_scripted_model_callable() -> None:
    def reply(request: ScriptedRequest) -> str:
        return f"{len(request.messages)} messages"

    model = ScriptedModel(reply)
    assert model.complete([Message.user("a"), Message.user("b")]).text == "2 messages"
    assert model.remaining is None


def test_make_model(tmp_path: Path) -> None:
    script = tmp_path / "s.json"
    script.write_text(json.dumps({"responses": ["hello"]}))
    scripted = make_model(f"scripted:{script}")
    assert isinstance(scripted, ScriptedModel) and scripted.complete([]).text == "hello"
    openai = make_model("openai:gpt-4o-mini", base_url="http://127.0.0.1:1/v1", api_key="k", max_retries=0)
    assert isinstance(openai, OpenAIClient) and openai.model == "gpt-4o-mini"
    assert openai.base_url == "http://127.0.0.1:1/v1" and openai.max_tokens_param == "max_tokens"
    anthropic = make_model("anthropic:claude-sonnet-4-5", base_url="http://127.0.0.1:1/")
    assert isinstance(anthropic, AnthropicClient) and anthropic.base_url == "http://127.0.0.1:1"
    for bad in ("gpt-4o", "azure:x", "openai:"):
        with pytest.raises(ValueError, match="openai:gpt-4o-mini"):
            make_model(bad)


def test_made_clients_reach_the_fake_server() -> None:
    with FakeModelServer(["from openai", "from anthropic"]) as server:
        for spec, base in (("openai:m", server.openai_base_url), ("anthropic:m", server.anthropic_base_url)):
            model = make_model(spec, base_url=base, api_key="k")
            assert model.complete([Message.user("hi")], stream=True).text == f"from {spec.split(':')[0]}"


def test_messages_round_trip_and_helpers() -> None:
    call = ToolCall.from_raw("c1", "f", '{"a": [1, 2]}')
    assert call.arguments == {"a": [1, 2]} and call.executable
    assert ToolCall.from_raw("c2", "f", "").arguments == {}
    not_object = ToolCall.from_raw("c3", "f", "[1]")
    assert not_object.arguments is None and "JSON object" in (not_object.parse_error or "")
    history = [
        Message.system("s"),
        Message.user("u"),
        ModelResponse(text="t", tool_calls=[call]).to_message(),
        Message.tool([ToolResult(call_id="c1", content="r", is_error=True)]),
        Message(role="user", content=[{"type": "text", "text": "a"}, {"type": "text", "text": "b"}]),  # type: ignore[list-item]
    ]
    assert history[-1].text == "ab"
    dumped = [m.model_dump(mode="json") for m in history]
    assert [Message.model_validate(d) for d in dumped] == history
    assert Usage(input_tokens=1, output_tokens=2) + Usage(input_tokens=3) == Usage(input_tokens=4, output_tokens=2)
