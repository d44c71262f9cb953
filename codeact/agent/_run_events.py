"""A turn's live events in the episode trace (and so to the agent's ``on_event``), as they happen.

Trace events, ``turn`` added (``t`` is episode time, so a viewer gets each call's real start)::

    stdout / stderr   text                  (code mode: the code's output as it is written)
    call_started      id, name, arguments
    call_finished     id, name, ok, error, duration_ms, cached   (the result is in the record)

Only when someone reads the trace (a file or ``on_event``); otherwise runs take the plain path.
"""

from __future__ import annotations

import threading
from typing import Any

from ..results import ToolCallRecord
from ..runtime.events import CallFinished, CallStarted, ObservedLedger, RunDone, RunEvent
from ..runtime.ledger import CallLedger
from .trace import TraceWriter

__all__ = ["TurnEvents", "turn_events"]


class TurnEvents:
    """Writes run events into a trace; safe from any thread (calls end on the host's threads)."""

    def __init__(self, trace: TraceWriter, turn: int) -> None:
        self.trace = trace
        self.turn = turn
        self._lock = threading.Lock()

    def __call__(self, event: RunEvent) -> None:
        """A ``Session.run`` listener."""
        if isinstance(event, RunDone):
            return  # the 'execution' event that follows holds the result
        data = event.model_dump(mode="json", exclude={"t", "type"})
        if isinstance(event, CallFinished):
            data.pop("result", None)
        with self._lock:
            self.trace.emit(event.type, turn=self.turn, **data)

    def ledger(self, cache: dict[str, Any]) -> CallLedger:
        """A ledger reporting its calls here (the JSON agent's calls do not go through a run)."""
        return ObservedLedger(cache, self._opened, self._finished)

    def _opened(self, record: ToolCallRecord) -> None:
        self(CallStarted.of(record, 0.0))

    def _finished(self, record: ToolCallRecord) -> None:
        self(CallFinished.of(record, 0.0))


def turn_events(trace: TraceWriter, turn: int) -> TurnEvents | None:
    """Events for this turn, or None when nobody reads the trace."""
    if trace.path is None and trace.on_event is None:
        return None
    return TurnEvents(trace, turn)
