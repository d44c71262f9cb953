"""FunctionCallingAgent through the FakeModelServer: the seeds' JSON loop on the same tool host."""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from typing import Any

import pytest

from codeact import Runtime, SandboxConfig
from codeact.agent import Budget, FunctionCallingAgent, ScriptedModel
from codeact.testing.fake_server import FakeModelServer
from tests.agent.test_code_agent import WIRE_IDS, WIRES, client_for
from tests.conftest import Counter, make_tools

PARALLEL_WEATHER = {
    "text": "Checking both cities.",
    "tool_calls": [
        {"name": "get_weather", "arguments": {"city": "Pittsburgh"}, "id": "w_pit"},
        {"name": "get_weather", "arguments": {"city": "Beijing"}, "id": "w_bj"},
    ],
}


@pytest.fixture
def counter() -> Counter:
    return Counter()


@pytest.fixture
def runtime(counter: Counter) -> Iterator[Runtime]:
    with Runtime(make_tools(counter), SandboxConfig(backend="local", policy="none")) as rt:
        yield rt


def results_of(body: dict[str, Any], vendor: str) -> dict[str, tuple[str, bool]]:
    """call id → (content, is_error) of the tool results at the end of a request."""
    messages = body["messages"]
    if vendor == "openai":
        tail = [m for m in messages if m["role"] == "tool"]
        return {m["tool_call_id"]: (m["content"], m["content"].startswith('{"code"')) for m in tail}
    blocks = [b for b in messages[-1]["content"] if b["type"] == "tool_result"]
    return {b["tool_use_id"]: (b["content"], b["is_error"]) for b in blocks}


@pytest.mark.parametrize(("vendor", "stream"), WIRES, ids=WIRE_IDS)
def test_weather_in_one_turn_of_two_parallel_calls(runtime: Runtime, vendor: str, stream: bool) -> None:
    script = [PARALLEL_WEATHER, "Beijing is warmer: 68 °F is 20 °C, against 12 °C in Pittsburgh."]
    with FakeModelServer(script) as server:
        episode = FunctionCallingAgent(client_for(server, vendor), runtime.toolset, runtime=runtime,
                                       stream=stream).run("Is it warmer in Pittsburgh or in Beijing?")
        second = server.requests[1]
    assert episode.status == "answered" and episode.answer.startswith("Beijing is warmer")
    assert (episode.turns, episode.model_calls, episode.tool_calls, episode.tool_errors) == (1, 2, 2, 0)
    assert episode.tokens_in > 0 and episode.tokens_out > 0 and episode.mode == "json"
    results = results_of(second, vendor)
    assert json.loads(results["w_pit"][0]) == {"city": "Pittsburgh", "temperature": 12.0, "unit": "celsius"}
    assert json.loads(results["w_bj"][0])["unit"] == "fahrenheit"
    if vendor == "anthropic":  # one user message holding both results
        assert second["messages"][-1]["role"] == "user" and len(second["messages"][-1]["content"]) == 2
    else:  # one role=tool message per call
        assert [m["role"] for m in second["messages"][-2:]] == ["tool", "tool"]
    assert [r.name for r in episode.records] == ["get_weather", "get_weather"]


def test_parallel_calls_run_concurrently() -> None:
    """The three calls of one turn meet at a barrier: run one after another, the first would wait
    there alone until the barrier breaks, and fail."""
    import threading

    from codeact import tool

    barrier = threading.Barrier(3, timeout=60)

    @tool(timeout_s=120)
    def meet(i: int) -> int:
        """Wait until all three calls run.

        Args:
            i: Which call.
        """
        barrier.wait()
        return i

    calls = [{"name": "meet", "arguments": {"i": i}} for i in range(3)]
    with Runtime([meet], SandboxConfig(backend="local", policy="none")) as rt:
        episode = FunctionCallingAgent(ScriptedModel([{"tool_calls": calls}, "done"]), rt.toolset,
                                       runtime=rt).run("Meet three times.")
    assert episode.tool_calls == 3 and all(r.ok for r in episode.records), [r.error for r in episode.records]


@pytest.mark.parametrize("vendor", ["openai", "anthropic"])
def test_failures_are_structured_errors(runtime: Runtime, vendor: str) -> None:
    calls = [
        {"name": "fetch_item", "arguments": {"i": 3}, "id": "broken"},
        {"name": "no_such_tool", "arguments": {}, "id": "unknown"},
        {"name": "fetch_item", "arguments": {"i": "three"}, "id": "invalid"},
        {"name": "fetch_item", "arguments": {"i": 1}, "id": "fine"},
    ]
    with FakeModelServer([{"tool_calls": calls}, "Only item 1."]) as server:
        episode = FunctionCallingAgent(client_for(server, vendor), runtime.toolset, runtime=runtime).run("Fetch.")
        results = results_of(server.requests[1], vendor)
    errors = {cid: json.loads(content) for cid, (content, is_error) in results.items() if is_error}
    assert set(errors) == {"broken", "unknown", "invalid"} and results["fine"] == ("item-1", False)
    assert errors["broken"] == {"code": "upstream_error", "message": "item 3 is unavailable", "retryable": True}
    assert errors["unknown"]["code"] == "unknown_tool" and errors["invalid"]["code"] == "invalid_arguments"
    assert not errors["unknown"]["retryable"]
    assert episode.tool_calls == 4 and episode.tool_errors == 3 and episode.errors["tool"] == 3


@pytest.mark.parametrize(("vendor", "stream"), WIRES, ids=WIRE_IDS)
def test_invalid_json_arguments_get_an_error_and_a_retry(runtime: Runtime, counter: Counter, vendor: str,
                                                         stream: bool) -> None:
    script: list[Any] = [
        {"tool_calls": [{"name": "get_weather", "arguments": '{"city": "Pittsburgh"', "id": "bad"}]},
        {"tool_calls": [{"name": "get_weather", "arguments": {"city": "Pittsburgh"}, "id": "good"}]},
        "12 °C.",
    ]
    with FakeModelServer(script) as server:
        episode = FunctionCallingAgent(client_for(server, vendor), runtime.toolset, runtime=runtime,
                                       stream=stream).run("Pittsburgh?")
        content, is_error = results_of(server.requests[1], vendor)["bad"]
    assert is_error and json.loads(content)["code"] == "invalid_arguments" and "JSON" in content
    assert counter.count("get_weather") == 1 and episode.tool_calls == 1 and episode.errors["syntax"] == 1
    assert episode.answer == "12 °C." and episode.turns == 2


@pytest.mark.parametrize("vendor", ["openai", "anthropic"])
def test_truncated_stream_is_not_executed(runtime: Runtime, counter: Counter, vendor: str) -> None:
    script: list[Any] = [{**PARALLEL_WEATHER, "truncate_stream": True}, "Sorry, I was cut off."]
    with FakeModelServer(script) as server:
        episode = FunctionCallingAgent(client_for(server, vendor), runtime.toolset, runtime=runtime,
                                       stream=True).run("Compare.")
        results = results_of(server.requests[1], vendor)
    assert counter.count("get_weather") == 0 and episode.tool_calls == 0
    assert set(results) == {"w_pit", "w_bj"} and all(is_error for _, is_error in results.values())
    assert episode.errors["model"] == 1 and episode.status == "answered"


@pytest.mark.parametrize("vendor", ["openai", "anthropic"])
def test_tool_choice_applies_to_the_first_call(runtime: Runtime, vendor: str) -> None:
    script = [{"tool_calls": [{"name": "get_weather", "arguments": {"city": "Beijing"}}]}, "68 °F."]
    with FakeModelServer(script) as server:
        FunctionCallingAgent(client_for(server, vendor), runtime.toolset, runtime=runtime,
                             tool_choice={"name": "get_weather"}).run("Beijing?")
        first, second = server.requests[0]["tool_choice"], server.requests[1]["tool_choice"]
    if vendor == "openai":
        assert first == {"type": "function", "function": {"name": "get_weather"}} and second == "auto"
    else:
        assert first == {"type": "tool", "name": "get_weather"} and second == {"type": "auto"}


def test_tool_choice_none_stays(runtime: Runtime) -> None:
    model = ScriptedModel(["no tools for me"])
    FunctionCallingAgent(model, runtime.toolset, runtime=runtime, tool_choice="none").run("?")
    assert model.requests[0].tool_choice == "none"


def test_names_the_vendors_reject_are_mapped(runtime: Runtime, counter: Counter) -> None:
    model = ScriptedModel([{"tool_calls": [{"name": "math_factorial", "arguments": {"n": 5}}]}, "120"])
    episode = FunctionCallingAgent(model, runtime.toolset, runtime=runtime).run("5!")
    assert "math_factorial" in [t["name"] for t in model.requests[0].tools]
    assert episode.records[0].name == "math.factorial" and episode.records[0].result == 120


def test_max_tool_calls_budget(runtime: Runtime, counter: Counter) -> None:
    model = ScriptedModel([PARALLEL_WEATHER, PARALLEL_WEATHER, "never"])
    episode = FunctionCallingAgent(model, runtime.toolset, runtime=runtime, budget=Budget(max_tool_calls=3)).run("?")
    assert (episode.status, episode.stop_reason, episode.tool_calls) == ("incomplete", "max_tool_calls", 2)
    assert counter.count("get_weather") == 2 and episode.errors["budget"] == 1


def test_records_are_those_of_the_host(runtime: Runtime) -> None:
    model = ScriptedModel([PARALLEL_WEATHER, {"tool_calls": [{"name": "fetch_item", "arguments": {"i": 2}}]}, "ok"])
    episode = FunctionCallingAgent(model, runtime.toolset, runtime=runtime).run("?")
    assert len({r.id for r in episode.records}) == 3 and [r.name for r in episode.records][-1] == "fetch_item"
    assert all(r.finished and r.duration_ms >= 0 for r in episode.records)


@pytest.mark.parametrize("vendor", ["openai", "anthropic"])
def test_streamed_arguments_reassemble_exactly(runtime: Runtime, vendor: str) -> None:
    city = 'São Paulo "Centro" \\ ☀ {not: json}'
    script: list[Any] = [{"tool_calls": [{"name": "get_weather", "arguments": {"city": city}}]}, "No station."]
    with FakeModelServer(script, chunk_sizes=(1, 3)) as server:
        episode = FunctionCallingAgent(client_for(server, vendor), runtime.toolset, runtime=runtime,
                                       stream=True).run("?")
    record = episode.records[0]
    assert record.arguments == {"city": city}
    assert record.error is not None and record.error.code == "not_found" and repr(city) in record.error.message


def test_interrupt_stops_json_tool_calls_in_flight(tmp_path: Any) -> None:
    # The JSON agent's calls run on the tool host, not in a sandbox: interrupt() cancels them too,
    # instead of waiting for a tool to return (or for its timeout).
    import threading

    from codeact import tool

    release = threading.Event()

    running = threading.Event()

    @tool(timeout_s=60)
    def stall() -> str:
        """Waits a long time."""
        running.set()
        release.wait(60)
        return "late"

    script = [{"tool_calls": [{"name": "stall", "arguments": {}}]}, "done"]
    try:
        with FakeModelServer(script) as server, Runtime([stall], SandboxConfig(backend="local")) as rt:
            agent = FunctionCallingAgent(client_for(server, "openai"), rt.toolset, runtime=rt,
                                         trace_path=tmp_path / "t.jsonl")
            workers = rt.loop.pool.max_workers
            threading.Thread(target=lambda: running.wait(60) and agent.interrupt(), daemon=True).start()
            episode = agent.run("go")
            assert not release.is_set()  # back while the tool still blocks: the call was cut, not awaited
            deadline = time.monotonic() + 30  # the host's loop takes the cancel a moment after the episode ends
            while rt.loop.pool.max_workers != workers + 1 and time.monotonic() < deadline:
                time.sleep(0.02)
            assert rt.loop.pool.max_workers == workers + 1  # the stalled tool's thread is lent back meanwhile
            assert episode.stop_reason == "interrupted"
            [record] = episode.records
            assert not record.ok and record.error is not None and "interrupted" in record.error.message
            events = [json.loads(line)["event"] for line in (tmp_path / "t.jsonl").read_text().splitlines()]
            assert events[-1] == "episode_end" and "call_finished" in events
    finally:
        release.set()
