"""``codeact check`` (nothing runs: exit 0 no error, 1 errors, 2 usage) and ``codeact exec --check``."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

CODEACT = str(Path(sys.executable).with_name("codeact"))
TOOLS = '''\
from codeact import tool


@tool
def lookup(city: str, days: int = 1) -> dict:
    """Look a city up."""
    return {"city": city, "days": days}
'''


def codeact(*args: str, stdin: str | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run([CODEACT, *args], input=stdin, capture_output=True, text=True, timeout=180)


@pytest.fixture
def tools(tmp_path: Path) -> Path:
    path = tmp_path / "tools.py"
    path.write_text(TOOLS)
    return path


def test_check_prints_each_finding_and_exits_by_severity(tools: Path, tmp_path: Path) -> None:
    bad = tmp_path / "bad.py"
    bad.write_text("r = lookup('Oslo')\nr2 = lookup(citty='Oslo', days='2')\n")
    proc = codeact("check", str(bad), "--tools", str(tools))
    assert proc.returncode == 1, proc.stderr
    assert proc.stdout.splitlines() == [
        f"{bad}:2:6: error [missing-argument] lookup() is missing required argument 'city'",
        f"{bad}:2:13: error [unknown-argument] lookup() got an unexpected keyword argument 'citty'; "
        "did you mean 'city'?",
        f"{bad}:2:32: error [argument-type] lookup() argument 'days': '2' is not of type 'integer'"]
    good = codeact("check", "-", "--tools", str(tools), "--json", stdin="def f():\n    return later\nlookup('Oslo')\n")
    assert good.returncode == 0, good.stderr
    assert [(d["line"], d["severity"]) for d in json.loads(good.stdout)] == [(2, "warning")]


def test_check_usage_errors_exit_2(tools: Path, tmp_path: Path) -> None:
    assert codeact("check", str(tmp_path / "missing.py")).returncode == 2
    proc = codeact("exec", "-", "--check", "sometimes", stdin="1")
    assert proc.returncode == 2 and "--check must be off, warn or block" in proc.stderr


@pytest.mark.docker
def test_exec_check_block_does_not_run_the_cell(docker_image: str, tools: Path) -> None:
    proc = codeact("exec", "-", "--tools", str(tools), "--check", "block", "--json",
                   stdin="print('ran')\nlookup(city=3)\n")
    assert proc.returncode == 1, proc.stderr
    result = json.loads(proc.stdout)
    assert (result["termination"], result["stdout"], result["calls"]) == ("rejected", "", [])
    assert [(d["line"], d["code"]) for d in result["diagnostics"]] == [(2, "argument-type")]
