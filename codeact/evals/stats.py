"""Statistics of an experiment, with the *task* as the unit of analysis.

Repeats of one task are clustered (same instruction, same tools, often the same model output),
so they are not independent samples. The primary comparison therefore reduces each task to one
number per mode, its success rate over the repeats, and compares modes over tasks:

- an exact two-sided **sign test** on the tasks where one mode's rate is higher,
- an exact two-sided **Wilcoxon signed-rank** test on the per-task rate differences,
- a **cluster bootstrap** (tasks resampled with replacement, fixed seed) for the mean
  difference of the rates and its 95% interval.

Repeats only sharpen the per-task rates; repeating identical episodes changes none of these
numbers. Each task row also gets its own exact test (Fisher's, on its k/n per mode).
"""

from __future__ import annotations

import math
import random
from collections.abc import Mapping, Sequence
from typing import Any

__all__ = ["binomial_two_sided", "cluster_bootstrap", "fisher_exact_p", "mcnemar_p", "task_level_test",
           "wilcoxon_signed_rank_p", "wilson"]

BOOTSTRAP_SAMPLES = 4000
BOOTSTRAP_SEED = 20260


def wilson(successes: int, n: int, z: float = 1.959964) -> tuple[float, float]:
    """The Wilson score interval of a binomial proportion (95% by default)."""
    if n == 0:
        return (0.0, 0.0)
    p = successes / n
    denom = 1 + z * z / n
    centre = (p + z * z / (2 * n)) / denom
    half = z * math.sqrt(p * (1 - p) / n + z * z / (4 * n * n)) / denom
    low = 0.0 if successes == 0 else max(0.0, centre - half)
    high = 1.0 if successes == n else min(1.0, centre + half)
    return (low, high)


def binomial_two_sided(k: int, n: int) -> float:
    """Exact two-sided p of ``k`` of ``n`` under p = 1/2 (the sign test; McNemar's exact test)."""
    if n == 0:
        return 1.0
    tail = sum(math.comb(n, i) for i in range(min(k, n - k) + 1)) / float(2**n)
    return min(1.0, 2 * tail)


def mcnemar_p(only_a: int, only_b: int) -> float:
    """Exact two-sided McNemar p-value from the discordant pair counts."""
    return binomial_two_sided(only_a, only_a + only_b)


def fisher_exact_p(a_ok: int, a_n: int, b_ok: int, b_n: int) -> float:
    """Exact two-sided Fisher test of two proportions (sum of tables no likelier than the observed)."""
    ok, n = a_ok + b_ok, a_n + b_n
    if a_n == 0 or b_n == 0 or ok in (0, n):
        return 1.0

    def prob(x: int) -> float:
        return math.comb(a_n, x) * math.comb(b_n, ok - x) / math.comb(n, ok)

    observed = prob(a_ok)
    support = range(max(0, ok - b_n), min(a_n, ok) + 1)
    return min(1.0, sum(p for p in map(prob, support) if p <= observed * (1 + 1e-9)))


def wilcoxon_signed_rank_p(diffs: Sequence[float]) -> float:
    """Exact two-sided Wilcoxon signed-rank p; zero differences dropped, tied ranks averaged.

    The null distribution of the positive rank sum is counted exactly (doubled ranks keep tied
    half-ranks integral), so it holds for the small task counts of an experiment.
    """
    nonzero = [d for d in diffs if abs(d) > 1e-12]
    n = len(nonzero)
    if n == 0:
        return 1.0
    order = sorted(range(n), key=lambda i: abs(nonzero[i]))
    ranks2 = [0] * n  # twice the average rank
    i = 0
    while i < n:
        j = i
        while j + 1 < n and abs(abs(nonzero[order[j + 1]]) - abs(nonzero[order[i]])) <= 1e-12:
            j += 1
        for k in range(i, j + 1):
            ranks2[order[k]] = i + j + 2
        i = j + 1
    total = sum(ranks2)
    counts = [0] * (total + 1)  # ways to reach each positive rank sum
    counts[0] = 1
    for r in ranks2:
        for s in range(total, r - 1, -1):
            counts[s] += counts[s - r]
    w_plus = sum(r for r, d in zip(ranks2, nonzero, strict=True) if d > 0)
    w = min(w_plus, total - w_plus)
    tail = sum(counts[: w + 1]) / float(2**n)
    return min(1.0, 2 * tail)


def cluster_bootstrap(diffs: Sequence[float], samples: int = BOOTSTRAP_SAMPLES,
                      seed: int = BOOTSTRAP_SEED) -> tuple[float, float]:
    """95% percentile interval of the mean per-task difference, resampling tasks (the clusters)."""
    if not diffs:
        return (0.0, 0.0)
    rng = random.Random(seed)
    n = len(diffs)
    means = sorted(sum(diffs[rng.randrange(n)] for _ in range(n)) / n for _ in range(samples))
    return (means[int(0.025 * (samples - 1))], means[math.ceil(0.975 * (samples - 1))])


def task_level_test(rates: Mapping[str, tuple[float, float]], a: str = "code", b: str = "json") -> dict[str, Any]:
    """The primary comparison: ``rates`` maps task → (rate of ``a``, rate of ``b``) over its repeats."""
    tasks = sorted(rates)
    diffs = [rates[t][0] - rates[t][1] for t in tasks]
    better_a = sum(d > 1e-12 for d in diffs)
    better_b = sum(d < -1e-12 for d in diffs)
    low, high = cluster_bootstrap(diffs)
    return {
        "unit": "task",
        "tasks": len(tasks),
        f"{a}_rate": sum(rates[t][0] for t in tasks) / len(tasks) if tasks else 0.0,
        f"{b}_rate": sum(rates[t][1] for t in tasks) / len(tasks) if tasks else 0.0,
        "mean_difference": sum(diffs) / len(diffs) if diffs else 0.0,
        "ci_low": low, "ci_high": high,
        "ci_method": f"cluster bootstrap over tasks, {BOOTSTRAP_SAMPLES} resamples, seed {BOOTSTRAP_SEED}",
        f"{a}_better": better_a, f"{b}_better": better_b, "ties": len(tasks) - better_a - better_b,
        "sign_test_p": binomial_two_sided(better_a, better_a + better_b),
        "wilcoxon_p": wilcoxon_signed_rank_p(diffs),
    }
