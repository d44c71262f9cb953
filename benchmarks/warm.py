"""Warm ``x = 1`` in a live session, timed from the host: ``session.run`` round trip.

Baselines in the same run: the transport floor (a raw ``exec`` loop with a process in a hardened
container from the sandbox image, no codeact on either side: ``floor.py``), the same kernel as a
local subprocess, a Jupyter
kernel (ipykernel started by ``jupyter_client.KernelManager``, blocking client ``execute`` with
``reply=True``: the shell round trip) and pydantic-monty's ``feed_run`` (``monty.py``: no OS
isolation). Blocks alternate between them.
"""

from __future__ import annotations

import subprocess
import time
from collections.abc import Callable
from typing import Any

from codeact import Runtime

from ._common import Baseline, Context, Row, med_p90, ratio
from .floor import open_floor
from .monty import NOTE as MONTY_NOTE
from .monty import open_peer as open_monty

TARGET_RATIO = 1.5
ROWS = [("warm_run", "warm `x = 1` in a live session", "µs", f"≤ {TARGET_RATIO:g}× transport floor")]


class _Jupyter:
    """A Jupyter kernel and a blocking client; ``None`` values with a reason when unavailable."""

    def __init__(self) -> None:
        from jupyter_client.manager import KernelManager  # peer: from the bench extra only

        self.km = KernelManager(kernel_name="python3")
        self.km.start_kernel(stderr=subprocess.DEVNULL)  # keep its TCP warning off the table
        self.kc = self.km.client()
        self.kc.start_channels()
        self.kc.wait_for_ready(timeout=60)

    def run(self) -> None:
        reply = self.kc.execute("x = 1", reply=True, timeout=30)
        if reply["content"]["status"] != "ok":
            raise RuntimeError(f"jupyter execute failed: {reply['content']}")

    def close(self) -> None:
        self.kc.stop_channels()
        self.km.shutdown_kernel(now=True)


def _spin_note(ctx: Context) -> str:
    return f"reads spin {ctx.subject.spin_us} µs before they block, as codeact's do"


def _block(fn: Callable[[], Any], n: int, into: list[float]) -> None:
    for _ in range(n):
        start = time.perf_counter()
        fn()
        into.append((time.perf_counter() - start) * 1e6)


def _peers(lat: dict[str, list[float]], med: float, extra: dict[str, Any], jupyter_note: str,
           monty_note: str) -> list[Baseline]:
    """The peers' baselines (``extra`` gets the ratio to Jupyter)."""
    found = []
    if lat["jupyter"]:
        j_med, j_p90 = med_p90(lat["jupyter"])
        found.append(Baseline("Jupyter kernel (ipykernel + jupyter_client)", j_med, j_p90))
        extra["vs_jupyter"] = med / j_med
    else:
        found.append(Baseline("Jupyter kernel (ipykernel + jupyter_client)", None, None, note=jupyter_note))
    if lat["monty"]:
        found.append(Baseline("pydantic-monty feed_run in a checked-out session", *med_p90(lat["monty"]),
                              note=MONTY_NOTE))
    else:
        found.append(Baseline("pydantic-monty feed_run", None, None, note=monty_note))
    return found


def measure(ctx: Context) -> list[Row]:
    iters, blocks = ctx.n(1000, 60), ctx.n(10, 2)
    per = iters // blocks
    lat: dict[str, list[float]] = {"subject": [], "floor": [], "jupyter": [], "raw": [], "blocking": [],
                                   "monty": []}
    jupyter: _Jupyter | None = None
    jupyter_note = "skipped in --quick" if ctx.quick else ""
    if not ctx.quick:
        try:
            jupyter = _Jupyter()
        except Exception as exc:  # not installed, or the kernel would not start
            jupyter_note = f"n/a: {type(exc).__name__}: {exc}"[:200]
    raw, raw_note = open_floor(ctx.docker, ctx.subject)
    monty, monty_note = open_monty(ctx.quick)
    try:
        with Runtime([], ctx.subject) as rt_s, Runtime([], ctx.floor) as rt_f, \
                rt_s.session() as subject, rt_f.session() as floor:
            runners: dict[str, Callable[[], Any]] = {"subject": lambda: subject.run("x = 1"),
                                                     "floor": lambda: floor.run("x = 1")}
            if jupyter is not None:
                runners["jupyter"] = jupyter.run
            if raw is not None:
                raw_box = raw
                runners["raw"] = lambda: raw_box.exec_loop(1)
                runners["blocking"] = lambda: raw_box.exec_loop(1, spin_s=0.0)
            if monty is not None:
                runners["monty"] = monty.warm
            for fn in runners.values():
                _block(fn, 20, [])  # warm-up
            for _ in range(blocks):
                for name, fn in runners.items():
                    _block(fn, per, lat[name])
            check = subject.run("x")
            if check.value != 1:
                raise RuntimeError(f"the namespace did not keep x: {check.value!r}")
    finally:
        if jupyter is not None:
            jupyter.close()
        if raw is not None:
            raw.close()
        if monty is not None:
            monty.close()
    med, p90 = med_p90(lat["subject"])
    f_med, f_p90 = med_p90(lat["floor"])
    baselines = []
    raw_med = None
    if lat["raw"]:
        raw_med, raw_p90 = med_p90(lat["raw"])
        baselines.append(Baseline("transport floor: raw exec loop, hardened container, same socket",
                                  raw_med, raw_p90, note=_spin_note(ctx)))
        baselines.append(Baseline("the same floor with blocking reads (spin_us=0)", *med_p90(lat["blocking"])))
    else:
        baselines.append(Baseline("transport floor: raw exec loop", None, None, note=raw_note))
    baselines.append(Baseline("codeact kernel as a local subprocess", f_med, f_p90))
    extra: dict[str, Any] = {}
    baselines += _peers(lat, med, extra, jupyter_note, monty_note)
    r = ratio(med, raw_med if raw_med is not None else f_med)
    met = raw_med is not None and r is not None and r <= TARGET_RATIO
    note = f"{len(lat['subject'])} runs of session.run('x = 1') from the host"
    if "vs_jupyter" in extra:
        note += f"; {extra['vs_jupyter']:.2f}× Jupyter"
    return [Row(key="warm_run", measure=f"warm `x = 1` in a live {ctx.subject_label} session", unit="µs",
                median=med, p90=p90, samples=len(lat["subject"]), baselines=baselines, ratio=r,
                ratio_label="× floor" if raw_med is not None else "× local kernel",
                target=f"≤ {TARGET_RATIO:g}× transport floor", met=met,
                note=note, extra=extra)]
