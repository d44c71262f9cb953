"""``codeact eval`` and ``codeact report`` from the command line (in-process, typer's runner)."""

from __future__ import annotations

import json
from pathlib import Path

from typer.testing import CliRunner

from codeact.cli import app

LOCAL = ["--backend", "local", "--policy", "none", "--no-progress"]


def test_eval_then_report(tmp_path: Path) -> None:
    out = tmp_path / "run"
    args = ["eval", "weather", "--out", str(out), "--tasks", "weather.compare,weather.timeout", "--repeats", "2",
            "--max-turns", "6", *LOCAL]
    result = CliRunner().invoke(app, args)
    assert result.exit_code == 0, result.output
    rows = [json.loads(line) for line in (out / "results.jsonl").read_text().splitlines()]
    assert len(rows) == 8 and all(r["correct"] for r in rows)
    meta = json.loads((out / "run.json").read_text())
    assert meta["model"] == "scripted/openai" and meta["budget"]["max_turns"] == 6 and meta["backend"] == "local"
    assert "8 episode(s) run, 0 already done, 0 left" in result.output
    again = CliRunner().invoke(app, args)
    assert again.exit_code == 0 and "0 episode(s) run, 8 already done" in again.output

    report = CliRunner().invoke(app, ["report", str(out)])
    assert report.exit_code == 0, report.output
    for name in ("report.md", "report.html", "summary.json", "success_by_mode.png"):
        assert (out / name).is_file() and str(out / name) in report.output
    assert "| code | 4 | 100.0% (4/4) |" in (out / "report.md").read_text()


def test_eval_writes_the_report_when_asked(tmp_path: Path) -> None:
    out = tmp_path / "run"
    result = CliRunner().invoke(app, ["eval", "multitool", "--out", str(out), "--tasks", "m3.decode",
                                      "--modes", "json", "--wire", "anthropic", "--report", *LOCAL])
    assert result.exit_code == 0, result.output
    assert "| json | 1 | 100.0% (1/1) |" in (out / "report.md").read_text()


def test_usage_errors(tmp_path: Path) -> None:
    runner = CliRunner()
    bad = [
        ["eval", "weather", "--out", str(tmp_path / "a"), "--engine", "spark", *LOCAL],
        ["eval", "weather", "--out", str(tmp_path / "b"), "--model", "mistral", *LOCAL],
        ["eval", "nonsense", "--out", str(tmp_path / "c"), *LOCAL],
        ["eval", "weather", "--out", str(tmp_path / "d"), "--modes", "yaml", *LOCAL],
        ["report", str(tmp_path / "empty")],
    ]
    for args in bad:
        result = runner.invoke(app, args)
        assert result.exit_code == 2, (args, result.output)
