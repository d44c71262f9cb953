"""The CLI at 80 columns (``COLUMNS=80``): the eval summary, the exec call table and the progress
bar fit, and none of their key cells is cut or wrapped. Real subprocesses, the local backend."""

from __future__ import annotations

from pathlib import Path

from tests.cli.test_cli_exec import codeact

_NARROW = {"COLUMNS": "80"}


def _fits(lines: list[str]) -> None:
    assert lines and all(len(line) <= 80 for line in lines), "\n".join(lines)


def test_eval_summary_and_its_bar_at_80_columns(tmp_path: Path) -> None:
    proc = codeact("eval", "weather", "--model", "scripted", "--backend", "local", "--out", str(tmp_path / "run"),
                   "--tasks", "weather.compare,weather.ambiguous_city", env=_NARROW)
    assert proc.returncode == 0, proc.stderr
    lines = proc.stderr.splitlines()
    _fits([line for line in lines if "results: " not in line])  # the closing line names a path
    bar = next(line for line in lines if "ETA" in line)
    assert " 4/4 " in bar and "wrong 1 " in bar and "…" not in bar  # eval counts wrong answers
    assert any(line.strip().startswith("code 1/2 50% · json 2/2 100%") for line in lines)  # the status line
    rows = {line.split()[0]: line for line in lines if line.startswith(("code ", "json "))}
    assert "50.0% (1/2)" in rows["code"] and "100.0% (2/2)" in rows["json"], proc.stderr
    assert "[9.5%, 90.5%]" in rows["code"] and "[34.2%, 100.0%]" in rows["json"]
    assert "…" not in rows["code"] + rows["json"]
    assert any("success" in line and "turns" in line for line in lines)  # headers whole


def test_exec_call_table_keeps_one_line_per_call_at_80_columns(tmp_path: Path) -> None:
    tools = tmp_path / "tools.py"
    tools.write_text(
        "from codeact import tool\n\n"
        "@tool\ndef convert_temperature_between_units(value: float, to: str) -> dict:\n"
        "    \"\"\"Convert.\"\"\"\n"
        "    return {'value': value, 'to': to, 'note': 'a long result ' * 8}\n")
    code = "for v in (1.0, 2.0, 3.0):\n    convert_temperature_between_units(value=v, to='celsius' * 6)\n"
    proc = codeact("exec", "-", "--tools", str(tools), "--backend", "local", stdin=code, env=_NARROW)
    assert proc.returncode == 0, proc.stderr
    lines = proc.stdout.splitlines()
    _fits(lines)
    start = next(i for i, line in enumerate(lines) if line.startswith("id "))
    rows = lines[start + 2:start + 5]  # the header, its rule, then exactly one line per call
    assert [row.split()[0] for row in rows] == ["call_1", "call_2", "call_3"], proc.stdout
    for row in rows:
        assert " convert_temperature_between_units " in row and " ok " in row
        assert row.split()[-1].replace(".", "").isdigit()  # ms, whole, last
    assert lines[start + 5].startswith("completed")


def test_batch_bar_names_failed_items_and_the_exit_status_says_so(tmp_path: Path) -> None:
    code = tmp_path / "action.py"
    code.write_text("if item == 2:\n    raise ValueError('bad item')\nitem * 10\n")
    inputs = tmp_path / "inputs.jsonl"
    inputs.write_text("1\n2\n3\n")
    proc = codeact("batch", str(code), str(inputs), "--backend", "local", "--concurrency", "1", env=_NARROW)
    assert proc.returncode == 1, proc.stderr  # an item failed
    lines = proc.stderr.splitlines()
    _fits(lines)
    bar = next(line for line in lines if "ETA" in line)
    assert " 3/3 " in bar and "failed 1 " in bar and "…" not in bar
    assert "3 results, 1 failed (inputs 1)" in proc.stderr
    allowed = codeact("batch", str(code), str(inputs), "--backend", "local", "--allow-failed", "--no-progress")
    assert allowed.returncode == 0, allowed.stderr
    assert len(allowed.stdout.splitlines()) == 3  # the failed item's line is written all the same
