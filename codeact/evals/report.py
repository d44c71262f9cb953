"""``codeact report DIR``: numbers computed from ``DIR/results.jsonl``, written as Markdown, HTML,
``summary.json`` and PNG plots (matplotlib, optional extra ``plots``).

Per mode: success rate with a 95% Wilson interval, mean turns / model calls / tokens in and out /
tool calls / wall time per episode, tokens per success, and error totals by layer. Per task: code
vs JSON side by side with Fisher's exact test. The primary comparison has the task as its unit
(see :mod:`.stats`); the pooled episode-level McNemar test is kept for reference only.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import asdict
from pathlib import Path

from ._html import render_html
from ._sections import episodes_table, intro, mode_table, notes, paired_text, task_table
from ._summary import LAYERS, ModeStats, Report, TaskRow, summarize
from .results_store import load_failures, load_run
from .stats import mcnemar_p, wilson

__all__ = ["LAYERS", "ModeStats", "Report", "TaskRow", "episodes_table", "mcnemar_p", "mode_table", "summarize",
           "task_table", "wilson", "write_report"]

PLOTS = ("success_by_mode.png", "turns_distribution.png", "tokens_per_success.png")


def _md_table(header: list[str], rows: list[list[str]]) -> str:
    lines = ["| " + " | ".join(header) + " |", "|" + "|".join("---" for _ in header) + "|"]
    lines += ["| " + " | ".join(r) + " |" for r in rows]
    return "\n".join(lines)


def render_markdown(report: Report, plots: Sequence[str]) -> str:
    n = sum(s.episodes for s in report.modes)
    parts = [f"# Experiment report: {report.meta.suite if report.meta else 'results'}", "", intro(report, n), "",
             *(f"{note}\n" for note in notes(report)),
             "## Episodes", "", _md_table(*episodes_table(report)), "",
             "## Per mode", "",
             "Means per compared episode; errors are totals by layer (syntax, runtime, tool, budget, model, check). "
             "Turns are replies that asked for an action; model calls also count the final answer.", "",
             _md_table(*mode_table(report)), "", "## Code vs JSON, per task", "", _md_table(*task_table(report)), "",
             paired_text(report.paired), ""]
    if plots:
        parts += ["## Plots", ""] + [f"![{Path(p).stem.replace('_', ' ')}]({p})" for p in plots] + [""]
    return "\n".join(parts)


def write_report(out_dir: str | Path, *, plots: bool = True) -> dict[str, Path]:
    """Write ``report.md``, ``report.html``, ``summary.json`` and the PNGs into ``out_dir``."""
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
