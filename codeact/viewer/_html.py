"""Timelines → one self-contained HTML page. Every piece of trace text is escaped here.

Nothing from a trace reaches the page unescaped: text goes through :func:`html.escape` (quotes
included, for attributes), element ids are counters made here (never a trace's call id), and the
inline script only toggles elements; it never builds HTML from strings.
"""

from __future__ import annotations

import base64
import html
import json
import re
from collections.abc import Iterable, Sequence
from typing import Any

from ._assets import SCRIPT, STYLE
from ._timeline import CallSpan, EpisodeTimeline, Span

__all__ = ["page", "render_episode", "table"]


def _e(text: Any) -> str:
    return html.escape(str(text), quote=True)


class _Ids:
    """Unique element ids for one page."""

    def __init__(self) -> None:
        self.n = 0

    def __call__(self, prefix: str) -> str:
        self.n += 1
        return f"{prefix}-{self.n}"


def _clip(text: str, limit: int) -> str:
    if len(text) <= limit:
        return text
    return f"{text[:limit]}\n… [{len(text) - limit} more characters not shown]"


def _json(value: Any, limit: int) -> str:
    text = value if isinstance(value, str) else json.dumps(value, indent=2, ensure_ascii=False, default=str)
    return _clip(text, limit)


def _pre(cls: str, label: str, text: str, limit: int) -> str:
    if not text:
        return ""
    return f'<div class="label">{_e(label)}</div><pre class="{cls}">{_e(_clip(text, limit))}</pre>'


def _ms(seconds: float) -> str:
    return f"{seconds * 1000:.0f} ms" if seconds < 10 else f"{seconds:.1f} s"


def table(header: Sequence[str], rows: Iterable[Sequence[str]]) -> str:
    head = "".join(f"<th>{_e(h)}</th>" for h in header)
    body = "".join("<tr>" + "".join(f"<td>{_e(c)}</td>" for c in row) + "</tr>" for row in rows)
    return f"<table><thead><tr>{head}</tr></thead><tbody>{body}</tbody></table>"


def _bar(cls: str, start: float, duration: float, scale: float, text: str, title: str, target: str) -> str:
    width = min(max(100 * duration / scale, 0.5), 100.0)
    left = min(max(100 * start / scale, 0.0), 100 - width)  # a bar never leaves its track
    return (f'<button type="button" class="bar {cls}" style="left:{left:.3f}%;width:{width:.3f}%" '
            f'title="{_e(title)}" data-target="{target}">{_e(text)}</button>')


def _stack(calls: list[tuple[CallSpan, str]]) -> list[list[tuple[CallSpan, str]]]:
    """Calls in rows so that overlapping calls sit on different rows (greedy, by start)."""
    rows: list[list[tuple[CallSpan, str]]] = []
    ends: list[float] = []
    for item in sorted(calls, key=lambda c: c[0].start):
        call = item[0]
        for i, end in enumerate(ends):
            if call.start >= end:
                rows[i].append(item)
                ends[i] = call.start + call.duration
                break
        else:
            rows.append([item])
            ends.append(call.start + call.duration)
    return rows


def _axis(scale: float) -> str:
    ticks = []
    for i in range(6):
        t = scale * i / 5
        shift = {0: ";transform:none", 5: ";transform:translateX(-100%)"}.get(i, "")
        label = f"{t:.2f} s" if scale < 10 else f"{t:.0f} s"
        ticks.append(f'<span style="left:{100 * i / 5:.1f}%{shift}">{_e(label)}</span>')
    return f'<div class="axis">{"".join(ticks)}</div>'


def _decision(call: CallSpan) -> str:
    """`` · refused by policy`` and the like, for a call a data-flow policy judged otherwise than allow."""
    flow = (call.flow or {}).get("flow")
    decision = flow.get("decision") if isinstance(flow, dict) else None
    if decision in ("deny", "refused"):
        return " · refused by policy"
    return f" · policy: {decision}" if decision in ("approved", "audit") else ""


def _call_title(call: CallSpan) -> str:
    status = "ok" if call.ok else f"error: {(call.error or {}).get('code', '?')}"
    extra = (" · cached" if call.cached else "") + _decision(call)
    when = "start estimated" if call.estimated else f"start {call.start:.3f} s"
    return f"{call.name} · {status}{extra} · {when} · {call.duration * 1000:.1f} ms"


def _call_class(call: CallSpan) -> str:
    cls = "call" + ("" if call.ok else " error") + (" cached" if call.cached else "")
    return cls + (" estimated" if call.estimated else "")


def _tokens(info: dict[str, Any], sep: str = "→", unit: str = " tok") -> str:
    """A model call's tokens; ``n/a`` when the provider reported no usage (unknown, not 0)."""
    if info.get("tokens_in") is None:
        return "tokens n/a"
    return f"{info.get('tokens_in', 0)}{sep}{info.get('tokens_out', 0)}{unit}"


def _timeline(tl: EpisodeTimeline, scale: float, steps: list[str], calls: list[tuple[CallSpan, str]]) -> str:
    model_bars, exec_bars = [], []
    for span, step_id in zip(tl.spans, steps, strict=True):
        if span.kind == "sandbox":
            exec_bars.append(_bar("sandbox", span.start, span.duration, scale, _ms(span.duration),
                                  f"{span.label} · {_ms(span.duration)}", step_id))
        elif span.kind == "model":
            tokens = _tokens(span.info)
            title = f"{span.label} · {_ms(span.duration)} · {tokens}" + ("" if span.ok else " · error")
            model_bars.append(_bar("model" + ("" if span.ok else " error"), span.start, span.duration, scale,
                                   tokens, title, step_id))
        else:
            status = span.info.get("termination") or ("ok" if span.ok else "error")
            title = f"{span.label} · {_ms(span.duration)} · {status}"
            exec_bars.append(_bar("exec" + ("" if span.ok else " error"), span.start, span.duration, scale,
                                  _ms(span.duration), title, step_id))
    call_rows = []
    for row in _stack(calls) or [[]]:
        bars = "".join(_bar(_call_class(c), c.start, c.duration, scale, c.name, _call_title(c), target)
                       for c, target in row)
        call_rows.append(f'<div class="track">{bars}</div>')
    lanes = [("model", f'<div class="track">{"".join(model_bars)}</div>'),
             ("actions", f'<div class="track">{"".join(exec_bars)}</div>'),
             ("tool calls", "".join(call_rows))]
    body = "".join(f'<div class="lane" data-lane="{_e(name)}"><span class="lane-label">{_e(name)}</span>'
                   f'<div class="tracks">{tracks}</div></div>' for name, tracks in lanes)
    return f'<div class="timeline">{_axis(scale)}{body}</div>'


def _call_details(call: CallSpan, element_id: str, limit: int) -> str:
    cls = "call" + ("" if call.ok else " error")
    status = "ok" if call.ok else f"error: {(call.error or {}).get('code', '?')}"
    summary = (f"<b>{_e(call.name)}</b> · {_e(status)}{' · cached' if call.cached else ''}{_e(_decision(call))} · "
               f"{call.duration * 1000:.1f} ms <span class='muted'>{_e(call.id)}</span>")
    body = _pre("args", "arguments", _json(call.arguments, limit), limit)
    if call.ok:
        body += _pre("result", "result", _json(call.result, limit), limit)
    else:
        body += _pre("error", "error", _json(call.error, limit), limit)
    if call.flow:  # the labels of the arguments, the control flow and the result; the decision and why
        body += _pre("labels", "data-flow labels", _json(call.flow, limit), limit)
    return f'<details class="{cls}" id="{element_id}"><summary>{summary}</summary>{body}</details>'


def _egress(records: list[dict[str, Any]]) -> str:
    """The run's requests through the egress broker, one line each: allowed or refused, and why."""
    lines = []
    for r in records:
        verdict = "ok" if r.get("allowed") else "refused"
        what = f"{r.get('method')} {r.get('host')}:{r.get('port')}{r.get('path') or ''}"
        size = f"{r.get('bytes_out', 0)}→{r.get('bytes_in', 0)} B"
        why = f" · {r['reason']}" if r.get("reason") else ""
        cls = "egress" if r.get("allowed") else "egress error"
        lines.append(f'<li class="{cls}">{_e(verdict)} · {_e(what)} · {_e(str(r.get("status")))} · {size} · '
                     f'{float(r.get("duration_ms") or 0):.0f} ms{_e(why)}</li>')
    return f'<ul class="egress">{"".join(lines)}</ul>'


_BASE64 = re.compile(r"[A-Za-z0-9+/]*={0,2}")


def _output(bundle: dict[str, Any], limit: int) -> str:
    """One rich output. The code that made it is hostile: a PNG, JPEG or SVG goes in an ``<img>``
    as a data URI (an image runs no script; base64 checked), HTML only in an iframe sandboxed with
    no permissions at all (no script, no same-origin, no forms), anything else as escaped text."""
    for mime in ("image/png", "image/jpeg"):
        data = bundle.get(mime)
        if isinstance(data, str) and len(data) <= limit * 100 and _BASE64.fullmatch(data):
            return f'<img class="output" alt="{_e(mime)} output" src="data:{mime};base64,{data}">'
    svg, markup = bundle.get("image/svg+xml"), bundle.get("text/html")
    if isinstance(svg, str):
        data = base64.b64encode(svg.encode()).decode()
        return f'<img class="output" alt="svg output" src="data:image/svg+xml;base64,{data}">'
    if isinstance(markup, str):
        srcdoc = _e(_clip(markup, limit * 10))
        return f'<iframe class="output" sandbox="" title="HTML output" srcdoc="{srcdoc}"></iframe>'
    text = bundle.get("text/markdown") or bundle.get("application/json") or bundle.get("text/plain") or ""
    return _pre("output", "output", str(text), limit)


def _step(span: Span, element_id: str, call_ids: list[str], limit: int) -> str:
    info = span.info
    if span.kind == "sandbox":
        head = f"<b>turn {span.turn} · {_e(span.label)}</b> · {_ms(span.duration)}"
        body = ('<p class="note">Starting the sandbox (container and kernel) before the first code action; '
                "the action's own bar starts after it.</p>")
    elif span.kind == "model":
        tokens = _tokens(info, " in → ", " out tokens")
        head = f"<b>turn {span.turn} · {_e(span.label)}</b> · {_ms(span.duration)} · {tokens}"
        if info.get("stop_reason"):
            head += f" · {_e(info['stop_reason'])}"
        body = _pre("error" if not span.ok else "text", "reply" if span.ok else "error", info.get("text", ""), limit)
        for call in info.get("tool_calls", []):
            body += _pre("args", f"asks for {call['name']}", _json(call.get("arguments"), limit), limit)
    else:
        status = info.get("termination") or ("ok" if span.ok else "error")
        head = f"<b>turn {span.turn} · {_e(span.label)}</b> · {_ms(span.duration)} · {_e(status)}"
        body = _pre("code", "code", info.get("code", ""), limit)
        body += _pre("stdout", "stdout", info.get("stdout", ""), limit)
        body += _pre("stderr", "stderr", info.get("stderr", ""), limit)
        error = info.get("error")
        if error:
            text = error.get("traceback") or f"{error.get('type')}: {error.get('message')}"
            body += _pre("error", "error", str(text), limit)
        if info.get("reason"):
            body += f'<p class="note">{_e(info["reason"])}</p>'
        if span.calls:
            body += '<div class="label">tool calls</div>'
            body += "".join(_call_details(c, i, limit) for c, i in zip(span.calls, call_ids, strict=True))
        if info.get("egress"):
            body += '<div class="label">egress</div>' + _egress(info["egress"])
        if info.get("outputs"):
            body += '<div class="label">outputs</div>' + "".join(_output(o, limit) for o in info["outputs"])
        if info.get("observation"):
            body += _pre("observation", "observation fed back to the model", info["observation"], limit)
    cls = f"step {span.kind}" + ("" if span.ok else " error")
    return f'<li class="{cls}" id="{element_id}"><div class="step-head">{head}</div>{body}</li>'


def _prompt(tl: EpisodeTimeline, limit: int) -> str:
    """What the model was shown before the conversation: folded, it is long."""
    parts = []
    for cls, label, text in (("system", "system prompt", tl.system),
                             ("stubs", "tool stubs (the model's view)", tl.stubs),
                             ("tools", "tool definitions", _json(tl.tools, limit) if tl.tools else "")):
        if text:
            parts.append(f'<details class="prompt {cls}"><summary>{_e(label)} · {len(text)} characters</summary>'
                         f'<pre class="{cls}">{_e(_clip(text, limit))}</pre></details>')
    return "".join(parts)


def render_episode(tl: EpisodeTimeline, ids: _Ids, *, scale: float | None = None, limit: int = 20_000) -> str:
    """One ``<section class="episode">``: header, timeline lanes, then every step in order."""
    scale = max(scale or tl.total, 1e-3)
    step_ids = [ids("step") for _ in tl.spans]
    call_ids = [[ids("call") for _ in span.calls] for span in tl.spans]
    calls = [pair for span, cids in zip(tl.spans, call_ids, strict=True)
             for pair in zip(span.calls, cids, strict=True)]
    status = "answered" if tl.status == "answered" else "failed" if tl.status in ("error", "incomplete") else ""
    grade = ""
    if tl.correct is not None:
        status = status if tl.correct else "failed"
        grade = f' <span class="badge {"ok" if tl.correct else "err"}">{"correct" if tl.correct else "wrong"}</span>'
    model_calls = sum(s.kind == "model" for s in tl.spans)
    tokens = f"{tl.tokens_in}→{tl.tokens_out}"
    if tl.usage_unknown:
        known = sum(s.kind == "model" and s.ok for s in tl.spans) - tl.usage_unknown
        tokens = f"{tokens} (+ {tl.usage_unknown} call(s) n/a)" if known > 0 else "n/a"
    facts = [("turns", str(tl.turns)), ("model calls", str(model_calls)), ("tokens", tokens),
             ("tool calls", f"{tl.tool_calls} ({tl.tool_errors} failed)"), ("wall", f"{tl.total:.2f} s")]
    if tl.stop_reason:
        facts.append(("stop", tl.stop_reason))
    if tl.answer is not None:
        facts.append(("answer", _clip(json.dumps(tl.answer, ensure_ascii=False, default=str), 300)))
    facts_html = "".join(f"<span>{_e(k)}: <b>{_e(v)}</b></span>" for k, v in facts)
    notes = "".join(f'<p class="note">{t:.2f} s · {_e(text)}</p>' for t, text in tl.notes)
    notes = _prompt(tl, limit) + notes
    steps = "".join(_step(s, i, c, limit) for s, i, c in zip(tl.spans, step_ids, call_ids, strict=True))
    source = f' <span class="muted">{_e(tl.source)}</span>' if tl.source else ""
    return (f'<section class="episode {status}" data-mode="{_e(tl.mode)}" data-status="{_e(tl.status)}">'
            f'<h3><span class="badge {_e(tl.mode)}">{_e(tl.mode or "?")}</span> '
            f'<span class="badge {_e(tl.status)}">{_e(tl.status)}</span>{grade} {_e(tl.model)}{source}</h3>'
            f'<div class="task-text">{_e(_clip(tl.task, 2000))}</div><div class="facts">{facts_html}</div>'
            f'{_timeline(tl, scale, step_ids, calls)}{notes}<ol class="steps">{steps}</ol></section>')


def page(title: str, body: str) -> str:
    """The whole document: inline style and script, nothing fetched."""
    return ("<!doctype html>\n<html lang='en'><head><meta charset='utf-8'>"
            "<meta name='viewport' content='width=device-width, initial-scale=1'>"
            "<meta http-equiv='Content-Security-Policy' content=\"default-src 'none'; "
            "style-src 'unsafe-inline'; script-src 'unsafe-inline'; img-src data:\">"
            f"<title>{_e(title)}</title><style>{STYLE}</style></head><body><main>{body}</main>"
            f"<script>{SCRIPT}</script></body></html>\n")
