"""The benchmark harness runs end to end (``--quick``, local backend only) and writes well-formed JSON.

Timings are never asserted: only the structure, and that what was measured is a positive number.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
ROW_KEYS = {"key", "measure", "unit", "median", "p90", "baselines", "ratio", "ratio_label", "target", "met",
            "status", "note", "samples", "extra"}


def test_quick_bench_on_the_local_backend_writes_json(tmp_path: Path) -> None:
    docs_before = {name: (ROOT / name).read_text() for name in ("README.md", "docs/benchmarks.md")}
    proc = subprocess.run(
        [sys.executable, "-m", "benchmarks.run", "--quick", "--backend", "local", "--out", str(tmp_path),
         "--no-table", "--budget", "240"],
        cwd=ROOT, capture_output=True, text=True, timeout=280,
    )
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    assert {name: (ROOT / name).read_text() for name in docs_before} == docs_before
    latest = tmp_path / "latest.json"
    assert latest.exists()
    assert len(list(tmp_path.glob("bench-*.json"))) == 1
    data = json.loads(latest.read_text())

    assert data["schema"] == 1 and data["mode"] == "quick" and data["subject_backend"] == "local"
    assert data["machine"]["cores"] >= 1 and data["machine"]["python"]
    assert data["duration_s"] > 0
    rows = {row["key"]: row for row in data["measures"]}
    for row in rows.values():
        assert set(row) == ROW_KEYS
    measured = {"tool_call", "warm_run", "cpu_sum_squares", "cpu_comprehensions", "cpu_fib", "parallel_2",
                "parallel_10", "throughput", "action_latency", "fresh_pooled", "fresh_cold", "session_close",
                "flow_tool_call", "flow_warm_run", "flow_cpu_labelled", "flow_cpu_plain"}
    assert measured <= set(rows)
    for key in measured:
        row = rows[key]
        assert row["status"] == "ok", (key, row["note"])
        assert row["median"] > 0 and row["samples"] > 0, key
        assert row["p90"] is None or row["p90"] >= 0, key
        for baseline in row["baselines"]:
            assert baseline["median"] is None or baseline["median"] > 0, (key, baseline)
    # Docker-only measures say why they were not measured instead of inventing a number.
    for key in ("memory_idle", "idle_sessions"):
        assert rows[key]["status"] == "n/a" and rows[key]["median"] is None and rows[key]["note"]


def test_the_table_section_is_rewritten_from_the_json_and_nothing_else(tmp_path: Path) -> None:
    from benchmarks import _report

    doc = tmp_path / "benchmarks.md"
    doc.write_text(f"# title\n\nbefore\n\n{_report.START}\nold table\n{_report.END}\n\nafter\n")
    row = {"key": "warm_run", "measure": "warm `x = 1` | pipe", "unit": "µs", "median": 120.0, "p90": 200.0,
           "baselines": [{"name": "floor", "median": 100.0, "p90": 150.0, "note": ""},
                         {"name": "Jupyter", "median": None, "p90": None, "note": "n/a: not installed"}],
           "ratio": 1.2, "ratio_label": "× floor", "target": "≤ 100 µs", "met": False, "status": "ok",
           "note": "a note", "samples": 10, "extra": {}}
    data = {"finished_at": "2026-01-01 00:00 UTC", "duration_s": 1.0, "loadavg_start": 0.5, "measures": [row],
            "machine": {"cores": 2, "memory_gib": 1.0, "docker": None, "python": "3.11", "loadavg_1m": 0.5}}
    assert _report.update_table(data, doc)
    text = doc.read_text()
    assert text.startswith("# title\n\nbefore\n\n") and text.endswith("\n\nafter\n")
    assert "old table" not in text
    assert "| warm `x = 1` \\| pipe | 120 µs | 200 µs | floor: 100 µs (p90 150 µs)<br>Jupyter: n/a: not installed" in text
    assert "| NO |" in text
    no_markers = tmp_path / "other.md"
    no_markers.write_text("no markers here\n")
    assert not _report.update_table(data, no_markers)
    assert no_markers.read_text() == "no markers here\n"
