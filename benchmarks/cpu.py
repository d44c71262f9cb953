"""CPU-bound code in the sandbox vs bare CPython on the host (and smolagents' interpreter).

Each workload is timed with ``time.perf_counter`` around the work itself, in the same script in
every place it runs: the sandbox kernel, the floor kernel, host CPython subprocesses (the venv's
interpreter, and ``/usr/bin/python3`` when it is the same build as the image's, which isolates the
cost of the container from the cost of a different interpreter build). smolagents'
``LocalPythonExecutor`` is timed around its call (it re-interprets the AST in Python).
"""

from __future__ import annotations

import functools
import json
import os
import subprocess
import sys
import time
from collections.abc import Callable
from typing import Any

from codeact import Runtime, Session

from ._common import Baseline, Context, Row, med_p90

SETUP = "def fib(n):\n    return n if n < 2 else fib(n - 1) + fib(n - 2)\n"
WORKLOADS: dict[str, tuple[str, str, int]] = {  # key: (label, expression, samples per round)
    "cpu_sum_squares": ("sum of squares 10^6", "sum(i * i for i in range(1_000_000))", 2),
    "cpu_comprehensions": ("comprehensions (list/dict/set, 5×10^5 items)",
                           "len([x * 2 for x in range(200_000) if x % 3]) + len({x: x * x for x in range(100_000)})"
                           " + len({x % 977 for x in range(200_000)})", 2),
    "cpu_fib": ("fib(22), recursive", "fib(22)", 10),  # ~2 ms each: more samples against preemption noise
}
TARGET = 0.95
ROWS = [(key, f"CPU-bound: {label}", "ms", f"≥ {TARGET:g}× CPython speed") for key, (label, _, _) in WORKLOADS.items()]

TIMER = SETUP + """
import sys as _sys, time as _t
_out = {{"version": _sys.version}}
for _k, (_src, _reps) in {workloads!r}.items():
    _c = compile(_src, "<work>", "eval")
    _r = []
    for _ in range(_reps if {full} else 1):
        _s = _t.perf_counter()
        eval(_c)
        _r.append((_t.perf_counter() - _s) * 1000)
    _out[_k] = _r
"""


def _script(full: bool) -> str:
    return TIMER.format(workloads={k: (src, reps) for k, (_, src, reps) in WORKLOADS.items()}, full=full)


def _host(python: str, full: bool) -> dict[str, Any]:
    code = _script(full) + "import json as _j\nprint(_j.dumps(_out))\n"
    out = subprocess.run([python, "-E", "-s", "-c", code], check=True, capture_output=True, text=True,
                         timeout=300, env={})
    return dict(json.loads(out.stdout))


def _smolagents(reps: int) -> tuple[dict[str, list[float]], str]:
    try:
        from smolagents.local_python_executor import LocalPythonExecutor  # peer: bench extra only
    except Exception as exc:
        return {}, f"n/a: smolagents not importable ({type(exc).__name__}: {exc})"[:200]
    executor = LocalPythonExecutor(additional_authorized_imports=[])
    executor.send_tools({})
    executor(SETUP)
    out: dict[str, list[float]] = {}
    for key, (_, src, _) in WORKLOADS.items():
        out[key] = []
        for _ in range(reps):
            start = time.perf_counter()
            executor(src)
            out[key].append((time.perf_counter() - start) * 1000)
    return out, ""


def _same_build_python(sandbox_version: str) -> str | None:
    """``/usr/bin/python3`` if it is the sandbox interpreter's version and compiler (the distribution's
    build, as in the image: a Debian host has it), else None."""
    system = "/usr/bin/python3"
    if not os.path.exists(system) or os.path.realpath(system) == os.path.realpath(sys.executable):
        return None
    out = subprocess.run([system, "-c", "import sys; print(sys.version)"], capture_output=True, text=True)

    def key(version: str) -> tuple[str, str]:
        return version.split()[0], version.rsplit("[", 1)[-1]

    return system if out.returncode == 0 and key(out.stdout.strip()) == key(sandbox_version.strip()) else None


def measure(ctx: Context) -> list[Row]:
    rounds, full = ctx.n(8, 1), not ctx.quick  # many short alternating rounds: load spikes hit all places alike
    times: dict[str, dict[str, list[float]]] = {}
    versions: dict[str, str] = {}

    def add(place: str, out: dict[str, Any]) -> None:
        versions[place] = str(out.pop("version", ""))
        for key, values in out.items():
            times.setdefault(place, {}).setdefault(key, []).extend(values)

    with Runtime([], ctx.subject) as rt_s, Runtime([], ctx.floor) as rt_f, \
            rt_s.session() as subject, rt_f.session() as floor:
        sessions = {"subject": subject, "floor": floor}
        script = _script(full) + "_out\n"
        first = subject.run(_script(False) + "_out\n")  # warm-up, and the sandbox interpreter's version
        if not first.ok or not isinstance(first.value, dict):
            raise RuntimeError(f"CPU cell failed: {first.error or first.reason}")
        same_build = _same_build_python(str(first.value["version"]))
        hosts = {"host": sys.executable, **({"host_same_build": same_build} if same_build else {})}

        def in_session(session: Session) -> dict[str, Any]:
            result = session.run(script)
            if not result.ok or not isinstance(result.value, dict):
                raise RuntimeError(f"CPU cell failed: {result.error or result.reason}")
            return dict(result.value)

        steps: list[tuple[str, Callable[[], dict[str, Any]]]] = [
            *((place, functools.partial(in_session, session)) for place, session in sessions.items()),
            *((place, functools.partial(_host, python, full)) for place, python in hosts.items())]
        for r in range(rounds):  # the order rotates each round, so no place always runs first or last
            for place, step in steps[r % len(steps):] + steps[:r % len(steps)]:
                add(place, step())
    smol, smol_note = ({}, "skipped in --quick") if ctx.quick else _smolagents(1)
    reference = "host_same_build" if "host_same_build" in times else "host"
    rows = []
    for key, (label, _, _) in WORKLOADS.items():
        med, p90 = med_p90(times["subject"][key])
        bases = [Baseline(f"host CPython {versions['host'].split()[0]} (the venv's interpreter)",
                          *med_p90(times["host"][key]))]
        if "host_same_build" in times:
            bases.append(Baseline(f"host {same_build} {versions['host_same_build'].split()[0]} "
                                  "(distribution build, like the image's)", *med_p90(times["host_same_build"][key])))
        bases.append(Baseline("floor: local subprocess kernel", *med_p90(times["floor"][key])))
        if key in smol:
            bases.append(Baseline("smolagents LocalPythonExecutor", *med_p90(smol[key]), note="1 sample"))
        else:
            bases.append(Baseline("smolagents LocalPythonExecutor", None, None, note=smol_note))
        ref_med = med_p90(times[reference][key])[0]
        speed = ref_med / med
        vs_venv = med_p90(times["host"][key])[0] / med
        extra: dict[str, Any] = {"speed_vs_venv_python": vs_venv, "sandbox_python": versions.get("subject", "")}
        if key in smol:
            extra["speed_vs_smolagents"] = med_p90(smol[key])[0] / med
        best = min(times[reference][key]) / min(times["subject"][key])
        extra["speed_best_of"] = best
        note = (f"speed = CPython time ÷ sandbox time (medians; best-of: {best:.2f}×); "
                f"vs the venv's CPython: {vs_venv:.2f}×")
        if "speed_vs_smolagents" in extra:
            note += f"; vs smolagents: {extra['speed_vs_smolagents']:.0f}×"
        rows.append(Row(key=key, measure=f"CPU-bound: {label} ({ctx.subject_label})", unit="ms", median=med,
                        p90=p90, samples=len(times["subject"][key]), baselines=bases, ratio=speed,
                        ratio_label="× CPython speed" + (" (same build)" if reference != "host" else ""),
                        target=f"≥ {TARGET:g}× CPython speed", met=speed >= TARGET, note=note, extra=extra))
    return rows
