"""The report's PNGs with matplotlib's object API (no pyplot: no global state, thread-safe).

Importing this module needs matplotlib (the optional extra ``plots``).
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.figure import Figure
from matplotlib.patches import Patch

if TYPE_CHECKING:
    from ._summary import Report

__all__ = ["draw_all"]

_COLORS = {"code": "#3b7dd8", "json": "#e0883a"}
_DEFAULT = "#7a7a7a"


def _figure() -> Figure:
    fig = Figure(figsize=(6.4, 4.0), dpi=120)
    FigureCanvasAgg(fig)
    return fig


def _title(report: Report, text: str) -> str:
    meta = report.meta
    return f"{text}\n{meta.suite} suite · {meta.model}" if meta else text


def _footnote(report: Report, tokens: bool = False) -> str:
    """What the figure's numbers rest on: scripted replies, where tokens come from, the comparison set."""
    notes = []
    if report.meta is not None and report.meta.model.startswith("scripted"):
        notes.append("scripted reference replies, not a real model")
    if tokens:
        notes.append(f"tokens: {report.token_source}")
    notes.append("episodes finished in both modes")
    return " · ".join(notes)


def _save(fig: Figure, path: Path, footnote: str) -> Path:
    fig.tight_layout(rect=(0, 0.05, 1, 1))
    fig.text(0.01, 0.012, footnote, fontsize=7, color="#555")
    fig.savefig(path, format="png")
    return path


def success_by_mode(report: Report, path: Path) -> Path:
    fig = _figure()
    ax = fig.add_subplot()
    modes = [s.mode for s in report.modes]
    rates = [100 * s.success_rate for s in report.modes]
    low = [max(0.0, 100 * (s.success_rate - s.ci_low)) for s in report.modes]
    high = [max(0.0, 100 * (s.ci_high - s.success_rate)) for s in report.modes]
    bars = ax.bar(modes, rates, yerr=[low, high], capsize=8,
                  color=[_COLORS.get(m, _DEFAULT) for m in modes], edgecolor="#333", linewidth=0.6)
    for bar, s in zip(bars, report.modes, strict=True):
        inside = s.success_rate >= 0.12  # a low bar has no room: the label goes above it, in dark
        ax.annotate(f"{s.successes}/{s.episodes}", (bar.get_x() + bar.get_width() / 2,
                                                    2 if inside else 100 * s.ci_high + 2),
                    ha="center", va="bottom", color="white" if inside else "#222", fontweight="bold")
    ax.set_ylim(0, 105)
    ax.set_ylabel("success rate (%)")
    ax.set_title(_title(report, "Success by mode (95% Wilson interval)"))
    ax.grid(axis="y", alpha=0.3)
    return _save(fig, path, _footnote(report))


def turns_distribution(report: Report, path: Path) -> Path:
    fig = _figure()
    ax = fig.add_subplot()
    turns = sorted({t for s in report.modes for t in s.turns_hist})
    width = 0.8 / max(1, len(report.modes))
    for i, s in enumerate(report.modes):
        xs = [t + (i - (len(report.modes) - 1) / 2) * width for t in turns]
        ax.bar(xs, [s.turns_hist.get(t, 0) for t in turns], width=width, label=s.mode,
               color=_COLORS.get(s.mode, _DEFAULT), edgecolor="#333", linewidth=0.6)
    ax.set_xticks(turns)
    ax.set_xlabel("turns per episode")
    ax.set_ylabel("episodes")
    ax.set_title(_title(report, "Turns per episode"))
    ax.legend()
    ax.grid(axis="y", alpha=0.3)
    return _save(fig, path, _footnote(report))


def tokens_per_success(report: Report, path: Path) -> Path:
    fig = _figure()
    ax = fig.add_subplot()
    modes = [s.mode for s in report.modes]
    values = [s.tokens_per_success or 0.0 for s in report.modes]
    share_in = [s.tokens_in / (s.tokens_in + s.tokens_out)
                if s.tokens_in is not None and s.tokens_out is not None and s.tokens_in + s.tokens_out else 0.0
                for s in report.modes]
    tin = [v * f for v, f in zip(values, share_in, strict=True)]
    tout = [v - i for v, i in zip(values, tin, strict=True)]
    colors = [_COLORS.get(m, _DEFAULT) for m in modes]
    ax.bar(modes, tin, color=colors, edgecolor="#333", linewidth=0.6)
    ax.bar(modes, tout, bottom=tin, color=colors, alpha=0.45, edgecolor="#333", linewidth=0.6, hatch="//")
    for x, (v, s) in enumerate(zip(values, report.modes, strict=True)):
        label = f"{v:,.0f}" if v else ("unknown" if s.usage_unknown_calls else "no success")
        ax.annotate(label, (x, v), ha="center", va="bottom")
    ax.set_ylabel("tokens per correct answer")
    ax.set_title(_title(report, "Tokens per success (all tokens / correct episodes)"))
    ax.legend(handles=[Patch(facecolor="#999", edgecolor="#333", label="input"),
                       Patch(facecolor="#999", alpha=0.45, edgecolor="#333", hatch="//", label="output")])
    ax.grid(axis="y", alpha=0.3)
    return _save(fig, path, _footnote(report, tokens=True))


def draw_all(report: Report, out_dir: Path) -> list[Path]:
    """Write the three PNGs; returns their paths."""
    return [success_by_mode(report, out_dir / "success_by_mode.png"),
            turns_distribution(report, out_dir / "turns_distribution.png"),
            tokens_per_success(report, out_dir / "tokens_per_success.png")]
