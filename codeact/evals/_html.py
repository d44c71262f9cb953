"""The HTML form of the report: one self-contained page (PNGs embedded as data URIs)."""

from __future__ import annotations

import base64
import html
from collections.abc import Sequence
from pathlib import Path

from ._sections import episodes_table, intro, mode_table, notes, paired_text, task_table
from ._summary import Report

__all__ = ["render_html"]

_STYLE = """
body { font: 14px/1.45 system-ui, sans-serif; margin: 2em auto; max-width: 1200px; color: #222; padding: 0 1em; }
table { border-collapse: collapse; margin: 1em 0; font-variant-numeric: tabular-nums; }
th, td { border: 1px solid #ccc; padding: 4px 8px; text-align: right; }
th:first-child, td:first-child { text-align: left; }
th { background: #f3f3f3; }
img { max-width: 100%; margin: 0.5em 1em 0.5em 0; border: 1px solid #eee; }
"""


def _table(header: list[str], rows: list[list[str]]) -> str:
    head = "".join(f"<th>{html.escape(h)}</th>" for h in header)
    body = "".join("<tr>" + "".join(f"<td>{html.escape(c)}</td>" for c in row) + "</tr>" for row in rows)
    return f"<table><thead><tr>{head}</tr></thead><tbody>{body}</tbody></table>"


def _img(out_dir: Path, name: str) -> str:
    data = base64.b64encode((out_dir / name).read_bytes()).decode()
    alt = html.escape(Path(name).stem.replace("_", " "))
    return f'<img alt="{alt}" title="{alt}" src="data:image/png;base64,{data}">'


def render_html(report: Report, out_dir: Path, plots: Sequence[str]) -> str:
    n = sum(s.episodes for s in report.modes)
    title = f"Experiment report: {report.meta.suite if report.meta else 'results'}"
    parts = [
        "<!doctype html><html><head><meta charset='utf-8'>",
        f"<title>{html.escape(title)}</title><style>{_STYLE}</style></head><body>",
        f"<h1>{html.escape(title)}</h1>",
        f"<p>{html.escape(intro(report, n).replace('**', ''))}</p>",
        *(f"<p>{html.escape(note)}</p>" for note in notes(report)),
        "<h2>Episodes</h2>",
        _table(*episodes_table(report)),
        "<h2>Per mode</h2>",
        "<p>Means per compared episode; errors are totals by layer (syntax, runtime, tool, budget, model, check). "
        "Turns are replies that asked for an action; model calls also count the final answer.</p>",
        _table(*mode_table(report)),
        "<h2>Code vs JSON, per task</h2>",
        _table(*task_table(report)),
        f"<p>{html.escape(paired_text(report.paired))}</p>",
    ]
    if plots:
        parts += ["<h2>Plots</h2>", "<div>", *(_img(out_dir, p) for p in plots), "</div>"]
    parts.append("</body></html>\n")
    return "\n".join(parts)
