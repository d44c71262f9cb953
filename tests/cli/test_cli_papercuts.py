"""Small things a new user trips over (issue 28, item 10), as the user meets them: real subprocesses."""

from __future__ import annotations

import json
from pathlib import Path

from tests.cli.test_cli_exec import codeact


def test_a_missing_image_says_which_command_builds_one(docker_image: str) -> None:
    proc = codeact("exec", "-", "--image", "codeact-nosuch:tag", stdin="1")
    assert proc.returncode == 3
    assert "`codeact image build`" in proc.stderr and "ensure_image()" not in proc.stderr, proc.stderr


def test_a_tool_spec_tool_says_how_to_give_it_an_implementation(tmp_path: Path) -> None:
    spec = tmp_path / "tools.json"
    spec.write_text(json.dumps([{"name": "get-weather", "description": "Weather.",
                                 "input_schema": {"type": "object", "properties": {"city": {"type": "string"}}}}]))
    code = "try:\n    get_weather(city='Paris')\nexcept ToolError as e:\n    print(e.code, e.message)\n"
    proc = codeact("exec", "-", "--tool-spec", str(spec), "--backend", "local", "--json", stdin=code)
    assert proc.returncode == 0, proc.stderr
    out = json.loads(proc.stdout)["stdout"]
    assert out.startswith("not_implemented ") and "@tool(name='get-weather')" in out and "--tools" in out, out

    tools = tmp_path / "impl.py"  # the hint works: the same name in --tools implements the definition
    tools.write_text("from codeact import tool\n\n@tool(name='get-weather')\ndef weather(city: str) -> str:\n"
                     "    \"\"\"Weather.\"\"\"\n    return city + ': sunny'\n")
    proc = codeact("exec", "-", "--tools", str(tools), "--tool-spec", str(spec), "--backend", "local", "--json",
                   stdin="get_weather(city='Paris')")
    assert json.loads(proc.stdout)["value"] == "Paris: sunny", proc.stdout


def test_doctor_reads_as_text_by_default_and_json_with_the_flag() -> None:
    proc = codeact("doctor")
    assert proc.returncode in (0, 3), proc.stderr
    assert "{'" not in proc.stdout and "True" not in proc.stdout and "[]" not in proc.stdout, proc.stdout
    assert any(line.startswith("engine:") for line in proc.stdout.splitlines())
    assert any(line.startswith("  ok:") for line in proc.stdout.splitlines())  # nested facts, indented
    machine = codeact("doctor", "--json")
    assert machine.returncode == 0 and "engine" in json.loads(machine.stdout)
