"""Episode traces: one JSON object per line, and a model that replays them.

Every line has ``"event"`` and ``"t"`` (seconds since the episode started); ``turn`` is the action
turn an event belongs to, ``call`` the model call's number. Events, in order::

    episode_start   task, mode, model, config (budget, sandbox, stream…), system, tools
    model_request   turn, call, messages (count), tools (names), tool_choice, stream
    model_response  turn, call, duration_ms, response (a ModelResponse without ``raw``)
    model_error     turn, call, message
    note            turn, reason, text             (what the agent told the model about a cut reply)
    code            turn, source ("markdown" | "tool"), call_id, code
    execution       turn, call_id, result (ExecutionResult), observation (the text fed back)
    tool_results    turn, calls ({call_id: record id}), records, results (ToolResult per call)
    budget          turn, limit, detail
    episode_end     episode (the Episode)

:class:`ReplayModel` answers with the ``model_response`` events of a trace, in order, so
``codeact agent ... --model replay:TRACE`` reproduces a run offline.
"""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import IO, Any

from ..errors import ModelError
from .messages import Message, ModelResponse
from .models.base import ToolChoice, ToolDef

__all__ = ["ReplayModel", "TraceWriter", "load_trace"]


class TraceWriter:
    """Writes events to a JSONL file (truncated when opened) and/or hands them to a callback."""

    def __init__(self, path: str | Path | None = None, on_event: Callable[[dict[str, Any]], None] | None = None,
                 ) -> None:
        self.path = Path(path) if path is not None else None
        self.on_event = on_event
        self.started = time.monotonic()
        self._file: IO[str] | None = None
        if self.path is not None:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            self._file = self.path.open("w", encoding="utf-8")

    def elapsed(self) -> float:
        return time.monotonic() - self.started

    def emit(self, event: str, **data: Any) -> dict[str, Any]:
        """Write one event (JSON-able values; anything else is written as its ``str``)."""
        record = {"event": event, "t": round(self.elapsed(), 4), **data}
        if self._file is not None:
            self._file.write(json.dumps(record, ensure_ascii=False, default=str) + "\n")
            self._file.flush()
        if self.on_event is not None:
            self.on_event(record)
        return record

    def close(self) -> None:
        if self._file is not None:
            self._file.close()
            self._file = None


def load_trace(path: str | Path) -> list[dict[str, Any]]:
    """The events of a trace file; a line that is not a JSON object raises ``ValueError``."""
    events: list[dict[str, Any]] = []
    for n, line in enumerate(Path(path).read_text(encoding="utf-8").splitlines(), 1):
        if not line.strip():
            continue
        try:
            event = json.loads(line)
        except (ValueError, RecursionError) as exc:  # RecursionError: nested past the parser's depth
            raise ValueError(f"{path}:{n}: not a trace line: {exc}") from None
        if not isinstance(event, dict) or "event" not in event:
            raise ValueError(f"{path}:{n}: not a trace event (a JSON object with an 'event' key)")
        events.append(event)
    return events


class ReplayModel:
    """A ``ModelClient`` answering with the responses (and provider errors) a trace recorded.

    The requests it receives are not compared with the recorded ones: the replayed run follows
    the recorded replies whatever the tools answer. Raises :class:`ModelError` when exhausted.
    """

    def __init__(self, path: str | Path) -> None:
        events = load_trace(path)
        start = next((e for e in events if e["event"] == "episode_start"), {})
        self.model = f"replay:{start.get('model', Path(path).name)}"
        self.path = Path(path)
        self._entries: list[ModelResponse | ModelError] = []
        for event in events:
            if event["event"] == "model_response":
                self._entries.append(ModelResponse.model_validate(event["response"]))
            elif event["event"] == "model_error":
                self._entries.append(ModelError(str(event.get("message", "replayed model error"))))
        if not self._entries:
            raise ValueError(f"{path}: the trace holds no model responses to replay")
        self.served = 0
        self._lock = threading.Lock()

    @property
    def remaining(self) -> int:
        return len(self._entries) - self.served

    def complete(self, messages: Sequence[Message], *, system: str | None = None, tools: Sequence[ToolDef] = (),
                 tool_choice: ToolChoice = "auto", max_tokens: int = 4096, stream: bool = False) -> ModelResponse:
        """The next recorded response."""
        with self._lock:
            if self.served >= len(self._entries):
                raise ModelError(f"replay of {self.path.name} exhausted after {len(self._entries)} responses")
            entry = self._entries[self.served]
            self.served += 1
        if isinstance(entry, ModelError):
            raise entry
        return entry

    async def acomplete(self, messages: Sequence[Message], *, system: str | None = None,
                        tools: Sequence[ToolDef] = (), tool_choice: ToolChoice = "auto", max_tokens: int = 4096,
                        stream: bool = False) -> ModelResponse:
        """Async :meth:`complete`."""
        return self.complete(messages, system=system, tools=tools, tool_choice=tool_choice,
                             max_tokens=max_tokens, stream=stream)
