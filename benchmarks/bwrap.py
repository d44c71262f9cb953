"""What bubblewrap isolation costs the local backend: cold start, tool call, warm exec.

Each measure runs the same kernel twice, side by side and interleaved: inside bwrap
(``SandboxConfig(backend="local", isolation="bwrap", policy="none")``) and as a plain subprocess
(``isolation="none"``, the floor). Ratios are bwrap ÷ plain. Without a working bwrap the rows say why.
"""

from __future__ import annotations

import time
from typing import Any

from codeact import Runtime, SandboxConfig, Session
from codeact.sandbox._bwrap import bwrap_status

from ._common import Baseline, Context, Row, echo, med_p90, na, ratio

ROWS = [
    ("bwrap_cold", "local backend in bwrap: fresh session, acquire → first result", "ms", "report"),
    ("bwrap_tool_call", "local backend in bwrap: tool call round trip", "µs", "report"),
    ("bwrap_warm", "local backend in bwrap: warm `x = 1`", "µs", "report"),
]

_CALLS = """
import time as _t
_lat = []
for _i in range({n}):
    _s = _t.perf_counter()
    echo(x=_i)
    _lat.append((_t.perf_counter() - _s) * 1e6)
_lat
"""


def _cold_ms(rt: Runtime) -> float:
    start = time.perf_counter()
    with rt.session() as session:
        result = session.run("1")
        elapsed = (time.perf_counter() - start) * 1000
    if result.value != 1:
        raise RuntimeError(f"fresh session did not answer: {result.termination} {result.reason}")
    return elapsed


def _calls_us(session: Session, n: int) -> list[float]:
    result = session.run(_CALLS.format(n=n))
    if not result.ok or not isinstance(result.value, list):
        raise RuntimeError(f"tool-call cell failed: {result.termination} {result.error or result.reason}")
    return [float(v) for v in result.value]


def _warm_us(session: Session, n: int) -> list[float]:
    out = []
    for _ in range(n):
        start = time.perf_counter()
        session.run("x = 1")
        out.append((time.perf_counter() - start) * 1e6)
    return out


def _row(key: str, label: str, unit: str, got: list[float], plain: list[float]) -> Row:
    med, p90 = med_p90(got)
    p_med, p_p90 = med_p90(plain)
    return Row(key=key, measure=label, unit=unit, median=med, p90=p90, samples=len(got),
               baselines=[Baseline("plain local subprocess kernel (isolation='none')", p_med, p_p90)],
               ratio=ratio(med, p_med), ratio_label="× plain local", target="report")


def measure(ctx: Context) -> list[Row]:
    ok, reason = bwrap_status()
    if not ok:
        return [na(key, label, unit, f"bwrap unavailable: {reason}", target) for key, label, unit, target in ROWS]
    base = {"backend": "local", "policy": "none", "timeout_s": 600}
    configs = {"bwrap": SandboxConfig(**base, isolation="bwrap"), "plain": SandboxConfig(**base, isolation="none")}
    rounds, calls, warm = ctx.n(15, 3), ctx.n(2000, 100), ctx.n(500, 30)
    cold: dict[str, list[float]] = {"bwrap": [], "plain": []}
    tool: dict[str, list[float]] = {"bwrap": [], "plain": []}
    hot: dict[str, list[float]] = {"bwrap": [], "plain": []}
    runtimes = {name: Runtime([echo], config) for name, config in configs.items()}
    try:
        sessions: dict[str, Any] = {name: rt.session().__enter__() for name, rt in runtimes.items()}
        for name, session in sessions.items():  # warm-up: imports, caches, the first frames
            _cold_ms(runtimes[name])
            _calls_us(session, 50)
        for _ in range(rounds):
            for name in configs:
                cold[name].append(_cold_ms(runtimes[name]))
                tool[name] += _calls_us(sessions[name], calls // rounds)
                hot[name] += _warm_us(sessions[name], warm // rounds)
        for session in sessions.values():
            session.close()
    finally:
        for rt in runtimes.values():
            rt.close()
    return [
        _row("bwrap_cold", ROWS[0][1], "ms", cold["bwrap"], cold["plain"]),
        _row("bwrap_tool_call", ROWS[1][1], "µs", tool["bwrap"], tool["plain"]),
        _row("bwrap_warm", ROWS[2][1], "µs", hot["bwrap"], hot["plain"]),
    ]
