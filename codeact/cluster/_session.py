"""A session that lives on a node of the cluster, seen from the caller.

After every run the caller keeps the session's replay log (its cells with their call records, as
``Session.cells``); when the node (or its agent) dies, the session is placed on another node and
rebuilt there from that log by replay before its next run: every recorded call is answered from the
log, so **no tool runs twice**, and that run's result says ``restored``. A run in flight when the
node died ends ``killed`` with the calls it had made so far (streamed to the caller as they ended).
The writes made through ``session.files`` are in that log too: each run's cell carries the ones made
before it (``CellRecord.files``, laid just before the cell is replayed), and those made since the
last run are done again on the new node once the replay ended. The log lays no other file (its
``Snapshot.files`` is None): the workspace is what the cells and those writes make.
"""

from __future__ import annotations

import asyncio
import collections
import time
import uuid
from collections.abc import AsyncIterator
from typing import Any, Protocol

from .. import tracing
from ..errors import RuntimeClosed, SandboxError
from ..results import ExecutionResult, ToolCallRecord
from ..runtime.events import CallFinished, CallStarted, EventHook, RunDone, RunEvent
from ..runtime.session import Runtime
from ..runtime.snapshot import CellRecord, FileOp, SkippedCell, Snapshot, toolset_fingerprint
from ..sandbox.base import SandboxConfig

__all__ = ["ClusterSession"]


class _Deployment(Protocol):
    """What a session uses of its ``_cluster.Deployment`` (which makes the sessions)."""

    @property
    def runtime(self) -> Runtime: ...

    @property
    def key(self) -> str: ...

    @property
    def ray(self) -> Any: ...

    @property
    def lost_errors(self) -> tuple[type[BaseException], ...]: ...

    def get(self, ref: Any) -> Any: ...

    def pick(self, exclude: frozenset[str] = frozenset()) -> str: ...

    def agent(self, node: str) -> Any: ...

    def placed(self, session: ClusterSession, node: str) -> None: ...

    def unplaced(self, session: ClusterSession) -> None: ...

    def node_died(self, node: str) -> None: ...

    def sweep(self, agent: Any) -> None: ...

_MAX_HISTORY = 32
#: The workspace as the code sees it on Docker (``session.files`` takes paths under it as relative).
_MOUNT = "/workspace/"
#: How often an interrupted run is interrupted again until it ends (the first may precede its code).
_INTERRUPT_EVERY_S = 0.25
#: How long a run goes before the caller starts polling its events.
BATCH_S = 0.05


class ClusterSession:
    """``Runtime.session()`` on a cluster: the same methods as a local :class:`~codeact.Session`
    (``run``, ``arun``, ``stream``, ``snapshot``, ``fork``, ``interrupt``, ``files``, ``close``),
    with :attr:`node_id` saying where it lives now."""

    def __init__(self, deployment: _Deployment, snapshot: Snapshot | None = None, *, lazy: bool = True) -> None:
        self.id = uuid.uuid4().hex
        self._deployment = deployment
        self.cells: list[CellRecord] = [c.model_copy(deep=True) for c in snapshot.cells] if snapshot else []
        self.skipped: list[SkippedCell] = list(snapshot.skipped) if snapshot else []
        #: Under a flow policy, what the model has seen (``Session.flow_context``), kept here too so
        #: that a rebuild on another node after this one died starts from it.
        self._flow_context: frozenset[str] = frozenset(snapshot.flow_context or ()) if snapshot else frozenset()
        #: The ``session.files`` writes since the last run (the node's session logs them with its
        #: next cell; these are done again on a rebuild elsewhere if the node dies first); from a
        #: snapshot, its files (laid over the replay there, so done again after it on a rebuild).
        self._file_ops: list[FileOp] = [FileOp.write(f.path, f.content()) for f in snapshot.files or ()] \
            if snapshot else []
        #: The snapshot's files, which no node logged: the first run's cell carries them.
        self._unlogged: list[FileOp] = list(self._file_ops)
        self.history: collections.deque[ExecutionResult] = collections.deque(maxlen=_MAX_HISTORY)
        self.closed = False
        #: Set when the node died: the next run rebuilds the session elsewhere first.
        self.lost: str | None = None
        self.last_used = time.monotonic()
        self.node_id: str = ""
        self._agent: Any = None
        self._token: str | None = None  # the run in progress (what an interrupt names)
        self._place(snapshot, lazy=lazy)

    @property
    def config(self) -> SandboxConfig:
        return self._deployment.runtime.config

    @property
    def started(self) -> bool:
        """Placed on a node (its sandbox there starts at the first run, inside that run's time)."""
        return self._agent is not None

    def start(self) -> ClusterSession:
        return self

    # -- placement -------------------------------------------------------------------------------
    def _place(self, snapshot: Snapshot | None, *, lazy: bool, exclude: frozenset[str] = frozenset()) -> None:
        deployment = self._deployment
        while True:
            node = deployment.pick(exclude)
            try:
                agent = deployment.agent(node)
                self.node_id = deployment.get(agent.open.remote(deployment.key, self.id, snapshot, lazy))
            except deployment.lost_errors:
                deployment.node_died(node)
                continue
            self._agent = agent
            deployment.placed(self, node)
            return

    def _replay_log(self) -> Snapshot:
        runtime = self._deployment.runtime
        return Snapshot(cells=[c.model_copy(deep=True) for c in self.cells], skipped=list(self.skipped),
                        files=None, config=runtime.config, toolset_fingerprint=toolset_fingerprint(runtime.host.specs),
                        flow_context=sorted(self._flow_context) if runtime.flow is not None else None)

    def _recover(self) -> None:
        dead, self.lost = self.lost, None
        self._deployment.unplaced(self)
        self._place(self._replay_log(), lazy=True, exclude=frozenset({dead}) if dead else frozenset())
        self._deployment.sweep(self._agent)  # the dead agent's containers, where they share an engine
        for op in self._file_ops:  # the writes since the last run: after the replay (the first makes it)
            data = op.content()
            self._deployment.get(self._agent.files.remote(self.id, *(("remove", op.path) if data is None
                                                                     else ("write", op.path, data))))

    # -- runs ------------------------------------------------------------------------------------
    def run(self, code: str, *, timeout_s: float | None = None, on_event: EventHook | None = None) -> ExecutionResult:
        """Run one code action on the session's node; never raises for anything the code does."""
        if not isinstance(code, str):
            raise TypeError(f"code must be a str, not {type(code).__name__}")
        if self.closed:
            raise RuntimeClosed("the session is closed")
        deployment = self._deployment
        started = time.perf_counter()
        calls: dict[str, ToolCallRecord] = {}
        began = False
        token = self._token = uuid.uuid4().hex
        try:
            while not began:  # a node found dead before the run began there: rebuild elsewhere, run there
                if self.lost is not None:
                    self._recover()
                try:  # the node holds the session: from here a loss of the node may have cut the run
                    deployment.get(self._agent.ready.remote(self.id))
                except deployment.lost_errors:
                    self.lost = self.node_id
                    deployment.node_died(self.node_id)
                    continue
                began = True
                running = _Running(self, token, self._agent.start.remote(
                    self.id, code, timeout_s, tracing.carrier(), token, on_event is not None))
                try:
                    done = running.follow(calls, on_event)
                except deployment.lost_errors:
                    self.lost = self.node_id
                    deployment.node_died(self.node_id)
                except BaseException:  # Ctrl-C in the caller: as a local session, stop the code, keep it
                    try:
                        self._done(running.follow(calls, on_event, interrupt=True), on_event)
                    except deployment.lost_errors:  # the node died meanwhile: the next run rebuilds
                        self.lost = self.node_id
                        deployment.node_died(self.node_id)
                    raise
                else:
                    return self._done(done, on_event)
        finally:
            self._token = None
        result = ExecutionResult(
            ok=False, termination="killed", calls=list(calls.values()), state_lost=True,
            duration_ms=(time.perf_counter() - started) * 1000,
            reason=f"the node running this session ({self.node_id[:12]}) died during the run; the next run "
                   "rebuilds the session elsewhere from its earlier cells (this run's effects on the "
                   "namespace are lost, its calls are listed here)")
        self.history.append(result)
        if on_event is not None:
            on_event(RunDone(result=result))
        return result

    def _events(self, events: list[RunEvent], calls: dict[str, ToolCallRecord], on_event: EventHook | None) -> None:
        for event in events:
            _note(calls, event)
            if on_event is not None:
                on_event(event)

    def _done(self, done: tuple[ExecutionResult, list[CellRecord], list[SkippedCell]],
              on_event: EventHook | None) -> ExecutionResult:
        result, cells, skipped = done
        if cells:  # the node logged the writes made before this run with its cell
            cells[0].files = self._unlogged + cells[0].files
            self._file_ops, self._unlogged = [], []
        self._flow_context = self._flow_context.union(*(result.labels or {}).values())  # as the node did
        self.cells += cells
        self.skipped = skipped
        self.history.append(result)
        self.last_used = time.monotonic()
        if on_event is not None:
            on_event(RunDone(result=result))
        return result

    async def arun(self, code: str, *, timeout_s: float | None = None) -> ExecutionResult:
        return await asyncio.to_thread(self.run, code, timeout_s=timeout_s)

    async def stream(self, code: str, *, timeout_s: float | None = None) -> AsyncIterator[RunEvent]:
        """The run's events as they happen, ending with ``done`` (see ``Session.stream``)."""
        loop = asyncio.get_running_loop()
        events: asyncio.Queue[RunEvent] = asyncio.Queue()
        def deliver(event: RunEvent) -> None:
            loop.call_soon_threadsafe(events.put_nowait, event)

        task = loop.run_in_executor(None, lambda: self.run(code, timeout_s=timeout_s, on_event=deliver))
        while True:
            event = await events.get()
            yield event
            if isinstance(event, RunDone):
                break
        await task

    # -- what a batch's worker does between items (runtime.batch) ------------------------------------
    def reset_namespace(self, *, forget: bool = False) -> None:
        """``Session.reset_namespace`` on the node; the flow context starts empty here too."""
        self.cells = self._with_files(self._control("reset", forget))
        self._flow_context = frozenset()

    def bind_names(self, values: Any) -> None:
        """``Session.bind_names`` on the node."""
        self._control("bind", dict(values))

    def _control(self, op: str, *args: Any) -> Any:
        if self.lost is not None:
            self._recover()
        try:
            return self._deployment.get(getattr(self._agent, op).remote(self.id, *args))
        except self._deployment.lost_errors as exc:
            self.lost = self.node_id
            self._deployment.node_died(self.node_id)
            raise SandboxError(f"the node running this session died: {exc}") from None

    @property
    def flow_context(self) -> frozenset[str]:
        """What the model has seen, as labels (see ``Session.flow_context``)."""
        return self._flow_context

    def trust(self) -> None:
        """Mark a trusted point (see ``Session.trust``), here and on the node."""
        self._control("trust")
        self._flow_context = frozenset()

    def interrupt(self) -> None:
        """Stop the running code (from any thread); see ``Session.interrupt``."""
        token = self._token
        if self._agent is not None and self.lost is None and token is not None:
            self._agent.interrupt.remote(self.id, token)

    # -- state -----------------------------------------------------------------------------------
    def snapshot(self, *, allow_inexact: bool = False) -> Snapshot:
        """The session's state (see ``Session.snapshot``); after a node's death, its replay log."""
        if self.lost is not None:
            return self._replay_log()
        try:
            state: Snapshot = self._deployment.get(self._agent.snapshot.remote(self.id, allow_inexact))
            state.cells = self._with_files(state.cells)
            return state
        except self._deployment.lost_errors:
            self.lost = self.node_id
            self._deployment.node_died(self.node_id)
            return self._replay_log()

    def _with_files(self, cells: list[CellRecord]) -> list[CellRecord]:
        """The node's ``cells`` with the ``session.files`` writes this caller kept for each (by index)."""
        kept = {c.index: c.files for c in self.cells if c.files}
        for cell in cells:
            cell.files = kept.get(cell.index, cell.files)
        return cells

    def fork(self, n: int = 1, *, allow_inexact: bool = False) -> list[ClusterSession]:
        """``n`` independent copies, placed like new sessions (so spread over the nodes)."""
        if n < 1:
            raise ValueError(f"fork needs n >= 1, got {n}")
        state = self.snapshot(allow_inexact=allow_inexact)
        return [ClusterSession(self._deployment, state, lazy=False) for _ in range(n)]

    @property
    def files(self) -> _RemoteFiles:
        return _RemoteFiles(self)

    def close(self) -> None:
        if self.closed:
            return
        self.closed = True
        self._deployment.unplaced(self)
        if self._agent is not None and self.lost is None:
            try:
                self._deployment.get(self._agent.close.remote(self.id))
            except self._deployment.lost_errors:
                pass

    def __enter__(self) -> ClusterSession:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


class _Running:
    """A run on the node, followed from the caller: :meth:`NodeAgent.start` ends with it; while it
    lasts past a batch's time, polls bring its events (for the hook, and the calls a run cut by
    the node's death lists), one at a time."""

    def __init__(self, session: ClusterSession, token: str, start: Any) -> None:
        self._session, self._token, self._start = session, token, start
        self._poll: Any = None

    def follow(self, calls: dict[str, ToolCallRecord], on_event: EventHook | None,
               interrupt: bool = False) -> tuple[ExecutionResult, list[CellRecord], list[SkippedCell]]:
        """The run's end, its events handed on meanwhile; with ``interrupt``, the run interrupted
        (again until it ends: the first may reach the node before its code started)."""
        session = self._session
        deployment, agent = session._deployment, session._agent
        ray = deployment.ray
        while True:
            if interrupt:
                agent.interrupt.remote(session.id, self._token)
            waiting = [self._start] if self._poll is None else [self._start, self._poll]
            wait_s = _INTERRUPT_EVERY_S if interrupt else BATCH_S if self._poll is None else None
            ready, _ = ray.wait(waiting, num_returns=1, timeout=wait_s)
            if self._poll is not None and (self._poll in ready or self._start in ready):
                session._events(deployment.get(self._poll), calls, on_event)  # before the start's own
                self._poll = None
            if self._start in ready:
                events, done = deployment.get(self._start)
                session._events(events, calls, on_event)
                return done  # type: ignore[no-any-return]
            if self._poll is None:
                self._poll = agent.poll.remote(session.id, self._token)


def _note(calls: dict[str, ToolCallRecord], event: Any) -> None:
    """Keep what the run's call events say, so a run cut by a node's death still lists them."""
    if isinstance(event, CallStarted):
        calls[event.id] = ToolCallRecord(id=event.id, name=event.name, arguments=event.arguments)
    elif isinstance(event, CallFinished):
        calls[event.id] = ToolCallRecord(id=event.id, name=event.name, arguments=getattr(
            calls.get(event.id), "arguments", None), ok=event.ok, result=event.result, error=event.error,
            duration_ms=event.duration_ms, cached=event.cached, finished=True)


class _RemoteFiles:
    """``Session.files`` of a cluster session: each call runs on its node (through hostfs there);
    the caller keeps each write and removal in the session's replay log, so a rebuild on another
    node after this one died does them again (see the module docstring)."""

    def __init__(self, session: ClusterSession) -> None:
        self._session = session

    def _call(self, op: str, *args: Any) -> Any:
        session = self._session
        if session.lost is not None:
            session._recover()
        return session._deployment.get(session._agent.files.remote(session.id, op, *args))

    def write(self, path: str, data: bytes | str) -> Any:
        info = self._call("write", path, data)
        self._session._file_ops.append(FileOp.write(info.path, data.encode() if isinstance(data, str) else bytes(data)))
        return info

    def read(self, path: str) -> bytes:
        return bytes(self._call("read", path))

    def read_text(self, path: str, encoding: str = "utf-8") -> str:
        return self.read(path).decode(encoding)

    def list(self, dir: str = "") -> Any:  # the name Session.files uses
        return self._call("list", dir)

    def remove(self, path: str) -> Any:
        done = self._call("remove", path)
        self._session._file_ops.append(FileOp(path=path.removeprefix(_MOUNT)))
        return done
