"""The host's record of tool calls: the only source of truth for what happened.

``CallLedger`` holds the calls of one run. ``CallStore`` is what a session keeps across its runs:
the call-id sequence (ids are unique within a session, so a later run can name an earlier call),
the answers of cacheable calls, the full text of results too large to send to the sandbox, and the
session's share of the tool pool (its in-flight count and :class:`SessionGate`).

A call comes in through one door, ``arrive`` (the run's bounds; its record opened, or its refusal
recorded). A record ends exactly once (``finish``); a call whose record ended before it started
(its run was over, or it timed out while queued) never starts (``begin`` says so), so the ledger
never shows a call as unfinished that later ran.
"""

from __future__ import annotations

import asyncio
import itertools
import json
import threading
import time
from collections import OrderedDict
from typing import TYPE_CHECKING, Any

from .._text import valid_text
from ..errors import ToolError
from ..results import ToolCallError, ToolCallRecord
from ..tracing import RunTrace
from ._accepted import Refusal
from ._admission import SessionGate
from ._calls import _error
from .cutoffs import Ending
from .limits import CallLimits

if TYPE_CHECKING:
    from .flow import FlowApprover

_MAX_MESSAGE = 4000
#: A refused call's arguments are kept as given only when their JSON is at most this long.
_MAX_REFUSED_ARGS = 1024

__all__ = ["CallLedger", "CallStore", "cache_key", "stand_in"]


_END_FIELDS = ("duration_ms", "ok", "result", "error", "cached", "finished")


def _new_record(call_id: str, name: str, arguments: Any) -> ToolCallRecord:
    """A record as ``ToolCallRecord.model_construct`` makes it (every field the host's own, so
    nothing to validate), without its per-field default lookups, which dominate it on the hot path."""
    record = object.__new__(ToolCallRecord)
    object.__setattr__(record, "__dict__", {
        "id": call_id, "name": name, "arguments": arguments, "ok": False, "result": None, "error": None,
        "duration_ms": 0.0, "cached": False, "finished": False,
        "labels": None, "pc_labels": None, "result_labels": None, "flow": None})
    object.__setattr__(record, "__pydantic_fields_set__", {"id", "name", "arguments"})
    object.__setattr__(record, "__pydantic_extra__", None)
    object.__setattr__(record, "__pydantic_private__", None)
    return record


def _copied(record: ToolCallRecord) -> ToolCallRecord:
    """``record.model_copy()`` (a shallow copy: its own ``__dict__`` and fields set) without
    pydantic's generic steps: the ledger's records have no extra fields and no private ones."""
    copy = object.__new__(ToolCallRecord)
    object.__setattr__(copy, "__dict__", record.__dict__.copy())
    object.__setattr__(copy, "__pydantic_fields_set__", set(record.__pydantic_fields_set__))
    object.__setattr__(copy, "__pydantic_extra__", None)
    object.__setattr__(copy, "__pydantic_private__", None)
    return copy


def stand_in(arguments: Any, size: int, text: str | None = None) -> Any:
    """What a refused call's record keeps of its arguments: the arguments when small, else a
    bounded serialized preview (a flood of refused calls must not pin their parsed arguments)."""
    if size <= _MAX_REFUSED_ARGS:
        return arguments
    if text is None:
        try:
            text = json.dumps(arguments, ensure_ascii=False, default=repr)[:_MAX_REFUSED_ARGS // 2]
        except (ValueError, TypeError, RecursionError):
            text = ""
    return {"truncated": True, "bytes": size, "preview": text[:_MAX_REFUSED_ARGS // 2]}

#: Where a CallStore lives inside a plain cache dict handed to CallLedger (see ``CallStore.of``).
#: Cache keys start with a tool name, which is printable, so no cache key can equal it.
_STORE_KEY = "\0codeact-call-store"


def cache_key(name: str, arguments: Any) -> str:
    return name + "\0" + json.dumps(arguments, sort_keys=True, separators=(",", ":"), default=repr)


class CallStore:
    """A session's memory of calls across runs. Thread-safe, except ``inflight`` (loop thread only)."""

    def __init__(self, cache: dict[str, Any] | None = None, *, max_kept_chars: int = 64_000_000,
                 max_running: int = 16) -> None:
        #: Answers of cacheable tools, keyed by :func:`cache_key`; only successful calls go in.
        self.cache: dict[str, Any] = cache if cache is not None else {}
        #: Cacheable calls now running, so an equal call arriving meanwhile waits for the answer.
        self.inflight: dict[str, asyncio.Future[tuple[bool, Any]]] = {}
        self.max_kept_chars = max_kept_chars
        self._lock = threading.Lock()
        self._ids = itertools.count(1)
        self._kept: OrderedDict[str, str] = OrderedDict()
        self._kept_chars = 0
        #: The session's share of the tool pool (see :class:`SessionGate`).
        self.gate = SessionGate(max_running)
        #: Calls of this session recorded and not yet ended (admitted, queued or running).
        self.in_flight = 0
        #: The data-flow labels of the large results kept (``runtime.flow``): their pages carry them.
        self.kept_labels: dict[str, list[str]] = {}

    def track(self, delta: int) -> int:
        with self._lock:
            self.in_flight += delta
            return self.in_flight

    @classmethod
    def of(cls, cache: dict[str, Any]) -> CallStore:
        """The store that belongs to a session's plain cache dict (made on first use)."""
        store = cache.get(_STORE_KEY)
        if not isinstance(store, CallStore):
            store = cache[_STORE_KEY] = cls(cache)
        return store

    def opened(self) -> int:
        """A call of this session was recorded: the next id number, and one more call in flight."""
        with self._lock:
            self.in_flight += 1
            return next(self._ids)

    def keep(self, call_id: str, text: str) -> None:
        """Keep a large result's full JSON text for paging; the oldest go when over the budget."""
        with self._lock:
            self._kept[call_id] = text
            self._kept_chars += len(text)
            while self._kept_chars > self.max_kept_chars and len(self._kept) > 1:
                _, dropped = self._kept.popitem(last=False)
                self._kept_chars -= len(dropped)

    def kept(self, call_id: str) -> str | None:
        with self._lock:
            return self._kept.get(call_id)


class CallLedger:
    """Calls of one run in arrival order. Records are written when a call arrives and when it ends,
    so the ledger survives an exception in the code, a timeout, or the death of the sandbox.

    ``store`` is the session's :class:`CallStore` (or its plain cache dict); None makes a fresh one.
    """

    def __init__(self, store: CallStore | dict[str, Any] | None = None, prefix: str = "call") -> None:
        if isinstance(store, CallStore):
            self.store = store
        else:
            self.store = CallStore.of(store) if store is not None else CallStore()
        self._lock = threading.Lock()
        self._records: list[ToolCallRecord] = []
        self._started: dict[str, float] = {}
        self._prefix = prefix
        self.counts: dict[str, int] = {}
        self._admitted: dict[str, int] = {}
        #: Calls that arrived in this run (refused ones included) and the argument bytes they cost.
        self.arrived = 0
        self.argument_bytes = 0
        self._begun: set[str] = set()
        self.ended = False
        #: The plain calls not yet done (by record id): what the tool host gives back for a call
        #: still running when the run ended (``ToolHost.release_abandoned``). A call leaves when it
        #: is done, so a run of many calls keeps none of them alive (fewer objects for the GC).
        self.holds: dict[str, Any] = {}
        #: The run's OpenTelemetry spans (``codeact.tracing``), or None when tracing is off.
        self.trace: RunTrace | None = None
        #: Under a data-flow policy: the context the run was sent (``flow.context``, what the model
        #: had seen), or None when the run had no ``flow``.
        self.flow: list[str] | None = None
        self.flow_context: frozenset[str] = frozenset()
        #: Who approves this run's calls the policy asks about, when the policy has no ``ask`` of its
        #: own (the session's ``flow_approver``: ``serve-mcp``'s client); None: the runtime's hook.
        self.flow_ask: FlowApprover | None = None

    @property
    def cache(self) -> dict[str, Any]:
        """Session-wide answers of cacheable tools, keyed by name and canonical arguments."""
        return self.store.cache

    def arrive(self, name: str, arguments: Any, size: int, limits: CallLimits,
               problem: ToolError | None = None, early: bool = False) -> ToolCallRecord | Refusal:
        """The one way in for a call: count it against the run's bounds and record it. Returns its
        record, open, or the refusal (recorded and ended, except past ``max_calls_per_run``).

        ``size``: its argument bytes; ``problem``: why the front refuses it, if it does, ``early``
        when that is its arguments' size or form, which comes before the run's bounds (the record
        then keeps only their size); any other problem comes after them."""
        with self._lock:
            self.arrived += 1
            if self.arrived > limits.max_calls_per_run:
                return Refusal.of(None, ToolCallError(
                    code="permission_denied", message=f"more than {limits.max_calls_per_run} tool calls in one "
                    "run; the rest are refused and not recorded"))
            over = self.argument_bytes + size > limits.max_run_argument_bytes
            if not over:
                self.argument_bytes += size
            if not early:
                if over:
                    problem = ToolError("permission_denied", f"the arguments of this run's calls exceed "
                                        f"{limits.max_run_argument_bytes} bytes in all; pass large data through files")
                elif self.store.in_flight >= limits.max_in_flight_per_session:
                    problem = ToolError("rate_limited", f"more than {limits.max_in_flight_per_session} calls of "
                                        "this session are in flight; wait for some to finish", retryable=True)
            if problem is not None:
                name = valid_text(str(name)[:200])
                arguments = {"truncated": True, "bytes": size} if early else stand_in(arguments, size)
            record = _new_record(f"{self._prefix}_{self.store.opened()}", name, arguments)
            self._records.append(record)
            self._started[record.id] = time.perf_counter()
            self.counts[name] = self.counts.get(name, 0) + 1
        self.opened(record)
        if problem is None:
            return record
        self.finish(record, error=_error(problem))
        return Refusal.of(record, record.error or _error(problem))

    def opened(self, record: ToolCallRecord) -> None:
        """A record was opened (on the thread the call arrived on, before anything can end it)."""
        if self.trace is not None:
            self.trace.opened(record)

    def begin(self, record: ToolCallRecord) -> bool:
        """Mark the call as started; False if its record has ended already (it must not run)."""
        with self._lock:
            return self._begin(record)

    def _begin(self, record: ToolCallRecord) -> bool:
        if record.finished:
            return False
        self._begun.add(record.id)
        return True

    def start(self, record: ToolCallRecord, limit: int | None) -> bool | None:
        """:meth:`begin` then :meth:`admit` under one lock (a call run straight away): None when its
        record has ended (it must not run), False when its tool's ``limit`` is reached, else True."""
        with self._lock:
            return self._admit(record.name, limit) if self._begin(record) else None

    def begun(self, record: ToolCallRecord) -> bool:
        with self._lock:
            return record.id in self._begun

    def count(self, name: str) -> int:
        """Calls of ``name`` that arrived in this run (whatever became of them)."""
        with self._lock:
            return self.counts.get(name, 0)

    def admit(self, name: str, limit: int | None) -> bool:
        """Count one call of ``name`` past its checks; False once ``limit`` calls were admitted.

        Counting at admission (not arrival) keeps the limit exact when calls run concurrently and
        lets calls refused earlier (bad arguments, denied) not use up the allowance.
        """
        with self._lock:
            return self._admit(name, limit)

    def _admit(self, name: str, limit: int | None) -> bool:
        admitted = self._admitted.get(name, 0)
        if limit is not None and admitted >= limit:
            return False
        self._admitted[name] = admitted + 1
        return True

    def finish(self, record: ToolCallRecord, *, result: Any = None, error: ToolCallError | None = None,
               cached: bool = False) -> bool:
        """Record how the call ended; False (and nothing changes) if it had ended already."""
        with self._lock:
            if record.finished:
                return False
            started = self._started.pop(record.id, time.perf_counter())
            if error is not None and len(error.message) > _MAX_MESSAGE:  # the message may echo the sandbox's input
                cut = error.message[:_MAX_MESSAGE] + f"… [{len(error.message)} characters]"
                error = error.model_copy(update={"message": cut})
            # Straight into the model's fields (no validation on assignment: pydantic's __setattr__
            # would only cost time, per field, on the hot path).
            record.__dict__.update(duration_ms=(time.perf_counter() - started) * 1000, ok=error is None,
                                   result=result if error is None else None, error=error, cached=cached,
                                   finished=True)
            record.__pydantic_fields_set__.update(_END_FIELDS)
        self.store.track(-1)
        if self.trace is not None:
            self.trace.finished(record)
        return True

    def close_pending(self, ending: Ending) -> None:
        """End every call still in flight (the run or episode ended before they answered) as
        ``ending`` says (``runtime/cutoffs.py``); those not yet started never will."""
        with self._lock:
            self.ended = True
            pending = [(r, r.id in self._begun) for r in self._records if not r.finished]
        for record, begun in pending:
            self.finish(record, error=(ending.running if begun else ending.queued).error())

    def records(self) -> list[ToolCallRecord]:
        """Copies of the records so far (calls may still be in flight)."""
        with self._lock:
            return [r.model_copy(deep=True) for r in self._records]

    def kept_records(self) -> list[ToolCallRecord]:
        """The records themselves (in a new list), once every call has ended, for the one owner
        that keeps them after the run, the session's cell log (the result has its own copies,
        :meth:`final_records`): nothing else holds them then, so no copy is needed."""
        with self._lock:
            return list(self._records)

    def final_records(self) -> list[ToolCallRecord]:
        """The records themselves, shallow-copied, once every call has ended (after
        :meth:`close_pending`): ``finish`` never changes a finished record, so no deep copy is needed."""
        with self._lock:
            return [_copied(r) for r in self._records]
