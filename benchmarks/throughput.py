"""End-to-end throughput: 1,000 short code actions through ``Runtime``, 4 at a time.

Four threads, each with its own session (started before the clock), take actions from a shared
counter; an action is ``s = sum(range(100))`` plus one tool call, checked. Reported: actions/s and
each action's latency (host side, ``session.run``). The floor runs the same on local kernels.
"""

from __future__ import annotations

import itertools
import threading
import time
from typing import Any

from codeact import Runtime, SandboxConfig

from ._common import Baseline, Context, Row, echo, med_p90

THREADS = 4
ACTION = "s = sum(range(100))\necho(x=s)"
ROWS = [("throughput", "1,000 short code actions through Runtime, 4 at a time", "actions/s", "report"),
        ("action_latency", "latency of one action under that load", "ms", "report")]


def _drive(config: SandboxConfig, total: int) -> tuple[float, list[float]]:
    """(wall seconds, per-action latencies in ms)."""
    counter = itertools.count()
    latencies: list[float] = []
    errors: list[str] = []
    lock = threading.Lock()
    with Runtime([echo], config) as rt:
        sessions = [rt.session().start() for _ in range(THREADS)]
        for s in sessions:
            s.run(ACTION)  # warm-up

        def worker(index: int) -> None:
            session = sessions[index]
            mine: list[float] = []
            while next(counter) < total:
                start = time.perf_counter()
                result = session.run(ACTION)
                mine.append((time.perf_counter() - start) * 1000)
                if result.value != 4950:
                    with lock:
                        errors.append(f"{result.termination}: {result.error or result.reason}")
            with lock:
                latencies.extend(mine)

        threads = [threading.Thread(target=worker, args=(i,)) for i in range(THREADS)]
        start = time.perf_counter()
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        wall = time.perf_counter() - start
        for s in sessions:
            s.close()
    if errors:
        raise RuntimeError(f"{len(errors)} actions failed, first: {errors[0]}")
    return wall, latencies


def measure(ctx: Context) -> list[Row]:
    total = ctx.n(1000, 40)
    wall, lat = _drive(ctx.subject, total)
    f_wall, f_lat = _drive(ctx.floor, total)
    rate, f_rate = total / wall, total / f_wall
    med, p90 = med_p90(lat)
    f_med, f_p90 = med_p90(f_lat)
    extra: dict[str, Any] = {"actions": total, "threads": THREADS, "wall_s": wall, "floor_wall_s": f_wall}
    label = ctx.subject_label
    return [
        Row(key="throughput", measure=f"{total:,} short code actions through Runtime ({label}), {THREADS} at a time",
            unit="actions/s", median=rate, samples=total,
            baselines=[Baseline("floor: local subprocess kernels", f_rate, None)], ratio=rate / f_rate,
            ratio_label="× floor", target="report", note=f"action: {ACTION!r}; wall {wall:.2f} s", extra=extra),
        Row(key="action_latency", measure=f"latency of one action under that load ({label})", unit="ms",
            median=med, p90=p90, samples=total, baselines=[Baseline("floor: local subprocess kernels", f_med, f_p90)],
            ratio=med / f_med, ratio_label="× floor", target="report", note="session.run from the host"),
    ]
