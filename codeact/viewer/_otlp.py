"""An OTLP JSON export of codeact's spans → episode timelines, so the viewer shows what a tracing
backend received as it shows a JSONL trace.

Reads the OTLP/JSON encoding of ``ExportTraceServiceRequest`` (``{"resourceSpans": [...]}``), one
document or one per line (what the OpenTelemetry Collector's file exporter writes). One timeline
per trace id: ``chat {model}`` spans become model calls, ``codeact.run`` spans code actions with
their ``execute_tool`` children as calls, and ``execute_tool`` spans under no run (the JSON loop)
tool turns, one per run of calls between two model calls. The export is untrusted text like a
trace: malformed entries are skipped, the HTML layer escapes the rest.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ._timeline import CallSpan, EpisodeTimeline, Span

__all__ = ["is_otlp", "load_otlp"]

#: At most this many bytes of an export are read (a trace file has the same bound).
MAX_EXPORT_BYTES = 256 * 1024 * 1024


@dataclass
class _Otel:
    """One span of the export, its attributes decoded."""

    trace: str
    id: str
    parent: str
    name: str
    start: int
    end: int
    attrs: dict[str, Any]
    failed: bool
    message: str
    children: list[_Otel] = field(default_factory=list)


def is_otlp(path: Path) -> bool:
    """Whether ``path`` looks like an OTLP JSON export (its first document has ``resourceSpans``)."""
    with path.open("rb") as f:
        head = f.read(4096).lstrip()
    return head.startswith(b"{") and b'"resourceSpans"' in head


def _value(value: Any) -> Any:
    """An OTLP ``AnyValue`` as a Python value."""
    if not isinstance(value, dict):
        return None
    for key in ("stringValue", "boolValue", "doubleValue"):
        if key in value:
            return value[key]
    if "intValue" in value:  # int64 is a JSON string in OTLP/JSON
        try:
            return int(value["intValue"])
        except (TypeError, ValueError):
            return None
    if "arrayValue" in value:
        items = value["arrayValue"].get("values") if isinstance(value["arrayValue"], dict) else None
        return [_value(v) for v in items] if isinstance(items, list) else []
    return None


def _spans(document: Any) -> list[_Otel]:
    found: list[_Otel] = []
    if not isinstance(document, dict):
        return found
    for resource in document.get("resourceSpans") or []:
        scopes = resource.get("scopeSpans") if isinstance(resource, dict) else None
        for scope in scopes if isinstance(scopes, list) else []:
            items = scope.get("spans") if isinstance(scope, dict) else None
            for raw in items if isinstance(items, list) else []:
                span = _span(raw)
                if span is not None:
                    found.append(span)
    return found


def _span(raw: Any) -> _Otel | None:
    if not isinstance(raw, dict) or not isinstance(raw.get("name"), str):
        return None
    try:
        start, end = int(raw.get("startTimeUnixNano", 0)), int(raw.get("endTimeUnixNano", 0))
    except (TypeError, ValueError):
        return None
    attrs = {a["key"]: _value(a.get("value")) for a in raw.get("attributes") or []
             if isinstance(a, dict) and isinstance(a.get("key"), str)}
    found = raw.get("status")
    status: dict[str, Any] = found if isinstance(found, dict) else {}
    failed = status.get("code") in (2, "STATUS_CODE_ERROR") or "error.type" in attrs
    return _Otel(trace=str(raw.get("traceId") or ""), id=str(raw.get("spanId") or ""),
                 parent=str(raw.get("parentSpanId") or ""), name=raw["name"], start=start, end=max(end, start),
                 attrs=attrs, failed=failed, message=str(status.get("message") or ""))


def _documents(text: str) -> list[Any]:
    try:
        return [json.loads(text)]
    except json.JSONDecodeError:
        pass
    documents = []
    for line in text.splitlines():  # the collector's file exporter: one request per line
        try:
            documents.append(json.loads(line))
        except json.JSONDecodeError:
            continue
    return documents


def load_otlp(path: str | Path) -> list[EpisodeTimeline]:
    """The timelines of an OTLP JSON export, one per trace, in the order the traces began."""
    path = Path(path)
    with path.open("rb") as f:
        text = f.read(MAX_EXPORT_BYTES).decode("utf-8", errors="replace")
    spans = [s for doc in _documents(text) for s in _spans(doc)]
    by_trace: dict[str, list[_Otel]] = {}
    for span in spans:
        by_trace.setdefault(span.trace, []).append(span)
    groups = sorted(by_trace.values(), key=lambda group: min(s.start for s in group))
    return [_timeline(group, path.name) for group in groups]


def _call(span: _Otel, origin: int) -> CallSpan:
    attrs = span.attrs
    error = ({"code": str(attrs.get("error.type") or "error"), "message": span.message} if span.failed else None)
    return CallSpan(id=str(attrs.get("gen_ai.tool.call.id") or span.id),
                    name=str(attrs.get("gen_ai.tool.name") or span.name.removeprefix("execute_tool ")),
                    start=(span.start - origin) / 1e9, duration=(span.end - span.start) / 1e9, ok=not span.failed,
                    cached=bool(attrs.get("codeact.tool.cached")), arguments=attrs.get("gen_ai.tool.call.arguments"),
                    result=attrs.get("gen_ai.tool.call.result"), error=error)


def _timeline(spans: list[_Otel], name: str) -> EpisodeTimeline:
    spans.sort(key=lambda s: s.start)
    origin = spans[0].start
    ids = {s.id: s for s in spans}
    for span in spans:
        if span.parent in ids:
            ids[span.parent].children.append(span)
    tl = EpisodeTimeline(source=f"{name} · trace {spans[0].trace[:16]}")
    agent = next((s for s in spans if s.name.startswith("invoke_agent")), None)
    if agent is not None:
        tl.mode = "code" if "Code" in str(agent.attrs.get("gen_ai.agent.name") or "") else "json"
        tl.model = str(agent.attrs.get("gen_ai.request.model") or "")
        tl.status = "failed" if agent.failed else "finished"
        tl.tokens_in = int(agent.attrs.get("gen_ai.usage.input_tokens") or 0)
        tl.tokens_out = int(agent.attrs.get("gen_ai.usage.output_tokens") or 0)
    tl.task = str(agent.name if agent is not None else spans[0].name)
    loose: list[_Otel] = []  # execute_tool spans under no run: the JSON loop's calls
    turn = 0
    for span in spans:
        start, duration = (span.start - origin) / 1e9, (span.end - span.start) / 1e9
        if span.name.startswith("chat "):
            turn += 1
            tl.spans.append(Span("model", turn, start, duration, ok=not span.failed, label=span.name, info={
                "tokens_in": span.attrs.get("gen_ai.usage.input_tokens"),
                "tokens_out": span.attrs.get("gen_ai.usage.output_tokens"),
                "stop_reason": ", ".join(map(str, span.attrs.get("gen_ai.response.finish_reasons") or []))}))
        elif span.name == "codeact.run":
            run = Span("exec", turn, start, duration, ok=not span.failed,
                       label=f"code action ({span.attrs.get('codeact.run.termination') or '?'})",
                       info={"termination": str(span.attrs.get("codeact.run.termination") or "")})
            run.calls = [_call(c, origin) for c in span.children if c.name.startswith("execute_tool")]
            tl.spans.append(run)
        elif span.name.startswith("execute_tool") and ids.get(span.parent, span).name != "codeact.run":
            loose.append(span)
    _tool_turns(tl, loose, origin)
    tl.spans.sort(key=lambda s: s.start)
    tl.total = max((s.end - origin) / 1e9 for s in spans)
    tl.turns = sum(s.kind == "exec" for s in tl.spans)
    tl.tool_calls = len(tl.calls)
    tl.tool_errors = sum(not c.ok for c in tl.calls)
    if agent is None:
        tl.tokens_in = sum(int(s.info.get("tokens_in") or 0) for s in tl.spans)
        tl.tokens_out = sum(int(s.info.get("tokens_out") or 0) for s in tl.spans)
    return tl


def _tool_turns(tl: EpisodeTimeline, loose: list[_Otel], origin: int) -> None:
    """The JSON loop's calls, one "tool calls" span per group between two model calls."""
    model_ends = sorted(s.start + s.duration for s in tl.spans if s.kind == "model")
    groups: dict[int, list[CallSpan]] = {}
    for span in loose:
        call = _call(span, origin)
        turn = sum(end <= call.start for end in model_ends)
        groups.setdefault(turn, []).append(call)
    for turn, calls in groups.items():
        start = min(c.start for c in calls)
        end = max(c.start + c.duration for c in calls)
        group = Span("exec", turn, start, end - start, ok=all(c.ok for c in calls), label=f"tool calls (turn {turn})")
        group.calls = calls
        tl.spans.append(group)
