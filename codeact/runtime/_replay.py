"""Replay: rebuild a namespace by running recorded cells again, answering every tool call from
the records instead of running the tool.

The answers come from a replay :class:`Toolset` (same names and schemas, so validation behaves as
it did) whose tools look up the next recorded call with equal name and arguments and return its
result or raise its ``ToolError``. It is served by a :class:`ToolHost` of its own that the session
uses only while replaying, so no policy hook, permission prompt, retry or real tool runs. Calls
the host answers itself (``read_result``) and calls refused before a tool would run (unknown tool,
invalid arguments) are reproduced by the host as they were the first time.

Concurrent calls (``parallel``) are matched by name and arguments, whatever order they arrive in;
their call ids are given in arrival order, so they may be numbered differently after a replay.

Replayed calls are kept out of every result: a replay produces no ``ExecutionResult``; the
restored session's cell log holds the original records.
"""

from __future__ import annotations

import threading
from typing import TYPE_CHECKING, Any

from ..errors import ReplayInterrupted, RestoreDiverged, ToolArgumentsError, ToolError
from ..results import ExecutionResult, ToolCallRecord
from .ledger import cache_key
from .snapshot import CellRecord
from .toolhost import ToolHost
from .toolset import Tool, ToolPolicy, Toolset

if TYPE_CHECKING:
    from .session import Session

#: Refusals decided before a tool would run: the host reproduces them without asking the tool.
_BEFORE_TOOL = frozenset({"unknown_tool", "invalid_arguments"})


def _short(name: str, arguments: Any, limit: int = 200) -> str:
    text = f"{name}({cache_key('', arguments)[1:]})"
    return text if len(text) <= limit else text[: limit - 1] + "…"


class _Expected:
    __slots__ = ("key", "record")

    def __init__(self, key: str, record: ToolCallRecord) -> None:
        self.key, self.record = key, record


class ReplayResponder:
    """The recorded calls of the cell being replayed; answers the replay tools."""

    def __init__(self, toolset: Toolset) -> None:
        self.toolset = toolset
        self._lock = threading.Lock()
        self._pending: list[_Expected] = []
        self._answered = 0
        self.cell: CellRecord | None = None
        self.divergence: RestoreDiverged | None = None

    def begin(self, cell: CellRecord) -> None:
        expected = []
        for record in cell.calls:
            tool = self.toolset.get(record.name)
            if tool is None or (record.error is not None and record.error.code in _BEFORE_TOOL):
                continue
            try:
                args = tool.spec.validate_arguments(record.arguments)
            except ToolArgumentsError:
                args = record.arguments
            expected.append(_Expected(cache_key(record.name, args), record))
        with self._lock:
            self.cell, self._pending, self._answered, self.divergence = cell, expected, 0, None

    def answer(self, name: str, arguments: dict[str, Any]) -> Any:
        """The recorded answer of an equal call (concurrent calls may arrive in another order)."""
        key = cache_key(name, arguments)
        with self._lock:
            self._answered += 1
            for i, item in enumerate(self._pending):
                if item.key == key:
                    record = self._pending.pop(i).record
                    break
            else:
                self._diverge(f"asked for {_short(name, arguments)}", self._answered)
                raise ToolError("replay_diverged", "this call was not recorded; the replay stops here")
        if record.ok:
            return record.result
        error = record.error
        assert error is not None
        raise ToolError(error.code, error.message, error.retryable)

    def _diverge(self, what: str, call: int) -> None:
        if self.divergence is not None or self.cell is None:
            return
        nxt = "no more calls were recorded"
        if self._pending:
            first = self._pending[0].record
            nxt = f"the next recorded call was {_short(first.name, first.arguments)}"
        self.divergence = RestoreDiverged(
            f"cell {self.cell.index} diverged at its tool call {call}: the replay {what}, but {nxt}; the cell "
            "depends on something that was not recorded (random numbers, the clock, the environment)",
            cell=self.cell.index, call=call)

    def finish(self, result: ExecutionResult) -> None:
        """Raise RestoreDiverged if the cell asked for other calls or ended otherwise than recorded."""
        cell = self.cell
        assert cell is not None
        with self._lock:
            if self.divergence is None and self._pending:
                first = self._pending[0].record
                self.divergence = RestoreDiverged(
                    f"cell {cell.index} diverged: the replay ended without the recorded call "
                    f"{_short(first.name, first.arguments)} ({len(self._pending)} recorded calls left unasked)",
                    cell=cell.index, call=self._answered + 1)
        if self.divergence is not None:
            raise self.divergence
        _check_outcome(cell, result)

    def toolset_for_replay(self) -> Toolset:
        def responder(name: str) -> Any:
            return lambda **arguments: self.answer(name, arguments)

        return Toolset([Tool(spec=t.spec, fn=responder(t.name), policy=ToolPolicy(timeout_s=None))
                        for t in self.toolset])


def _check_outcome(cell: CellRecord, result: ExecutionResult) -> None:
    if result.termination in ("interrupted", "killed"):
        # Stopped from outside (an interrupt, a dead sandbox): nothing says the cell would not replay.
        # (A timeout, even one that ended in a kill, is the cell's own doing: a divergence.)
        raise ReplayInterrupted(f"the replay of cell {cell.index} was stopped ({result.termination}: "
                                f"{result.reason or 'no reason given'})",
                                cell=cell.index, requested=result.termination == "interrupted")
    if result.state_lost or result.termination not in ("completed", "error", "memory"):
        raise RestoreDiverged(f"cell {cell.index} did not finish on replay ({result.termination}: "
                              f"{result.reason or ''}); it was recorded as {cell.status}", cell=cell.index)
    got_error = result.error
    if cell.status == "completed" and got_error is not None:
        raise RestoreDiverged(f"cell {cell.index} completed when recorded but raised on replay: "
                              f"{got_error.type} at line {got_error.lineno}: {got_error.message[:300]}",
                              cell=cell.index)
    if cell.status == "raised":
        if got_error is None:
            raise RestoreDiverged(f"cell {cell.index} raised {cell.error_type} at line {cell.error_lineno} when "
                                  "recorded but completed on replay", cell=cell.index)
        if (got_error.type, got_error.lineno) != (cell.error_type, cell.error_lineno):
            raise RestoreDiverged(
                f"cell {cell.index} raised {cell.error_type} at line {cell.error_lineno} when recorded but "
                f"{got_error.type} at line {got_error.lineno} on replay", cell=cell.index)


def replay(session: Session, cells: list[CellRecord]) -> None:
    """Run ``cells`` in the session's (fresh) kernel with recorded answers; raises RestoreDiverged."""
    runtime = session.runtime
    responder = ReplayResponder(runtime.toolset)
    host = runtime.host  # the same bounds, so refusals replay as they happened
    session._host = ToolHost(responder.toolset_for_replay(), runtime.loop,
                             max_result_chars=runtime.max_result_chars, max_concurrency=host.max_concurrency,
                             tool_timeout_s=host.tool_timeout_s, max_calls_per_run=host.max_calls_per_run,
                             max_argument_bytes=host.max_argument_bytes,
                             max_run_argument_bytes=host.max_run_argument_bytes,
                             max_in_flight_per_session=host.max_in_flight_per_session)
    for name, tool in host.builtins.items():  # search_tools / describe_tool: answered again, they only read
        session._host.builtins.setdefault(name, tool)
    try:
        for cell in cells:
            responder.begin(cell)
            result = session._run_cell(cell.code, cell.timeout_s, log=False)
            responder.finish(result)
    finally:
        session._host = None
