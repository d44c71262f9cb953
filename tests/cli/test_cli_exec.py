"""`codeact exec` and `codeact stubs` as a user runs them: real subprocesses, contract exit statuses."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
CODEACT = [sys.executable, "-m", "codeact.cli"]


def codeact(*args: str, stdin: str | None = None, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run([*CODEACT, *args], input=stdin, capture_output=True, text=True, timeout=120,
                          env={**os.environ, **(env or {})}, cwd=ROOT)


@pytest.fixture(params=["local", "docker"])
def backend(request: pytest.FixtureRequest) -> str:
    if request.param == "docker":
        request.getfixturevalue("docker_image")
    return str(request.param)


def test_exec_weather_example_json(backend: str) -> None:
    proc = codeact("exec", "examples/weather_action.py", "--tools", "examples/weather_tools.py",
                   "--backend", backend, "--json")
    assert proc.returncode == 0, proc.stderr
    result = json.loads(proc.stdout)  # exactly one JSON object on stdout
    assert result["ok"] and result["termination"] == "completed"
    assert result["value"] == "Beijing is warmer by 8.0 °C"
    assert [c["name"] for c in result["calls"]] == ["get_weather", "get_weather", "convert_temperature"]


def test_exec_failure_is_exit_1_with_result(tmp_path: Path) -> None:
    code = tmp_path / "fail.py"
    code.write_text("print('before')\nraise ValueError('nope')\n")
    proc = codeact("exec", str(code), "--backend", "local", "--json")
    assert proc.returncode == 1
    result = json.loads(proc.stdout)
    assert result["stdout"] == "before\n" and result["error"]["lineno"] == 2


def test_exec_timeout_is_exit_1() -> None:
    proc = codeact("exec", "-", "--backend", "local", "--timeout", "1", "--json", stdin="while True: pass\n")
    assert proc.returncode == 1 and json.loads(proc.stdout)["termination"] == "timeout"


def test_exec_readable_summary() -> None:
    proc = codeact("exec", "examples/weather_action.py", "--tools", "examples/weather_tools.py", "--backend", "local")
    assert proc.returncode == 0, proc.stderr
    assert "Pittsburgh: 12.0 °C" in proc.stdout and "completed" in proc.stdout and "get_weather" in proc.stdout


def test_usage_errors_are_exit_2(tmp_path: Path) -> None:
    assert codeact("exec", str(tmp_path / "missing.py"), "--backend", "local").returncode == 2
    assert codeact("exec", "-", "--backend", "podman", stdin="1").returncode == 2
    assert codeact("exec", "-", "--bogus-flag", stdin="1").returncode == 2


def test_no_engine_is_exit_3_one_line() -> None:
    proc = codeact("exec", "-", "--backend", "docker", stdin="1", env={"DOCKER_HOST": "unix:///nonexistent/docker.sock"})
    assert proc.returncode == 3
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and "sandbox unavailable" in lines[0]


def test_tool_spec_file_without_implementation(tmp_path: Path) -> None:
    spec = tmp_path / "tools.json"
    spec.write_text(json.dumps([
        {"type": "function", "function": {"name": "get-weather", "description": "Weather.",
                                          "parameters": {"type": "object", "properties": {"city": {"type": "string"}},
                                                         "required": ["city"]}}},
        {"name": "lookup", "description": "Look up.", "input_schema": {"type": "object", "properties": {}}},
        {"name": "math.factorial", "inputSchema": {"type": "object", "properties": {"n": {"type": "integer"}}}},
    ]))
    stubs = codeact("stubs", str(spec))
    assert stubs.returncode == 0, stubs.stderr
    compile(stubs.stdout, "<stubs>", "exec")
    assert "def get_weather(" in stubs.stdout and "def math_factorial(" in stubs.stdout
    proc = codeact("exec", "-", "--tool-spec", str(spec), "--backend", "local", "--json",
                   stdin="try:\n    get_weather('Paris')\nexcept ToolError as e:\n    print(e.code)\n")
    assert proc.returncode == 0, proc.stderr
    result = json.loads(proc.stdout)
    assert result["stdout"] == "not_implemented\n"
    assert result["calls"][0]["name"] == "get-weather"  # the original name reaches the host


def test_bad_tool_spec_is_exit_2(tmp_path: Path) -> None:
    spec = tmp_path / "bad.json"
    spec.write_text(json.dumps([{"nonsense": True}]))
    proc = codeact("stubs", str(spec))
    assert proc.returncode == 2 and proc.stderr.count("\n") <= 2


def test_exec_json_survives_a_hand_written_frame_with_a_lone_surrogate(tmp_path: Path, docker_image: str) -> None:
    # The code writes a call frame itself, its argument "\udc80" (valid JSON, not valid Unicode).
    # Before, the tool ran with it, the record held it, and no writer could encode the result:
    # exit 1, a traceback, nothing on stdout.
    from tests.sandbox.test_channel_hostile import FORGE

    code = tmp_path / "forge.py"
    code.write_text(FORGE + "chan.sendall(frame({'type': 'call', 'seq': 999, 'name': 'get_weather', "
                            "'arguments': {'city': '\\udc80'}}))\nimport time\ntime.sleep(0.5)\n"
                            "print('after', get_weather(city='Beijing')['condition'])\n")
    # docker: the local backend runs exec's code under the restricted policy (no os, no socket)
    proc = codeact("exec", str(code), "--tools", "examples/weather_tools.py", "--backend", "docker", "--json")
    assert proc.returncode == 0, proc.stderr
    result = json.loads(proc.stdout)  # one valid JSON result
    assert result["stdout"] == "after sunny\n"
    refused, fine = result["calls"]
    assert refused["error"]["code"] == "invalid_arguments" and "lone surrogate" in refused["error"]["message"]
    assert fine["ok"] and fine["arguments"] == {"city": "Beijing"}
