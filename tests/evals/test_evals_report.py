"""The report: statistics, tables, the self-contained HTML, and the PNGs actually looked at."""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

import pytest

from codeact.evals.report import mcnemar_p, summarize, wilson, write_report
from codeact.evals.results_store import EpisodeResult, ResultsStore, RunMeta, load_run
from codeact.evals.suite import EpisodeKey

#: code solves 4 of 5 tasks in 1 turn each; json solves 2 of 5 in 3 turns, one budget stop.
CODE_OK = {"t1", "t2", "t3", "t4"}
JSON_OK = {"t1", "t2"}


def _result(task: str, mode: str, repeat: int) -> EpisodeResult:
    ok = task in (CODE_OK if mode == "code" else JSON_OK)
    errors = {"syntax": 0, "runtime": int(mode == "code" and not ok), "tool": 1 if task == "t2" else 0,
              "budget": int(mode == "json" and task == "t5"), "model": 0}
    return EpisodeResult(task_id=task, mode=mode, repeat=repeat, correct=ok, status="answered", stop_reason="answer",
                         turns=1 if mode == "code" else 3, model_calls=1 if mode == "code" else 4,
                         tokens_in=1000 if mode == "code" else 4000, tokens_out=100, tool_calls=5, wall_s=0.5,
                         errors=errors)


@pytest.fixture
def run_dir(tmp_path: Path) -> Path:
    RunMeta(suite="toy", suite_ref="toy", model="scripted/openai", modes=["code", "json"], repeats=2).write(tmp_path)
    with ResultsStore(tmp_path / "results.jsonl") as store:
        for repeat in range(2):
            for task in ("t1", "t2", "t3", "t4", "t5"):
                for mode in ("code", "json"):
                    assert store.append(_result(task, mode, repeat))
        assert not store.append(_result("t1", "code", 0))  # a duplicate is refused
    return tmp_path


def test_wilson_and_mcnemar_known_values() -> None:
    low, high = wilson(6, 7)
    assert (round(low, 4), round(high, 4)) == (0.4869, 0.9743)
    assert wilson(0, 10)[0] == 0 and round(wilson(0, 10)[1], 4) == 0.2775
    assert wilson(0, 0) == (0.0, 0.0)
    assert mcnemar_p(0, 5) == pytest.approx(0.0625) and mcnemar_p(3, 3) == 1.0 and mcnemar_p(0, 0) == 1.0


def test_summary_numbers(run_dir: Path) -> None:
    meta, results = load_run(run_dir)
    report = summarize(results, meta)
    code, json_ = report.modes
    assert (code.mode, code.episodes, code.successes, json_.successes) == ("code", 10, 8, 4)
    assert code.turns == 1 and json_.turns == 3 and json_.model_calls == 4
    assert code.tokens_per_success == pytest.approx(10 * 1100 / 8)
    assert json_.tokens_per_success == pytest.approx(10 * 4100 / 4)
    assert code.errors == {"syntax": 0, "runtime": 2, "tool": 2, "budget": 0, "model": 0, "check": 0}
    assert json_.errors["budget"] == 2 and json_.turns_hist == {3: 10}
    episodes = {k: v for k, v in report.paired["episode_level"].items() if k != "note"}
    assert episodes == {"pairs": 10, "both": 4, "only_code": 4, "only_json": 0, "neither": 2,
                        "mcnemar_p": pytest.approx(0.125)}
    tasks = report.paired
    assert (tasks["unit"], tasks["tasks"], tasks["code_better"], tasks["json_better"], tasks["ties"]) == \
        ("task", 5, 2, 0, 3)
    assert tasks["sign_test_p"] == pytest.approx(0.5) and tasks["mean_difference"] == pytest.approx(0.4)
    assert tasks["identical_repeats"] == {"cells": 10, "of": 10}
    rows = {t.task_id: t for t in report.tasks}
    assert rows["t3"].success == {"code": (2, 2), "json": (0, 2)}


def _pixels(path: Path) -> tuple[tuple[int, int], set[tuple[int, int, int]]]:
    import matplotlib.image as mpimg

    image = mpimg.imread(path)
    colors = {tuple(int(255 * c) for c in px[:3]) for row in image[::4] for px in row[::4]}
    return (image.shape[1], image.shape[0]), colors  # type: ignore[return-value]


def test_report_files_and_pngs_are_looked_at(run_dir: Path) -> None:
    if os.environ.get("CI") != "true":  # under CI the plots extra must be installed
        pytest.importorskip("matplotlib")
    written = write_report(run_dir)
    pngs = [written[name] for name in ("success_by_mode.png", "turns_distribution.png", "tokens_per_success.png")]
    for png in pngs:
        data = png.read_bytes()
        assert data[:8] == b"\x89PNG\r\n\x1a\n" and len(data) > 10_000, png
        size, colors = _pixels(png)
        assert size[0] >= 600 and size[1] >= 400
        assert len(colors) > 20  # drawn, not blank
        for bar in ((0x3B, 0x7D, 0xD8), (0xE0, 0x88, 0x3A)):  # a code bar and a json bar are drawn
            assert any(sum(abs(a - b) for a, b in zip(bar, c, strict=True)) < 30 for c in colors), png
    markdown = written["markdown"].read_text()
    assert "| code | 10 | 80.0% (8/10) |" in markdown and "| json | 10 | 40.0% (4/10) |" in markdown
    assert "![success by mode](success_by_mode.png)" in markdown and "McNemar p = 0.125" in markdown
    assert "Unit of analysis: the task" in markdown and "sign test p = 0.500" in markdown
    page = written["html"].read_text()
    assert page.count("data:image/png;base64,") == 3 and "http" not in page.replace("charset", "")
    assert "<td>80.0% (8/10)</td>" in page
    summary = json.loads(written["summary"].read_text())
    assert [m["successes"] for m in summary["modes"]] == [8, 4]


def test_report_without_matplotlib(run_dir: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "codeact.evals._plots", None)  # as if the plots extra were missing
    written = write_report(run_dir)
    assert not any(name.endswith(".png") for name in written)
    assert "## Plots" not in written["markdown"].read_text()


def test_report_of_an_empty_directory_is_an_error(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="no results"):
        write_report(tmp_path)


def test_store_repairs_a_torn_line_and_skips_garbage(tmp_path: Path) -> None:
    path = tmp_path / "results.jsonl"
    good = _result("t1", "code", 0).model_dump_json()
    path.write_text(good + "\nnot json\n" + good[:40])
    with ResultsStore(path) as store:
        assert store.done() == {EpisodeKey("t1", "code", 0)} and store.skipped_lines == 1
        assert store.append(_result("t2", "code", 0))
    assert [json.loads(line)["task_id"] for line in path.read_text().splitlines() if line.startswith("{")] == \
        ["t1", "t2"]


def test_an_unfinished_episode_counts_once() -> None:
    # A stored retryable provider error whose retry then failed in the harness is one unfinished
    # episode, not a provider error and a harness failure (the totals came to more than planned).
    from codeact.evals._accounting import account
    from codeact.evals.suite import EpisodeKey

    failed = _result("t1", "json", 0).model_copy(update={"retryable": True, "status": "error", "correct": False})
    fine = _result("t2", "json", 0)
    key = EpisodeKey("t1", "json", 0)
    accounting, _, _ = account([failed, fine], None, {key: "RuntimeError: harness broke"}, ["json"])
    acc = accounting["json"]
    assert (acc.finished, acc.provider_errors, acc.harness_failures) == (1, 1, 0)
    only_harness, _, _ = account([fine], None, {key: "RuntimeError: harness broke"}, ["json"])
    assert (only_harness["json"].provider_errors, only_harness["json"].harness_failures) == (0, 1)


def test_wall_seconds_say_what_of_them_was_the_sandbox_start(tmp_path: Path) -> None:
    from codeact.evals.report import mode_table, notes

    results = [_result("t1", "code", 0).model_copy(update={"sandbox_start_s": 0.2}),
               _result("t1", "json", 0)]
    report = summarize(results)
    header, rows = mode_table(report)
    wall, start = header.index("wall s"), header.index("of which sandbox start s")
    assert [(r[0], r[wall], r[start]) for r in rows] == [("code", "0.500", "0.200"), ("json", "0.500", "0.000")]
    assert any("the sandbox's start included" in line for line in notes(report))
