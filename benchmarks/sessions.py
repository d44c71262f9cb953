"""Sessions beyond their sandbox (issue 11): restore, fork, suspended sessions.

- restore: a session of 20 cells with 100 tool calls (each tool sleeps ``LATENCY_S`` on the host
  and each cell computes a little) is snapshotted and restored in a fresh sandbox; compared with
  the time the cells took originally, their compute time alone (original minus the tools' waits)
  and one cold start. The same session with 5× the tool latency shows that restore does not
  depend on it (no tool runs during a restore).
- fork: ``fork(3)`` of that session (three sandboxes rebuilt at once).
- suspended sessions: 10,000 open sessions held suspended (no container, state kept as cells +
  workspace files) made from a real session's snapshot; host memory per session from the RSS
  growth; three of them resumed at random to show they still answer.
"""

from __future__ import annotations

import gc
import random
import statistics
import time
from typing import Any

from codeact import Runtime, Session, tool

from ._common import Baseline, Context, Row, rss_mib

LATENCY_S = 0.02
ROWS = [
    ("restore_20_cells", "restore of 20 cells + 100 tool calls", "s", "≤ compute + 1 cold start"),
    ("restore_slow_tools", "the same restore, tools 5× slower", "s", "≈ restore_20_cells"),
    ("fork_3", "fork(3) of that session", "s", "—"),
    ("suspended_session_memory", "host memory per suspended session (10,000 open)", "KiB", "10,000 open"),
]


def _tools(latency: float) -> list[Any]:
    @tool(timeout_s=60)
    def lookup(i: int) -> dict[str, int]:
        """A host lookup that takes a while.

        Args:
            i: Key.
        """
        time.sleep(latency)
        return {"i": i, "square": i * i}

    return [lookup]


def _cells(n_cells: int, calls: int) -> list[str]:
    per = calls // n_cells
    cells = []
    for c in range(n_cells):
        cells.append(
            f"rows_{c} = [lookup(i) for i in range({c * per}, {(c + 1) * per})]\n"
            f"acc_{c} = sum(r['square'] for r in rows_{c}) + sum(k * k for k in range(100_000))\n"
            f"open('cell_{c}.txt', 'w').write(str(acc_{c}))")
    return cells


def _session_time(runtime: Runtime, cells: list[str]) -> tuple[Session, float]:
    session = runtime.session()
    session.start()
    start = time.perf_counter()
    for code in cells:
        result = session.run(code)
        if not result.ok:
            raise RuntimeError(f"bench cell failed: {result.error or result.reason}")
    return session, time.perf_counter() - start


def _cold_start(runtime: Runtime) -> float:
    start = time.perf_counter()
    with runtime.session() as s:
        s.run("x = 1")
    return time.perf_counter() - start


def _restore_round(runtime: Runtime, cells: list[str], fork: bool) -> dict[str, float]:
    """One original session, its restore, one cold start (and a fork(3) when asked), in seconds."""
    session, original = _session_time(runtime, cells)
    try:
        snap = session.snapshot()
        start = time.perf_counter()
        restored = runtime.restore(snap)
        took = {"original": original, "restore": time.perf_counter() - start}
        same = restored.run("acc_0").value == session.run("acc_0").value
        restored.close()
        if not same:
            raise RuntimeError("the restored session does not hold the original's state")
        took["cold"] = _cold_start(runtime)
        if fork:
            start = time.perf_counter()
            forks = session.fork(3)
            took["fork"] = time.perf_counter() - start
            for f in forks:
                f.close()
        return took
    finally:
        session.close()


def _restore_rows(ctx: Context) -> list[Row]:
    n_cells, calls, rounds = ctx.n(20, 5), ctx.n(100, 20), ctx.n(3, 1)
    cells = _cells(n_cells, calls)
    med: dict[float, dict[str, float]] = {}
    for latency in (LATENCY_S, LATENCY_S * 5):
        with Runtime(_tools(latency), ctx.subject) as runtime:
            took = [_restore_round(runtime, cells, fork=latency == LATENCY_S and r == 0) for r in range(rounds)]
        med[latency] = {k: statistics.median(t[k] for t in took if k in t) for k in took[0]}
    base = med[LATENCY_S]
    compute = base["original"] - calls * LATENCY_S
    slow = med[LATENCY_S * 5]["restore"]
    return [
        Row(key="restore_20_cells", measure=f"restore of {n_cells} cells + {calls} tool calls", unit="s",
            median=round(base["restore"], 3), samples=rounds, target="≤ compute + 1 cold start",
            baselines=[Baseline("original run", round(base["original"], 3)),
                       Baseline("original compute (run − tool waits)", round(compute, 3)),
                       Baseline("cold start", round(base["cold"], 3))],
            ratio=round(base["restore"] / base["original"], 3), ratio_label="× original run",
            met=base["restore"] <= compute + base["cold"],
            note=f"tools sleep {LATENCY_S * 1000:g} ms per call, none runs during the restore; median of {rounds}"),
        Row(key="fork_3", measure="fork(3) of that session", unit="s", median=round(base["fork"], 3), samples=1,
            ratio=round(base["fork"] / base["restore"], 2), ratio_label="× one restore",
            note="three sandboxes rebuilt concurrently"),
        Row(key="restore_slow_tools", measure="the same restore, tools 5× slower", unit="s", median=round(slow, 3),
            samples=rounds, ratio=round(slow / base["restore"], 2), ratio_label="× restore at 1× latency",
            target="≈ 1×", met=slow <= base["restore"] * 1.5 + 0.5,
            note=f"tools sleep {LATENCY_S * 5000:g} ms per call; original run {med[LATENCY_S * 5]['original']:.2f} s"),
    ]


def _suspended_row(ctx: Context) -> Row:
    goal = ctx.n(10_000, 500)
    with Runtime(_tools(0.0), ctx.subject) as runtime:
        with runtime.session() as source:
            for code in _cells(3, 6):
                source.run(code)
            snap = source.snapshot()
        gc.collect()
        before = rss_mib()
        sessions = [runtime.restore(snap, lazy=True) for _ in range(goal)]
        gc.collect()
        grown = rss_mib() - before
        assert all(s.suspended for s in sessions)
        resumed = []
        for s in random.Random(0).sample(sessions, 3):
            start = time.perf_counter()
            result = s.run("acc_2")
            resumed.append(time.perf_counter() - start)
            if not (result.ok and result.restored):
                raise RuntimeError(f"a suspended session did not resume: {result.reason or result.error}")
        per_kib = grown * 1024 / goal
        for s in sessions:
            s.close()
    return Row(key="suspended_session_memory", measure=f"host memory per suspended session ({goal:,} open)",
               unit="KiB", median=round(per_kib, 1), samples=goal, target=f"{goal:,} open",
               met=True, extra={"rss_growth_mib": round(grown, 1), "resume_s": [round(x, 3) for x in resumed],
                                "snapshot_cells": len(snap.cells), "snapshot_files": len(snap.files)},
               note=f"{goal:,} sessions held with no sandbox; RSS +{grown:.0f} MiB; 3 resumed at random in "
                    f"{max(resumed):.2f} s or less")


def measure(ctx: Context) -> list[Row]:
    rows = _restore_rows(ctx)
    rows.append(_suspended_row(ctx))
    return rows
