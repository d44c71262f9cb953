"""A JSON-mode answer is kept as its value: the ``ANSWER:`` line of the protocol is not part of it."""

from __future__ import annotations

import json
from pathlib import Path

from codeact.evals.answers import kept_answer
from tests.cli.test_cli_exec import codeact


def test_the_stored_json_answer_is_the_value_not_the_answer_line(tmp_path: Path) -> None:
    proc = codeact("eval", "weather", "--model", "scripted", "--backend", "local", "--out", str(tmp_path),
                   "--modes", "json", "--tasks", "weather.compare", "--no-progress")
    assert proc.returncode == 0, proc.stderr
    [row] = [json.loads(line) for line in (tmp_path / "results.jsonl").read_text().splitlines()]
    assert row["answer"] == 2.0 == row["answer_value"] and row["correct"], row["answer"]


def test_other_answers_are_kept_as_they_came() -> None:
    assert kept_answer("Total: 76 USD.\nANSWER: 76") == 76
    assert kept_answer("Two of them.\nANSWER: [1, 2]") == [1, 2]
    assert kept_answer("Beijing is warmer.") == "Beijing is warmer."
    assert kept_answer({"warmer": "Beijing"}) == {"warmer": "Beijing"}
