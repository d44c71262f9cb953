"""Replay: rebuild a namespace by running recorded cells again, answering every tool call from
the records instead of running the tool.

The answers come from a replay :class:`Toolset` (same names and schemas, so validation behaves as
it did) whose tools look up the next recorded call with equal name and arguments and return its
result or raise its ``ToolError``. It is served by a :class:`ToolHost` of its own that the session
uses only while replaying, so no policy hook, permission prompt, retry or real tool runs. Calls
the host answers itself (``read_result``, the discovery built-ins) and calls refused before a tool
would run (unknown tool, invalid arguments) are reproduced by the host as they were the first time.

Once a cell's replay ends it must have behaved as recorded (:meth:`ReplayResponder.finish`): the
same outcome; the same calls, refused ones and built-ins included, with the main thread's own
calls in the recorded order (calls of threads, ``parallel`` and event loops are compared as a
multiset: their order is the scheduler's); the same output (a digest of stdout and stderr); the
same number of threads and processes left running (a thread started only on replay could call a
tool after the rebuild, where its call would run for real). Anything else is a divergence.

Concurrent calls get their ids in arrival order, so they may be numbered differently after a
replay. A rebuild has a time budget (:func:`rebuild_budget`); past it the replay is a divergence too.

Under a data-flow policy a replayed cell's run frame carries the ``flow.context`` it had when
recorded, and each answer the labels its recorded result carried, so the kernel rebuilds the same
labels; the replay host judges nothing (the recorded refusals are answered as recorded).

Replayed calls are kept out of every result: a replay produces no ``ExecutionResult``; the
restored session's cell log holds the original records.
"""

from __future__ import annotations

import collections
import os
import threading
import time
from typing import Any

from ..errors import ReplayInterrupted, RestoreDiverged, ToolArgumentsError, ToolError
from ..results import ExecutionResult, ToolCallRecord
from ._state import ReplayCell, RuntimePort, SessionPort
from ._workspace import apply_ops
from .ledger import cache_key
from .snapshot import CellRecord, output_digest
from .toolhost import ToolHost
from .toolset import Tool, ToolPolicy, Toolset

#: Refusals decided before a tool would run: the host reproduces them without asking the tool.
_BEFORE_TOOL = frozenset({"unknown_tool", "invalid_arguments"})
#: An honest replay does the recorded work with instant answers: twice the recorded time plus this
#: much covers a loaded machine (see :func:`rebuild_budget`).
_BUDGET_FACTOR = 2.0
_BUDGET_SLACK_S = 1.0
_MAX_COUNT = 1_000_000


def rebuild_budget(cells: list[CellRecord], run_timeout_s: float, cap_s: float) -> float:
    """How long replaying ``cells`` may take: the larger of the time limit of the run that asked
    for the rebuild (its caller already waits that long) and twice the recorded time plus a second
    (an honest replay is no slower than the original), at most ``cap_s``
    (``SandboxConfig.rebuild_timeout_s``). Cells slow only on replay thus cost about one run's
    time limit, not one per cell."""
    recorded = sum(cell.duration_ms for cell in cells) / 1000
    return min(cap_s, max(run_timeout_s, _BUDGET_FACTOR * recorded + _BUDGET_SLACK_S))


def kernel_facts(raw: Any) -> dict[str, Any] | None:
    """The ``facts`` of a done frame, checked (the kernel is not trusted): ``lanes`` a string of
    ``m``/``c``, ``threads`` and ``children`` counts; a malformed field is left out."""
    if type(raw) is not dict:
        return None
    facts: dict[str, Any] = {}
    lanes = raw.get("lanes")
    if type(lanes) is str and len(lanes) <= _MAX_COUNT and not lanes.strip("mc"):
        facts["lanes"] = lanes
    for name in ("threads", "children"):
        value = raw.get(name)
        if type(value) is int and 0 <= value <= _MAX_COUNT:
            facts[name] = value
    return facts


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
        self._ids: dict[str, str] = {}  # replayed call id -> recorded call id, for read_result
        self._labels: dict[str, list[str]] = {}  # tool name -> the labels its recorded results carried

    def begin(self, cell: CellRecord) -> None:
        expected = []
        labels: dict[str, set[str]] = {}
        for record in cell.calls:
            if record.result_labels:
                labels.setdefault(record.name, set()).update(record.result_labels)
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
            self._labels = {name: sorted(found) for name, found in labels.items()}

    def result_labels(self, name: str) -> list[str] | None:
        """The labels the cell's recorded results of ``name`` carried (a tool's results carry its
        declared labels, so every call of one tool carries the same)."""
        return self._labels.get(name)

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

    def finish(self, result: ExecutionResult, facts: dict[str, Any] | None = None) -> None:
        """Raise RestoreDiverged if the cell behaved otherwise than recorded (see the module docstring);
        ``facts``: what the cell's done frame reported (:func:`kernel_facts`)."""
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
        facts = facts or {}
        _check_calls(cell, result.calls, facts.get("lanes"), self._ids)
        if cell.output_digest is not None and output_digest(result) != cell.output_digest:
            raise RestoreDiverged(
                f"cell {cell.index} diverged: it wrote other output on replay than when recorded; its output "
                "depends on something that was not recorded (random numbers, the clock, the environment)",
                cell=cell.index)
        for what, recorded in (("threads", cell.threads), ("children", cell.children)):
            got = facts.get(what)
            if recorded is not None and got is not None and got != recorded:
                kind = "threads" if what == "threads" else "processes"
                raise RestoreDiverged(
                    f"cell {cell.index} diverged: {kind} left running: {got} on replay, {recorded} when "
                    "recorded (what runs on after a replay could call tools for real)", cell=cell.index)

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


def _signature(record: ToolCallRecord, ids: dict[str, str] | None = None) -> str:
    outcome = "ok" if record.ok else record.error.code if record.error is not None else "unfinished"
    arguments = record.arguments
    if ids and record.name == "read_result" and isinstance(arguments, dict) and arguments.get("call_id") in ids:
        arguments = {**arguments, "call_id": ids[arguments["call_id"]]}  # the recorded call's own id
    return f"{_short(record.name, arguments)} -> {outcome}"


def _pair_ids(cell: CellRecord, got: list[ToolCallRecord], ids: dict[str, str]) -> None:
    """Map each replayed call's id to the id its recorded twin had: concurrent calls are numbered in
    arrival order, so ``parallel`` may number them otherwise on replay, and a ``read_result`` of one
    names it by the replay's id. Equal calls are interchangeable (the same recorded answer)."""
    recorded: dict[str, collections.deque[str]] = collections.defaultdict(collections.deque)
    for r in cell.calls:
        if r.name != "read_result":
            recorded[_signature(r)].append(r.id)
    for r in got:
        if r.name != "read_result" and (twins := recorded.get(_signature(r))):
            ids[r.id] = twins.popleft()


def _check_calls(cell: CellRecord, got: list[ToolCallRecord], lanes: str | None,
                 ids: dict[str, str] | None = None) -> None:
    """Every call of the replay (refused ones and built-ins too) against the recorded ones: the main
    thread's in order, the concurrent ones as a multiset; all as a multiset when a lane is unknown.
    ``ids`` (replay id → recorded id, kept across the replay's cells) is extended with this cell's."""
    ids = {} if ids is None else ids
    _pair_ids(cell, got, ids)
    want, have = [_signature(r) for r in cell.calls], [_signature(r, ids) for r in got]
    if cell.lanes is not None and lanes is not None and len(cell.lanes) == len(want) and len(lanes) == len(have):
        ordered_want = [s for s, lane in zip(want, cell.lanes, strict=True) if lane == "m"]
        ordered_have = [(i, s) for i, (s, lane) in enumerate(zip(have, lanes, strict=True), 1) if lane == "m"]
        for k, (position, sig) in enumerate(ordered_have):
            expected = ordered_want[k] if k < len(ordered_want) else "no further call"
            if sig != expected:
                raise RestoreDiverged(
                    f"cell {cell.index} diverged at its tool call {position}: the replay called {sig}, but the "
                    f"recorded sequence had {expected} there (the main thread's calls must come in the recorded "
                    "order)", cell=cell.index, call=position)
        want = [s for s, lane in zip(want, cell.lanes, strict=True) if lane == "c"]
        have = [s for s, lane in zip(have, lanes, strict=True) if lane == "c"]
        if len(ordered_want) > len(ordered_have):
            raise RestoreDiverged(f"cell {cell.index} diverged: the replay ended without the recorded call "
                                  f"{ordered_want[len(ordered_have)]}", cell=cell.index)
    extra = collections.Counter(have) - collections.Counter(want)
    missing = collections.Counter(want) - collections.Counter(have)
    if extra or missing:
        what = f"called {next(iter(extra))}" if extra else f"never called {next(iter(missing))}"
        raise RestoreDiverged(f"cell {cell.index} diverged: the replay {what}, unlike the recorded calls "
                              "(refused calls and built-ins count too)", cell=cell.index)


def replay(session: SessionPort, run: ReplayCell, cells: list[CellRecord], budget_s: float) -> None:
    """Run ``cells`` in the session's (fresh) kernel with ``run`` and recorded answers, within
    ``budget_s`` seconds (plus a grace to stop the cell running then); raises RestoreDiverged."""
    runtime = session.runtime
    state = session.sandbox_state
    responder = ReplayResponder(runtime.toolset)
    host = runtime.host  # the same limits, so refusals replay as they happened
    state.replay_host = replay_host = ToolHost(
        responder.toolset_for_replay(), runtime.loop, limits=host.limits,
        replay_labels=responder.result_labels if _flowing(runtime, cells) else None)
    for name, tool in host.builtins.items():  # search_tools / describe_tool: answered again, they only read
        replay_host.builtins.setdefault(name, tool)
    deadline = time.monotonic() + budget_s
    try:
        for done, cell in enumerate(cells):
            left = deadline - time.monotonic()
            own = cell.timeout_s or session.config.timeout_s
            if left <= 0:
                raise _over_budget(cell, done, cells, budget_s)
            if cell.files:  # the session.files writes made before it (kept by a cluster's caller)
                _lay_ops(session, cell)
            responder.begin(cell)
            state.egress_replay = list(cell.egress)  # plain-HTTP requests answered from the record
            state.replay_flow = cell.flow_context
            result = run(cell.code, min(own, left))
            if result.termination == "timeout" and left < own:
                raise _over_budget(cell, done, cells, budget_s)
            responder.finish(result, state.last_facts)
    finally:
        state.replay_host = None
        state.replay_flow = None


def _lay_ops(session: SessionPort, cell: CellRecord) -> None:
    driver = session.sandbox_state.driver
    assert driver is not None  # the rebuild started it
    uid = session.config.uid if session.config.backend == "docker" and os.geteuid() == 0 else None
    apply_ops(driver.sandbox.workspace, cell.files, uid=uid)


def _flowing(runtime: RuntimePort, cells: list[CellRecord]) -> bool:
    """Whether the replay labels anything: a policy is on, or a cell was recorded under one."""
    return runtime.flow is not None or any(cell.flow_context is not None for cell in cells)


def _over_budget(cell: CellRecord, done: int, cells: list[CellRecord], budget_s: float) -> RestoreDiverged:
    recorded = sum(c.duration_ms for c in cells) / 1000
    return RestoreDiverged(
        f"the rebuild passed its time budget of {budget_s:g} s at cell {cell.index} ({done} of {len(cells)} cells "
        f"replayed; they took {recorded:.1f} s when recorded): the replay is slower than the original, so it "
        "does not behave as recorded", cell=cell.index)
