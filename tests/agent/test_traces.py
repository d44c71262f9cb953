"""Episode traces (JSONL), the replay model, and ``codeact replay``."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

from codeact import Runtime, SandboxConfig
from codeact.agent import CodeActAgent, FunctionCallingAgent, ReplayModel, load_trace
from codeact.cli import app
from codeact.errors import ModelError
from codeact.testing.fake_server import FakeModelServer
from tests.agent.test_code_agent import WEATHER_CODE, client_for, fenced
from tests.agent.test_json_agent import PARALLEL_WEATHER
from tests.conftest import Counter, make_tools


@pytest.fixture
def runtime() -> Iterator[Runtime]:
    with Runtime(make_tools(Counter()), SandboxConfig(backend="local", policy="none")) as rt:
        yield rt


def test_code_trace_lines(runtime: Runtime, tmp_path: Path) -> None:
    trace = tmp_path / "run" / "trace.jsonl"
    script = [fenced("1 / 0"), fenced(WEATHER_CODE), "Beijing."]
    seen: list[dict[str, Any]] = []
    with FakeModelServer(script) as server:
        episode = CodeActAgent(client_for(server, "anthropic"), runtime.toolset, runtime=runtime, trace_path=trace,
                               stream=True, on_event=seen.append).run("Warmer?")
    lines = trace.read_text().splitlines()
    events = [json.loads(line) for line in lines]
    assert events == seen and episode.trace_path == str(trace)
    kinds = [e["event"] for e in events]
    live = ["call_started", "call_finished"] * 2 + ["stdout"]  # the second action's run, as it happened
    assert kinds == ["episode_start", "model_request", "model_response", "sandbox_start", "code", "execution",
                     "model_request", "model_response", "code", *live, "execution",
                     "model_request", "model_response", "episode_end"]
    started = [e for e in events if e["event"] == "call_started"]
    finished = [e for e in events if e["event"] == "call_finished"]
    assert [e["arguments"] for e in started] == [{"city": "Pittsburgh"}, {"city": "Beijing"}]
    assert [e["id"] for e in finished] == [e["id"] for e in started] and all(e["turn"] == 2 for e in started)
    assert all(e["ok"] and "result" not in e for e in finished)
    assert next(e for e in events if e["event"] == "stdout")["text"].startswith("Pittsburgh 12.0 C")
    events = [e for e in events if e["event"] not in ("call_started", "call_finished", "stdout")]
    start = events[0]
    assert start["task"] == "Warmer?" and start["mode"] == "code" and start["model"] == "fake-model"
    assert start["config"]["budget"]["max_turns"] == 10 and start["config"]["stream"] is True
    assert "def get_weather" in start["system"] and start["tools"][0]["name"] == "execute_python"
    assert all(isinstance(e["t"], float) for e in events) and [e["t"] for e in events] == sorted(e["t"] for e in events)
    request = events[1]
    assert request["messages"] == 1 and request["tools"] == ["execute_python"]
    response = events[2]["response"]
    assert response["stop_reason"] == "end_turn" and response["usage"]["output_tokens"] > 0
    assert events[2]["duration_ms"] >= 0 and "raw" not in response
    assert events[3]["duration_ms"] >= 0 and events[3]["t"] <= events[4]["t"]  # the sandbox, before the code
    assert "def get_weather" in start["stubs"]
    failed = events[5]
    assert failed["result"]["error"]["type"] == "ZeroDivisionError" and "line 1" in failed["observation"]
    assert events[9]["result"]["calls"][1]["arguments"] == {"city": "Beijing"}
    assert events[-1]["episode"] == episode.model_dump(mode="json")


def test_json_trace_has_tool_results(runtime: Runtime, tmp_path: Path) -> None:
    trace = tmp_path / "json.jsonl"
    with FakeModelServer([PARALLEL_WEATHER, "Beijing."]) as server:
        FunctionCallingAgent(client_for(server, "openai"), runtime.toolset, runtime=runtime,
                             trace_path=trace).run("Warmer?")
    events = load_trace(trace)
    results = next(e for e in events if e["event"] == "tool_results")
    assert set(results["calls"]) == {"w_pit", "w_bj"}
    assert [r["name"] for r in results["records"]] == ["get_weather", "get_weather"]
    assert [r["call_id"] for r in results["results"]] == ["w_pit", "w_bj"]
    assert events[0]["config"]["tool_choice"] == "auto" and events[0]["tools"][0]["name"] == "get_weather"


@pytest.mark.parametrize("mode", ["code", "json"])
def test_replay_model_reproduces_a_run_offline(runtime: Runtime, tmp_path: Path, mode: str) -> None:
    trace = tmp_path / "original.jsonl"
    script: list[Any] = ([fenced("x = 1 / 0"), fenced(WEATHER_CODE), "Beijing is warmer."] if mode == "code"
                         else [PARALLEL_WEATHER, "Beijing is warmer."])
    agent_cls = CodeActAgent if mode == "code" else FunctionCallingAgent
    with FakeModelServer(script) as server:
        original = agent_cls(client_for(server, "openai"), runtime.toolset, runtime=runtime,
                             trace_path=trace).run("Warmer?")
    replay = ReplayModel(trace)
    again = agent_cls(replay, runtime.toolset, runtime=runtime, trace_path=tmp_path / "replayed.jsonl").run("Warmer?")
    assert replay.model == "replay:fake-model" and replay.remaining == 0
    assert again.answer == original.answer and again.status == "answered"
    assert (again.turns, again.model_calls, again.tokens_in, again.tokens_out, again.errors) == (
        original.turns, original.model_calls, original.tokens_in, original.tokens_out, original.errors)
    assert [(r.name, r.arguments, r.result) for r in again.records] == [
        (r.name, r.arguments, r.result) for r in original.records]


def test_replay_reproduces_model_errors_and_runs_out(runtime: Runtime, tmp_path: Path) -> None:
    trace = tmp_path / "error.jsonl"
    with FakeModelServer([{"http_status": 400, "message": "context too long"}]) as server:
        CodeActAgent(client_for(server, "openai"), runtime.toolset, runtime=runtime, trace_path=trace).run("?")
    episode = CodeActAgent(ReplayModel(trace), runtime.toolset, runtime=runtime).run("?")
    assert episode.stop_reason == "model_error" and "context too long" in str(episode.detail)
    replay = ReplayModel(trace)
    with pytest.raises(ModelError):
        replay.complete([])
    with pytest.raises(ModelError, match="exhausted"):
        replay.complete([])
    empty = tmp_path / "empty.jsonl"
    empty.write_text('{"event": "episode_start", "model": "m"}\n')
    with pytest.raises(ValueError, match="no model responses"):
        ReplayModel(empty)
    empty.write_text("not json\n")
    with pytest.raises(ValueError, match="not a trace line"):
        load_trace(empty)


def test_codeact_replay_prints_a_trace(runtime: Runtime, tmp_path: Path) -> None:
    trace = tmp_path / "t.jsonl"
    script: list[Any] = [fenced("print(get_weather('Beijing'))", "Looking it up."), {"tool_calls": [
        {"name": "execute_python", "arguments": {"code": "oops("}}]}, "It is 68 °F in Beijing."]
    with FakeModelServer(script) as server:
        CodeActAgent(client_for(server, "openai"), runtime.toolset, runtime=runtime, trace_path=trace).run(
            "Beijing? [/red] [bold]")
    out = CliRunner().invoke(app, ["replay", str(trace)], terminal_width=140)
    assert out.exit_code == 0, out.output
    text = out.output
    for expected in ("code mode", "Beijing? [/red] [bold]", "Looking it up.", "print(get_weather('Beijing'))", "fahrenheit",
                     "SyntaxError", "answered", "It is 68 °F in Beijing.", "turns 2", "tool calls 1"):
        assert expected in text, expected
    bad = CliRunner().invoke(app, ["replay", str(tmp_path / "missing.jsonl")])
    assert bad.exit_code == 2
