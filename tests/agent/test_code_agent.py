"""CodeActAgent through the FakeModelServer (real HTTP on 127.0.0.1, both wire formats, streaming
and not) and real sandboxes."""

from __future__ import annotations

import asyncio
import json
import threading
from collections.abc import Iterator
from typing import Any

import pytest

from codeact import Runtime, SandboxConfig, Toolset
from codeact.agent import (
    AnthropicClient,
    Budget,
    CodeActAgent,
    ModelClient,
    OpenAIClient,
    ScriptedModel,
    extract_code,
)
from codeact.testing.fake_server import FakeModelServer
from tests._configs import LOCAL
from tests.conftest import Counter, make_tools

WIRES = [("openai", False), ("openai", True), ("anthropic", False), ("anthropic", True)]
WIRE_IDS = ["openai-json", "openai-stream", "anthropic-json", "anthropic-stream"]

WEATHER_CODE = """\
pit = get_weather("Pittsburgh")
bj = get_weather(city="Beijing")
bj_c = (bj["temperature"] - 32) * 5 / 9 if bj["unit"] == "fahrenheit" else bj["temperature"]
warmer = "Beijing" if bj_c > pit["temperature"] else "Pittsburgh"
print(f"Pittsburgh {pit['temperature']:.1f} C, Beijing {bj_c:.1f} C: {warmer} is warmer")"""


def client_for(server: FakeModelServer, vendor: str) -> ModelClient:
    """A real HTTP client of the fake server (loopback only, no retries to wait for)."""
    if vendor == "openai":
        return OpenAIClient("fake-model", base_url=server.openai_base_url, api_key="test-key", max_retries=0)
    return AnthropicClient("fake-model", base_url=server.anthropic_base_url, api_key="test-key", max_retries=0)


def fenced(code: str, before: str = "Let me compute that.") -> str:
    return f"{before}\n```python\n{code}\n```\n"


def messages_text(body: dict[str, Any]) -> str:
    """Everything a request said, as one string (both vendors)."""
    return json.dumps([body.get("system"), body["messages"]], ensure_ascii=False)


@pytest.fixture
def counter() -> Counter:
    return Counter()


@pytest.fixture
def runtime(counter: Counter) -> Iterator[Runtime]:
    with Runtime(make_tools(counter), LOCAL) as rt:
        yield rt


@pytest.mark.parametrize(("vendor", "stream"), WIRES, ids=WIRE_IDS)
def test_weather_in_one_code_action(backend: str, vendor: str, stream: bool, counter: Counter) -> None:
    script = [fenced(WEATHER_CODE), "Beijing is warmer: 20.0 °C against 12.0 °C in Pittsburgh."]
    config = SandboxConfig(backend=backend, policy="none", timeout_s=30)  # type: ignore[arg-type]
    with FakeModelServer(script) as server, Runtime(make_tools(counter), config) as rt:
        agent = CodeActAgent(client_for(server, vendor), rt.toolset, runtime=rt, stream=stream)
        episode = agent.run("Is it warmer in Pittsburgh or in Beijing right now?")
        requests = server.requests
    assert episode.status == "answered" and episode.stop_reason == "answer"
    assert episode.answer.startswith("Beijing is warmer")
    assert (episode.turns, episode.model_calls, episode.tool_calls, episode.tool_errors) == (1, 2, 2, 0)
    assert episode.tokens_in > 0 and episode.tokens_out > 0 and episode.mode == "code"
    assert [r.arguments for r in episode.records] == [{"city": "Pittsburgh"}, {"city": "Beijing"}]
    assert counter.count("get_weather") == 2
    first, second = messages_text(requests[0]), messages_text(requests[1])
    assert "def get_weather(city: str)" in first and "final_answer(" in first  # the prompt view and convention
    assert "Pittsburgh 12.0 C, Beijing 20.0 C: Beijing is warmer" in second  # the observation went back


@pytest.mark.parametrize(("vendor", "stream"), WIRES, ids=WIRE_IDS)
def test_error_is_fed_back_and_the_revision_succeeds(runtime: Runtime, vendor: str, stream: bool) -> None:
    broken = 'pit = get_weather("Pittsburgh")\nprint(pit)\nprint(pit["temp"])'
    fixed = 'final_answer(pit["temperature"])'
    with FakeModelServer([fenced(broken), fenced(fixed, "The key is 'temperature'.")]) as server:
        episode = CodeActAgent(client_for(server, vendor), runtime.toolset, runtime=runtime, stream=stream).run(
            "How warm is Pittsburgh?")
        second = messages_text(server.requests[1])
    assert "KeyError" in second and "line 3" in second and "'temp'" in second
    assert episode.status == "answered" and episode.answer == 12.0
    assert episode.turns == 2 and episode.model_calls == 2  # final_answer ends the episode at once
    assert episode.errors["runtime"] == 1 and episode.errors["syntax"] == 0
    assert episode.tool_calls == 1  # the variable survived into the second action


@pytest.mark.parametrize(("vendor", "stream"), WIRES, ids=WIRE_IDS)
def test_execute_python_tool_call_arguments_reassemble_exactly(runtime: Runtime, vendor: str, stream: bool) -> None:
    code = WEATHER_CODE + "\nfinal_answer({'warmer': warmer, 'quote': \"it's \\\"hot\\\"\", 'emoji': '☀'})"
    script = [{"text": "Running it.", "tool_calls": [{"name": "execute_python", "arguments": {"code": code}}]}]
    events: list[dict[str, Any]] = []
    with FakeModelServer(script, chunk_sizes=(1, 4)) as server:
        agent = CodeActAgent(client_for(server, vendor), runtime.toolset, runtime=runtime, stream=stream,
                             on_event=events.append)
        episode = agent.run("Which city is warmer?")
        body = server.requests[0]
    ran = [e["code"] for e in events if e["event"] == "code"]
    assert ran == [code] and [e["source"] for e in events if e["event"] == "code"] == ["tool"]
    assert episode.answer == {"warmer": "Beijing", "quote": 'it\'s "hot"', "emoji": "☀"}
    names = [t.get("name") or t["function"]["name"] for t in body["tools"]]
    assert names == ["execute_python"]


@pytest.mark.parametrize(("vendor", "stream"), WIRES, ids=WIRE_IDS)
def test_execute_python_result_goes_back_as_tool_result(runtime: Runtime, vendor: str, stream: bool) -> None:
    script: list[Any] = [{"tool_calls": [{"name": "execute_python", "arguments": {"code": "1 / 0"}, "id": "c1"}]},
                         {"tool_calls": [{"name": "execute_python", "arguments": {"code": "6 * 7"}, "id": "c2"}]},
                         "It is 42."]
    with FakeModelServer(script) as server:
        episode = CodeActAgent(client_for(server, vendor), runtime.toolset, runtime=runtime, stream=stream).run(
            "Compute 6 * 7.")
        second, third = server.requests[1]["messages"], server.requests[2]["messages"]
    if vendor == "openai":
        assert second[-1]["role"] == "tool" and second[-1]["tool_call_id"] == "c1"
        assert "ZeroDivisionError" in second[-1]["content"]
        assert third[-1]["role"] == "tool" and "value: 42" in third[-1]["content"]
    else:
        block = second[-1]["content"][0]
        assert block["type"] == "tool_result" and block["tool_use_id"] == "c1" and block["is_error"] is True
        assert "ZeroDivisionError" in block["content"] and third[-1]["content"][0]["is_error"] is False
    assert episode.answer == "It is 42." and episode.turns == 2 and episode.errors["runtime"] == 1


@pytest.mark.parametrize("vendor", ["openai", "anthropic"])
def test_truncated_stream_is_reported_not_executed(runtime: Runtime, counter: Counter, vendor: str) -> None:
    call = {"name": "execute_python", "arguments": {"code": 'get_weather("Pittsburgh")\nfinal_answer(1)'}}
    script: list[Any] = [{"tool_calls": [call], "truncate_stream": True}, "I could not finish."]
    with FakeModelServer(script) as server:
        episode = CodeActAgent(client_for(server, vendor), runtime.toolset, runtime=runtime, stream=True).run("Go.")
        second = messages_text(server.requests[1])
    assert counter.count("get_weather") == 0 and episode.tool_calls == 0
    assert "cut off" in second and episode.errors["model"] == 1
    assert episode.status == "answered" and episode.answer == "I could not finish." and episode.turns == 1


@pytest.mark.parametrize(("vendor", "stream"), WIRES, ids=WIRE_IDS)
def test_length_stop_is_not_an_answer_nor_run(runtime: Runtime, counter: Counter, vendor: str, stream: bool) -> None:
    cut_code = {"text": fenced('get_weather("Beijing")\nfinal_answer("Beij'), "stop_reason": "max_tokens"}
    cut_text = {"text": "The warmer city is Beij", "stop_reason": "max_tokens"}
    with FakeModelServer([cut_code, "Beijing."]) as server:
        episode = CodeActAgent(client_for(server, vendor), runtime.toolset, runtime=runtime, stream=stream).run("?")
        assert "output limit" in messages_text(server.requests[1])
    assert counter.count("get_weather") == 0 and episode.answer == "Beijing." and episode.errors["model"] == 1
    with FakeModelServer([cut_text, cut_text]) as server:
        episode = CodeActAgent(client_for(server, vendor), runtime.toolset, runtime=runtime, stream=stream).run("?")
    assert episode.status == "incomplete" and episode.stop_reason == "max_tokens_stop" and episode.answer is None


def test_budgets_end_the_episode_incomplete(runtime: Runtime, counter: Counter) -> None:
    again = fenced('print(get_weather("Pittsburgh"))')
    episode = CodeActAgent(ScriptedModel([again] * 5), runtime.toolset, runtime=runtime,
                           budget=Budget(max_turns=2)).run("Loop forever.")
    assert (episode.status, episode.stop_reason, episode.turns, episode.model_calls) == ("incomplete", "max_turns", 2, 3)
    assert episode.tool_calls == 2 and len(episode.records) == 2 and episode.errors["budget"] == 1
    assert episode.answer is None and episode.detail

    costly = {"text": again, "usage": {"input_tokens": 600, "output_tokens": 100}}
    episode = CodeActAgent(ScriptedModel([costly] * 5), runtime.toolset, runtime=runtime,
                           budget=Budget(max_tokens=1000)).run("?")
    assert (episode.stop_reason, episode.model_calls, episode.tokens_in, episode.tokens_out) == ("max_tokens", 2, 1200, 200)

    episode = CodeActAgent(ScriptedModel([again] * 5), runtime.toolset, runtime=runtime,
                           budget=Budget(max_tool_calls=1)).run("?")
    assert (episode.stop_reason, episode.tool_calls, episode.turns) == ("max_tool_calls", 1, 1)


def test_wall_time_budget_caps_a_slow_model(runtime: Runtime) -> None:
    with FakeModelServer([{"text": "late", "delay": 3}]) as server:
        episode = CodeActAgent(client_for(server, "openai"), runtime.toolset, runtime=runtime,
                               budget=Budget(max_wall_s=0.5)).run("?")
    assert episode.status == "incomplete" and episode.stop_reason == "max_wall_s" and episode.wall_s < 2.5


def test_model_error_ends_the_episode_with_status_error(runtime: Runtime) -> None:
    with FakeModelServer([{"http_status": 401, "message": "bad key"}]) as server:
        episode = CodeActAgent(client_for(server, "anthropic"), runtime.toolset, runtime=runtime).run("?")
    assert (episode.status, episode.stop_reason, episode.errors["model"]) == ("error", "model_error", 1)
    assert episode.detail is not None and "bad key" in episode.detail


def test_syntax_errors_and_text_answers(runtime: Runtime) -> None:
    model = ScriptedModel([fenced("x = (1,"), fenced("x = 5\nx * 2"), "ten"])
    episode = CodeActAgent(model, runtime.toolset, runtime=runtime).run("?")
    assert episode.errors["syntax"] == 1 and episode.answer == "ten" and episode.turns == 2
    assert "SyntaxError" in model.requests[1].messages[-1].text
    assert "value: 10" in model.requests[2].messages[-1].text


def test_own_runtime_is_made_and_closed() -> None:
    closed = threading.Event()
    tools = Toolset(make_tools(Counter()))
    tools.on_close(closed.set)
    episode = CodeActAgent(ScriptedModel([fenced("final_answer(get_weather('Beijing')['unit'])")]), tools,
                           sandbox=LOCAL).run("Unit?")
    assert episode.answer == "fahrenheit" and closed.is_set()


def test_given_runtime_stays_open_and_arun_works(runtime: Runtime) -> None:
    agent = CodeActAgent(ScriptedModel(["plain answer", "again"]), [], runtime=runtime)
    episode = asyncio.run(agent.arun("?"))

    async def inside_a_loop() -> str:
        return str(agent.run("?").answer)  # run() from async code: its own loop in a thread

    assert episode.answer == "plain answer" and asyncio.run(inside_a_loop()) == "again"
    assert not runtime.closed and episode.turns == 0 and episode.model_calls == 1


def test_extract_code() -> None:
    assert extract_code("no code here") is None
    assert extract_code("```bash\nls\n```") is None
    text = "a\n```python\nx = 1\n```\nthen\n```py\nprint('```')\n```\n"
    assert extract_code(text) == "x = 1\n\nprint('```')"
    assert extract_code("```python\ny = 2\n") == "y = 2"  # unclosed: to the end


def test_fenced_blocks_only_when_the_tool_is_not_offered(runtime: Runtime) -> None:
    model = ScriptedModel([fenced("final_answer(get_weather('Pittsburgh')['unit'])")])
    episode = CodeActAgent(model, runtime.toolset, runtime=runtime, code_tool=False).run("Unit?")
    assert model.requests[0].tools == [] and episode.answer == "celsius"
    assert "def get_weather(city: str)" in str(model.requests[0].system)


def test_a_direct_call_of_a_tool_is_redirected_to_code(runtime: Runtime, counter: Counter) -> None:
    model = ScriptedModel([{"tool_calls": [{"name": "get_weather", "arguments": {"city": "Beijing"}}]}, "ok"])
    episode = CodeActAgent(model, runtime.toolset, runtime=runtime).run("?")
    result = model.requests[1].messages[-1].tool_results[0]
    assert result.is_error and json.loads(result.content)["code"] == "unknown_tool" and "execute_python" in result.content
    assert counter.count("get_weather") == 0 and episode.errors["syntax"] == 1
