"""What a session keeps of its runs (``cells`` for replay, ``history``), and the budget it keeps it in.

A run's call records are kept with their results, since replay answers calls from them, except a
``read_result`` page: it is kept as its place in the one large result it pages through,
``{"call_id", "offset", "text_chars", "total_chars", "next_offset"}``, not as a copy of its text
(the replay host pages through the large result again itself).

What a run keeps is measured as the JSON text of its calls' arguments and results (pages as their
place) plus :data:`RECORD_COST` a record for its Python objects, and counted against two budgets:
``Runtime(max_run_record_bytes=...)`` for one run and ``max_session_record_bytes`` for all the
cells a session holds. A run past either is kept as an *inexact* cell without its call records,
listed in ``Session.skipped`` with the reason: its effects are in the namespace, but a snapshot
then needs ``allow_inexact=True`` (which leaves it out), a suspension is refused, and a rebuild
leaves it out. ``history`` is bounded by the same measure (``max_session_record_bytes``).
"""

from __future__ import annotations

import json
from typing import Any

from ..results import ExecutionResult, ToolCallRecord
from .snapshot import CellRecord, SkippedCell
from .toolhost import READ_RESULT

#: What one kept record costs beyond its JSON: the record, its dicts and its id (measured in
#: CPython 3.11, rounded up), so that a flood of small calls is counted too.
RECORD_COST = 1024
_SCALAR_COST = 24


def json_size(value: Any) -> int:
    """About how many characters ``value``'s JSON text has; scalars without serializing."""
    kind = type(value)
    if value is None or kind is bool or kind is float:
        return _SCALAR_COST
    if kind is int:
        return _SCALAR_COST if value.bit_length() <= 64 else value.bit_length() // 3 + 1
    if kind is str:
        return len(value) + 2
    try:
        return len(json.dumps(value, ensure_ascii=False, default=repr))
    except (ValueError, TypeError, RecursionError):  # nothing the ledger takes in, but never fail here
        return len(repr(type(value)))


def egress_bytes(result: ExecutionResult) -> int:
    """What a run's egress records keep: the plain-HTTP responses replay answers from, and a record's cost."""
    return sum(len(r.response or "") + RECORD_COST for r in result.egress)


def _is_page(result: Any) -> bool:
    return (type(result) is dict and type(result.get("text")) is str and "call_id" in result
            and "offset" in result)


def page_place(result: dict[str, Any]) -> dict[str, Any]:
    """A ``read_result`` page as a session keeps it: where its text is in the large result."""
    return {"call_id": result["call_id"], "offset": result["offset"], "text_chars": len(result["text"]),
            "total_chars": result.get("total_chars"), "next_offset": result.get("next_offset")}


class KeptRun:
    """One run's records as kept (pages as their place) and what they cost."""

    __slots__ = ("bytes", "pages", "records")

    def __init__(self, records: list[ToolCallRecord], argument_bytes: int, *, builtin_pages: bool) -> None:
        size = argument_bytes + RECORD_COST * len(records)
        pages: dict[str, ToolCallRecord] = {}
        for i, record in enumerate(records):
            result = record.result
            if builtin_pages and record.name == READ_RESULT and record.ok and _is_page(result):
                result = page_place(result)
                records[i] = pages[record.id] = record.model_copy(update={"result": result})
            size += _outcome_size(record, result)
        self.records, self.bytes, self.pages = records, size, pages

    def for_history(self, result: ExecutionResult) -> ExecutionResult:
        """The result as ``history`` keeps it: the caller's own, unless pages are swapped for their place."""
        if not self.pages:
            return result
        pages = self.pages
        calls = [pages.get(c.id, c) if c.name == READ_RESULT else c for c in result.calls]
        return result.model_copy(update={"calls": calls})


def cell_bytes(cell: CellRecord) -> int:
    """What a cell's records cost, measured as :class:`KeptRun` measures a run."""
    return sum(RECORD_COST + json_size(r.arguments) + _outcome_size(r) for r in cell.calls)


def _outcome_size(record: ToolCallRecord, result: Any = None) -> int:
    if record.ok:
        return json_size(record.result if result is None else result)
    return len(record.error.message) + _SCALAR_COST if record.error is not None else 0


class RecordBudget:
    """The bytes of call records a session's cells hold, within a per-run and a per-session budget."""

    __slots__ = ("per_run", "per_session", "used")

    def __init__(self, per_run: int, per_session: int) -> None:
        self.per_run, self.per_session, self.used = per_run, per_session, 0

    def take(self, size: int) -> str | None:
        """Count a run's records in; the reason they cannot be kept, if they cannot (nothing counted)."""
        if size > self.per_run:
            return (f"its call records ({size:,} bytes) are over the per-run budget of {self.per_run:,} "
                    "bytes (Runtime(max_run_record_bytes=...)), so they were not kept for replay")
        if self.used + size > self.per_session:
            return (f"its call records ({size:,} bytes) would put the session's kept records "
                    f"({self.used:,} bytes) over its budget of {self.per_session:,} bytes "
                    "(Runtime(max_session_record_bytes=...)), so they were not kept for replay")
        self.used += size
        return None

    def reset(self, cells: list[CellRecord]) -> None:
        """The session's cells were replaced (a restore) or cleared (a batch's reset)."""
        self.used = sum(cell_bytes(c) for c in cells)


def unkept(cell: CellRecord, reason: str, skipped: list[SkippedCell]) -> CellRecord:
    """``cell`` made inexact for ``reason``, without its records, and listed in ``skipped``."""
    skipped.append(SkippedCell(index=cell.index, reason=reason, code=cell.code))
    return cell.model_copy(update={"status": "inexact", "reason": reason, "calls": [], "egress": []})
