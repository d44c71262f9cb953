"""The node agent: one Ray actor per node and runtime, owning that node's sandboxes, tool host and
ledgers, so a code action's tool calls are answered on the node that runs it.

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
from ..runtime.events import RunEvent
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
    """One node's sessions of one runtime (an actor: its methods run on the node)."""

    def __init__(self, tools: list[Any] | Callable[[], Toolset | Iterable[Any]], sandbox: SandboxConfig,
                 options: dict[str, Any], relay: Any | None, setup: Callable[[], None] | None = None) -> None:
        if setup is not None:  # RayCluster(node_setup=...): e.g. this node's tracer provider
            setup()
        self.swept = _sweep() if sandbox.backend == "docker" else []
        made = tools() if callable(tools) else tools
        built = made if isinstance(made, Toolset) else Toolset(list(made))
        if relay is not None:
            built = Toolset([forwarded(t, relay) if t.policy.where == "caller" else t for t in built])
        self.runtime = Runtime(built, sandbox, **options)
        self.sessions: dict[str, Session] = {}
        self._lock = threading.Lock()

    def node_id(self) -> str:
        import ray

        return str(ray.get_runtime_context().get_node_id())

    def owner(self) -> str:
        """The owner label this agent's containers carry (``sandbox._owner``)."""
        from ..sandbox.cleanup import owner_id

        return owner_id()

    def sweep(self) -> list[str]:
        return _sweep()

    def open(self, sid: str, snapshot: Snapshot | None = None, lazy: bool = True) -> str:
        """Start session ``sid`` (fresh, or ``snapshot``'s state rebuilt by replay, at its first run
        when ``lazy``); returns this node's id."""
        session = self.runtime.session() if snapshot is None else self.runtime.restore(snapshot, lazy=lazy)
        with self._lock:
            self.sessions[sid] = session
        return self.node_id()

    def _session(self, sid: str) -> Session:
        with self._lock:
            found = self.sessions.get(sid)
        if found is None:
            raise KeyError(f"no session {sid!r} on this node")
        return found

    def run(self, sid: str, code: str, timeout_s: float | None,
            trace: dict[str, str] | None = None) -> Iterator[str | list[RunEvent] | Done]:
        """:data:`STARTED`, the run's live events in batches, then its :data:`Done` (a Ray streaming
        generator with a backpressure of one object: the run begins only once the caller has taken
        STARTED, so a node lost before that ran nothing of it). ``trace``: the caller's trace
        context, continued here when this node traces (``RayCluster(node_setup=...)``)."""
        session = self._session(sid)
        yield STARTED
        before = len(session.cells)
        events: queue.SimpleQueue[Any] = queue.SimpleQueue()

        def work() -> None:
            try:
                with tracing.attached(trace):
                    events.put(session.run(code, timeout_s=timeout_s, on_event=events.put))
            except BaseException as exc:  # handed to the caller as it is
                events.put(exc)

        threading.Thread(target=work, daemon=True, name="codeact-node-run").start()
        while True:
            batch, ended = _batch(events)
            if batch:
                yield batch
            if isinstance(ended, BaseException):
                raise ended
            if ended is not None:
                yield (ended, [c.model_copy() for c in session.cells[before:]], list(session.skipped))
                return

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

    def interrupt(self, sid: str) -> None:
        self._session(sid).interrupt()

    def files(self, sid: str, op: str, *args: Any) -> Any:
        """``Session.files.<op>(*args)`` of ``sid`` (write, read, list, remove)."""
        if op not in ("write", "read", "list", "remove"):
            raise ValueError(f"no files operation {op!r}")
        return getattr(self._session(sid).files, op)(*args)

    def close(self, sid: str) -> None:
        with self._lock:
            session = self.sessions.pop(sid, None)
        if session is not None:
            session.close()

    def count(self) -> int:
        with self._lock:
            return len(self.sessions)

    def shutdown(self) -> None:
        with self._lock:
            sessions, self.sessions = list(self.sessions.values()), {}
        for session in sessions:
            session.close()
        self.runtime.close()
