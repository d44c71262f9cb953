"""Fresh isolated session, acquire → first result, with and without the warm pool; then close.

``with rt.session() as s: s.run("1")`` timed from ``rt.session()`` to the result (close excluded
and timed on its own). Pooled: ``SandboxConfig(pool_size=2)``, the pool refilled
(``wait_ready``) before every sample so no refill competes with the sample. Cold: ``pool_size=0``.
Baselines in the same rounds: ``docker run --rm --network none IMAGE python3 -c pass``, a cold
local subprocess kernel, and beside the pooled row a pooled pydantic-monty checkout to its first
``feed_run("1")`` (``monty.py``: no OS isolation). With Docker, a last row splits the cold samples
into their steps (``_fresh_steps``): engine create and start, the kernel's start, the handshake.
"""

from __future__ import annotations

import shutil
import subprocess
import time

from codeact import Runtime

from ._common import Baseline, Context, Row, med_p90, ratio
from ._fresh_steps import STEPS, StepClock
from .monty import NOTE as MONTY_NOTE
from .monty import open_peer as open_monty

POOLED_MS = 1.0
COLD_MS = 300.0
CLOSE_MS = 100.0
ROWS = [("fresh_pooled", "fresh session from the warm pool, acquire → first result", "ms", f"≤ {POOLED_MS:g} ms"),
        ("fresh_cold", "fresh session, no pool, acquire → first result", "ms", f"≤ {COLD_MS:g} ms"),
        ("session_close", "session close", "ms", f"≤ {CLOSE_MS:g} ms"),
        ("fresh_cold_steps", "fresh session, no pool: where the ms go (median of each step)", "ms", "—")]


def _session_ms(rt: Runtime, close_ms: list[float], clock: StepClock | None = None,
                steps: list[dict[str, float]] | None = None) -> float:
    if clock is not None:
        clock.reset()
    start = time.perf_counter()
    session = rt.session()
    result = session.run("1")
    first = time.perf_counter()
    split = clock.split(start, first) if clock is not None else None
    if split is not None and steps is not None:
        steps.append(split)
    session.close()
    close_ms.append((time.perf_counter() - first) * 1000)
    if result.value != 1:
        raise RuntimeError(f"fresh session did not answer: {result.termination} {result.reason}")
    return (first - start) * 1000


def _docker_run_ms(image: str, python: str) -> float:
    start = time.perf_counter()
    subprocess.run(["docker", "run", "--rm", "--network", "none", image, python, "-c", "pass"],
                   check=True, capture_output=True, timeout=120)
    return (time.perf_counter() - start) * 1000


def measure(ctx: Context) -> list[Row]:
    rounds, pooled_per_round = ctx.n(10, 2), ctx.n(2, 1)
    pooled: list[float] = []
    cold: list[float] = []
    local_cold: list[float] = []
    docker_run: list[float] = []
    close: list[float] = []
    local_close: list[float] = []
    monty_ms: list[float] = []
    steps: list[dict[str, float]] = []
    clock = StepClock() if ctx.docker else None
    image = python = None
    docker_note = "n/a: the subject is the local backend" if not ctx.docker else ""
    if ctx.docker:
        from codeact.sandbox.docker import sandbox_image

        image, python = sandbox_image(ctx.subject)
        if shutil.which("docker") is None:
            image, docker_note = None, "n/a: no docker CLI on PATH"
    pool_cfg = ctx.subject.model_copy(update={"pool_size": 2})
    monty, monty_note = open_monty(ctx.quick)
    try:
        with Runtime([], pool_cfg) as rt_pool, Runtime([], ctx.subject) as rt_cold, Runtime([], ctx.floor) as rt_local:
            pool = rt_pool.pool
            assert pool is not None
            _session_ms(rt_cold, [])  # warm-up: engine client, image lookup, imports
            _session_ms(rt_local, [])
            for _ in range(rounds):
                for _ in range(pooled_per_round):
                    if not pool.wait_ready(120):
                        raise RuntimeError(f"the pool did not fill: {pool.last_error}")
                    pooled.append(_session_ms(rt_pool, close))
                    if monty is not None:
                        monty_ms.append(monty.checkout_ms())
                pool.wait_ready(120)  # no refill in flight during the cold samples
                if clock is not None:
                    with clock.patched():
                        cold.append(_session_ms(rt_cold, close, clock, steps))
                else:
                    cold.append(_session_ms(rt_cold, close))
                local_cold.append(_session_ms(rt_local, local_close))
                if image is not None and python is not None:
                    docker_run.append(_docker_run_ms(image, python))
    finally:
        if monty is not None:
            monty.close()
    d_med = d_p90 = None
    if docker_run:
        d_med, d_p90 = med_p90(docker_run)
    docker_base = Baseline("docker run --rm --network none IMAGE python3 -c pass", d_med, d_p90, note=docker_note)
    p_med, p_p90 = med_p90(pooled)
    c_med, c_p90 = med_p90(cold)
    l_med, l_p90 = med_p90(local_cold)
    k_med, k_p90 = med_p90(close)
    lc_med, lc_p90 = med_p90(local_close)
    label = ctx.subject_label
    monty_base = (Baseline("pydantic-monty pooled checkout → first feed_run", *med_p90(monty_ms), note=MONTY_NOTE)
                  if monty_ms else Baseline("pydantic-monty pooled checkout", None, None, note=monty_note))
    rows = [
        Row(key="fresh_pooled", measure=f"fresh {label} session from the warm pool, acquire → first result",
            unit="ms", median=p_med, p90=p_p90, samples=len(pooled), baselines=[docker_base, monty_base],
            ratio=ratio(p_med, d_med), ratio_label="× docker run", target=f"≤ {POOLED_MS:g} ms",
            met=p_med <= POOLED_MS, note="SandboxConfig(pool_size=2); pool refilled before each sample"),
        Row(key="fresh_cold", measure=f"fresh {label} session, no pool, acquire → first result", unit="ms",
            median=c_med, p90=c_p90, samples=len(cold),
            baselines=[docker_base, Baseline("cold local subprocess kernel", l_med, l_p90)],
            ratio=ratio(c_med, d_med), ratio_label="× docker run", target=f"≤ {COLD_MS:g} ms",
            met=c_med <= COLD_MS, note=f"pooled is {c_med / p_med:.0f}× faster" if p_med else ""),
        Row(key="session_close", measure=f"{label} session close", unit="ms", median=k_med, p90=k_p90,
            samples=len(close), baselines=[Baseline("local subprocess kernel close", lc_med, lc_p90)],
            ratio=ratio(k_med, lc_med), ratio_label="× local", target=f"≤ {CLOSE_MS:g} ms",
            met=k_med <= CLOSE_MS, note="Session.close() of the pooled and cold sessions above"),
    ]
    rows.append(_steps_row(label, steps, c_med, d_med))
    return rows


def _steps_row(label: str, steps: list[dict[str, float]], total: float, docker_run: float | None) -> Row:
    """The cold samples split into their steps: each step's median (they need not sum to the total's)."""
    measure = f"fresh {label} session, no pool: where the ms go (median of each step)"
    if not steps:
        return Row(key="fresh_cold_steps", measure=measure, unit="ms", status="n/a",
                   note="only the Docker backend's start is split into steps")
    medians = {name: med_p90([s[name] for s in steps]) for name in STEPS}
    summed = sum(m for m, _ in medians.values())
    return Row(key="fresh_cold_steps", measure=measure, unit="ms", median=summed, samples=len(steps),
               baselines=[Baseline(name, m, p) for name, (m, p) in medians.items()],
               ratio=ratio(summed, docker_run), ratio_label="× docker run",
               note="; ".join(f"{name} {m:.1f}" for name, (m, _) in medians.items())
               + f" (the steps' medians sum to {summed:.0f} ms; the cold median is {total:.0f} ms)",
               extra={"steps_ms": {name: {"median": m, "p90": p} for name, (m, p) in medians.items()}})

