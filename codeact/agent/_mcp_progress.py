"""``execute_python`` over MCP with progress: each live event of the run becomes a
``notifications/progress`` message (when the client asked for progress with a token)."""

from __future__ import annotations

import json
from typing import Any

from ..results import ExecutionResult
from ..runtime.events import CallFinished, CallStarted, EgressFinished, OutputChunk, RunDone, RunEvent
from ..runtime.session import Session

__all__ = ["describe_event", "run_with_progress"]

_MAX_MESSAGE = 500


def _short(value: Any, limit: int = 120) -> str:
    text = json.dumps(value, ensure_ascii=False, default=repr)
    return text if len(text) <= limit else text[: limit - 1] + "…"


def describe_event(event: RunEvent, *, labelled: bool = False) -> str:
    """One line for a progress message. ``labelled``: the session runs under a data-flow policy,
    so a call's arguments and an egress request's address are not shown. Their labels reach the
    session's context only through the run's observation, and what the client sees is the
    model's input: shown here, an injected text would reach the next cell unlabelled."""
    if isinstance(event, OutputChunk):
        text = f"{event.type}: {event.text}"  # the done frame labels stdout/stderr for the context
    elif isinstance(event, CallStarted):
        text = f"call {event.id} {event.name}({'…' if labelled else _short(event.arguments)}) started"
    elif isinstance(event, CallFinished):
        how = ("ok (cached)" if event.cached else "ok") if event.ok else (event.error.code if event.error else "failed")
        text = f"call {event.id} {event.name} {how} in {event.duration_ms:.0f} ms"
    elif isinstance(event, EgressFinished):
        text = "egress request finished" if labelled else f"egress {event.record.describe()}"
    else:
        text = "done"
    return text if len(text) <= _MAX_MESSAGE else text[: _MAX_MESSAGE - 1] + "…"


def _wants_progress(ctx: Any) -> bool:
    try:
        meta = ctx.request_context.meta
    except (AttributeError, ValueError, LookupError):
        return False
    token = meta.get("progress_token") if isinstance(meta, dict) else getattr(meta, "progress_token", None)
    return token is not None


async def run_with_progress(session: Session, code: str, ctx: Any) -> ExecutionResult:
    """Run ``code``; report each event as progress (1, 2, … with no total) when the client listens."""
    if ctx is None or not _wants_progress(ctx):
        return await session.arun(code)
    result: ExecutionResult | None = None
    step = 0
    labelled = session.runtime.flow is not None
    async for event in session.stream(code):
        if isinstance(event, RunDone):
            result = event.result
            continue
        step += 1
        await ctx.report_progress(step, None, describe_event(event, labelled=labelled))
    assert result is not None  # a stream ends with 'done' or raises
    return result
