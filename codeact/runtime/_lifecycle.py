"""A session's life beyond one sandbox: take a snapshot, rebuild from cells (restore, recover,
resume after suspension), suspend when idle. The public entry points are ``Session.snapshot``,
``Session.fork``, ``Session.suspend``, ``Runtime.restore`` and ``Runtime(suspend_idle_s=...)``.
"""

from __future__ import annotations

import contextvars
import os
import threading
import time
import weakref
from collections.abc import Callable, Iterable, Set
from concurrent.futures import ThreadPoolExecutor
from typing import Protocol, TypeVar

from .. import tracing
from ..errors import ReplayInterrupted, RestoreDiverged, SessionClosed, SnapshotError
from ..sandbox import SandboxConfig
from ..sandbox.driver import KernelDriver
from ._replay import rebuild_budget, replay
from ._state import Lifecycle, ReplayCell, Resume, SessionPort
from ._workspace import collect_files, lay_files, list_files
from .snapshot import CellRecord, SkippedCell, Snapshot, SnapshotFile, toolset_fingerprint

#: Default cap on the workspace bytes a snapshot (or a suspension) keeps.
MAX_WORKSPACE_BYTES = 64 * 1024 * 1024


def _first_line(code: str) -> str:
    line = next((ln.strip() for ln in code.splitlines() if ln.strip()), "")
    return line if len(line) <= 80 else line[:79] + "…"


def image_of(config: SandboxConfig) -> str | None:
    if config.backend != "docker":
        return None
    if config.image is not None:
        return config.image
    from ..sandbox.docker import sandbox_image

    return sandbox_image(config)[0]


def take_snapshot(session: SessionPort, allow_inexact: bool, max_workspace_bytes: int) -> Snapshot:
    """The session's state (caller holds its lock). Refuses an inexact cell unless ``allow_inexact``."""
    cells: list[CellRecord] = []
    skipped = list(session.skipped)
    for cell in session.cells:
        if not cell.in_state:
            continue
        if cell.status == "inexact":
            if not allow_inexact:
                raise SnapshotError(
                    f"cell {cell.index} ({_first_line(cell.code)!r}) cannot be replayed exactly: {cell.reason}; "
                    "pass allow_inexact=True to snapshot without it")
            _skip(skipped, cell)
            continue
        cells.append(cell.model_copy(deep=True))
    state = session.sandbox_state
    files: list[SnapshotFile] | None
    if state.resume is not None and state.resume.files is not None:
        files = list(state.resume.files)
    elif state.driver is not None and not state.driver.dead:
        files = collect_files(state.driver.sandbox.workspace, max_workspace_bytes)
    elif session.user_workspace is not None:
        files = collect_files(session.user_workspace, max_workspace_bytes)
    else:  # a rebuild pending that lays nothing: the workspace is what the replay will make
        files = None if state.resume is not None else []
    return Snapshot(cells=cells, skipped=skipped, files=files, config=session.config,
                    image=image_of(session.config), toolset_fingerprint=toolset_fingerprint(session.runtime.host.specs),
                    flow_context=sorted(session.flow_context) if session.runtime.flow is not None else None)


def _skip(skipped: list[SkippedCell], cell: CellRecord) -> None:
    """List an inexact cell as left out, unless it is already (one over the record budget is listed
    when it is kept, see ``_retained``)."""
    if not any(s.index == cell.index for s in skipped):
        skipped.append(SkippedCell(index=cell.index, reason=cell.reason or "inexact", code=cell.code))


def ensure(session: SessionPort, run: ReplayCell, timeout_s: float | None = None) -> KernelDriver:
    """The session's kernel (caller holds the lock): started, or rebuilt by replay with ``run``
    when suspended (within a budget from ``timeout_s``, the time limit of the run that asks)."""
    state = session.sandbox_state
    if state.closed:
        raise SessionClosed("the session is closed")
    if state.resume is not None:
        with tracing.span("codeact.restore", {"codeact.restore.cells": len(session.cells)}):
            rebuild(session, run, timeout_s)
        assert state.driver is not None
        return state.driver
    return state.kernel()


def rebuild(session: SessionPort, run: ReplayCell, run_timeout_s: float | None = None) -> None:
    """Start a fresh kernel and replay the session's cells into it with ``run`` (caller holds the
    lock; the session is suspended), within a budget from ``run_timeout_s`` (the time limit of the
    run that asked for it) and the recorded durations (``_replay.rebuild_budget``). Cells that
    cannot be replayed exactly are left out and listed in ``session.skipped``. Raises SnapshotError
    (RestoreDiverged: the resume is kept, see :func:`give_up`) or SandboxUnavailable."""
    state = session.sandbox_state
    pending, state.resume = state.resume, None
    assert pending is not None
    state.discard()
    cells = []
    for cell in session.cells:
        if cell.in_state and cell.status == "inexact":
            cell.in_state = False
            _skip(session.skipped, cell)
        if cell.in_state:
            cells.append(cell)
    try:
        driver = state.kernel()
        workspace = driver.sandbox.workspace
        listed = list_files(workspace)
        keep = None if listed is None else set(listed)
        replay(session, run, cells, rebuild_budget(cells, run_timeout_s or session.config.timeout_s,
                                                   session.config.rebuild_timeout_s))
        _refill_cache(session, cells)
        if pending.files is not None:
            uid = session.config.uid if session.config.backend == "docker" and os.geteuid() == 0 else None
            lay_files(workspace, pending.files, keep=keep, uid=uid)
    except SnapshotError:
        state.discard()
        state.resume = pending  # for the files it holds (see give_up)
        raise
    except ReplayInterrupted as exc:
        state.discard()
        state.resume = pending
        if not exc.requested:
            pending.deaths += 1
            if pending.deaths > 1:  # a second death in a row: the replay itself, not bad luck
                raise RestoreDiverged(f"{exc}, at a second try in a row", cell=exc.cell) from None
        raise
    except BaseException:  # e.g. no engine now: keep what rebuilds the state for a later try
        state.discard()
        state.resume = pending
        raise
    state.restored = True


def _refill_cache(session: SessionPort, cells: list[CellRecord]) -> None:
    """Put the answers of cacheable tools back in the session's cache, as the original run left it:
    keyed as the live path keys them, on the arguments converted to the tool's parameter types."""
    from .ledger import cache_key

    store = session.calls  # the session's own store: ``session.cache`` holds cached answers only
    for cell in cells:
        for record in cell.calls:
            tool = session.runtime.toolset.get(record.name)
            if tool is None or not tool.policy.cacheable or not record.ok:
                continue
            try:
                args = session.runtime.host.arguments_for(tool, record.arguments)
            except ValueError:  # ToolArgumentsError included
                continue
            store.cache.setdefault(cache_key(record.name, args), record.result)


def give_up(session: SessionPort, run: ReplayCell, exc: SnapshotError) -> str:
    """After a rebuild that diverged: the namespace starts empty (the cells leave the state, their
    records stay in ``session.cells``) and the files saved with the state are still laid in the next
    sandbox (the rebuild kept the resume for them). Returns what the run says."""
    state = session.sandbox_state
    files = state.resume.files if state.resume is not None else None
    forget_state(session)
    kept = "the records of its cells stay in session.cells, out of the state"
    try:
        ensure(session, run)  # nothing to replay: a new sandbox with the saved files
        if files:
            kept += f"; the {len(files)} workspace files saved with it are laid in the new sandbox"
    except SnapshotError as lost:  # the files could not be laid: start without them
        state.resume = None
        kept += f"; not the saved workspace files ({lost})"
    finally:
        state.restored = False  # an empty start is no restore, neither for this run nor the next
    return f"the earlier state could not be rebuilt, this run started empty: {exc}; kept: {kept}"


def forget_state(session: SessionPort) -> None:
    """After a failed rebuild: the namespace starts empty, so no earlier cell is in it any more."""
    session.sandbox_state.discard()
    for cell in session.cells:
        cell.in_state = False


def suspend(session: SessionPort, max_workspace_bytes: int = MAX_WORKSPACE_BYTES) -> bool:
    """Stop the session's sandbox, keeping what rebuilds it (caller holds the lock). False, and the
    sandbox is kept, when the state could not be rebuilt exactly or the workspace is over the cap."""
    state = session.sandbox_state
    if state.lifecycle is not Lifecycle.LIVE:
        return False
    if any(c.in_state and c.status == "inexact" for c in session.cells):
        return False
    assert state.driver is not None
    try:
        files = collect_files(state.driver.sandbox.workspace, max_workspace_bytes)
    except SnapshotError:
        return False
    state.resume = Resume(files=files)
    state.discard()
    return True


class IdleSuspender:
    """A daemon thread that suspends the sessions of a runtime idle for ``idle_s`` seconds."""

    def __init__(self, sessions: Set[SessionPort], idle_s: float) -> None:
        """``sessions``: the runtime's (a weakref.WeakSet), held weakly: once the runtime is gone, so
        is the set, and this thread ends."""
        self.idle_s = idle_s
        self._sessions = weakref.ref(sessions)
        self._stop = threading.Event()
        self.suspended = 0
        self._thread = threading.Thread(target=self._loop, name="codeact-suspender", daemon=True)
        self._thread.start()

    def _loop(self) -> None:
        period = min(max(self.idle_s / 4, 0.05), 5.0)
        while not self._stop.wait(period):
            sessions = self._sessions()
            if sessions is None:
                return
            self.sweep(sessions)
            del sessions

    def sweep(self, sessions: Iterable[SessionPort]) -> None:
        now = time.monotonic()
        try:
            found = list(sessions)
        except RuntimeError:  # a session was added meanwhile: look again at the next sweep
            return
        for session in found:
            if (session.sandbox_state.driver is not None and now - session.last_used >= self.idle_s
                    and session.suspend()):
                self.suspended += 1

    def close(self) -> None:
        self._stop.set()
        if self._thread is not threading.current_thread():
            self._thread.join(timeout=10)


class _Closable(Protocol):
    def close(self) -> None: ...


_S = TypeVar("_S", bound=_Closable)


def restore_many(restore: Callable[[], _S], n: int) -> list[_S]:
    """``n`` sessions made by ``restore`` (a restore of one snapshot), concurrently; all or none
    (the others are closed).

    The restores get threads of their own, not the tool pool's: their replayed calls go through the
    pipeline, which may need pool threads. (Kernels outlive these threads: the local backend starts
    every kernel from one long-lived thread, see ``sandbox.local._spawn``.)"""
    sessions, errors = [], []
    with ThreadPoolExecutor(max_workers=n, thread_name_prefix="codeact-fork") as pool:
        # each in a copy of this context: the caller's span (``codeact.tracing``) is the restores' parent
        futures = [pool.submit(contextvars.copy_context().run, restore) for _ in range(n)]
        for future in futures:
            try:
                sessions.append(future.result())
            except BaseException as exc:
                errors.append(exc)
    if errors:
        for session in sessions:
            session.close()
        raise errors[0]
    return sessions
