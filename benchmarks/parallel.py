"""Independent slow tool calls in parallel from the code, vs the same calls one after another.

A host ``@tool`` sleeps 1 s. The code calls it K times (K = 2, 10) three ways: serially, with the
sandbox's ``parallel(fn, items)`` as a model would write it (default ``max_workers``), and with
``parallel(..., max_workers=K)``. Timed from the host around ``session.run``.
"""

from __future__ import annotations

import time
from typing import Any

from codeact import Runtime, Session

from ._common import Baseline, Context, Row, med_p90, slow

ROWS = [(f"parallel_{k}", f"{k} independent 1 s tool calls in parallel from code", "s", "≈ 1 s") for k in (2, 10)]
TOLERANCE = 1.25  # "≈ 1 s": within 25 % of one call

SERIAL = "[slow(seconds={s}) for _ in range({k})]"
PARALLEL = "parallel(lambda _: slow(seconds={s}), range({k}))"
PARALLEL_K = "parallel(lambda _: slow(seconds={s}), range({k}), max_workers={k})"


def _time(session: Session, code: str, k: int) -> float:
    start = time.perf_counter()
    result = session.run(code)
    elapsed = time.perf_counter() - start
    if not result.ok or not isinstance(result.value, list) or len(result.value) != k:
        raise RuntimeError(f"parallel cell failed: {result.termination} {result.error or result.reason}")
    if any(not isinstance(v, (int, float)) for v in result.value):
        raise RuntimeError(f"a call failed: {result.value!r}")
    return elapsed


def measure(ctx: Context) -> list[Row]:
    seconds = 0.05 if ctx.quick else 1.0
    reps = ctx.n(3, 1)
    rows = []
    with Runtime([slow], ctx.subject) as rt, rt.session() as session:
        session.run("slow(seconds=0.001)")  # warm-up
        for k in (2, 10):
            times: dict[str, list[float]] = {"default": [], "max_workers": [], "serial": []}
            for _ in range(reps):
                times["default"].append(_time(session, PARALLEL.format(s=seconds, k=k), k))
                times["max_workers"].append(_time(session, PARALLEL_K.format(s=seconds, k=k), k))
            times["serial"].append(_time(session, SERIAL.format(s=seconds, k=k), k))
            med, p90 = med_p90(times["default"])
            mw_med, mw_p90 = med_p90(times["max_workers"])
            s_med, _ = med_p90(times["serial"])
            extra: dict[str, Any] = {"call_s": seconds, "max_workers_k_median_s": mw_med,
                                     "serial_s": s_med}
            met = med <= seconds * TOLERANCE
            note = f"parallel(fn, items) as written by a model; with max_workers={k}: {mw_med:.2f} s"
            rows.append(Row(
                key=f"parallel_{k}", measure=f"{k} independent {seconds:g} s tool calls, parallel(...) in code",
                unit="s", median=med, p90=p90, samples=reps,
                baselines=[Baseline(f"serial ({k} calls in a loop)", s_med, None, note="1 sample"),
                           Baseline(f"parallel(..., max_workers={k})", mw_med, mw_p90)],
                ratio=med / s_med, ratio_label="× serial", target=f"≈ {seconds:g} s (≤ {seconds * TOLERANCE:g} s)",
                met=met, note=note, extra=extra))
    return rows
