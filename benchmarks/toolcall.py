"""Tool call round trip: sandbox code → host function → back, timed from inside the code.

Each cell times a loop of N calls with ``time.perf_counter`` in the sandbox (mean per call) and
records every call's own duration (for the median and p90). Chunks alternate between the subject
(Docker) and the floor (the same kernel as a local subprocess, same Unix-socket channel).
"""

from __future__ import annotations

from typing import Any

from codeact import Runtime, Session

from ._common import Baseline, Context, Row, echo, med_p90, ratio

CELL = """
import time as _t
_n = {n}
_lat = [0.0] * _n
_t0 = _t.perf_counter()
for _i in range(_n):
    _s = _t.perf_counter()
    echo(x=_i)
    _lat[_i] = _t.perf_counter() - _s
_total = _t.perf_counter() - _t0
{{"total_s": _total, "lat_us": [round(v * 1e6, 2) for v in _lat]}}
"""

TARGET_US = 50.0
TARGET_RATIO = 2.0
ROWS = [("tool_call", "tool call round trip (sandbox code → host fn → back)", "µs",
         f"≤ {TARGET_US:g} µs, ≤ {TARGET_RATIO:g}× floor")]


def _chunk(session: Session, n: int) -> dict[str, Any]:
    result = session.run(CELL.format(n=n))
    if not result.ok or not isinstance(result.value, dict):
        raise RuntimeError(f"tool-call cell failed: {result.termination} {result.error or result.reason}")
    return result.value


def measure(ctx: Context) -> list[Row]:
    calls = ctx.n(10_000, 300)
    chunks = ctx.n(5, 1)
    per_chunk = calls // chunks
    lat: dict[str, list[float]] = {"subject": [], "floor": []}
    total_s = {"subject": 0.0, "floor": 0.0}
    with Runtime([echo], ctx.subject) as rt_s, Runtime([echo], ctx.floor) as rt_f, \
            rt_s.session() as subject, rt_f.session() as floor:
        sessions = {"subject": subject, "floor": floor}
        for session in sessions.values():
            _chunk(session, 200)  # warm-up: imports, caches, the first frames
        for _ in range(chunks):
            for name, session in sessions.items():
                value = _chunk(session, per_chunk)
                lat[name] += value["lat_us"]
                total_s[name] += value["total_s"]
    n = chunks * per_chunk
    med, p90 = med_p90(lat["subject"])
    f_med, f_p90 = med_p90(lat["floor"])
    mean_us = total_s["subject"] / n * 1e6
    floor_mean_us = total_s["floor"] / n * 1e6
    r = ratio(med, f_med)
    met = med <= TARGET_US and r is not None and r <= TARGET_RATIO
    return [Row(
        key="tool_call", measure=f"tool call round trip ({ctx.subject_label} code → host fn → back)", unit="µs",
        median=med, p90=p90, samples=n,
        baselines=[Baseline("floor: local subprocess kernel, same Unix-socket channel", f_med, f_p90,
                            note=f"loop mean {floor_mean_us:.0f} µs")],
        ratio=r, ratio_label="× floor", target=f"≤ {TARGET_US:g} µs, ≤ {TARGET_RATIO:g}× floor", met=met,
        note=f"{n:,} calls timed inside the code; loop mean {mean_us:.0f} µs/call",
        extra={"loop_mean_us": mean_us, "floor_loop_mean_us": floor_mean_us},
    )]
