"""The report's numbers: per mode, per task and paired, from the results alone (no rendering).

See :mod:`.report` for what they mean and how they are written.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from ._accounting import Accounting, account, token_source
from .results_store import EpisodeResult, RunMeta
from .stats import fisher_exact_p, mcnemar_p, task_level_test, wilson
from .suite import EpisodeKey

__all__ = ["LAYERS", "ModeStats", "Report", "TaskRow", "summarize"]

LAYERS = ("syntax", "runtime", "tool", "budget", "model", "check")


def _mean(values: Sequence[float]) -> float:
    return sum(values) / len(values) if values else 0.0


@dataclass
class ModeStats:
    """One mode's numbers; means are per episode, errors are totals by layer."""

    mode: str
    episodes: int
    successes: int
    success_rate: float
    ci_low: float
    ci_high: float
    turns: float
    model_calls: float
    tokens_in: float | None
    tokens_out: float | None
    tool_calls: float
    wall_s: float
    tokens_per_success: float | None
    errors: dict[str, int]
    status: dict[str, int]
    turns_hist: dict[int, int]
    # Alike by design (_accounting.Accounting): its counters, copied flat so that summary.json keeps one
    # flat object per mode.
    #: Where the mode's planned episodes went (see :mod:`._accounting`).
    planned: int = 0
    finished: int = 0
    harness_failures: int = 0
    provider_errors: int = 0
    incomplete: int = 0
    error_episodes: int = 0
    not_run: int = 0
    usage_unknown_calls: int = 0
    #: Of ``wall_s`` (the whole episode), the mean time spent starting the sandbox.
    sandbox_start_s: float = 0.0


@dataclass
class TaskRow:
    """One task: k/n per mode, mean turns and tokens, its own exact test, repeats that add nothing."""

    task_id: str
    success: dict[str, tuple[int, int]] = field(default_factory=dict)
    turns: dict[str, float] = field(default_factory=dict)
    tokens: dict[str, float | None] = field(default_factory=dict)
    #: Fisher's exact test of code k/n vs json k/n (None unless both modes ran the task).
    p_value: float | None = None
    #: Modes whose repeats of this task were identical episodes (same answer, grade and costs).
    identical_repeats: list[str] = field(default_factory=list)


@dataclass
class Report:
    meta: RunMeta | None
    modes: list[ModeStats]
    tasks: list[TaskRow]
    paired: dict[str, Any]
    token_source: str = "provider usage"
    accounting: dict[str, Accounting] = field(default_factory=dict)
    warnings: list[str] = field(default_factory=list)


def _mode_stats(mode: str, rows: list[EpisodeResult]) -> ModeStats:
    n = len(rows)
    ok = sum(r.correct for r in rows)
    low, high = wilson(ok, n)
    tokens = sum(r.tokens_in + r.tokens_out for r in rows)
    known = not any(r.usage_unknown for r in rows)  # missing usage is unknown, never 0
    hist: dict[int, int] = {}
    for r in rows:
        hist[r.turns] = hist.get(r.turns, 0) + 1
    status: dict[str, int] = {}
    for r in rows:
        status[r.status] = status.get(r.status, 0) + 1
    layers = list(LAYERS) + sorted({k for r in rows for k in r.errors} - set(LAYERS))
    errors = {layer: sum(int(r.errors.get(layer, 0)) for r in rows) for layer in layers}
    return ModeStats(
        mode=mode, episodes=n, successes=ok, success_rate=ok / n if n else 0.0, ci_low=low, ci_high=high,
        turns=_mean([r.turns for r in rows]), model_calls=_mean([r.model_calls for r in rows]),
        tokens_in=_mean([r.tokens_in for r in rows]) if known else None,
        tokens_out=_mean([r.tokens_out for r in rows]) if known else None,
        tool_calls=_mean([r.tool_calls for r in rows]), wall_s=_mean([r.wall_s for r in rows]),
        tokens_per_success=tokens / ok if ok and known else None, errors=errors, status=status,
        sandbox_start_s=_mean([r.sandbox_start_s for r in rows]),
        turns_hist=dict(sorted(hist.items())),
    )


def summarize(results: Sequence[EpisodeResult], meta: RunMeta | None = None,
              failures: Mapping[EpisodeKey, str] | None = None) -> Report:
    """Every number of the report, from the results (and harness failures) alone.

    Rates, means and tests use the comparison set (see :mod:`._accounting`).
    """
    order = list(meta.modes) if meta else []
    order += sorted({r.mode for r in results} - set(order))
    accounting, compared, warnings = account(results, meta, failures or {}, order)
    source = token_source(meta, results)
    results = compared
    by_mode = {m: [r for r in results if r.mode == m] for m in order}
    modes = []
    for m, rows in by_mode.items():
        if rows or accounting[m].finished or accounting[m].provider_errors:
            stats = _mode_stats(m, rows)
            acc = accounting[m]
            for name in ("planned", "finished", "harness_failures", "provider_errors", "incomplete",
                         "error_episodes", "not_run", "usage_unknown_calls"):
                setattr(stats, name, getattr(acc, name))
            modes.append(stats)
    task_ids: list[str] = []
    for r in results:
        if r.task_id not in task_ids:
            task_ids.append(r.task_id)
    tasks = []
    for task_id in sorted(task_ids):
        row = TaskRow(task_id)
        for m, rows in by_mode.items():
            mine = [r for r in rows if r.task_id == task_id]
            if mine:
                row.success[m] = (sum(r.correct for r in mine), len(mine))
                row.turns[m] = _mean([r.turns for r in mine])
                row.tokens[m] = (None if any(r.usage_unknown for r in mine)
                                 else _mean([r.tokens_in + r.tokens_out for r in mine]))
                if len(mine) > 1 and len({_signature(r) for r in mine}) == 1:
                    row.identical_repeats.append(m)
        if "code" in row.success and "json" in row.success:
            row.p_value = fisher_exact_p(*row.success["code"], *row.success["json"])
        tasks.append(row)
    return Report(meta, modes, tasks, _paired(results, tasks), source, accounting, warnings)


def _signature(r: EpisodeResult) -> str:
    """What makes two repeats the same episode (a deterministic model replays it exactly)."""
    return json.dumps([r.correct, r.answer, r.status, r.turns, r.model_calls, r.tokens_in, r.tokens_out,
                       r.tool_calls, r.errors], sort_keys=True, default=repr)


def _paired(results: Sequence[EpisodeResult], tasks: Sequence[TaskRow]) -> dict[str, Any]:
    """The task-level test (primary), the episode-level McNemar (reference only), identical repeats."""
    rates = {t.task_id: (t.success["code"][0] / t.success["code"][1], t.success["json"][0] / t.success["json"][1])
             for t in tasks if "code" in t.success and "json" in t.success}
    paired = task_level_test(rates)
    code = {(r.task_id, r.repeat): r.correct for r in results if r.mode == "code"}
    json_ = {(r.task_id, r.repeat): r.correct for r in results if r.mode == "json"}
    pairs = [(code[k], json_[k]) for k in sorted(code.keys() & json_.keys())]
    both = sum(a and b for a, b in pairs)
    only_code = sum(a and not b for a, b in pairs)
    only_json = sum(b and not a for a, b in pairs)
    paired["episode_level"] = {"pairs": len(pairs), "both": both, "only_code": only_code, "only_json": only_json,
                               "neither": len(pairs) - both - only_code - only_json,
                               "mcnemar_p": mcnemar_p(only_code, only_json),
                               "note": "repeats of a task are not independent; for reference only"}
    cells = [(t.task_id, m) for t in tasks for m in t.success if t.success[m][1] > 1]
    paired["identical_repeats"] = {"cells": sum(len(t.identical_repeats) for t in tasks), "of": len(cells)}
    return paired
