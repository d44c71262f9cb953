"""The trace viewer: an episode trace (JSONL), an OTLP JSON export of codeact's spans, or an eval
run directory → one self-contained HTML page.

    from codeact.viewer import write_view
    write_view("trace.jsonl", "trace.html")      # each episode as a timeline
    write_view("spans.otlp.json")                # each trace of an OTLP export as a timeline
    write_view("runs/weather")                   # an eval: code vs JSON per task, every episode

The page fetches nothing (inline style and script, a Content-Security-Policy that forbids loads)
and escapes every piece of trace text. It sits above ``agent`` (traces) and ``evals`` (run dirs).

Floor 6 of the layers (docs/architecture.md): imports ``evals`` and below, never ``cli``.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from ..agent.trace import load_trace
from ._html import _e as _esc
from ._html import _Ids, page, render_episode, table
from ._otlp import is_otlp, load_otlp
from ._timeline import CallSpan, EpisodeTimeline, Span, _num, build_timeline, flow_of

__all__ = ["CallSpan", "EpisodeTimeline", "Span", "build_timeline", "render_run", "render_trace", "write_view"]


def _split_episodes(events: list[dict[str, Any]]) -> list[list[dict[str, Any]]]:
    """A trace file normally holds one episode; concatenated traces hold several (split at starts)."""
    episodes: list[list[dict[str, Any]]] = []
    for event in events:
        if event.get("event") == "episode_start" or not episodes:
            episodes.append([])
        episodes[-1].append(event)
    return episodes


def render_trace(path: str | Path, *, limit: int = 20_000) -> str:
    """The page for one trace file (or OTLP JSON export). Raises ``ValueError`` if it is neither."""
    path = Path(path)
    if is_otlp(path):
        timelines = load_otlp(path)
    else:
        timelines = [build_timeline(evs, path.name) for evs in _split_episodes(load_trace(path))]
    if not timelines:
        raise ValueError(f"{path}: the trace holds no events")
    ids = _Ids()
    header = (f"<h1>Trace: {_esc(path.name)}</h1><p class='muted'>{len(timelines)} episode(s). "
              "Click a bar to see its step; bars: model calls, code actions / JSON tool turns, tool calls "
              "(green ok, red failed, grey cached).</p>")
    body = header + "".join(render_episode(tl, ids, limit=limit) for tl in timelines)
    return page(f"codeact trace · {path.name}", body)


def _trace_file(out_dir: Path, trace_path: str | None) -> Path | None:
    if not trace_path:
        return None
    path = Path(trace_path)
    # The run directory's own copy first: a directory moved or set aside (``--force-new``) keeps an
    # absolute path to where the run was, which may now hold another run's traces.
    for candidate in (out_dir / "traces" / path.name, out_dir / path, path):
        if candidate.is_file():
            return candidate
    return None


def render_run(out_dir: str | Path, *, limit: int = 20_000) -> str:
    """The page for an eval run directory: per-mode and per-task tables, then each task's episodes
    side by side (one column per mode, on a common time scale). Raises ``ValueError`` if the
    directory holds no results."""
    from ..evals.report import mode_table, summarize, task_table
    from ..evals.results_store import load_run

    out = Path(out_dir)
    meta, results = load_run(out)
    if not results:
        raise ValueError(f"{out}: no results.jsonl with episodes in this directory")
    report = summarize(results, meta)
    ids = _Ids()
    name = meta.suite if meta else out.name
    model = meta.model if meta else "?"
    parts = [f"<h1>Eval run: {_esc(name)}</h1>",
             f"<p class='muted'>{_esc(out)} · model {_esc(model)} · {len(results)} episode(s)</p>",
             "<h2>Per mode</h2>", table(*mode_table(report)), "<h2>Code vs JSON, per task</h2>",
             table(*task_table(report))]
    modes = [s.mode for s in report.modes]
    header, rows = task_table(report)
    by_task = {row[0]: row for row in rows}
    for task_id in sorted({r.task_id for r in results}):
        mine = sorted((r for r in results if r.task_id == task_id),
                      key=lambda r: (modes.index(r.mode) if r.mode in modes else len(modes), r.repeat))
        timelines = []
        for r in mine:
            trace = _trace_file(out, r.trace_path)
            tl = build_timeline(load_trace(trace), trace.name) if trace else _from_result(r.model_dump())
            tl.status = r.status if tl.status == "unfinished" else tl.status
            tl.correct = r.correct
            tl.source = f"repeat {r.repeat}" + (f" · {trace.name}" if trace else " · no trace")
            timelines.append(tl)
        scale = max((tl.total for tl in timelines), default=1.0)
        columns = []
        for mode in dict.fromkeys(tl.mode for tl in timelines):
            episodes = "".join(render_episode(tl, ids, scale=scale, limit=limit) for tl in timelines if tl.mode == mode)
            columns.append(f'<div class="column" data-mode="{_esc(mode)}">{episodes}</div>')
        parts.append(f'<section class="task" data-task="{_esc(task_id)}"><h2>{_esc(task_id)}</h2>'
                     f"{table(header, [by_task[task_id]]) if task_id in by_task else ''}"
                     f'<div class="pair">{"".join(columns)}</div></section>')
    return page(f"codeact eval · {name}", "".join(parts))


def _from_result(fields: dict[str, Any]) -> EpisodeTimeline:
    """A timeline without a trace: the episode's facts and its call records, no time axis."""
    tl = build_timeline([{"event": "episode_start", "t": 0, "task": "", "mode": fields.get("mode"),
                          "model": fields.get("model")},
                         {"event": "episode_end", "t": fields.get("wall_s", 0), "episode": fields}])
    span = Span("exec", 0, 0.0, tl.total, label="tool calls (no trace: times unknown)")
    span.calls = [CallSpan(id=str(r.get("id", "")), name=str(r.get("name", "?")), start=0.0,
                           duration=_num(r.get("duration_ms")) / 1000, ok=bool(r.get("ok")),
                           cached=bool(r.get("cached")), estimated=True, arguments=r.get("arguments"),
                           result=r.get("result"), error=r.get("error"), flow=flow_of(r))
                  for r in fields.get("records") or [] if isinstance(r, dict)]
    tl.spans.append(span)
    return tl


def write_view(source: str | Path, out: str | Path | None = None, *, limit: int = 20_000) -> Path:
    """Write the page for ``source`` (a trace file or a run directory) and return its path.

    Default output: ``TRACE.html`` beside a trace, ``DIR/view.html`` in a run directory.
    """
    source = Path(source)
    if source.is_dir():
        text = render_run(source, limit=limit)
        target = Path(out) if out is not None else source / "view.html"
    elif source.is_file():
        text = render_trace(source, limit=limit)
        target = Path(out) if out is not None else source.with_suffix(".html")
    else:
        raise ValueError(f"{source}: no such trace file or run directory")
    target.parent.mkdir(parents=True, exist_ok=True)
    target.write_text(text, encoding="utf-8")
    return target
