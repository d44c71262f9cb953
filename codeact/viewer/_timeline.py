"""Trace events → an episode timeline: spans on one time axis (seconds since the episode began).

Reads the events :mod:`codeact.agent.trace` writes. Everything in a trace is untrusted text (the
model's code, tool results, stdout): this module only arranges it; the HTML layer escapes it.
Unknown events and missing fields are tolerated, so a trace cut short (a killed run) still shows.

Where a call started: the trace's ``call_started`` events when the run streamed them, else the
record's ``started_ms`` when it has one, else an estimate (calls laid end to end in arrival order
from the start of their action), marked ``estimated``.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any

__all__ = ["CallSpan", "EpisodeTimeline", "Span", "build_timeline"]


@dataclass
class CallSpan:
    """One tool call: where it sits on the axis and what it carried."""

    id: str
    name: str
    start: float
    duration: float
    ok: bool
    cached: bool = False
    estimated: bool = False
    arguments: Any = None
    result: Any = None
    error: dict[str, Any] | None = None
    #: Under a data-flow policy: the record's labels and decision (``labels``, ``pc_labels``,
    #: ``result_labels``, ``flow``), else None.
    flow: dict[str, Any] | None = None


_FLOW_KEYS = ("labels", "pc_labels", "result_labels", "flow")


def flow_of(record: dict[str, Any]) -> dict[str, Any] | None:
    """A call record's data-flow fields (``runtime.flow``), None when it has none."""
    found = {k: record[k] for k in _FLOW_KEYS if record.get(k) is not None}
    return found or None


@dataclass
class Span:
    """A model call (``kind="model"``), an action (``"exec"``: code run / JSON tool calls), or the
    sandbox's start before the first code action (``"sandbox"``)."""

    kind: str
    turn: int
    start: float
    duration: float
    ok: bool = True
    label: str = ""
    #: model: text, stop_reason, tokens_in, tokens_out, tool_calls; exec: code, stdout, stderr,
    #: error, termination, value, observation.
    info: dict[str, Any] = field(default_factory=dict)
    calls: list[CallSpan] = field(default_factory=list)


@dataclass
class EpisodeTimeline:
    """One episode: header facts, spans in time order, and notes (budget, cut replies)."""

    task: str = ""
    mode: str = ""
    model: str = ""
    status: str = "unfinished"
    stop_reason: str = ""
    answer: Any = None
    total: float = 0.0
    turns: int = 0
    tokens_in: int = 0
    tokens_out: int = 0
    tool_calls: int = 0
    tool_errors: int = 0
    spans: list[Span] = field(default_factory=list)
    notes: list[tuple[float, str]] = field(default_factory=list)
    source: str = ""
    #: An eval's grade of the answer (None outside an eval).
    correct: bool | None = None
    #: What the model was shown: the system prompt, the tool stubs (code mode), the tool definitions.
    system: str = ""
    stubs: str = ""
    tools: Any = None
    #: Model calls whose reply reported no token usage (their tokens are unknown, not 0).
    usage_unknown: int = 0

    @property
    def calls(self) -> list[CallSpan]:
        return [c for s in self.spans for c in s.calls]


def _num(value: Any, default: float = 0.0) -> float:
    """A trace's number as a finite float; anything else (text, an int past float's range such as
    ``10**400``, an infinity read from ``1e400``) is ``default``: a trace is data, never trusted."""
    if not isinstance(value, (int, float)) or isinstance(value, bool):
        return default
    try:
        number = float(value)
    except OverflowError:
        return default
    return number if math.isfinite(number) else default


def _int(value: Any) -> int:
    return int(value) if isinstance(value, int) and not isinstance(value, bool) else 0


def _dict(value: Any) -> dict[str, Any]:
    return value if isinstance(value, dict) else {}


def _calls(records: Any, window: tuple[float, float], live: dict[str, float]) -> list[CallSpan]:
    """Call spans for the records of one action run between ``window`` (start, end) seconds."""
    spans: list[CallSpan] = []
    cursor = window[0]
    for raw in records if isinstance(records, list) else []:
        rec = _dict(raw)
        call_id = str(rec.get("id", ""))
        duration = max(_num(rec.get("duration_ms")) / 1000, 0.0)
        estimated = False
        if call_id in live:
            start = live[call_id]
        elif isinstance(rec.get("started_ms"), (int, float)):
            start = window[0] + _num(rec.get("started_ms")) / 1000
        else:
            start, estimated = min(cursor, window[1]), True
            cursor = start + duration
        error = rec.get("error")
        spans.append(CallSpan(id=call_id, name=str(rec.get("name", "?")), start=start, duration=duration,
                              ok=bool(rec.get("ok")), cached=bool(rec.get("cached")), estimated=estimated,
                              arguments=rec.get("arguments"), result=rec.get("result"),
                              error=error if isinstance(error, dict) else None, flow=flow_of(rec)))
    return spans


def _model_span(event: dict[str, Any], pending: dict[int, float]) -> Span:
    call = _int(event.get("call"))
    t = _num(event.get("t"))
    duration = _num(event.get("duration_ms")) / 1000
    start = pending.pop(call, t - duration)
    response = _dict(event.get("response"))
    usage = _dict(response.get("usage"))
    tool_calls = [_dict(c) for c in response.get("tool_calls") or [] if isinstance(c, dict)]
    known = usage.get("reported", True) is not False  # unknown usage is not 0 tokens
    info = {"text": str(response.get("text") or ""), "stop_reason": str(response.get("stop_reason") or ""),
            "tokens_in": _int(usage.get("input_tokens")) if known else None,
            "tokens_out": _int(usage.get("output_tokens")) if known else None,
            "tool_calls": [{"name": str(c.get("name", "?")), "arguments": c.get("arguments")} for c in tool_calls],
            "duration_ms": _num(event.get("duration_ms"))}
    return Span("model", _int(event.get("turn")), start, max(t - start, duration, 0.0), ok=True,
                label=f"model call {call}", info=info)


def _exec_span(event: dict[str, Any], started: float, code: str, live: dict[str, float]) -> Span:
    t = _num(event.get("t"))
    result = _dict(event.get("result"))
    error = _dict(result.get("error")) or None
    info = {"code": code, "stdout": str(result.get("stdout") or ""), "stderr": str(result.get("stderr") or ""),
            "error": error, "termination": str(result.get("termination") or ""), "value": result.get("value"),
            "reason": result.get("reason"), "observation": str(event.get("observation") or ""),
            "egress": [e for e in result.get("egress") or [] if isinstance(e, dict)],
            "outputs": [o for o in result.get("outputs") or [] if isinstance(o, dict)]}
    span = Span("exec", _int(event.get("turn")), started, max(t - started, 0.0), ok=bool(result.get("ok")),
                label=f"code action (turn {_int(event.get('turn'))})", info=info)
    span.calls = _calls(result.get("calls"), (started, t), live)
    return span


def _begin(tl: EpisodeTimeline, event: dict[str, Any]) -> None:
    """The episode's header (what the model was shown), or the sandbox's start as a span of its own."""
    if event.get("event") == "episode_start":
        tl.task, tl.mode, tl.model = (str(event.get(k) or "") for k in ("task", "mode", "model"))
        tl.system, tl.stubs = str(event.get("system") or ""), str(event.get("stubs") or "")
        tl.tools = event.get("tools")
        return
    t, duration = _num(event.get("t")), max(_num(event.get("duration_ms")) / 1000, 0.0)
    tl.spans.append(Span("sandbox", _int(event.get("turn")), max(t - duration, 0.0), duration,
                         label="sandbox start (cold start, before the action)"))


def build_timeline(events: list[dict[str, Any]], source: str = "") -> EpisodeTimeline:
    """Arrange the events of one episode (one trace file) as a timeline."""
    tl = EpisodeTimeline(source=source)
    requests: dict[int, float] = {}  # model call number → when it was sent
    code: tuple[float, str] | None = None
    last_response = 0.0
    live: dict[str, float] = {}  # call id → start, from streamed call events
    pending: dict[str, dict[str, Any]] = {}  # streamed calls of the action now running (if the trace ends)
    for event in events:
        kind, t = event.get("event"), _num(event.get("t"))
        tl.total = max(tl.total, t)
        if kind in ("episode_start", "sandbox_start"):
            _begin(tl, event)
        elif kind == "model_request":
            requests[_int(event.get("call"))] = t
        elif kind == "model_response":
            span = _model_span(event, requests)
            tl.spans.append(span)
            last_response = t
        elif kind == "model_error":
            start = requests.pop(_int(event.get("call")), t)
            tl.spans.append(Span("model", _int(event.get("turn")), start, t - start, ok=False, label="model error",
                                 info={"text": str(event.get("message") or ""), "error": True}))
        elif kind == "code":
            code = (t, str(event.get("code") or ""))
        elif kind == "call_started":
            live[str(event.get("id", ""))] = t
            pending[str(event.get("id", ""))] = {**event, "ok": False, "duration_ms": 0.0}
        elif kind == "call_finished":
            pending.setdefault(str(event.get("id", "")), {}).update(
                {k: event.get(k) for k in ("ok", "error", "duration_ms", "cached")})
        elif kind == "execution":
            started, source_code = code if code is not None else (last_response, "")
            tl.spans.append(_exec_span(event, started, source_code, live))
            code, pending = None, {}
        elif kind == "tool_results":
            span = Span("exec", _int(event.get("turn")), last_response, max(t - last_response, 0.0),
                        label=f"tool calls (turn {_int(event.get('turn'))})")
            span.calls = _calls(event.get("records"), (last_response, t), live)
            span.ok = all(c.ok for c in span.calls)
            tl.spans.append(span)
            pending = {}
        elif kind in ("note", "budget"):
            tl.notes.append((t, f"{kind}: {event.get('detail') or event.get('text') or event.get('limit') or ''}"))
        elif kind == "episode_end":
            _finish(tl, _dict(event.get("episode")))
    if code is not None:  # the trace ends while an action runs (a killed run): show what it got to
        span = Span("exec", 0, code[0], max(tl.total - code[0], 0.0), ok=False, label="code action (unfinished)",
                    info={"code": code[1], "termination": "unfinished"})
        span.calls = _calls([{"id": k, **v} for k, v in pending.items()], (code[0], tl.total), live)
        tl.spans.append(span)
    if not any(e.get("event") == "episode_end" for e in events):
        tl.turns = len({s.turn for s in tl.spans if s.kind == "exec"})
        tl.usage_unknown = sum(s.kind == "model" and s.ok and s.info.get("tokens_in") is None for s in tl.spans)
        tl.tokens_in = sum(_int(s.info.get("tokens_in")) for s in tl.spans)
        tl.tokens_out = sum(_int(s.info.get("tokens_out")) for s in tl.spans)
        tl.tool_calls = len(tl.calls)
        tl.tool_errors = sum(not c.ok for c in tl.calls)
    return tl


def _finish(tl: EpisodeTimeline, episode: dict[str, Any]) -> None:
    tl.status = str(episode.get("status") or tl.status)
    tl.stop_reason = str(episode.get("stop_reason") or "")
    tl.answer = episode.get("answer")
    tl.turns = _int(episode.get("turns"))
    tl.tokens_in, tl.tokens_out = _int(episode.get("tokens_in")), _int(episode.get("tokens_out"))
    tl.usage_unknown = _int(episode.get("usage_unknown"))
    tl.tool_calls, tl.tool_errors = _int(episode.get("tool_calls")), _int(episode.get("tool_errors"))
    tl.total = max(tl.total, _num(episode.get("wall_s")))
