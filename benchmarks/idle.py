"""Idle sessions held at once: start up to 1,000 Docker sessions (4 starter threads), one run each,
check that every one still answers, then close them all.

Guards, so the machine never falls over: stop starting when the time budget is spent, when the
host's MemAvailable drops below a floor, or at the first start that fails (its error is the
reason reported). The file-descriptor soft limit is raised to the hard limit for the run.
Progress is logged every few seconds. Whatever happens (a failed start, an error, Ctrl-C), every
container this process started is removed before ``measure`` returns: the sessions are closed,
then the containers still labelled with this process's owner id are removed in parallel (the
reaper removes them one at a time), then the reaper's queue is drained.

    python -m benchmarks.run --only idle --no-table --budget 1200
"""

from __future__ import annotations

import resource
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from codeact import Runtime, Session

from ._common import Context, Row, mem_available_mib

TARGET = 1000
THREADS = 4
#: Containers removed at once by the final sweep.
SWEEP_THREADS = 8
PROGRESS_S = 5.0
#: Seconds kept back per session held for removing its container (the engine removes them slowly
#: while many are held): the starters stop early enough to leave the clean-up its time.
CLEANUP_S_PER_SESSION = 0.15
ROWS = [("idle_sessions", "idle Docker sessions held at once", "sessions", f"≥ {TARGET}")]


class _Holder:
    """Starts sessions until told to stop; remembers why it stopped."""

    def __init__(self, rt: Runtime, goal: int, stop_at: float, min_free_mib: float) -> None:
        self.rt, self.goal, self.stop_at, self.min_free_mib = rt, goal, stop_at, min_free_mib
        self.sessions: list[Session] = []
        self.lock = threading.Lock()
        self.stopped: str | None = None
        self.start_s: list[float] = []
        self.claimed = 0  # starts in flight or done, so four threads never overshoot the goal

    def stop(self, reason: str) -> None:
        with self.lock:
            self.stopped = self.stopped or reason

    def _should_stop(self) -> bool:
        with self.lock:
            if self.stopped is not None:
                return True
            if self.claimed >= self.goal:
                self.stopped = "reached the goal"
            elif time.monotonic() + self.claimed * CLEANUP_S_PER_SESSION > self.stop_at:
                self.stopped = "time budget spent (the rest kept for the clean-up)"
            elif mem_available_mib() < self.min_free_mib:
                self.stopped = f"host MemAvailable below {self.min_free_mib:.0f} MiB"
            if self.stopped is None:
                self.claimed += 1
            return self.stopped is not None

    def worker(self) -> None:
        while not self._should_stop():
            start = time.perf_counter()
            session: Session | None = None
            try:
                session = self.rt.session()
                result = session.run("x = 1")
                if not result.ok:
                    raise RuntimeError(f"{result.termination}: {result.reason or result.error}")
            except Exception as exc:
                if session is not None:
                    session.close()
                with self.lock:
                    self.claimed -= 1
                    self.stopped = self.stopped or f"a start failed: {type(exc).__name__}: {exc}"[:300]
                return
            with self.lock:
                self.sessions.append(session)
                self.start_s.append(time.perf_counter() - start)


def _raise_nofile() -> int:
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if hard == resource.RLIM_INFINITY or soft < hard:
        try:
            resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
            soft = hard
        except (ValueError, OSError):
            pass
    return soft


def _progress(ctx: Context, holder: _Holder, threads: list[threading.Thread], started: float,
              avail0: float) -> None:
    """Wait for the starters, logging how many sessions are up, how fast, and the memory they took."""
    last = 0
    while any(t.is_alive() for t in threads):
        for t in threads:
            t.join(PROGRESS_S / len(threads))
        with holder.lock:
            held, stopped = len(holder.sessions), holder.stopped
        elapsed = time.monotonic() - started
        drop = avail0 - mem_available_mib()
        ctx.log(f"idle: {held}/{holder.goal} sessions in {elapsed:.0f} s ({(held - last) / PROGRESS_S:.1f}/s now), "
                f"MemAvailable −{drop:.0f} MiB ({drop / held if held else 0:.1f} MiB/session)"
                + (f"; stopping: {stopped}" if stopped else ""))
        last = held


def _close_all(sessions: list[Session]) -> None:
    with ThreadPoolExecutor(THREADS) as pool:
        list(pool.map(lambda s: s.close(), sessions))


def _sweep_own_containers() -> int:
    """Remove every container labelled with this process's owner id; how many there were."""
    from docker.errors import APIError

    from codeact.image.engine import docker_client
    from codeact.sandbox._owner import LABEL, owner_id

    client = docker_client(timeout=120)
    try:
        ids = [c["Id"] for c in client.api.containers(all=True, filters={"label": f"{LABEL}={owner_id()}"})]

        def remove(cid: str) -> None:
            try:
                client.api.remove_container(cid, force=True)
            except APIError:  # gone already, or the reaper is removing it (409)
                pass

        with ThreadPoolExecutor(SWEEP_THREADS) as pool:
            list(pool.map(remove, ids))
        return len(ids)
    finally:
        client.close()


def _clean_up(ctx: Context, sessions: list[Session]) -> dict[str, Any]:
    """Close every session and remove every container we started; what it took."""
    from codeact.sandbox.reaper import drain

    start = time.perf_counter()
    _close_all(sessions)
    closed = time.perf_counter() - start
    ctx.log(f"idle: {len(sessions)} sessions closed in {closed:.1f} s; removing their containers …")
    swept = _sweep_own_containers()
    drained = drain(max(60.0, len(sessions) * 0.5))
    left = _sweep_own_containers()
    total = time.perf_counter() - start
    ctx.log(f"idle: cleaned up in {total:.0f} s ({swept} containers swept, {left} left after the reaper)")
    return {"close_wall_s": closed, "cleanup_wall_s": total, "containers_swept": swept,
            "reaper_drained": drained, "containers_left_after_reaper": left}


def measure(ctx: Context, budget_s: float) -> list[Row]:
    goal = ctx.n(TARGET, 5)
    nofile = _raise_nofile()
    avail0 = mem_available_mib()
    min_free = max(2048.0, avail0 * 0.15)
    started = time.monotonic()
    cleanup: dict[str, Any] = {}
    with Runtime([], ctx.subject) as rt:
        holder = _Holder(rt, goal, started + budget_s, min_free)
        threads = [threading.Thread(target=holder.worker, name=f"idle-starter-{i}") for i in range(THREADS)]
        try:
            for t in threads:
                t.start()
            _progress(ctx, holder, threads, started, avail0)
            start_wall = time.monotonic() - started
            avail1 = mem_available_mib()
            alive = sum(1 for s in holder.sessions if s.run("x").value == 1)
        finally:
            holder.stop("interrupted")  # an error or Ctrl-C above: the starters end after their start
            for t in threads:
                t.join()
            cleanup = _clean_up(ctx, holder.sessions)
    held = len(holder.sessions)
    per_mib = (avail0 - avail1) / held if held else None
    rate = held / start_wall if start_wall else None
    extra: dict[str, Any] = {"started": held, "answering": alive, "stopped": holder.stopped,
                             "start_wall_s": start_wall, "nofile_limit": nofile, "threads": THREADS,
                             "memavailable_drop_per_session_mib": per_mib, "starts_per_s": rate,
                             "median_start_s": sorted(holder.start_s)[len(holder.start_s) // 2] if held else None,
                             **cleanup}
    note = (f"{alive}/{held} answering; started in {start_wall:.0f} s with {THREADS} threads, cleaned up in "
            f"{cleanup['cleanup_wall_s']:.0f} s; stopped: {holder.stopped}")
    if per_mib is not None:
        note += f"; host MemAvailable −{per_mib:.1f} MiB/session"
    return [Row(key="idle_sessions", measure=f"idle {ctx.subject_label} sessions held at once", unit="sessions",
                median=float(alive), samples=1, target=f"≥ {TARGET}", met=alive >= TARGET if not ctx.quick else None,
                note=note, extra=extra)]
