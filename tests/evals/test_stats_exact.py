"""The experiment statistics against scipy as the reference, and at the edges of each formula."""

from __future__ import annotations

import itertools
import math
import random

import pytest
from scipy import stats as sp

from codeact.evals.stats import (
    BOOTSTRAP_SAMPLES,
    BOOTSTRAP_SEED,
    binomial_two_sided,
    cluster_bootstrap,
    fisher_exact_p,
    mcnemar_p,
    task_level_test,
    wilcoxon_signed_rank_p,
    wilson,
)

CASES = [(k, n) for n in (1, 2, 3, 7, 10, 25) for k in range(n + 1)]


@pytest.mark.parametrize(("k", "n"), CASES)
def test_wilson_matches_scipy(k: int, n: int) -> None:
    ci = sp.binomtest(k, n).proportion_ci(method="wilson")
    low, high = wilson(k, n)
    assert low == pytest.approx(ci.low, abs=1e-7)
    assert high == pytest.approx(ci.high, abs=1e-7)
    assert (low == 0.0) == (k == 0) and (high == 1.0) == (k == n)


def test_wilson_other_level_and_empty() -> None:
    ci = sp.binomtest(3, 10).proportion_ci(method="wilson", confidence_level=0.99)
    assert wilson(3, 10, z=sp.norm.ppf(0.995)) == pytest.approx((ci.low, ci.high), abs=1e-9)
    assert wilson(0, 0) == (0.0, 0.0)


@pytest.mark.parametrize(("k", "n"), [*CASES, (0, 0)])
def test_sign_and_mcnemar_match_scipy(k: int, n: int) -> None:
    want = sp.binomtest(k, n, 0.5).pvalue if n else 1.0
    assert binomial_two_sided(k, n) == pytest.approx(want, rel=1e-12)
    assert mcnemar_p(k, n - k) == pytest.approx(want, rel=1e-12)


FISHER = [(a, an, b, bn) for an, bn in ((1, 1), (1, 10), (10, 1), (3, 3), (4, 7), (6, 2), (10, 10))
          for a in range(an + 1) for b in range(bn + 1)]


@pytest.mark.parametrize(("a_ok", "a_n", "b_ok", "b_n"), FISHER)
def test_fisher_matches_scipy(a_ok: int, a_n: int, b_ok: int, b_n: int) -> None:
    want = sp.fisher_exact([[a_ok, a_n - a_ok], [b_ok, b_n - b_ok]]).pvalue
    assert fisher_exact_p(a_ok, a_n, b_ok, b_n) == pytest.approx(want, rel=1e-9)


def test_fisher_without_one_arm_is_one() -> None:
    assert fisher_exact_p(0, 0, 2, 5) == 1.0 and fisher_exact_p(2, 5, 0, 0) == 1.0


def _wilcoxon_reference(diffs: list[float]) -> float:
    """Exact two-sided p by enumerating every sign assignment, scipy's average ranks for ties."""
    nonzero = [d for d in diffs if d != 0]
    if not nonzero:
        return 1.0
    ranks = sp.rankdata([abs(d) for d in nonzero])
    w_plus = sum(r for r, d in zip(ranks, nonzero, strict=True) if d > 0)
    total = sum(ranks)
    w = min(w_plus, total - w_plus)
    extreme = 0
    for signs in itertools.product((0, 1), repeat=len(ranks)):
        s = sum(r for r, bit in zip(ranks, signs, strict=True) if bit)
        extreme += min(s, total - s) <= w + 1e-9
    return min(1.0, extreme / 2 ** len(ranks))


WILCOXON = [
    [1, 2, -3, 4, 5, 6], [0.5, -0.5, 0.5, 0.5, 1.0, -1.0, 1.0], [1, 1, 2, 2, -2, 3, 3, -3],
    [-0.25, 0.25, 0.5, 0.75, 0.75, 0.75, -1.0], [0, 0.5, -0.5, 0, 1.0], [2, 2, 2, -1], [-1, -2, -3],
    [0.1, 0.2, 0.2, 0.3, -0.3, 0.3, 0.4, -0.1, 0.5], [1, -1], [1, -2, -1, 2], [6, 5, 4, -3, 2, 1], [2, -2, 1],
    [0.5, 0.25, -0.25, 0.125],
]


@pytest.mark.parametrize("diffs", WILCOXON)
def test_wilcoxon_exact_with_ties_matches_enumeration(diffs: list[float]) -> None:
    assert wilcoxon_signed_rank_p(diffs) == pytest.approx(_wilcoxon_reference(diffs), rel=1e-12)


@pytest.mark.parametrize("diffs", [[1, 2, -3, 4, 5, 6], [-1, 2, -3, 4, -5, 6, 7, 8], [3, -1, 4, -2, 5]])
def test_wilcoxon_without_ties_matches_scipy(diffs: list[float]) -> None:
    assert wilcoxon_signed_rank_p(diffs) == pytest.approx(sp.wilcoxon(diffs, method="exact").pvalue, rel=1e-12)


def test_wilcoxon_tiny_differences_are_zero() -> None:
    assert wilcoxon_signed_rank_p([1e-13, -1e-13, 1, 2]) == wilcoxon_signed_rank_p([1, 2])
    assert wilcoxon_signed_rank_p([1e-12, 1, 2]) == wilcoxon_signed_rank_p([1, 2])  # at the bound: zero too
    # Nearly equal magnitudes are one tie (their ranks averaged), not two ranks.
    assert wilcoxon_signed_rank_p([1.0, -(1.0 + 1e-13), 2.0]) == pytest.approx(_wilcoxon_reference([1, -1, 2]))


def _bootstrap_reference(diffs: list[float], samples: int, seed: int) -> tuple[float, float]:
    rng = random.Random(seed)
    n = len(diffs)
    means = sorted(sum(diffs[rng.randrange(n)] for _ in range(n)) / n for _ in range(samples))
    return means[int(0.025 * (samples - 1))], means[math.ceil(0.975 * (samples - 1))]


def test_cluster_bootstrap_is_the_percentile_interval_of_resampled_means() -> None:
    diffs = [0.0, 0.25, -0.5, 1.0, 0.5, 0.0, -0.25, 0.013, -0.071, 0.29, 0.377, -0.6]  # distinct means
    assert cluster_bootstrap(diffs) == _bootstrap_reference(diffs, BOOTSTRAP_SAMPLES, BOOTSTRAP_SEED)
    assert cluster_bootstrap(diffs, samples=41, seed=3) == _bootstrap_reference(diffs, 41, 3)
    low, high = cluster_bootstrap(diffs)
    assert low < sum(diffs) / len(diffs) < high
    assert cluster_bootstrap([]) == (0.0, 0.0)


def test_task_level_test_counts_and_names() -> None:
    rates = {"t1": (1.0, 0.5), "t2": (0.5, 0.5 + 1e-13), "t3": (0.0, 1.0), "t4": (1.0, 0.0), "t5": (0.75, 0.25)}
    out = task_level_test(rates, a="x", b="y")
    assert out["tasks"] == 5 and out["unit"] == "task"
    assert out["x_better"] == 3 and out["y_better"] == 1 and out["ties"] == 1
    assert out["x_rate"] == pytest.approx(3.25 / 5) and out["y_rate"] == pytest.approx((2.25 + 1e-13) / 5)
    diffs = [0.5, -1e-13, -1.0, 1.0, 0.5]
    assert out["mean_difference"] == pytest.approx(sum(diffs) / 5)
    assert (out["ci_low"], out["ci_high"]) == cluster_bootstrap(diffs)
    assert out["sign_test_p"] == binomial_two_sided(3, 4)
    assert out["wilcoxon_p"] == wilcoxon_signed_rank_p(diffs)
    assert str(BOOTSTRAP_SAMPLES) in out["ci_method"] and str(BOOTSTRAP_SEED) in out["ci_method"]
    empty = task_level_test({})
    at_bound = task_level_test({"a": (1e-12, 0.0), "b": (0.0, 1e-12), "c": (1.0, 0.0)})
    assert at_bound["code_better"] == 1 and at_bound["json_better"] == 0 and at_bound["ties"] == 2
    assert empty["tasks"] == 0 and empty["code_rate"] == 0.0 and empty["json_rate"] == 0.0
    assert empty["mean_difference"] == 0.0 and empty["sign_test_p"] == 1.0
