"""``codeact report DIR``: numbers computed from ``DIR/results.jsonl``, written as Markdown, HTML,
``summary.json`` and PNG plots (matplotlib, optional extra ``plots``).

Per mode: success rate with a 95% Wilson interval, mean turns / model calls / tokens in and out /
tool calls / wall time per episode, tokens per success, and error totals by layer. Per task: code
vs JSON side by side; paired episodes (same task and repeat) give an exact McNemar test.
"""

from __future__ import annotations

import json
import math
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from .results_store import EpisodeResult, RunMeta, load_run

__all__ = ["LAYERS", "ModeStats", "Report", "TaskRow", "mcnemar_p", "summarize", "wilson", "write_report"]

LAYERS = ("syntax", "runtime", "tool", "budget", "model")
PLOTS = ("success_by_mode.png", "turns_distribution.png", "tokens_per_success.png")


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


def mcnemar_p(only_a: int, only_b: int) -> float:
    """Exact two-sided McNemar p-value from the discordant pair counts."""
    n = only_a + only_b
    if n == 0:
        return 1.0
    tail = sum(math.comb(n, i) for i in range(min(only_a, only_b) + 1)) / float(2**n)
    return min(1.0, 2 * tail)


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
    tokens_in: float
    tokens_out: float
    tool_calls: float
    wall_s: float
    tokens_per_success: float | None
    errors: dict[str, int]
    status: dict[str, int]
    turns_hist: dict[int, int]


@dataclass
class TaskRow:
    task_id: str
    success: dict[str, tuple[int, int]] = field(default_factory=dict)
    turns: dict[str, float] = field(default_factory=dict)
    tokens: dict[str, float] = field(default_factory=dict)


@dataclass
class Report:
    meta: RunMeta | None
    modes: list[ModeStats]
    tasks: list[TaskRow]
    paired: dict[str, Any]


def _mode_stats(mode: str, rows: list[EpisodeResult]) -> ModeStats:
    n = len(rows)
    ok = sum(r.correct for r in rows)
    low, high = wilson(ok, n)
    tokens = sum(r.tokens_in + r.tokens_out for r in rows)
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
        tokens_in=_mean([r.tokens_in for r in rows]), tokens_out=_mean([r.tokens_out for r in rows]),
        tool_calls=_mean([r.tool_calls for r in rows]), wall_s=_mean([r.wall_s for r in rows]),
        tokens_per_success=tokens / ok if ok else None, errors=errors, status=status,
        turns_hist=dict(sorted(hist.items())),
    )


def summarize(results: Sequence[EpisodeResult], meta: RunMeta | None = None) -> Report:
    """Every number of the report, from the results alone."""
    order = list(meta.modes) if meta else []
    order += sorted({r.mode for r in results} - set(order))
    by_mode = {m: [r for r in results if r.mode == m] for m in order}
    modes = [_mode_stats(m, rows) for m, rows in by_mode.items() if rows]
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
                row.tokens[m] = _mean([r.tokens_in + r.tokens_out for r in mine])
        tasks.append(row)
    return Report(meta, modes, tasks, _paired(results))


def _paired(results: Sequence[EpisodeResult]) -> dict[str, Any]:
    code = {(r.task_id, r.repeat): r.correct for r in results if r.mode == "code"}
    json_ = {(r.task_id, r.repeat): r.correct for r in results if r.mode == "json"}
    pairs = [(code[k], json_[k]) for k in sorted(code.keys() & json_.keys())]
    both = sum(a and b for a, b in pairs)
    only_code = sum(a and not b for a, b in pairs)
    only_json = sum(b and not a for a, b in pairs)
    return {"pairs": len(pairs), "both": both, "only_code": only_code, "only_json": only_json,
            "neither": len(pairs) - both - only_code - only_json, "mcnemar_p": mcnemar_p(only_code, only_json)}


# -- rendering -----------------------------------------------------------------------------------

def _pct(x: float) -> str:
    return f"{100 * x:.1f}%"


def mode_table(report: Report) -> tuple[list[str], list[list[str]]]:
    """The per-mode table (header, rows), shared by Markdown and HTML."""
    header = ["mode", "episodes", "success", "95% CI (Wilson)", "turns", "model calls", "tokens in", "tokens out",
              "tool calls", "wall s", "tokens / success", *(f"errors: {layer}" for layer in LAYERS)]
    rows = []
    for s in report.modes:
        tps = f"{s.tokens_per_success:.1f}" if s.tokens_per_success is not None else "–"
        rows.append([s.mode, str(s.episodes), f"{_pct(s.success_rate)} ({s.successes}/{s.episodes})",
                     f"[{_pct(s.ci_low)}, {_pct(s.ci_high)}]", f"{s.turns:.2f}", f"{s.model_calls:.2f}",
                     f"{s.tokens_in:.1f}", f"{s.tokens_out:.1f}", f"{s.tool_calls:.2f}", f"{s.wall_s:.3f}", tps,
                     *(str(s.errors.get(layer, 0)) for layer in LAYERS)])
    return header, rows


def task_table(report: Report) -> tuple[list[str], list[list[str]]]:
    modes = [s.mode for s in report.modes]
    header = ["task", *(f"{m} success" for m in modes), *(f"{m} turns" for m in modes),
              *(f"{m} tokens" for m in modes)]
    paired = {"code", "json"} <= set(modes)
    if paired:
        header.append("code − json")
    rows = []
    for t in report.tasks:
        cells = [t.task_id]
        cells += [f"{t.success[m][0]}/{t.success[m][1]}" if m in t.success else "–" for m in modes]
        cells += [f"{t.turns[m]:.1f}" if m in t.turns else "–" for m in modes]
        cells += [f"{t.tokens[m]:.0f}" if m in t.tokens else "–" for m in modes]
        if paired:
            if "code" in t.success and "json" in t.success:
                diff = t.success["code"][0] / t.success["code"][1] - t.success["json"][0] / t.success["json"][1]
                cells.append(f"{diff:+.2f}")
            else:
                cells.append("–")
        rows.append(cells)
    return header, rows


def _md_table(header: list[str], rows: list[list[str]]) -> str:
    lines = ["| " + " | ".join(header) + " |", "|" + "|".join("---" for _ in header) + "|"]
    lines += ["| " + " | ".join(r) + " |" for r in rows]
    return "\n".join(lines)


def _intro(report: Report, n: int) -> str:
    m = report.meta
    if m is None:
        return f"{n} episodes."
    return (f"Suite **{m.suite}**, model **{m.model}**, modes {', '.join(m.modes)}, {m.repeats} repeat(s), "
            f"backend {m.backend or '?'}, engine {m.engine}; {n} finished episodes, {len(report.tasks)} tasks.")


def _paired_text(p: dict[str, Any]) -> str:
    if not p["pairs"]:
        return "No paired code/json episodes."
    return (f"Paired episodes (same task and repeat): {p['pairs']} — both correct {p['both']}, only code "
            f"{p['only_code']}, only JSON {p['only_json']}, neither {p['neither']}; exact McNemar p = "
            f"{p['mcnemar_p']:.3f}.")


def render_markdown(report: Report, plots: Sequence[str]) -> str:
    n = sum(s.episodes for s in report.modes)
    parts = [f"# Experiment report: {report.meta.suite if report.meta else 'results'}", "", _intro(report, n), "",
             "## Per mode", "",
             "Means per episode; errors are totals by layer (syntax, runtime, tool, budget, model).", "",
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
    report = summarize(results, meta)
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
    summary = {"meta": meta.model_dump() if meta else None, "modes": [asdict(s) for s in report.modes],
               "tasks": [asdict(t) for t in report.tasks], "paired": report.paired}
    written["summary"].write_text(json.dumps(summary, indent=2) + "\n", encoding="utf-8")
    return written
