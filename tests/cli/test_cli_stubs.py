"""`codeact stubs`: the prompt view the model is shown by default, the sandbox's module with
--sandbox, the index view past --budget."""

from __future__ import annotations

import json
from pathlib import Path

from tests.cli.test_cli_exec import codeact

_SPEC = [{"type": "function", "function": {
    "name": "get_weather", "description": "Current weather for a city.",
    "parameters": {"type": "object", "properties": {"city": {"type": "string", "description": "City name."}},
                   "required": ["city"]}}}]


def _spec(tmp_path: Path) -> Path:
    path = tmp_path / "tools.json"
    path.write_text(json.dumps(_SPEC))
    return path


def test_stubs_prints_the_prompt_view_with_the_builtins(tmp_path: Path) -> None:
    proc = codeact("stubs", str(_spec(tmp_path)))
    assert proc.returncode == 0, proc.stderr
    assert "def get_weather(city: str) -> Any:" in proc.stdout
    assert "def read_result(" in proc.stdout  # the model is shown the built-in too
    assert "__codeact" not in proc.stdout  # none of the sandbox's plumbing
    compile(proc.stdout, "<prompt view>", "exec")


def test_stubs_sandbox_prints_the_module_the_sandbox_runs(tmp_path: Path) -> None:
    proc = codeact("stubs", str(_spec(tmp_path)), "--sandbox")
    assert proc.returncode == 0, proc.stderr
    assert "__codeact_call__('get_weather'" in proc.stdout.replace('"', "'")
    assert "def read_result(" in proc.stdout and "def search_tools(" in proc.stdout
    compile(proc.stdout, "<stubs>", "exec")


def test_stubs_budget_prints_the_index_view_when_the_stubs_do_not_fit(tmp_path: Path) -> None:
    proc = codeact("stubs", str(_spec(tmp_path)), "--budget", "200")
    assert proc.returncode == 0, proc.stderr
    assert "search_tools(query: str" in proc.stdout and "def get_weather(" not in proc.stdout
    assert "def get_weather(" in codeact("stubs", str(_spec(tmp_path)), "--budget", "100000").stdout
    assert codeact("stubs", str(_spec(tmp_path)), "--budget", "0").returncode == 2
