"""The node agent: one Ray actor per node (and ``RayCluster``), owning that node's sandboxes, tool
hosts and ledgers for every runtime attached to it, so a code action's tool calls are answered on the
node that runs it.

It is a plain class here; :class:`~codeact.cluster.RayCluster` makes it an actor pinned to a node.
"""

from __future__ import annotations

import collections
import threading
import time
from collections.abc import Callable, Iterable
from typing import Any

from .. import tracing
from ..results import ExecutionResult, ToolCallRecord
from ..runtime.events import CallFinished, CallStarted, RunEvent
from ..runtime.session import Runtime, Session
from ..runtime.snapshot import CellRecord, SkippedCell, Snapshot
from ..runtime.toolset import Toolset
from ..sandbox.base import SandboxConfig
from ._relay import forwarded

__all__ = ["Done", "NodeAgent", "Poll"]

#: How often a waiting poll looks whether the run has events for the caller (events are not
#: signalled one by one: a call on the node wakes nobody).
BATCH_S = 0.05
#: The longest a poll waits with nothing to say (the caller then asks again).
KEEPALIVE_S = 5.0

#: How a run ended: the result, the cells the run added, the session's skipped list.
Done = tuple[ExecutionResult, list[CellRecord], list[SkippedCell]]
#: What :meth:`NodeAgent.start` answers: the events no poll took, and how the run ended.
Poll = tuple[list[RunEvent], Done]


class _Run:
    """One run in progress on this node: its events, kept for the caller's polls."""

    def __init__(self, token: str | None, listen: bool) -> None:
        self.token = token
        self.events: collections.deque[RunEvent] = collections.deque()  # appended where they are made
        #: Without a listener: the calls' live records (``Session.run(keep_calls=...)``), turned into
        #: call events only when a poll asks, so a call makes no event object on its way.
        self.calls: list[ToolCallRecord] | None = None if listen else []
        self._told = 0  # calls[:_told] have had their CallStarted
        self._open: dict[str, ToolCallRecord] = {}  # told started, not yet told finished
        self.ended = threading.Event()
        self._taking = threading.Lock()

    def take(self) -> list[RunEvent]:
        with self._taking:  # two takers never share out one run's events out of order
            taken = [self.events.popleft() for _ in range(len(self.events))]
            if self.calls is not None:
                taken += self._call_events()
            return taken

    def _calls_moved(self) -> bool:
        """A call arrived or ended since the last take (read without the lock: only a hint)."""
        return self.calls is not None and (len(self.calls) > self._told or
                                           any(r.finished for r in list(self._open.values())))

    def _call_events(self) -> list[RunEvent]:
        assert self.calls is not None
        found: list[RunEvent] = []
        arrived = self.calls[self._told:]
        self._told += len(arrived)
        for record in arrived:
            found.append(CallStarted.of(record, 0.0))
            self._open[record.id] = record
        for cid, record in list(self._open.items()):
            if record.finished:
                found.append(CallFinished.of(record, 0.0))
                del self._open[cid]
        return found

    def wait(self, wait_s: float) -> list[RunEvent]:
        """The events, once there are some (looked at every :data:`BATCH_S`), the run ended, or
        ``wait_s`` passed."""
        deadline = time.monotonic() + wait_s
        while not self.ended.wait(min(BATCH_S, max(0.0, deadline - time.monotonic()))):
            if self.events or self._calls_moved() or time.monotonic() >= deadline:
                break
        return self.take()


def _sweep() -> list[str]:
    """Remove this machine's containers of dead owners (an earlier agent killed with its node)."""
    from ..image.engine import docker_client
    from ..sandbox.cleanup import cleanup_stale

    try:
        client = docker_client()
    except Exception:  # no engine on this node: nothing of ours can be left there
        return []
    try:
        return cleanup_stale(client).containers
    except Exception:  # a busy engine: best effort, the next attach or recovery sweeps again
        return []
    finally:
        client.close()


class NodeAgent:
    """One node's sessions, of every runtime attached to it (an actor: its methods run on the node).

    One agent per node and :class:`~codeact.cluster.RayCluster`: each Runtime on the cluster is
    attached to it (:meth:`attach`: its tools, sandbox config and options, so its own Runtime here
    with its pool and tool host) and detached at its close, so many runtimes on one cluster (an
    eval's episodes) add no actors."""

    def __init__(self, setup: Callable[[], None] | None = None) -> None:
        if setup is not None:  # RayCluster(node_setup=...): e.g. this node's tracer provider
            setup()
        self.swept: list[str] | None = None  # the first Docker runtime attached sweeps (see _sweep)
        self.runtimes: dict[str, Runtime] = {}
        self.sessions: dict[str, tuple[str, Session]] = {}  # session id -> (runtime key, session)
        self.running: dict[str, _Run] = {}  # session id -> its run in progress
        self._lock = threading.Lock()

    def attach(self, key: str, tools: list[Any] | Callable[[], Toolset | Iterable[Any]], sandbox: SandboxConfig,
               options: dict[str, Any], relay: Any | None = None) -> str:
        """Make runtime ``key``'s Runtime here (once); returns this node's id."""
        with self._lock:
            if key in self.runtimes:
                return self.node_id()
            sweep = sandbox.backend == "docker" and self.swept is None
            if sweep:
                self.swept = []
        if sweep:
            self.swept = _sweep()
        made = tools() if callable(tools) else tools
        built = made if isinstance(made, Toolset) else Toolset(list(made))
        if relay is not None:
            built = Toolset([forwarded(t, relay) if t.policy.where == "caller" else t for t in built])
        runtime = Runtime(built, sandbox, **options)  # outside the lock: other runtimes' calls go on
        with self._lock:
            taken = self.runtimes.setdefault(key, runtime)
        if taken is not runtime:  # attached twice at once: keep the first
            runtime.close()
        return self.node_id()

    def detach(self, key: str) -> None:
        """Close runtime ``key``'s sessions here and its Runtime (its containers with it)."""
        with self._lock:
            runtime = self.runtimes.pop(key, None)
            mine = [sid for sid, (k, _) in self.sessions.items() if k == key]
            sessions = [self.sessions.pop(sid)[1] for sid in mine]
        for session in sessions:
            session.close()
        if runtime is not None:
            runtime.close()

    def node_id(self) -> str:
        import ray

        return str(ray.get_runtime_context().get_node_id())

    def owner(self) -> str:
        """The owner label this agent's containers carry (``sandbox._owner``)."""
        from ..sandbox.cleanup import owner_id

        return owner_id()

    def sweep(self) -> list[str]:
        return _sweep()

    def open(self, key: str, sid: str, snapshot: Snapshot | None = None, lazy: bool = True) -> str:
        """Start session ``sid`` of runtime ``key`` (fresh, or ``snapshot``'s state rebuilt by replay,
        at its first run when ``lazy``); returns this node's id."""
        with self._lock:
            runtime = self.runtimes.get(key)
        if runtime is None:
            raise KeyError(f"no runtime {key!r} attached on this node")
        session = runtime.session() if snapshot is None else runtime.restore(snapshot, lazy=lazy)
        with self._lock:
            self.sessions[sid] = (key, session)
        return self.node_id()

    def _session(self, sid: str) -> Session:
        with self._lock:
            found = self.sessions.get(sid)
        if found is None:
            raise KeyError(f"no session {sid!r} on this node")
        return found[1]

    def ready(self, sid: str) -> None:
        """Nothing, once this agent holds ``sid``: the caller's first step of a run (a node lost
        before this answer ran nothing of the run, which the caller may then run elsewhere)."""
        self._session(sid)

    def start(self, sid: str, code: str, timeout_s: float | None, trace: dict[str, str] | None = None,
              token: str | None = None, listen: bool = True) -> Poll:
        """Run ``code`` in session ``sid`` here, in this call's thread; returns the events no
        :meth:`poll` took and how it ended. ``trace``: the caller's trace context, continued here
        when this node traces (``RayCluster(node_setup=...)``); ``token`` names the run for
        :meth:`interrupt` and :meth:`poll`; without ``listen`` (no caller hook) only the calls are
        kept, as their live records (what a run cut by this node's death lists), and a poll turns
        them into call events; no output."""
        session = self._session(sid)
        run = _Run(token, listen)
        with self._lock:
            self.running[sid] = run
        before = len(session.cells)
        try:
            with tracing.attached(trace):
                if run.calls is None:  # a deque takes each event on the thread that made it: no switch
                    result = session.run(code, timeout_s=timeout_s, on_event=run.events.append, inline_events=True)
                else:
                    result = session.run(code, timeout_s=timeout_s, keep_calls=run.calls)
            done = (result, [c.model_copy() for c in session.cells[before:]], list(session.skipped))
        finally:
            run.ended.set()
            with self._lock:
                if self.running.get(sid) is run:
                    del self.running[sid]
        # Without a listener the calls only serve a run cut short: this one ended, its result has them.
        return (run.take() if run.calls is None else []), done

    def poll(self, sid: str, token: str | None, wait_s: float = KEEPALIVE_S) -> list[RunEvent]:
        """The events of run ``token`` of ``sid`` since they were last taken, waiting for some up to
        ``wait_s`` (none once it ended: :meth:`start` returns the rest)."""
        with self._lock:
            run = self.running.get(sid)
        if run is None or run.token != token:
            return []
        return run.wait(wait_s)

    def reset(self, sid: str, forget: bool) -> list[CellRecord]:
        """``Session.reset_namespace`` (a batch worker's next item); returns the cells as they now are."""
        session = self._session(sid)
        session.reset_namespace(forget=forget)
        return [c.model_copy() for c in session.cells]

    def bind(self, sid: str, values: dict[str, Any]) -> None:
        self._session(sid).bind_names(values)

    def trust(self, sid: str) -> None:
        self._session(sid).trust()

    def snapshot(self, sid: str, allow_inexact: bool = False) -> Snapshot:
        return self._session(sid).snapshot(allow_inexact=allow_inexact)

    def interrupt(self, sid: str, token: str | None = None) -> None:
        """Interrupt ``sid``'s run; with ``token``, only while the run it names is in progress (a
        late interrupt never reaches the next run)."""
        with self._lock:
            current = self.running.get(sid)
        if current is not None and (token is None or current.token == token):
            self._session(sid).interrupt()

    def files(self, sid: str, op: str, *args: Any) -> Any:
        """``Session.files.<op>(*args)`` of ``sid`` (write, read, list, remove)."""
        if op not in ("write", "read", "list", "remove"):
            raise ValueError(f"no files operation {op!r}")
        return getattr(self._session(sid).files, op)(*args)

    def close(self, sid: str) -> None:
        with self._lock:
            found = self.sessions.pop(sid, None)
        if found is not None:
            found[1].close()

    def count(self, key: str | None = None) -> int:
        """Sessions here (of runtime ``key``)."""
        with self._lock:
            return sum(1 for k, _ in self.sessions.values() if key is None or k == key)

    def attached(self) -> list[str]:
        """The keys of the runtimes attached here."""
        with self._lock:
            return list(self.runtimes)

    def shutdown(self) -> None:
        for key in self.attached():
            self.detach(key)
