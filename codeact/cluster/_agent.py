"""The node agent: one Ray actor per node (and ``RayCluster``), owning that node's sandboxes, tool
hosts and ledgers for every runtime attached to it, so a code action's tool calls are answered on the
node that runs it.

It is a plain class here; :class:`~codeact.cluster.RayCluster` makes it an actor pinned to a node.
"""

from __future__ import annotations

import queue
import threading
import time
from collections.abc import Callable, Iterable, Iterator
from typing import Any

from .. import tracing
from ..results import ExecutionResult
from ..runtime.events import CallFinished, CallStarted, RunEvent
from ..runtime.session import Runtime, Session
from ..runtime.snapshot import CellRecord, SkippedCell, Snapshot
from ..runtime.toolset import Toolset
from ..sandbox.base import SandboxConfig
from ._relay import forwarded

__all__ = ["STARTED", "Done", "NodeAgent"]

#: The first item of a run's stream.
STARTED = "started"
#: How long a run's events gather on the node before they go to the caller as one batch.
BATCH_S = 0.05

#: What the last item of a run's stream holds: the result, the cells the run added, the skipped list.
Done = tuple[ExecutionResult, list[CellRecord], list[SkippedCell]]


def _sweep() -> list[str]:
    """Remove this machine's containers of dead owners (an earlier agent killed with its node)."""
    from ..image.engine import docker_client
    from ..sandbox.cleanup import cleanup_stale

    try:
        client = docker_client()
    except Exception:  # no engine on this node: nothing of ours can be left there
        return []
    return cleanup_stale(client).containers


def _batch(events: queue.SimpleQueue[Any]) -> tuple[list[RunEvent], ExecutionResult | BaseException | None]:
    """The events of the next :data:`BATCH_S` (waiting for the first), and how the run ended if it
    did meanwhile. Batched so that a run's many calls cost the node one Ray object per batch, not
    two per call: the calls themselves never wait for Ray."""
    batch: list[RunEvent] = []
    item = events.get()
    deadline = time.monotonic() + BATCH_S
    while True:
        if isinstance(item, (ExecutionResult, BaseException)):
            return batch, item
        if getattr(item, "type", None) != "done":  # the result comes once, in Done
            batch.append(item)
        left = deadline - time.monotonic()
        if left <= 0:
            return batch, None
        try:
            item = events.get(timeout=left)
        except queue.Empty:
            return batch, None


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
        self.running: dict[str, str | None] = {}  # session id -> the token of its run in progress
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

    def run(self, sid: str, code: str, timeout_s: float | None, trace: dict[str, str] | None = None,
            token: str | None = None, listen: bool = True) -> Iterator[str | list[RunEvent] | Done]:
        """:data:`STARTED`, the run's live events in batches, then its :data:`Done` (a Ray streaming
        generator with a backpressure of one object: the run begins only once the caller has taken
        STARTED, so a node lost before that ran nothing of it). ``trace``: the caller's trace
        context, continued here when this node traces (``RayCluster(node_setup=...)``). ``token``
        names the run for :meth:`interrupt`; without ``listen`` (no caller hook) only the call events
        come (what a run cut by this node's death lists), not the output."""
        session = self._session(sid)
        yield STARTED
        with self._lock:
            self.running[sid] = token
        before = len(session.cells)
        events: queue.SimpleQueue[Any] = queue.SimpleQueue()

        def calls_only(event: RunEvent) -> None:
            if isinstance(event, (CallStarted, CallFinished)):
                events.put(event)

        def work() -> None:
            try:
                with tracing.attached(trace):
                    events.put(session.run(code, timeout_s=timeout_s, on_event=events.put if listen else calls_only))
            except BaseException as exc:  # handed to the caller as it is
                events.put(exc)

        threading.Thread(target=work, daemon=True, name="codeact-node-run").start()
        try:
            while True:
                batch, ended = _batch(events)
                if batch:
                    yield batch
                if isinstance(ended, BaseException):
                    raise ended
                if ended is not None:
                    break
        finally:
            with self._lock:
                self.running.pop(sid, None)
        yield (ended, [c.model_copy() for c in session.cells[before:]], list(session.skipped))

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
            current = self.running.get(sid, "")
        if token is None or current == token:
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
