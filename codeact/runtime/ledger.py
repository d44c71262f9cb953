"""The host's record of tool calls: the only source of truth for what happened."""

from __future__ import annotations

import itertools
import json
import threading
import time
from typing import Any

from ..results import ToolCallError, ToolCallRecord

__all__ = ["CallLedger"]


def cache_key(name: str, arguments: Any) -> str:
    return name + "\0" + json.dumps(arguments, sort_keys=True, separators=(",", ":"), default=repr)


class CallLedger:
    """Calls of one run in arrival order. Records are written when a call arrives and when it ends,
    so the ledger survives an exception in the code, a timeout, or the death of the sandbox.
    """

    def __init__(self, cache: dict[str, Any] | None = None, prefix: str = "call") -> None:
        self._lock = threading.Lock()
        self._records: list[ToolCallRecord] = []
        self._started: dict[str, float] = {}
        self._ids = itertools.count(1)
        self._prefix = prefix
        self.counts: dict[str, int] = {}
        #: Session-wide answers of cacheable tools, keyed by name and canonical arguments.
        self.cache = cache if cache is not None else {}

    def open(self, name: str, arguments: Any) -> ToolCallRecord:
        with self._lock:
            record = ToolCallRecord(id=f"{self._prefix}_{next(self._ids)}", name=name, arguments=arguments)
            self._records.append(record)
            self._started[record.id] = time.perf_counter()
            self.counts[name] = self.counts.get(name, 0) + 1
            return record

    def count(self, name: str) -> int:
        with self._lock:
            return self.counts.get(name, 0)

    def finish(self, record: ToolCallRecord, *, result: Any = None, error: ToolCallError | None = None,
               cached: bool = False) -> None:
        with self._lock:
            if record.finished:
                return
            started = self._started.pop(record.id, time.perf_counter())
            record.duration_ms = (time.perf_counter() - started) * 1000
            record.ok = error is None
            record.result = result if error is None else None
            record.error = error
            record.cached = cached
            record.finished = True

    def close_pending(self, code: str, message: str) -> None:
        """End every call still in flight (the run ended before they answered)."""
        with self._lock:
            pending = [r for r in self._records if not r.finished]
        for record in pending:
            self.finish(record, error=ToolCallError(code=code, message=message, retryable=code == "timeout"))

    def records(self) -> list[ToolCallRecord]:
        with self._lock:
            return [r.model_copy(deep=True) for r in self._records]
