"""``codeact report DIR``: numbers computed from ``DIR/results.jsonl``, written as Markdown, HTML,
``summary.json`` and PNG plots (matplotlib, optional extra ``plots``).

Per mode: success rate with a 95% Wilson interval, mean turns / model calls / tokens in and out /
tool calls / wall time per episode, tokens per success, and error totals by layer. Per task: code
vs JSON side by side with Fisher's exact test. The primary comparison has the task as its unit
(see :mod:`.stats`); the pooled episode-level McNemar test is kept for reference only.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from ._accounting import Accounting, account, token_source
from .results_store import EpisodeResult, RunMeta, load_failures, load_run
from .stats import fisher_exact_p, mcnemar_p, task_level_test, wilson
from .suite import EpisodeKey

__all__ = ["LAYERS", "ModeStats", "Report", "TaskRow", "episodes_table", "mcnemar_p", "mode_table", "summarize",
           "task_table", "wilson", "write_report"]

LAYERS = ("syntax", "runtime", "tool", "budget", "model")
PLOTS = ("success_by_mode.png", "turns_distribution.png", "tokens_per_success.png")


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
    #: Where the mode's planned episodes went (see :mod:`._accounting`).
    planned: int = 0
    finished: int = 0
    harness_failures: int = 0
    provider_errors: int = 0
    incomplete: int = 0
    error_episodes: int = 0
    not_run: int = 0
    usage_unknown_calls: int = 0


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


# -- rendering -----------------------------------------------------------------------------------

def _pct(x: float) -> str:
    return f"{100 * x:.1f}%"


def mode_table(report: Report) -> tuple[list[str], list[list[str]]]:
    """The per-mode table (header, rows), shared by Markdown and HTML."""
    header = ["mode", "episodes", "success", "95% CI (Wilson)", "turns", "model calls", "tokens in", "tokens out",
              "tool calls", "wall s", "tokens / success", *(f"errors: {layer}" for layer in LAYERS)]
    rows = []
    for s in report.modes:
        unknown = "unknown" if s.usage_unknown_calls else "–"
        tps = f"{s.tokens_per_success:.1f}" if s.tokens_per_success is not None else unknown
        tin = f"{s.tokens_in:.1f}" if s.tokens_in is not None else "unknown"
        tout = f"{s.tokens_out:.1f}" if s.tokens_out is not None else "unknown"
        rows.append([s.mode, str(s.episodes), f"{_pct(s.success_rate)} ({s.successes}/{s.episodes})",
                     f"[{_pct(s.ci_low)}, {_pct(s.ci_high)}]", f"{s.turns:.2f}", f"{s.model_calls:.2f}",
                     tin, tout, f"{s.tool_calls:.2f}", f"{s.wall_s:.3f}", tps,
                     *(str(s.errors.get(layer, 0)) for layer in LAYERS)])
    return header, rows


def episodes_table(report: Report) -> tuple[list[str], list[list[str]]]:
    """Where each mode's planned episodes went (header, rows)."""
    header = ["mode", "planned", "finished", "compared", "answered", "incomplete", "errors", "harness failures",
              "provider errors (retryable)", "not run"]
    rows = []
    for s in report.modes:
        answered = s.status.get("answered", 0)
        rows.append([s.mode, str(s.planned), str(s.finished), str(s.episodes), str(answered), str(s.incomplete),
                     str(s.error_episodes), str(s.harness_failures), str(s.provider_errors), str(s.not_run)])
    return header, rows


def _notes(report: Report) -> list[str]:
    """The lines saying how to read the numbers: unit of analysis, token source, warnings."""
    notes = ["Unit of analysis: the task (each mode's success rate per task over its repeats); per-mode rates "
             "and means are over the compared episodes: those whose task and repeat finished in both modes.",
             f"Tokens: {report.token_source}."]
    notes += [f"Warning: {w}." for w in report.warnings]
    return notes


def task_table(report: Report) -> tuple[list[str], list[list[str]]]:
    modes = [s.mode for s in report.modes]
    header = ["task", *(f"{m} success" for m in modes), *(f"{m} turns" for m in modes),
              *(f"{m} tokens" for m in modes), "identical repeats"]
    paired = {"code", "json"} <= set(modes)
    if paired:
        header += ["code − json", "p (Fisher exact)"]
    rows = []
    for t in report.tasks:
        cells = [t.task_id]
        cells += [f"{t.success[m][0]}/{t.success[m][1]}" if m in t.success else "–" for m in modes]
        cells += [f"{t.turns[m]:.1f}" if m in t.turns else "–" for m in modes]
        cells += [_tokens(t.tokens[m]) if m in t.tokens else "–" for m in modes]
        cells.append(", ".join(t.identical_repeats) or "–")
        if paired:
            if "code" in t.success and "json" in t.success:
                diff = t.success["code"][0] / t.success["code"][1] - t.success["json"][0] / t.success["json"][1]
                cells += [f"{diff:+.2f}", f"{t.p_value:.3f}" if t.p_value is not None else "–"]
            else:
                cells += ["–", "–"]
        rows.append(cells)
    return header, rows


def _tokens(value: float | None) -> str:
    return "unknown" if value is None else f"{value:.0f}"


def _md_table(header: list[str], rows: list[list[str]]) -> str:
    lines = ["| " + " | ".join(header) + " |", "|" + "|".join("---" for _ in header) + "|"]
    lines += ["| " + " | ".join(r) + " |" for r in rows]
    return "\n".join(lines)


def _intro(report: Report, n: int) -> str:
    m = report.meta
    if m is None:
        return f"{n} episodes."
    return (f"Suite **{m.suite}**, model **{m.model}**, modes {', '.join(m.modes)}, {m.repeats} repeat(s), "
            f"backend {m.backend or '?'}, engine {m.engine}; {n} compared episodes, {len(report.tasks)} tasks; "
            f"run fingerprint {m.fingerprint_id or '(none)'}.")


def _paired_text(p: dict[str, Any]) -> str:
    if not p["tasks"]:
        return "No task was run in both modes: no paired comparison."
    e = p["episode_level"]
    text = (f"Unit of analysis: the task ({p['tasks']} tasks run in both modes; each mode's success rate per task "
            f"over its repeats). Code better on {p['code_better']}, JSON better on {p['json_better']}, tied on "
            f"{p['ties']}; mean difference code − json {p['mean_difference']:+.3f} (95% CI "
            f"[{p['ci_low']:+.3f}, {p['ci_high']:+.3f}], {p['ci_method']}); exact sign test p = "
            f"{p['sign_test_p']:.3f}; exact Wilcoxon signed-rank p = {p['wilcoxon_p']:.3f}. "
            f"For reference only (repeats are not independent): {e['pairs']} episode pairs (same task and "
            f"repeat), only code {e['only_code']}, only JSON {e['only_json']}, McNemar p = {e['mcnemar_p']:.3f}.")
    same = p["identical_repeats"]
    if same["cells"]:
        text += (f" Warning: in {same['cells']} of {same['of']} task × mode cells every repeat was the same "
                 "episode (a deterministic model?): those repeats add no information.")
    return text


def render_markdown(report: Report, plots: Sequence[str]) -> str:
    n = sum(s.episodes for s in report.modes)
    parts = [f"# Experiment report: {report.meta.suite if report.meta else 'results'}", "", _intro(report, n), "",
             *(f"{note}\n" for note in _notes(report)),
             "## Episodes", "", _md_table(*episodes_table(report)), "",
             "## Per mode", "",
             "Means per compared episode; errors are totals by layer (syntax, runtime, tool, budget, model). "
             "Turns are replies that asked for an action; model calls also count the final answer.", "",
             _md_table(*mode_table(report)), "", "## Code vs JSON, per task", "", _md_table(*task_table(report)), "",
             _paired_text(report.paired), ""]
    if plots:
        parts += ["## Plots", ""] + [f"![{Path(p).stem.replace('_', ' ')}]({p})" for p in plots] + [""]
    return "\n".join(parts)


def write_report(out_dir: str | Path, *, plots: bool = True) -> dict[str, Path]:
    """Write ``report.md``, ``report.html``, ``summary.json`` and the PNGs into ``out_dir``."""
    from ._html import render_html

    out = Path(out_dir)
    meta, results = load_run(out)
    if not results:
        raise ValueError(f"{out}: no results.jsonl with finished episodes")
    report = summarize(results, meta, load_failures(out))
    written: dict[str, Path] = {}
    pngs: list[str] = []
    if plots:
        try:
            from ._plots import draw_all
        except ImportError:  # matplotlib is the optional extra ``plots``
            pass
        else:
            pngs = [p.name for p in draw_all(report, out)]
            written.update({name: out / name for name in pngs})
    written["markdown"] = out / "report.md"
    written["markdown"].write_text(render_markdown(report, pngs), encoding="utf-8")
    written["html"] = out / "report.html"
    written["html"].write_text(render_html(report, out, pngs), encoding="utf-8")
    written["summary"] = out / "summary.json"
    summary = {"meta": {**(meta.model_dump() if meta else {}), "token_source": report.token_source,
                        "unit_of_analysis": "task", "warnings": report.warnings},
               "modes": [asdict(s) for s in report.modes],
               "tasks": [asdict(t) for t in report.tasks], "paired": report.paired}
    written["summary"].write_text(json.dumps(summary, indent=2) + "\n", encoding="utf-8")
    return written
