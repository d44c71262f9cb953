"""Task-level statistics: known values, and repeats that cannot manufacture significance."""

from __future__ import annotations

import pytest

from codeact.evals.report import summarize
from codeact.evals.results_store import EpisodeResult
from codeact.evals.stats import (
    binomial_two_sided,
    cluster_bootstrap,
    fisher_exact_p,
    task_level_test,
    wilcoxon_signed_rank_p,
)


def test_exact_tests_known_values() -> None:
    assert binomial_two_sided(0, 5) == pytest.approx(0.0625)
    assert binomial_two_sided(3, 6) == 1.0 and binomial_two_sided(0, 0) == 1.0
    # Fisher: 3/3 vs 0/3 → p = 0.1; 1/1 vs 0/1 → p = 1 (R: fisher.test)
    assert fisher_exact_p(3, 3, 0, 3) == pytest.approx(0.1)
    assert fisher_exact_p(1, 1, 0, 1) == 1.0 and fisher_exact_p(2, 2, 2, 2) == 1.0
    assert fisher_exact_p(6, 6, 0, 6) == pytest.approx(0.002164502)
    # Wilcoxon exact: five positive differences → 2/32; ties dropped; tied ranks averaged
    assert wilcoxon_signed_rank_p([1, 2, 3, 4, 5]) == pytest.approx(0.0625)
    assert wilcoxon_signed_rank_p([0, 0, 1]) == 1.0 and wilcoxon_signed_rank_p([]) == 1.0
    assert wilcoxon_signed_rank_p([1, 1, 1, -1, 1, 1]) == pytest.approx(0.21875)  # = sign test, all tied
    low, high = cluster_bootstrap([1.0] * 4)
    assert (low, high) == (1.0, 1.0)
    low, high = cluster_bootstrap([1.0, 0.0, 0.0, -1.0, 0.5])
    assert -1 <= low < 0.1 < high <= 1


def _episodes(outcomes: dict[str, tuple[bool, bool]], repeats: int) -> list[EpisodeResult]:
    return [EpisodeResult(task_id=t, mode=m, repeat=r, correct=ok[i], status="answered", answer=str(ok[i]),
                          turns=1, model_calls=2, tokens_in=10, tokens_out=5)
            for r in range(repeats) for t, ok in outcomes.items() for i, m in enumerate(("code", "json"))]


def test_identical_repeats_do_not_change_the_task_level_p_value() -> None:
    """The audit's case: 1 task only code solves, the rest tied. Six identical repeats gave a pooled
    McNemar p of 0.031; over tasks the evidence is one task, whatever the repeats."""
    outcomes = {"a": (True, False), "b": (True, True), "c": (False, False), "d": (True, True), "e": (True, True)}
    one, six = summarize(_episodes(outcomes, 1)).paired, summarize(_episodes(outcomes, 6)).paired
    for field in ("tasks", "code_better", "json_better", "ties", "mean_difference", "ci_low", "ci_high",
                  "sign_test_p", "wilcoxon_p"):
        assert one[field] == six[field], field
    assert one["sign_test_p"] == 1.0 and one["code_better"] == 1
    assert six["episode_level"]["mcnemar_p"] == pytest.approx(0.03125)  # what the pooled test claims
    assert (one["identical_repeats"], six["identical_repeats"]) == ({"cells": 0, "of": 0}, {"cells": 10, "of": 10})
    rows = {t.task_id: t for t in summarize(_episodes(outcomes, 6)).tasks}
    assert rows["a"].p_value == pytest.approx(0.002164502) and rows["b"].p_value == 1.0  # each row its own test
    assert rows["a"].identical_repeats == ["code", "json"]


def test_task_level_test_over_tasks() -> None:
    rates = {f"t{i}": (1.0, 0.0) for i in range(6)} | {"u": (0.5, 0.5)}
    out = task_level_test(rates)
    assert (out["code_better"], out["json_better"], out["ties"]) == (6, 0, 1)
    assert out["sign_test_p"] == pytest.approx(0.03125) and out["wilcoxon_p"] == pytest.approx(0.03125)
    assert out["mean_difference"] == pytest.approx(6 / 7) and out["unit"] == "task"
