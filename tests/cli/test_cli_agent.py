"""``codeact agent`` and ``codeact replay`` as a user runs them: the real CLI in a subprocess,
talking HTTP to a FakeModelServer on 127.0.0.1."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from codeact.testing.fake_server import FakeModelServer
from tests.agent.test_mcp_server import TOOLS_PY

CODEACT = str(Path(sys.executable).with_name("codeact"))
CODE_REPLY = """I'll compare both cities.
```python
pit, bj = get_weather("Pittsburgh"), get_weather("Beijing")
bj_c = (bj["temperature"] - 32) * 5 / 9
final_answer({"warmer": "Beijing" if bj_c > pit["temperature"] else "Pittsburgh", "beijing_c": bj_c})
```"""
JSON_REPLIES: list[Any] = [
    {"tool_calls": [{"name": "get_weather", "arguments": {"city": "Pittsburgh"}},
                    {"name": "get_weather", "arguments": {"city": "Beijing"}}]},
    "Beijing is warmer (20 °C against 12 °C).",
]


@pytest.fixture
def tools_file(tmp_path: Path) -> Path:
    path = tmp_path / "weather_tools.py"
    path.write_text(TOOLS_PY)
    return path


def codeact(*args: str, timeout: float = 120) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("OPENAI_", "ANTHROPIC_"))}
    env["COLUMNS"] = "160"
    return subprocess.run([CODEACT, *args], capture_output=True, text=True, timeout=timeout, env=env)


def test_code_mode_run_then_offline_replay(tools_file: Path, tmp_path: Path) -> None:
    trace = tmp_path / "run.jsonl"
    with FakeModelServer([CODE_REPLY]) as server:
        run = codeact("agent", "Is it warmer in Pittsburgh or Beijing?", "--model", "openai:fake-model",
                      "--base-url", server.openai_base_url, "--mode", "code", "--tools", str(tools_file),
                      "--backend", "local", "--trace", str(trace))
        assert len(server.requests) == 1
    assert run.returncode == 0, run.stderr
    for expected in ("code mode", "I'll compare both cities.", 'get_weather("Pittsburgh")', "final_answer",
                     "answered", "Beijing", "turns 1", "tool calls 2"):
        assert expected in run.stdout, expected
    assert trace.is_file()

    replayed = codeact("agent", "Is it warmer in Pittsburgh or Beijing?", "--model", f"replay:{trace}",
                       "--tools", str(tools_file), "--backend", "local", "--json")
    assert replayed.returncode == 0, replayed.stderr
    episode = json.loads(replayed.stdout)
    assert episode["answer"] == {"warmer": "Beijing", "beijing_c": 20.0} and episode["model"] == "replay:fake-model"
    assert "final_answer" in replayed.stderr  # the steps went to stderr

    shown = codeact("replay", str(trace))
    assert shown.returncode == 0 and "get_weather" in shown.stdout and "answered" in shown.stdout


def test_json_mode_streaming_anthropic(tools_file: Path) -> None:
    with FakeModelServer(JSON_REPLIES) as server:
        run = codeact("agent", "Warmer?", "--model", "anthropic:fake-model", "--base-url",
                      server.anthropic_base_url, "--mode", "json", "--tools", str(tools_file), "--backend", "local",
                      "--stream", "--json")
        bodies = server.requests
    assert run.returncode == 0, run.stderr
    episode = json.loads(run.stdout)
    assert (episode["mode"], episode["turns"], episode["model_calls"], episode["tool_calls"]) == ("json", 1, 2, 2)
    assert episode["tokens_in"] > 0 and bodies[0]["stream"] is True
    assert "✓ get_weather" in run.stderr and "fahrenheit" in run.stderr


def test_one_line_errors_and_exit_statuses(tools_file: Path) -> None:
    bad_spec = codeact("agent", "x", "--model", "nonsense", "--backend", "local")
    assert bad_spec.returncode == 2 and "openai:" in bad_spec.stderr
    bad_mode = codeact("agent", "x", "--model", "openai:m", "--mode", "yaml")
    assert bad_mode.returncode == 2 and "--mode" in bad_mode.stderr
    with FakeModelServer([{"http_status": 401, "message": "invalid key"}]) as server:
        failed = codeact("agent", "x", "--model", "openai:m", "--base-url", server.openai_base_url,
                         "--backend", "local", "--tools", str(tools_file))
    assert failed.returncode == 1
    errors = [line for line in failed.stderr.splitlines() if line.startswith("codeact:")]
    assert len(errors) == 1 and "model_error" in errors[0] and "invalid key" in errors[0]
    assert "Traceback" not in failed.stderr + failed.stdout


def test_budget_exhausted_exits_1(tools_file: Path) -> None:
    again = "```python\nprint(get_weather('Beijing'))\n```"
    with FakeModelServer([again] * 3) as server:
        run = codeact("agent", "x", "--model", "openai:m", "--base-url", server.openai_base_url, "--backend",
                      "local", "--tools", str(tools_file), "--max-turns", "2", "--json")
    assert run.returncode == 1
    episode = json.loads(run.stdout)
    assert (episode["status"], episode["stop_reason"], episode["turns"]) == ("incomplete", "max_turns", 2)


def test_scripted_model_file(tools_file: Path, tmp_path: Path) -> None:
    script = tmp_path / "script.json"
    script.write_text(json.dumps(JSON_REPLIES))
    run = codeact("agent", "Warmer?", "--model", f"scripted:{script}", "--mode", "json", "--tools", str(tools_file),
                  "--json")
    assert run.returncode == 0, run.stderr
    assert json.loads(run.stdout)["answer"] == JSON_REPLIES[1]
