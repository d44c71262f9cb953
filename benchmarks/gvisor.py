"""gVisor (``SandboxConfig(runtime="runsc")``) against its own floor, runc beside it.

- cold: fresh session, no pool, acquire → first result, under runsc; baselines a raw
  ``docker run --rm --runtime runsc IMAGE python -c pass`` and the same session under runc.
- tool call: the ``echo`` round trip timed inside the code under runsc; the floor is ``floor.py``'s
  raw JSON ping-pong in a runsc container with the session's hardening and channel socket, started
  and timed in the container as codeact's calls are (gVisor's clock on both sides), interleaved
  with codeact's chunks.
- CPU: a pure-Python loop under runsc ÷ the same loop under runc (gVisor intercepts syscalls, not
  instructions: near 1×).
"""

from __future__ import annotations

import subprocess
import time

from codeact import Runtime

from ._common import Baseline, Context, Row, echo, med_p90, na, ratio
from .floor import FloorContainer

ROWS = [("gvisor_cold", "gVisor: fresh session, no pool, acquire → first result", "ms", "—"),
        ("gvisor_tool_call", "gVisor: tool call round trip", "µs", "≤ 1.3× its floor"),
        ("gvisor_cpu", "gVisor: CPU-bound loop (2M squares summed)", "s", "≤ 1.05× runc")]



_CPU = "import time\n_t=time.perf_counter()\nsum(i*i for i in range(2_000_000))\ntime.perf_counter()-_t"
_CALLS = ("import time as _t\n_l=[]\nfor _i in range({n}):\n    _s=_t.perf_counter()\n    echo(x=_i)\n"
          "    _l.append((_t.perf_counter()-_s)*1e6)\n_l")


def _runsc_registered() -> bool:
    from codeact.image.engine import runtimes

    return "runsc" in runtimes()


def _cold_ms(rt: Runtime) -> float:
    start = time.perf_counter()
    with rt.session() as s:
        if s.run("1").value != 1:
            raise RuntimeError("fresh session did not answer")
        return (time.perf_counter() - start) * 1000


def measure(ctx: Context) -> list[Row]:
    if not _runsc_registered():
        why = "runsc is not registered with dockerd (scripts/ensure-docker.sh)"
        return [na(k, m, u, why, t) for k, m, u, t in ROWS]
    from codeact.sandbox.docker import sandbox_image

    image, python = sandbox_image(ctx.subject)
    runsc_cfg = ctx.subject.model_copy(update={"runtime": "runsc", "pool_size": 0})
    runc_cfg = ctx.subject.model_copy(update={"runtime": "runc", "pool_size": 0})
    rounds = ctx.n(8, 2)
    cold: dict[str, list[float]] = {"runsc": [], "runc": [], "raw": []}
    with Runtime([echo], runsc_cfg) as g, Runtime([echo], runc_cfg) as c:
        for _ in range(rounds):
            cold["runsc"].append(_cold_ms(g))
            cold["runc"].append(_cold_ms(c))
            s = time.perf_counter()
            subprocess.run(["docker", "run", "--rm", "--runtime", "runsc", "--network", "none", image, python, "-c",
                            "pass"], check=True, capture_output=True, timeout=120)
            cold["raw"].append((time.perf_counter() - s) * 1000)
        calls: list[float] = []
        floor: list[float] = []
        blocking: list[float] = []
        raw_floor = FloorContainer(runsc_cfg)
        try:
            with g.session() as gs, c.session() as cs:
                n = ctx.n(1000, 200)
                gs.run(_CALLS.format(n=200))
                raw_floor.ping(200)
                raw_floor.ping(200, spin_s=0.0)
                for _ in range(ctx.n(6, 1)):  # interleaved: this machine's speed drifts
                    calls += gs.run(_CALLS.format(n=n)).value
                    floor += raw_floor.ping(n)
                    blocking += raw_floor.ping(n, spin_s=0.0)
                cpu: dict[str, list[float]] = {"runsc": [], "runc": []}
                for _ in range(ctx.n(5, 1)):
                    cpu["runsc"].append(gs.run(_CPU).value)
                    cpu["runc"].append(cs.run(_CPU).value)
        finally:
            raw_floor.close()
    rows: list[Row] = []
    med, p90 = med_p90(cold["runsc"])
    raw = med_p90(cold["raw"])
    runc = med_p90(cold["runc"])
    rows.append(Row(key="gvisor_cold", measure=ROWS[0][1], unit="ms", median=med, p90=p90, samples=rounds,
                    baselines=[Baseline("docker run --rm --runtime runsc … python -c pass", *raw),
                               Baseline("the same session under runc", *runc)],
                    ratio=ratio(med, raw[0]), ratio_label="× raw runsc docker run"))
    med, p90 = med_p90(calls)
    f_med, f_p90 = med_p90(floor)
    r = ratio(med, f_med)
    rows.append(Row(key="gvisor_tool_call", measure=ROWS[1][1], unit="µs", median=med, p90=p90, samples=len(calls),
                    baselines=[Baseline("floor: raw JSON ping-pong, hardened runsc container, same socket",
                                        f_med, f_p90,
                                        note=f"reads spin {ctx.subject.spin_us} µs, then block, as codeact's"),
                               Baseline("the same floor with blocking reads (spin_us=0)", *med_p90(blocking))],
                    ratio=r, ratio_label="× floor", target=ROWS[1][3], met=r is not None and r <= 1.3))
    g_med, _ = med_p90(cpu["runsc"])
    c_med, _ = med_p90(cpu["runc"])
    r = ratio(g_med, c_med)
    rows.append(Row(key="gvisor_cpu", measure=ROWS[2][1], unit="s", median=g_med, samples=len(cpu["runsc"]),
                    baselines=[Baseline("the same loop under runc", c_med)], ratio=r, ratio_label="× runc",
                    target=ROWS[2][3], met=r is not None and r <= 1.05, extra={"runsc_s": g_med, "runc_s": c_med}))
    return rows
