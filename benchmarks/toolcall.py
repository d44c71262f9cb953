"""Tool call round trip: sandbox code → host function → back, timed from inside the code.

Each cell times a loop of N calls with ``time.perf_counter`` in the sandbox (median and p90 of
the calls' own durations). In the same run, alternating chunk by chunk: the transport floor (a
raw JSON ping-pong with a process in a hardened container from the sandbox image, no codeact on
either side: see ``floor.py``) and the same codeact kernel as a local subprocess (a second
baseline), and pydantic-monty calling a host function from inside a feed (``monty.py``: no OS
isolation; timed from the host, a feed's mean per call). Also: 10,000 calls in one code action,
wall time and calls/s.
"""

from __future__ import annotations

import statistics
from typing import Any

from codeact import Runtime, Session

from ._common import Baseline, Context, Row, echo, med_p90, na, ratio
from .floor import open_floor
from .monty import NOTE as MONTY_NOTE
from .monty import open_peer as open_monty

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
BATCH = "for _i in range({n}):\n    echo(x=_i)\n"

TARGET_RATIO = 1.3
TARGET_RATE = 15_000  # issue 34: calls/s in one action
ROWS = [("tool_call", "tool call round trip (sandbox code → host fn → back)", "µs",
         f"≤ {TARGET_RATIO:g}× transport floor"),
        ("tool_calls_10k", "10,000 tool calls in one code action", "calls/s", f"≥ {TARGET_RATE:,} calls/s")]


def _chunk(session: Session, n: int) -> dict[str, Any]:
    result = session.run(CELL.format(n=n))
    if not result.ok or not isinstance(result.value, dict):
        raise RuntimeError(f"tool-call cell failed: {result.termination} {result.error or result.reason}")
    return result.value


def measure(ctx: Context) -> list[Row]:
    calls = ctx.n(10_000, 300)
    chunks = ctx.n(5, 1)
    per_chunk = calls // chunks
    lat: dict[str, list[float]] = {"subject": [], "local": [], "raw": [], "blocking": [], "monty": []}
    total_s = {"subject": 0.0, "local": 0.0}
    raw, raw_note = open_floor(ctx.docker, ctx.subject)
    monty, monty_note = open_monty(ctx.quick)
    batch_s = None
    try:
        with Runtime([echo], ctx.subject) as rt_s, Runtime([echo], ctx.floor) as rt_f, \
                rt_s.session() as subject, rt_f.session() as local:
            sessions = {"subject": subject, "local": local}
            for session in sessions.values():
                _chunk(session, 200)  # warm-up: imports, caches, the first frames
            if raw is not None:
                raw.ping(200)
            if monty is not None:
                monty.calls(200)
            for _ in range(chunks):
                for name, session in sessions.items():
                    value = _chunk(session, per_chunk)
                    lat[name] += value["lat_us"]
                    total_s[name] += value["total_s"]
                if raw is not None:
                    lat["raw"] += raw.ping(per_chunk)
                    lat["blocking"] += raw.ping(per_chunk, spin_s=0.0)
                if monty is not None:  # a feed's mean per call: Monty's code cannot time itself
                    lat["monty"] += [monty.calls(per_chunk // 10) for _ in range(10)]
            batch_n = ctx.n(10_000, 500)
            batch = subject.run(BATCH.format(n=batch_n))
            if not batch.ok or len(batch.calls) != batch_n:
                raise RuntimeError(f"batch cell failed: {batch.termination} {batch.error or batch.reason}")
            batch_s = batch.duration_ms / 1000
    finally:
        if raw is not None:
            raw.close()
        if monty is not None:
            monty.close()
    n = chunks * per_chunk
    med, p90 = med_p90(lat["subject"])
    l_med, l_p90 = med_p90(lat["local"])
    baselines = []
    floor_med = None
    if lat["raw"]:
        floor_med, f_p90 = med_p90(lat["raw"])
        baselines.append(Baseline("transport floor: raw JSON ping-pong, hardened container, same socket",
                                  floor_med, f_p90,
                                  note=f"reads spin {ctx.subject.spin_us} µs before they block, as codeact's do"))
        baselines.append(Baseline("the same floor with blocking reads (spin_us=0)", *med_p90(lat["blocking"])))
    else:
        baselines.append(Baseline("transport floor: raw JSON ping-pong", None, None, note=raw_note))
    baselines.append(Baseline("codeact kernel as a local subprocess", l_med, l_p90,
                              note=f"loop mean {total_s['local'] / n * 1e6:.0f} µs"))
    if lat["monty"]:
        baselines.append(Baseline(f"pydantic-monty host function (a feed of {per_chunk // 10:,} calls, mean a call)",
                                  *med_p90(lat["monty"]), note=MONTY_NOTE))
    else:
        baselines.append(Baseline("pydantic-monty host function", None, None, note=monty_note))
    r = ratio(med, floor_med if floor_med is not None else l_med)
    label = "× floor" if floor_med is not None else "× local kernel"
    mean_us = total_s["subject"] / n * 1e6
    rows = [Row(
        key="tool_call", measure=f"tool call round trip ({ctx.subject_label} code → host fn → back)", unit="µs",
        median=med, p90=p90, samples=n, baselines=baselines, ratio=r, ratio_label=label,
        target=f"≤ {TARGET_RATIO:g}× transport floor",
        met=r is not None and floor_med is not None and r <= TARGET_RATIO,
        note=f"{n:,} calls timed inside the code; loop mean {mean_us:.0f} µs/call",
        extra={"loop_mean_us": mean_us, "local_kernel_median_us": l_med, "floor_median_us": floor_med},
    )]
    if batch_s:
        batch_n = ctx.n(10_000, 500)
        rate = batch_n / batch_s
        # The floor's rate: one call per round trip, back to back, no codeact on either side.
        floor_rate = 1e6 / statistics.fmean(lat["raw"]) if lat["raw"] else None
        rows.append(Row(key="tool_calls_10k",
                        measure=f"{batch_n:,} tool calls in one code action ({ctx.subject_label})",
                        unit="calls/s", median=rate, samples=batch_n,
                        baselines=[Baseline("transport floor: raw ping-pong back to back (1 ÷ its mean round trip)",
                                            floor_rate)] if floor_rate else [],
                        ratio=ratio(rate, floor_rate), ratio_label="× the floor's rate",
                        target=f"≥ {TARGET_RATE:,} calls/s", met=rate >= TARGET_RATE,
                        note=f"wall {batch_s:.2f} s for the whole action (session.run, records included)",
                        extra={"wall_s": batch_s, "floor_rate": floor_rate}))
    else:
        rows.append(na("tool_calls_10k", "10,000 tool calls in one code action", "calls/s", "not measured"))
    return rows
