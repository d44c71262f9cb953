"""``Runtime`` (tools + sandbox settings, shared by many sessions) and ``Session`` (one sandbox,
one persistent namespace, many runs)."""

from __future__ import annotations

import asyncio
import collections
import functools
import json
import math
import os
import threading
import time
import weakref
from collections.abc import AsyncIterator, Callable, Iterable, Mapping
from pathlib import Path
from types import TracebackType
from typing import Any, Literal, cast

from .. import tracing
from ..errors import ReplayInterrupted, RuntimeClosed, SessionClosed, SnapshotError
from ..kernel.protocol import MAX_DEPTH, too_deep
from ..results import CodeError, Diagnostic, ExecutionResult, FileInfo, ToolCallRecord, bounded_value
from ..sandbox import SandboxConfig
from ..sandbox.driver import CallDeadline, CallHandler, KernelDriver, RunOutcome
from ..sandbox.pool import SandboxPool, open_kernel
from ..sandbox.reaper import drain as drain_reaper
from ..tool_stubs.catalog import DEFAULT_PROMPT_BUDGET
from ..tool_stubs.check import Checker, CheckMode, has_errors
from ..tool_stubs.check.tier2 import TypeCheck, ty_binary
from . import _check, _lifecycle, _retained, _rich, cutoffs
from . import events as _events
from ._calls import _retrieved
from ._files import WorkspaceSnapshot, snapshot, written_files
from ._loop import LoopThread
from ._replay import kernel_facts
from ._session_files import SessionFiles
from ._state import Lifecycle, Resume, SessionState
from .batch import BatchProgress, Isolation, map_code
from .discovery import ToolViews
from .events import EventHook, RunEvent
from .flow import FlowApprover, FlowPolicy
from .ledger import CallLedger, CallStore
from .limits import CallLimits
from .snapshot import CellRecord, FileOp, SkippedCell, Snapshot, toolset_fingerprint
from .toolhost import READ_RESULT, PermissionHook, ToolHost
from .toolset import Toolset

__all__ = ["Runtime", "Session"]

_MAX_VALUE_CHARS = 512 * 1024  # the kernel bounds values at 256 KiB; this is the safety net
_MAX_HISTORY = 32


class Runtime:
    """Tools and sandbox settings; makes sessions. Close it (or use ``with``) when done."""

    def __init__(self, tools: Toolset | Iterable[Any] | None = None, sandbox: SandboxConfig | None = None,
                 *, permission: PermissionHook | None = None, ask: PermissionHook | None = None,
                 max_result_chars: int = 1_000_000, max_calls_per_run: int = 10_000,
                 max_argument_bytes: int = 256 * 1024, max_concurrency: int = 32, tool_timeout_s: float = 30.0,
                 max_run_argument_bytes: int = 64 * 1024 * 1024, max_in_flight_per_session: int = 256,
                 max_session_record_bytes: int = 256 * 1024 * 1024, max_run_record_bytes: int = 64 * 1024 * 1024,
                 prompt_budget_chars: int = DEFAULT_PROMPT_BUDGET, suspend_idle_s: float | None = None,
                 check: CheckMode = "warn", check_types: bool = False,
                 max_file_bytes: int = 64 * 1024 * 1024, cluster: Any = None,
                 flow: FlowPolicy | None = None) -> None:
        #: What a node agent of ``cluster`` builds its own Runtime with (``codeact.cluster``).
        options = {k: v for k, v in locals().items() if k not in ("self", "tools", "sandbox", "cluster")}
        #: Check each code action before it runs (``tool_stubs.check``): ``warn`` runs it and puts
        #: what was found in ``diagnostics``; ``block`` does not run a cell with an error (it ends
        #: ``rejected``, nothing happened); ``off`` does not check. ``check_types`` adds tier 2, a
        #: real type checker (``ty``, the ``codeact[check]`` extra), whose findings only warn.
        self.check_mode = _check.check_mode(check)
        if check_types:
            ty_binary()  # CheckerUnavailable now, before anything is started
        self.toolset = tools if isinstance(tools, Toolset) else Toolset(list(tools or []))
        self.config = sandbox or SandboxConfig()
        if flow is not None and not isinstance(flow, FlowPolicy):
            raise TypeError(f"flow must be a FlowPolicy or None, not {type(flow).__name__}")
        #: The data-flow policy (``runtime.flow``): labels tracked in every cell, every call judged.
        self.flow = flow
        self.loop = LoopThread()
        #: The bounds of every tool call, handed down whole (to the host, and to a replay's).
        self.limits = CallLimits(max_result_chars=max_result_chars, max_concurrency=max_concurrency,
                                 tool_timeout_s=tool_timeout_s, max_calls_per_run=max_calls_per_run,
                                 max_argument_bytes=max_argument_bytes, max_run_argument_bytes=max_run_argument_bytes,
                                 max_in_flight_per_session=max_in_flight_per_session)
        self.host = ToolHost(self.toolset, self.loop, permission=permission, ask=ask, limits=self.limits,
                             flow=flow)
        self.views = ToolViews(self.host, prompt_budget_chars)  # registers search_tools / describe_tool
        self.stubs = self.views.sandbox_stubs  # the user's tools and the built-ins (read_result, discovery)
        self.checker = Checker(self.views.sandbox_specs, self.views.catalog.names)
        self.type_check = TypeCheck(self.views.sandbox_specs, self.views.catalog.names) if check_types else None
        #: The largest file ``Session.files`` reads or writes.
        self.max_file_bytes = max_file_bytes
        #: The bytes of call records (arguments and results, see ``_retained``) a session keeps, at
        #: most: in ``history`` (oldest dropped first), and in ``cells`` for replay (past it, a new
        #: cell is kept inexact, without its records, and listed in ``skipped``).
        self.max_session_record_bytes = max_session_record_bytes
        #: The bytes of call records one run may keep in ``cells``; past it, as above.
        self.max_run_record_bytes = max_run_record_bytes
        self._sessions: weakref.WeakSet[Session] = weakref.WeakSet()
        self._pool: SandboxPool | None = None
        self.closed = False
        #: ``cluster=RayCluster(...)``: sessions live on the cluster's nodes, each node's agent
        #: holding its own pool and suspender (``codeact.cluster``); None: here.
        self.cluster = cluster
        self._deployment = cluster.deploy(self, options) if cluster is not None else None
        if self.config.pool_size and cluster is None:
            self._pool = SandboxPool(self.config, self.config.pool_size, self.stubs, prepare=_note_workspace)
        #: Stops the sandbox of a session idle this long; its next run rebuilds it (``restored``).
        self.suspender = (_lifecycle.IdleSuspender(self._sessions, suspend_idle_s) if suspend_idle_s and cluster is None
                          else None)
        tracing.watch(self)

    @property
    def prompt_view(self) -> str:
        """The tools as the model is shown them: every stub within ``prompt_budget_chars``, else an
        index of groups and how to use ``search_tools`` / ``describe_tool`` (see ``runtime.discovery``)."""
        return self.views.prompt_view

    def session(self, *, workspace: str | Path | None = None,
                inputs: Mapping[str, str | Path] | None = None,
                config: SandboxConfig | None = None) -> Session:
        """A new isolated session (fresh namespace). ``workspace`` mounts a host directory;
        ``inputs`` maps names to host files made visible read-only under ``/inputs``."""
        if self.closed:
            raise RuntimeClosed("the runtime is closed")
        if self._deployment is not None:
            return self._on_cluster(None, workspace, inputs, config)
        session = Session(self, workspace=workspace, inputs=inputs, config=config)
        self._sessions.add(session)
        return session

    def check(self, code: str) -> list[Diagnostic]:
        """What the check finds in ``code`` as the first cell of a fresh session (nothing runs)."""
        return _check.SessionNames().check(self.checker, code, self.type_check)

    def run(self, code: str, **kwargs: Any) -> ExecutionResult:
        """Run one code action in a fresh session."""
        with self.session(**kwargs) as session:
            return session.run(code)

    async def arun(self, code: str, **kwargs: Any) -> ExecutionResult:
        return await asyncio.to_thread(self.run, code, **kwargs)

    def map(self, code_or_fn: str | Callable[..., Any], inputs: Iterable[Any], *, concurrency: int = 4,
            progress: bool | BatchProgress = False, isolation: Isolation = "auto") -> list[ExecutionResult]:
        """One code action per input (bound as ``item``), every result in input order, failures
        included; workers reuse warm sessions. See :func:`codeact.runtime.batch.map_code`.

        ``progress=True`` draws a bar on stderr; or pass an object the batch advances per item
        (see ``BatchProgress``)."""
        return map_code(self, code_or_fn, inputs, concurrency=concurrency, progress=progress, isolation=isolation)

    def restore(self, snapshot: Snapshot, *, config: SandboxConfig | None = None,
                workspace: str | Path | None = None, inputs: Mapping[str, str | Path] | None = None,
                lazy: bool = False) -> Session:
        """A new session with ``snapshot``'s state: a fresh sandbox whose namespace is rebuilt by
        replaying the cells, every tool call answered from the records (no tool runs), then the
        saved files laid over the workspace. ``lazy`` defers that to the first run (whose result
        then says ``restored``). Raises RestoreDiverged when a cell does not replay as recorded."""
        if snapshot.toolset_fingerprint != toolset_fingerprint(self.host.specs):
            raise SnapshotError("the snapshot was taken with other tools (names or input schemas differ); "
                                "restore it in a runtime with the same tools")
        if self._deployment is not None:
            return self._on_cluster(snapshot, workspace, inputs, config, lazy=lazy)
        session = self.session(workspace=workspace, inputs=inputs, config=config or snapshot.config)
        session.cells = [c.model_copy(deep=True) for c in snapshot.cells]
        session.skipped = list(snapshot.skipped)
        session._flow_context = frozenset(snapshot.flow_context or ())
        session.sandbox_state.resume = Resume(files=None if snapshot.files is None else list(snapshot.files))
        if not lazy:
            try:
                session.start()
            except BaseException:
                session.close()
                raise
            session.sandbox_state.restored = False
        session.last_used = time.monotonic()
        return session

    def _on_cluster(self, snapshot: Snapshot | None, workspace: Any, inputs: Any, config: Any,
                    lazy: bool = True) -> Session:
        """A session on a node of ``cluster`` (a ``ClusterSession``: the same public methods)."""
        if workspace is not None or inputs is not None or config is not None:
            raise ValueError("workspace=, inputs= and config= name this machine's paths and settings; on a "
                             "cluster put files in with session.files and set the config on the Runtime")
        assert self._deployment is not None
        return cast(Session, self._deployment.session(snapshot, lazy=lazy))

    def interrupt(self) -> None:
        """Interrupt the running code of every session (from any thread); see ``Session.interrupt``."""
        for session in list(self._sessions):
            session.interrupt()
        if self._deployment is not None:
            self._deployment.interrupt()  # the sessions on the cluster's nodes

    def close(self) -> None:
        if self.closed:
            return
        self.closed = True
        if self.suspender is not None:
            self.suspender.close()
        for session in list(self._sessions):
            session.close()
        if self._deployment is not None:
            self._deployment.close()  # its sessions, agents and relay
        if self._pool is not None:
            self._pool.close()
        if self.type_check is not None:
            self.type_check.close()
        try:
            self.toolset.close()
        finally:
            self.loop.close()
            drain_reaper()  # containers of closed sessions are removed before close returns

    def __enter__(self) -> Runtime:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    @property
    def pool(self) -> SandboxPool | None:
        """The warm pool (``SandboxConfig.pool_size`` > 0), if any."""
        return self._pool

    def _otel_gauges(self) -> dict[str, int]:
        """What ``codeact.tracing``'s gauges read of this runtime."""
        sessions = [s for s in list(self._sessions) if s.state == "open"]
        return {"codeact.sessions.open": len(sessions),
                "codeact.sessions.suspended": sum(s.suspended for s in sessions),
                "codeact.pool.size": self._pool.idle if self._pool is not None and not self.closed else 0}

    def _open_kernel(self, config: SandboxConfig, workspace: Path | None,
                     inputs: Mapping[str, Path]) -> KernelDriver:
        """A started, handshaken kernel: from the warm pool when the session needs nothing special."""
        if self._pool is not None and workspace is None and not inputs and config == self.config:
            asked = time.perf_counter()
            pooled = self._pool.acquire()
            tracing.pool_acquired(time.perf_counter() - asked, pooled is not None)
            if pooled is not None:
                return pooled
        return open_kernel(config, self.stubs, workspace, inputs)


class Session:
    """One sandbox and its persistent namespace; runs are serialized."""

    def __init__(self, runtime: Runtime, *, workspace: str | Path | None = None,
                 inputs: Mapping[str, str | Path] | None = None,
                 config: SandboxConfig | None = None) -> None:
        self.runtime = runtime
        self.config = config or runtime.config
        self.user_workspace = Path(workspace).resolve() if workspace is not None else None
        self.inputs = {k: Path(v).resolve() for k, v in (inputs or {}).items()}
        #: The session's sandbox: its kernel, what rebuilds it, who answers it while a replay runs.
        self.sandbox_state = SessionState(functools.partial(runtime._open_kernel, self.config, self.user_workspace,
                                                            self.inputs))
        #: The session's memory of calls across runs: call ids, cached answers, large results.
        self.calls: CallStore = runtime.host.new_store()
        self.cache: dict[str, Any] = self.calls.cache
        #: Recent results, oldest dropped first: at most ``_MAX_HISTORY`` of them and at most the
        #: runtime's ``max_session_record_bytes`` of call records in all.
        self._history: collections.deque[ExecutionResult] = collections.deque(maxlen=_MAX_HISTORY)
        self._history_bytes: collections.deque[int] = collections.deque(maxlen=_MAX_HISTORY)
        #: The runs that built the namespace, with full call records: what snapshots replay
        #: (kept for the session's life, like the ledger's large results).
        self._cells: list[CellRecord] = []
        #: What ``_cells`` holds of call records, within the runtime's budgets (see ``_retained``).
        self._kept = _retained.RecordBudget(runtime.max_run_record_bytes, runtime.max_session_record_bytes)
        #: Cells before this index were taken out of the state by a reset (not marked again: a
        #: batch resets once per item, and marking every earlier cell made it quadratic).
        self._reset_upto = 0
        #: The last run, not yet in ``history`` and ``cells`` (see :meth:`_settle`), with the facts
        #: its done frame reported for replay (unchecked until then: ``_replay.kernel_facts``).
        self._unsettled: tuple[str, ExecutionResult, CallLedger, float | None, Any, list[FileOp]] | None = None
        #: The ``session.files`` writes and removals since the last logged run began: the next
        #: cell carries them (``CellRecord.files``), so a replay lays them where they happened.
        self._file_ops: list[FileOp] = []
        self._settle_lock = threading.Lock()
        #: Cells left out of this session's state because they could not be replayed exactly, and
        #: cells whose records were over the record budget (a rebuild will leave them out).
        self.skipped: list[SkippedCell] = []
        self.last_used = time.monotonic()
        self._lock = threading.Lock()
        self._interrupted = False
        self._workspace: WorkspaceSnapshot | None = None  # the last run's snapshot of the workspace
        self._names = _check.SessionNames()  # what the namespace may hold, for the check
        #: Under a flow policy: the labels of every observation returned since the session began or
        #: since the last :meth:`trust` (what the model has seen); each run's literals carry them.
        self._flow_context: frozenset[str] = frozenset()
        #: Under a flow policy whose decision is ``ask`` and that has no ``ask`` of its own: who
        #: approves this session's calls (``FlowPolicy.ask``'s signature; ``serve-mcp`` sets it to an
        #: elicitation of its client for the run). None: the runtime's ``ask`` hook.
        self.flow_approver: FlowApprover | None = None

    @property
    def flow_context(self) -> frozenset[str]:
        """What the model has seen, as labels (``runtime.flow``): the union of the labels of every
        observation this session returned since it began or since :meth:`trust`."""
        return self._flow_context

    def trust(self) -> None:
        """Mark a trusted point: what the model saw so far no longer labels the code it writes
        next (e.g. after a person reviewed the conversation). Values keep their own labels."""
        self._flow_context = frozenset()

    @property
    def lifecycle(self) -> Lifecycle:
        """Where the session is in its life: new, live, suspended or closed (``runtime._state``)."""
        return self.sandbox_state.lifecycle

    @property
    def state(self) -> Literal["open", "closed"]:
        return "closed" if self.sandbox_state.closed else "open"

    @property
    def history(self) -> collections.deque[ExecutionResult]:
        """Recent results, oldest dropped first: at most ``_MAX_HISTORY`` of them and at most the
        runtime's ``max_session_record_bytes`` of call records in all (``read_result`` pages as
        their place in the large result, see ``_retained``)."""
        self._settle()
        return self._history

    @property
    def cells(self) -> list[CellRecord]:
        """The runs that built the namespace, with their call records: what snapshots replay. A run
        whose records are over the runtime's record budgets is kept inexact without them (``_retained``)."""
        self._settle()
        return self._cells

    @cells.setter
    def cells(self, cells: list[CellRecord]) -> None:
        self._settle()
        self._cells = cells
        self._names.learn_cells(c.code for c in cells)
        self._kept.reset(cells)
        self._reset_upto = 0

    def _settle(self) -> None:
        """Put the last run into ``history`` and ``cells``. Deferred from the end of that run (its
        result is returned first) to while the next run's code executes, or to the first look."""
        with self._settle_lock:
            if self._unsettled is None:
                return
            code, result, ledger, timeout_s, facts, file_ops = self._unsettled
            index = self._cells[-1].index + 1 if self._cells else 1
            kept = _retained.KeptRun(ledger.kept_records(), ledger.argument_bytes,
                                     builtin_pages=READ_RESULT not in self.runtime.toolset)
            cell = CellRecord.of(index, code, result, kept.records, timeout_s, kernel_facts(facts),
                                 flow_context=ledger.flow, files=file_ops)
            self._unsettled = None
            self._remember(kept.for_history(result), kept.bytes)
            laid = sum(len(op.data or "") for op in file_ops)
            over = self._kept.take(kept.bytes + _retained.egress_bytes(result) + laid)
            self._cells.append(cell if over is None else _retained.unkept(cell, over, self.skipped))

    def _meanwhile(self, code: str, found: list[list[Diagnostic]] | None) -> None:
        """What a run does while its code executes: settle the last run, check this one's code
        (``found`` None: no check now, but the names it binds are read, unless a check before the
        run read them; the run's end learns them)."""
        self._settle()
        if found is None:
            self._names.read(code)
        else:
            found.append(self.check(code))

    @property
    def files(self) -> SessionFiles:
        """Read, write, list and remove workspace files from the host, never through a link the code
        planted (see ``_session_files``)."""
        docker_root = self.config.backend == "docker" and os.geteuid() == 0  # files owned as snapshots lay them
        return SessionFiles(self._files_driver, self.runtime.max_file_bytes,
                            (self.config.uid, self.config.uid) if docker_root else None, self._file_changed)

    def _file_changed(self, path: str, data: bytes | None) -> None:
        self._file_ops.append(FileOp(path=path) if data is None else FileOp.write(path, data))  # atomic

    def _files_driver(self) -> KernelDriver:
        """The session's kernel (started if need be); during a run, the one running it."""
        if self._lock.acquire(blocking=False):
            try:
                return self._ensure()
            finally:
                self._lock.release()
        driver = self.sandbox_state.driver
        if driver is None:  # being started or rebuilt by another thread: wait for it
            with self._lock:
                return self._ensure()
        return driver

    @property
    def workspace(self) -> Path:
        """The host directory the code sees as its working directory."""
        return self._ensure().sandbox.workspace

    def _ensure(self, timeout_s: float | None = None) -> KernelDriver:
        """The session's kernel, started (or rebuilt, within a budget from ``timeout_s``: the time
        limit of the run that asks) if need be (caller holds the lock)."""
        return _lifecycle.ensure(self, self._replay_cell, timeout_s)

    def _replay_cell(self, code: str, timeout_s: float) -> ExecutionResult:
        """A recorded cell run again by a replay (``_state.ReplayCell``)."""
        return self._run_cell(code, timeout_s, log=False)

    @property
    def started(self) -> bool:
        """Whether the sandbox is up: the next run will not start (or rebuild) one first."""
        return self.sandbox_state.lifecycle is Lifecycle.LIVE

    def start(self) -> Session:
        """Start the sandbox now rather than at the first run."""
        with self._lock:
            self._ensure()
        return self

    def run(self, code: str, *, timeout_s: float | None = None, on_event: EventHook | None = None,
            inline_events: bool = False, keep_calls: list[ToolCallRecord] | None = None) -> ExecutionResult:
        """Run one code action; never raises for anything the code does.

        ``on_event`` receives the run's live events (:mod:`codeact.runtime.events`) on this thread;
        with ``inline_events``, on whichever thread makes each one, with no ``done`` event (a hook
        that only keeps them, thread-safe: a run then switches no thread per event).
        ``keep_calls`` (without ``on_event``): each call's record is appended to it as the call
        arrives, and finishes in place; no event is made (the calls of a run that may be cut short,
        read from another thread while it runs).
        """
        if not isinstance(code, str):
            raise TypeError(f"code must be a str, not {type(code).__name__}")
        _check_timeout(timeout_s)
        if keep_calls is not None:
            if on_event is not None:
                raise ValueError("keep_calls is for a run without on_event (the events carry the calls)")
            return _events.run_keeping_calls(functools.partial(self._run, code, timeout_s), self.config.output_cap,
                                             keep_calls)
        if on_event is not None and inline_events:
            return _events.run_inline(functools.partial(self._run, code, timeout_s), self.config.output_cap, on_event)
        if on_event is not None:
            return _events.run_with_events(functools.partial(self._run, code, timeout_s), self.config.output_cap,
                                           on_event)
        return self._run(code, timeout_s, None)

    def stream(self, code: str, *, timeout_s: float | None = None) -> AsyncIterator[RunEvent]:
        """``async for event in session.stream(code)``: the run's live events, ``done`` last."""
        if not isinstance(code, str):
            raise TypeError(f"code must be a str, not {type(code).__name__}")
        _check_timeout(timeout_s)
        return _events.stream(functools.partial(self._run, code, timeout_s), self.config.output_cap)

    def check(self, code: str) -> list[Diagnostic]:
        """What the check finds in ``code`` as this session's next cell (nothing runs)."""
        return self._names.check(self.runtime.checker, code, self.runtime.type_check)

    def _run(self, code: str, timeout_s: float | None, sink: _events._Sink | None) -> ExecutionResult:
        with self._lock:
            self.last_used = time.monotonic()
            found: list[Diagnostic] | None = None
            mode = self.runtime.check_mode
            # ``warn`` with tier 1 only: the check cannot stop the run, so it is done while the
            # kernel runs the code (``_traced_cell``); the names it reads are those before this cell.
            meanwhile = mode == "warn" and self.runtime.type_check is None
            if mode != "off":
                if self.state == "closed":
                    raise SessionClosed("the session is closed")
                if not meanwhile:
                    found = self.check(code)
                    if mode == "block" and has_errors(found):
                        result = _check.rejected(found)
                        self._settle()
                        self._remember(result, 0)  # in history; not in cells: it changed nothing
                        return result
            note = None
            state = self.sandbox_state
            if state.resume is not None:
                self._interrupted = False
                try:
                    self._ensure(timeout_s)
                except SnapshotError as exc:
                    note = _lifecycle.give_up(self, self._replay_cell, exc)
                except ReplayInterrupted as exc:  # the state is kept for the next run; this code never ran
                    return ExecutionResult(
                        ok=False, termination="interrupted" if self._interrupted else "killed",
                        reason=f"{exc}; the code did not run, and the session's state is rebuilt at the next run")
            restored, state.restored = state.restored, False
            result = self._run_cell(code, timeout_s, sink=sink, restored=restored, check=meanwhile)
            if note is not None:
                result.reason = note if result.reason is None else f"{result.reason}; {note}"
            if found is not None:
                result.diagnostics = found
            self.last_used = time.monotonic()
            return result

    def _run_cell(self, code: str, timeout_s: float | None, *, log: bool = True,
                  sink: _events._Sink | None = None, restored: bool = False, check: bool = False) -> ExecutionResult:
        """One run (caller holds the lock); ``log`` keeps it in ``history`` and ``cells``; ``check``
        puts the check's findings in ``diagnostics``, found while the kernel runs the code."""
        trace = tracing.run_trace(replayed=self.sandbox_state.replay_host is not None)
        if trace is None:
            return self._traced_cell(code, timeout_s, log, sink, restored, None, check)
        with trace:  # ends the run's span, as failed if the run raised
            return trace.ended(self._traced_cell(code, timeout_s, log, sink, restored, trace, check))

    def _traced_cell(self, code: str, timeout_s: float | None, log: bool, sink: _events._Sink | None,
                     restored: bool, trace: tracing.RunTrace | None, check: bool) -> ExecutionResult:
        driver = self._ensure()
        state = self.sandbox_state
        host = state.replay_host or self.runtime.host  # while replaying, the host answering from the records
        self._interrupted = False
        found: list[list[Diagnostic]] = []
        file_ops: list[FileOp] = []
        if log:  # the writes before this run: replayed just before its cell
            file_ops, self._file_ops = self._file_ops, []
        ledger = CallLedger(self.calls) if sink is None else sink.ledger(self.calls)
        ledger.trace = trace
        flow = self._flow_of(ledger)
        before = self._workspace = snapshot(driver.sandbox.workspace, self._workspace or driver.prepared)

        on_call = self._call_handler(driver, ledger)
        broker = getattr(driver.sandbox, "egress", None)  # SandboxConfig(egress=...): the host's broker
        if broker is not None:
            broker.begin_run(state.egress_replay if state.replay_host is not None else None,
                             on_record=sink.egress if sink is not None and sink.streams else None)

        timeout = timeout_s if timeout_s is not None else self.config.timeout_s
        if sink is not None:
            sink.attach(driver)  # a listener may interrupt the run from here ...
        outcome = driver.run(code, on_call, timeout,
                             output_cap=self.config.output_cap, output_limit=self.config.output_limit,
                             grace_s=self.config.grace_s, display=_rich.caps(self.config),
                             max_call_bytes=host.limits.max_argument_bytes, flow=flow,
                             on_output=sink.output if sink is not None and sink.streams else None,
                             after_send=functools.partial(self._meanwhile, code, found if check else None))
        if sink is not None:
            sink.detach()  # ... to here, never a later run
        if check and not found:  # the run frame was not sent, or the check raised: now, before learn
            found.append(self.check(code))
        self._names.learn(code, outcome.done.names if outcome.done is not None else None)
        files = _written_files(driver.sandbox, before)
        # A listener that raised, or a stream left early, interrupted the run on request too; so did
        # what was raised into this thread mid-run (Ctrl-C), raised again once the run is recorded.
        interrupted = self._interrupted or (sink is not None and sink.cancelled) or outcome.raised is not None
        result = _assemble(outcome, ledger, self.config, timeout, self.runtime.limits.max_result_chars,
                           files=files, interrupted=interrupted, restored=restored,
                           diagnostics=found[0] if found else [])
        facts = outcome.done.facts if outcome.done is not None else None
        if flow is not None:
            self._observed(result, outcome, log)
        if broker is not None:
            result.egress = broker.take()
        host.release_abandoned(ledger)  # once _assemble ended their records
        if outcome.state_lost:
            state.discard()
        if log:
            self._settle()  # normally done already, while this run's code executed
            self._unsettled = (code, result, ledger, timeout_s, facts, file_ops)
            if outcome.state_lost and self.config.recover:  # the next run rebuilds the state before it
                self.cells[-1].in_state = False
                state.resume = Resume(files=None)
        else:  # a replayed cell: what replay compares
            state.last_facts = kernel_facts(facts)
        if outcome.raised is not None:
            raise outcome.raised
        return result

    async def arun(self, code: str, *, timeout_s: float | None = None) -> ExecutionResult:
        """:meth:`run` on a worker thread. Cancelling the awaiting task stops the code: a run not yet
        started never starts, a running one is interrupted (it ends ``interrupted``, its records
        kept) rather than running on to its end."""
        if not isinstance(code, str):
            raise TypeError(f"code must be a str, not {type(code).__name__}")
        _check_timeout(timeout_s)
        guard = _events._Guard(self.config.output_cap)
        began, ended = threading.Event(), threading.Event()  # the worker's, not the loop's, word

        def run() -> ExecutionResult:
            began.set()
            try:
                return self._run(code, timeout_s, guard)
            finally:
                ended.set()

        work = asyncio.ensure_future(asyncio.to_thread(run))
        try:
            return await asyncio.shield(work)
        except asyncio.CancelledError:
            guard.refuse_start()
            work.add_done_callback(_retrieved)
            # Until the worker has ended; or for good once the future settled without it ever
            # beginning (the loop went away first: it never will, and its run was refused anyway).
            _events._interrupt_until(guard, lambda: ended.is_set() or (work.done() and not began.is_set()))
            raise

    # -- reset and bind (a batch's worker between items, ``runtime.batch``): protocol frames, no code runs
    def reset_namespace(self, *, forget: bool = False) -> None:
        """Put the namespace back to how the sandbox started: names the runs added are removed,
        tool stubs and helpers rebound even where the code shadowed or deleted them (a ``reset``
        frame). Nothing enters ``history`` or ``cells``; the earlier cells leave the state (a
        snapshot after this one replays none of them), or with ``forget`` leave ``cells`` (a
        batch's worker session: its log would grow with the batch). Imported modules and files stay.
        Under a flow policy the context starts empty again, as after :meth:`trust`: the values
        whose observations made it are gone (a batch's next item must not carry the last one's).

        Raises SandboxError (the sandbox is then discarded; the next use starts a new one)."""
        with self._lock:
            cells = self.cells
            for cell in cells[self._reset_upto:]:
                cell.in_state = False
            if forget:
                cells.clear()
                self._kept.reset(cells)
            self._reset_upto = len(cells)
            if self.sandbox_state.resume is not None:  # suspended: a new sandbox with the files, no cell to replay
                try:
                    self._ensure()
                except SnapshotError:
                    _lifecycle.forget_state(self)
            self.sandbox_state.restored = False
            self._flow_context = frozenset()
            self._control(lambda driver: driver.reset())

    def bind_names(self, values: Mapping[str, Any]) -> None:
        """Set names in the namespace to JSON values (a ``bind`` frame: decoded, never evaluated).
        Nothing enters ``history`` or ``cells``, so the names are not part of what a snapshot,
        a suspension or a recovery rebuilds.

        Raises TypeError (a value is not JSON) or ValueError (a name cannot be bound) before
        anything is sent, the session untouched; SandboxError as :meth:`reset_namespace`."""
        with self._lock:
            self._control(lambda driver: driver.bind(values))
            self._names.bind(values)

    def _control(self, action: Callable[[KernelDriver], None]) -> None:
        """Do a reset/bind on the kernel (caller holds the lock); a kernel that died is discarded."""
        self.last_used = time.monotonic()
        driver = self._ensure()
        try:
            action(driver)
        finally:
            if driver.dead:
                self.sandbox_state.discard()
            self.last_used = time.monotonic()

    def interrupt(self) -> None:
        """Stop the running code (from any thread): the run ends ``interrupted``, its records kept.
        Code that catches ``KeyboardInterrupt`` runs on; does nothing when no run is in progress."""
        driver = self.sandbox_state.driver
        if driver is not None and self._lock.locked():
            self._interrupted = True
            driver.interrupt()

    def _flow_of(self, ledger: CallLedger) -> dict[str, Any] | None:
        """The run frame's ``flow`` (None: no tracking): the context of what the model had seen
        (a replayed cell: the context it had when recorded), noted on the ledger."""
        ledger.flow_ask = self.flow_approver
        if self.sandbox_state.replay_host is not None:
            context = self.sandbox_state.replay_flow
        elif self.runtime.flow is not None:
            context = [] if self.runtime.flow.trusted_context else sorted(self._flow_context)
        else:
            return None
        if context is None:
            return None
        ledger.flow, ledger.flow_context = context, frozenset(context)
        return {"context": context}

    def _observed(self, result: ExecutionResult, outcome: RunOutcome, log: bool) -> None:
        """The observation's labels on the result; what the model will see joins the context."""
        labels = outcome.done.labels if outcome.done is not None else None
        result.labels = {part: sorted(set(found)) for part, found in (labels or {}).items() if found}
        if log:
            self._flow_context = self._flow_context.union(*result.labels.values())

    def _call_handler(self, driver: KernelDriver, ledger: CallLedger) -> CallHandler:
        """Every call from the sandbox goes into the host's one pipeline (bounds included); during a
        replay, into the replay host (same pipeline, recorded answers)."""
        dispatch = (self.sandbox_state.replay_host or self.runtime.host).dispatch

        def on_call(seq: int, name: str, arguments: Any, size: int, labels: Any = None) -> CallDeadline | None:
            return dispatch(ledger, name, arguments, functools.partial(driver.reply, seq), size, inline=True,
                            labels=labels)

        return on_call

    def _remember(self, result: ExecutionResult, argument_bytes: int) -> None:
        history = self._history
        if len(history) == history.maxlen:
            self._history_bytes.popleft()
        history.append(result)
        self._history_bytes.append(argument_bytes)
        while len(history) > 1 and sum(self._history_bytes) > self.runtime.max_session_record_bytes:
            history.popleft()
            self._history_bytes.popleft()

    def snapshot(self, *, allow_inexact: bool = False,
                 max_workspace_bytes: int = _lifecycle.MAX_WORKSPACE_BYTES) -> Snapshot:
        """The session's state as a :class:`Snapshot` (cells, call records, workspace files).
        A cell that cannot be replayed exactly (cut by a timeout, or its sandbox died) makes this
        raise SnapshotError naming it, unless ``allow_inexact``: then it is left out and listed."""
        with self._lock:
            if self.state == "closed":
                raise SessionClosed("the session is closed")
            return _lifecycle.take_snapshot(self, allow_inexact, max_workspace_bytes)

    def fork(self, n: int = 1, *, allow_inexact: bool = False) -> list[Session]:
        """``n`` independent sessions with this one's current state (each in a fresh sandbox and
        workspace, rebuilt by replay); tool calls made after the fork are real and separate."""
        if n < 1:
            raise ValueError(f"fork needs n >= 1, got {n}")
        with tracing.span("codeact.fork", {"codeact.fork.n": n}):
            snap = self.snapshot(allow_inexact=allow_inexact)
            restore = functools.partial(self.runtime.restore, snap, config=self.config, inputs=self.inputs)
            return _lifecycle.restore_many(restore, n)

    def suspend(self) -> bool:
        """Stop the sandbox now and rebuild it at the next run; False (nothing changes) if the
        session is busy, not started, or its state cannot be rebuilt exactly."""
        if not self._lock.acquire(blocking=False):
            return False
        try:
            with tracing.span("codeact.suspend") as current:
                done = _lifecycle.suspend(self)
                if current is not None:
                    current.set_attribute("codeact.suspend.done", done)
                return done
        finally:
            self._lock.release()

    @property
    def suspended(self) -> bool:
        """No sandbox now; the next run rebuilds the state by replay."""
        return self.sandbox_state.lifecycle is Lifecycle.SUSPENDED

    def close(self) -> None:
        """Kill the sandbox and remove its directories. Idempotent. From another thread while a
        run is in progress, the sandbox is killed first: that run ends ``killed`` at once rather
        than holding ``close`` until it ends by itself."""
        if self.state == "closed":
            return
        if not self._lock.acquire(blocking=False):
            driver = self.sandbox_state.driver
            if driver is not None:
                driver.kill()
            self._lock.acquire()
        try:
            self.sandbox_state.closed = True
            self.sandbox_state.discard()
        finally:
            self._lock.release()

    def __enter__(self) -> Session:
        return self

    def __exit__(self, et: type[BaseException] | None, ev: BaseException | None,
                 tb: TracebackType | None) -> None:
        self.close()

    async def __aenter__(self) -> Session:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await asyncio.to_thread(self.close)


def _check_timeout(timeout_s: float | None) -> None:
    """A run's ``timeout_s``: None (the config's) or a positive finite number of seconds; 0 is
    refused rather than read as "the default"."""
    if timeout_s is None:
        return
    if isinstance(timeout_s, bool) or not isinstance(timeout_s, (int, float)):
        raise TypeError(f"timeout_s must be a number of seconds or None, not {type(timeout_s).__name__}")
    if not math.isfinite(timeout_s) or timeout_s <= 0:
        raise ValueError(f"timeout_s must be a positive number of seconds (or None for the config's), "
                         f"not {timeout_s!r}")


def _note_workspace(driver: KernelDriver) -> None:
    """A pooled kernel's empty workspace, snapshotted while it waits: the first run of the session
    that takes it then checks the workspace with one ``stat`` instead of a scan."""
    driver.prepared = snapshot(driver.sandbox.workspace)


def _bounded_records(records: list[ToolCallRecord], max_chars: int) -> list[ToolCallRecord]:
    """The result's copy of the ledger, each record's result bounded (the ledger keeps everything)."""
    for record in records:
        if record.ok and record.result is not None:
            record.result = bounded_value(_shallow(record.result), max_chars, record.id)
    return records


def _assemble(outcome: RunOutcome, ledger: CallLedger, config: SandboxConfig, timeout_s: float,
              max_result_chars: int, *, files: list[FileInfo], interrupted: bool = False,
              restored: bool = False, diagnostics: list[Diagnostic] | None = None) -> ExecutionResult:
    """The run's result, built once from everything it collected (``interrupted``: on request)."""
    done = outcome.done
    termination = outcome.termination
    if outcome.interrupted and (done is None or done.termination != "completed"):
        termination = "timeout"
    error = CodeError(**done.error.as_dict()) if done is not None and done.error else None
    if termination == "error" and error is not None and error.type == "MemoryError":
        termination = "memory"
    reason = outcome.reason
    if termination == "timeout" and reason is None:
        reason = f"the run passed its time limit of {timeout_s:g} s"
    if termination == "output_limit":
        reason = f"the code wrote more than {config.output_limit} characters"
    ok = termination == "completed"
    if interrupted and not ok:
        lost = f" ({reason})" if outcome.state_lost and reason else ""  # e.g. it ignored the interrupt
        termination, reason = "interrupted", f"the run was interrupted on request{lost}"
    if termination == "timeout" and error is not None and error.type == "KeyboardInterrupt":
        error = _timed_out(error, timeout_s)  # the interrupt was the timeout's, not a person's
    ledger.close_pending(cutoffs.run_ended(termination))
    fields: dict[str, Any] = {}
    if done is not None:
        cap = config.output_cap
        fields.update(stdout=done.stdout[:cap], stderr=done.stderr[:cap],
                      stdout_truncated=done.stdout_truncated or len(done.stdout) > cap,
                      stderr_truncated=done.stderr_truncated or len(done.stderr) > cap,
                      value=bounded_value(_shallow(done.value), _MAX_VALUE_CHARS, "value"))
        if done.final is not None:
            fields.update(final_answer=_shallow(done.final.get("value")), answered=True)
        fields.update(outputs=_rich.checked(done.outputs, config))
    result = ExecutionResult(ok=ok, termination=termination, error=error,
                             calls=_bounded_records(ledger.final_records(), max_result_chars), files=files,
                             duration_ms=outcome.wall_ms, state_lost=outcome.state_lost, reason=reason,
                             restored=restored, diagnostics=diagnostics or [], **fields)
    return result


def _timed_out(error: CodeError, timeout_s: float) -> CodeError:
    """The KeyboardInterrupt the timeout raised in the code, said as what it was."""
    message = f"the run passed its time limit of {timeout_s:g} s (timeout_s) and was interrupted"
    head, _, last = error.traceback.rstrip("\n").rpartition("\n")
    tail = f"TimeoutError: {message}"
    traceback = f"{head}\n{tail}" if last.startswith("KeyboardInterrupt") and head else error.traceback or tail
    return CodeError(type="TimeoutError", message=message, lineno=error.lineno, traceback=traceback)


def _shallow(value: Any) -> Any:
    """A value nesting deeper than the result can serialize becomes its (bounded) JSON text."""
    if not too_deep(value, MAX_DEPTH):
        return value
    try:
        text = json.dumps(value, ensure_ascii=False, default=repr)
    except (ValueError, TypeError, RecursionError):
        text = repr(type(value))
    return text[:_MAX_VALUE_CHARS]


def _written_files(sandbox: Any, before: WorkspaceSnapshot) -> list[FileInfo]:
    """The files this run created or modified (see ``_files``); a sandbox whose workspace is a copy
    of the user's directory (``sync_out``) writes them back there."""
    files, removed = written_files(sandbox.workspace, before)
    sync_out = getattr(sandbox, "sync_out", None)
    if sync_out is not None and (files or removed):
        sync_out([f.path for f in files], removed)
    return files
