"""Idle sessions held at once: start up to 500 Docker sessions (4 starter threads), one run each,
check that every one still answers, then close them all.

Guards, so the machine never falls over: stop starting when the time budget is spent, when the
host's MemAvailable drops below a floor, or at the first start that fails (its error is the
reason reported). The file-descriptor soft limit is raised to the hard limit for the run.
"""

from __future__ import annotations

import resource
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from codeact import Runtime, Session

from ._common import Context, Row, mem_available_mib

TARGET = 500
THREADS = 4
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

    def _should_stop(self) -> bool:
        with self.lock:
            if self.stopped is not None:
                return True
            if self.claimed >= self.goal:
                self.stopped = "reached the goal"
            elif time.monotonic() > self.stop_at:
                self.stopped = "time budget spent"
            elif mem_available_mib() < self.min_free_mib:
                self.stopped = f"host MemAvailable below {self.min_free_mib:.0f} MiB"
            if self.stopped is None:
                self.claimed += 1
            return self.stopped is not None

    def worker(self) -> None:
        while not self._should_stop():
            session = self.rt.session()
            start = time.perf_counter()
            try:
                result = session.run("x = 1")
                if not result.ok:
                    raise RuntimeError(f"{result.termination}: {result.reason or result.error}")
            except Exception as exc:
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


def _close_all(sessions: list[Session]) -> float:
    start = time.perf_counter()
    with ThreadPoolExecutor(THREADS) as pool:
        list(pool.map(lambda s: s.close(), sessions))
    return time.perf_counter() - start


def measure(ctx: Context, budget_s: float) -> list[Row]:
    goal = ctx.n(TARGET, 5)
    nofile = _raise_nofile()
    avail0 = mem_available_mib()
    min_free = max(2048.0, avail0 * 0.15)
    started = time.monotonic()
    with Runtime([], ctx.subject) as rt:
        holder = _Holder(rt, goal, started + budget_s, min_free)
        try:
            threads = [threading.Thread(target=holder.worker) for _ in range(THREADS)]
            for t in threads:
                t.start()
            for t in threads:
                t.join()
            start_wall = time.monotonic() - started
            avail1 = mem_available_mib()
            alive = sum(1 for s in holder.sessions if s.run("x").value == 1)
        finally:
            close_s = _close_all(holder.sessions)
    held = len(holder.sessions)
    per_mib = (avail0 - avail1) / held if held else None
    extra: dict[str, Any] = {"started": held, "answering": alive, "stopped": holder.stopped,
                             "start_wall_s": start_wall, "close_wall_s": close_s, "nofile_limit": nofile,
                             "memavailable_drop_per_session_mib": per_mib, "threads": THREADS,
                             "median_start_s": sorted(holder.start_s)[len(holder.start_s) // 2] if held else None}
    note = (f"{alive}/{held} answering; started in {start_wall:.0f} s with {THREADS} threads, closed in "
            f"{close_s:.0f} s; stopped: {holder.stopped}")
    if per_mib is not None:
        note += f"; host MemAvailable −{per_mib:.1f} MiB/session"
    return [Row(key="idle_sessions", measure=f"idle {ctx.subject_label} sessions held at once", unit="sessions",
                median=float(alive), samples=1, target=f"≥ {TARGET}", met=alive >= TARGET if not ctx.quick else None,
                note=note, extra=extra)]
