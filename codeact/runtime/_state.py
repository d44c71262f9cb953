"""A session's state, and the little of a ``Session`` and its ``Runtime`` that the modules working
on sessions beside ``session.py`` use (``_lifecycle``, ``_replay``), so that none of them imports
``session.py``, which imports them.

:class:`SessionState` holds what changes as a session lives: its kernel (``driver``), what the
next kernel is rebuilt from (``resume``), the host that answers calls while a replay runs
(``replay_host``, with the cell's recorded egress), the facts of the last cell, whether the next
result says ``restored``. Its :class:`Lifecycle` follows from them::

    new ──first use──▶ live ──suspend, or lost with recover──▶ suspended ──next use: rebuild──▶ live
     ▲                   │ the sandbox died (recover off)
     └───────────────────┘                                      any ──close──▶ closed
"""

from __future__ import annotations

import enum
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

from ..results import EgressRecord, ExecutionResult
from ..sandbox import SandboxConfig
from ..sandbox.driver import KernelDriver
from ._loop import LoopThread
from .flow import FlowPolicy
from .ledger import CallStore
from .snapshot import CellRecord, SkippedCell, SnapshotFile
from .toolhost import ToolHost
from .toolset import Toolset


class Lifecycle(enum.Enum):
    """Where a session is in its life (``Session.lifecycle``)."""

    #: No sandbox yet, or the last one died with the state: the next use starts a fresh one.
    NEW = "new"
    #: A sandbox is up, its namespace the session's.
    LIVE = "live"
    #: No sandbox; the next use rebuilds the state in a new one (``resume``).
    SUSPENDED = "suspended"
    #: Closed for good.
    CLOSED = "closed"


@dataclass
class Resume:
    """What the session's next kernel must be rebuilt from: its in-state cells, then these files
    laid over the workspace (None: leave the workspace as the replay made it)."""

    files: list[SnapshotFile] | None
    #: Rebuilds in a row whose sandbox died (not interrupted on request): at the second, the
    #: replay is taken to kill it itself, and the state is given up as diverged.
    deaths: int = 0


class SessionState:
    """The mutable state of one session's sandbox (see the module docstring). Changed only with
    the session's lock held, except ``driver`` read (to interrupt or kill) from any thread."""

    __slots__ = ("_open", "closed", "driver", "egress_replay", "last_facts", "replay_flow", "replay_host", "restored",
                 "resume")

    def __init__(self, open_kernel: Callable[[], KernelDriver]) -> None:
        self._open = open_kernel
        self.driver: KernelDriver | None = None
        #: Set: the next kernel is rebuilt by replay (the session is suspended).
        self.resume: Resume | None = None
        #: Set while replaying: the host that answers calls from the records.
        self.replay_host: ToolHost | None = None
        #: While replaying: the cell's plain-HTTP egress, answered from the record.
        self.egress_replay: list[EgressRecord] = []
        #: While replaying under a data-flow policy: the cell's recorded ``flow.context``.
        self.replay_flow: list[str] | None = None
        #: The done frame's facts of the last cell run (checked; a replay compares them).
        self.last_facts: dict[str, Any] | None = None
        #: The next result says ``restored``.
        self.restored = False
        self.closed = False

    @property
    def lifecycle(self) -> Lifecycle:
        if self.closed:
            return Lifecycle.CLOSED
        if self.resume is not None:  # a resume is only ever set with the driver discarded
            return Lifecycle.SUSPENDED
        driver = self.driver
        return Lifecycle.LIVE if driver is not None and not driver.dead else Lifecycle.NEW

    def kernel(self) -> KernelDriver:
        """The live kernel; a new one (no replay) when there is none or it died."""
        driver = self.driver
        if driver is None or driver.dead:
            self.discard()
            driver = self.driver = self._open()
        return driver

    def discard(self) -> None:
        """Close the sandbox, if any; the next use starts (or rebuilds) another."""
        driver, self.driver = self.driver, None
        if driver is not None:
            driver.sandbox.close()


#: Runs one recorded cell in the session's kernel (caller holds the lock), kept out of ``history``
#: and ``cells``: (code, time limit in seconds) → its result; its facts are then ``last_facts``.
ReplayCell = Callable[[str, float], ExecutionResult]


class RuntimePort(Protocol):
    """What ``_lifecycle`` and ``_replay`` use of a ``Runtime``."""

    @property
    def toolset(self) -> Toolset: ...

    @property
    def host(self) -> ToolHost: ...

    @property
    def loop(self) -> LoopThread: ...

    @property
    def flow(self) -> FlowPolicy | None: ...


class SessionPort(Protocol):
    """What ``_lifecycle`` and ``_replay`` use of a ``Session``."""

    @property
    def runtime(self) -> RuntimePort: ...

    @property
    def config(self) -> SandboxConfig: ...

    @property
    def user_workspace(self) -> Path | None: ...

    @property
    def sandbox_state(self) -> SessionState: ...

    @property
    def flow_context(self) -> frozenset[str]: ...

    @property
    def cells(self) -> list[CellRecord]: ...

    @property
    def skipped(self) -> list[SkippedCell]: ...

    @property
    def calls(self) -> CallStore: ...

    @property
    def last_used(self) -> float: ...

    def suspend(self) -> bool: ...
