"""Where the time goes: the warm run, the tool call (runc and gVisor) and the pooled first result.

For codeact and for the transport floor (``floor.py``: the same hardened container and socket, no
codeact on either side), in alternating blocks: the wall time per operation, the host's CPU for
it (``time.process_time`` of this process, every thread), the sandbox's CPU for it (the
container's ``cpuacct`` cgroup: the kernel process and anything it runs) and what is neither,
wall − both: a side waiting for the other to be scheduled, wake-ups, the socket. So a target that
is missed shows which side the rest of the time is on, measured in the same run as the floor.

The pooled first result is measured after the pool has been idle (as every real acquire is); its
floor is the raw exec round trip after the same idle pause, beside the same round trip back to
back: what waking two idle processes costs on this machine with no code of ours on either side.

Both sides read with ``spin_us=0`` here (codeact and the floor): a spinning read's wait is CPU,
which would hide which side the time is on. The latency rows measure with the spin.
"""

from __future__ import annotations

import dataclasses
import functools
import glob
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from codeact import Runtime, Session

from ._common import Baseline, Context, Row, echo, med_p90, na, ratio
from .floor import FloorContainer, open_floor

ROWS = [("warm_split", "warm `x = 1`: where the µs go (per run)", "µs", "—"),
        ("tool_call_split", "tool call: where the µs go (per call)", "µs", "—"),
        ("pooled_split", "pooled acquire → first result: where the ms go", "ms", "—"),
        ("gvisor_tool_call_split", "gVisor: tool call, where the µs go (per call)", "µs", "—")]

#: A pause long enough for both processes to go idle (the kernel's reader thread stops waking).
IDLE_S = 0.25

_CALLS = "for _i in range({n}):\n    echo(x=_i)\n"
#: Longer than any read's spin (``MAX_SPIN_US``) and a scheduler tick.
_SETTLE_S = 0.02


def cpu_usage_path(container_id: str) -> Path | None:
    """The file holding the container's CPU time: cgroup v1 ``cpuacct.usage`` (ns) or v2 ``cpu.stat``."""
    patterns = [f"/sys/fs/cgroup/cpuacct/docker/{container_id}/cpuacct.usage",
                f"/sys/fs/cgroup/cpu,cpuacct/docker/{container_id}/cpuacct.usage",
                f"/sys/fs/cgroup/cpuacct/system.slice/docker-{container_id}.scope/cpuacct.usage",
                f"/sys/fs/cgroup/system.slice/docker-{container_id}.scope/cpu.stat",
                f"/sys/fs/cgroup/docker/{container_id}/cpu.stat"]
    for pattern in patterns:
        for found in glob.glob(pattern):
            return Path(found)
    return None


def cpu_seconds(path: Path) -> float:
    """The container's CPU time so far, in seconds."""
    text = path.read_text()
    if path.name == "cpu.stat":  # v2: usage_usec
        fields = dict(line.split() for line in text.splitlines() if " " in line)
        return int(fields["usage_usec"]) / 1e6
    return int(text) / 1e9


class _Split:
    """Per-operation wall, host CPU and sandbox CPU over blocks (µs or ms per operation)."""

    def __init__(self, scale: float) -> None:
        self.scale = scale
        self.wall: list[float] = []
        self.host: list[float] = []
        self.box: list[float] = []

    def block(self, box: Path, n: int, fn: Callable[[], Any]) -> None:
        b0, h0, w0 = cpu_seconds(box), time.process_time(), time.perf_counter()
        fn()
        w1, h1 = time.perf_counter(), time.process_time()
        # A process on the CPU is charged to its cgroup at a tick or when it sleeps: the sandbox's
        # reads spin a while after its last answer, so its CPU is read once they have gone to sleep.
        time.sleep(_SETTLE_S)
        b1 = cpu_seconds(box)
        self.wall.append((w1 - w0) * self.scale / n)
        self.host.append((h1 - h0) * self.scale / n)
        self.box.append((b1 - b0) * self.scale / n)

    def parts(self) -> dict[str, float]:
        wall, host, box = (med_p90(v)[0] for v in (self.wall, self.host, self.box))
        return {"wall": wall, "host": host, "sandbox": box, "neither": wall - host - box}


def _describe(name: str, parts: dict[str, float], unit: str) -> Baseline:
    fmt = "{:,.0f}" if unit == "µs" else "{:,.2f}"
    text = ", ".join(f"{k} CPU {fmt.format(parts[k])}" for k in ("host", "sandbox"))
    return Baseline(f"{name}: {text}, neither (wall − CPU) {fmt.format(parts['neither'])} {unit}; wall",
                    parts["wall"])


def _over(subject: dict[str, float], floor: dict[str, float], unit: str) -> str:
    fmt = "{:+,.0f}" if unit == "µs" else "{:+,.2f}"
    return "over the floor: " + ", ".join(
        f"{k} {fmt.format(subject[k] - floor[k])} {unit}" for k in ("host", "sandbox", "neither"))


def _container(session: Session) -> Path:
    sandbox: Any = session.sandbox_state.driver.sandbox if session.sandbox_state.driver else None  # benchmarks may peek
    path = cpu_usage_path(str(getattr(sandbox, "container_id", "")))
    if path is None:
        raise RuntimeError("cannot find the session's CPU cgroup under /sys/fs/cgroup")
    return path


def _row(key: str, measure: str, unit: str, subject: _Split, floor: _Split, floor_name: str,
         extra_note: str = "", baselines: list[Baseline] | None = None) -> Row:
    s, f = subject.parts(), floor.parts()
    return Row(key=key, measure=measure, unit=unit, median=s["wall"], samples=len(subject.wall),
               baselines=[_describe("codeact", s, unit), _describe(floor_name, f, unit), *(baselines or [])],
               ratio=ratio(s["wall"], f["wall"]), ratio_label="× floor", target="—",
               note=f"{_over(s, f, unit)}; medians of {len(subject.wall)} blocks{extra_note}",
               extra={"codeact": s, "floor": f})


def _warm_and_calls(ctx: Context, raw: FloorContainer, raw_box: Path) -> list[Row]:
    blocks, runs, calls = ctx.n(12, 2), ctx.n(50, 10), ctx.n(1000, 100)
    warm_s, warm_f = _Split(1e6), _Split(1e6)
    call_s, call_f = _Split(1e6), _Split(1e6)
    with Runtime([echo], ctx.subject) as rt, rt.session() as session:
        session.run("x = 1")
        box = _container(session)
        code = _CALLS.format(n=calls)

        def warm() -> None:
            for _ in range(runs):
                session.run("x = 1")

        many = functools.partial(_many, session, code)

        warm()  # warm-up
        raw.exec_loop(runs)
        many()
        raw.ping(calls)
        for _ in range(blocks):
            warm_s.block(box, runs, warm)
            warm_f.block(raw_box, runs, lambda: raw.exec_loop(runs))
            call_s.block(box, calls, many)
            call_f.block(raw_box, calls, lambda: raw.ping(calls))
    return [_row("warm_split", "warm `x = 1`: where the µs go (per run)", "µs", warm_s, warm_f,
                 "transport floor (raw exec loop)", f" of {runs} runs"),
            _row("tool_call_split", "tool call: where the µs go (per call)", "µs", call_s, call_f,
                 "transport floor (raw ping-pong)", f" of {calls} calls in one action")]


def _gvisor_calls(ctx: Context) -> Row:
    """The tool call under runsc against a floor container under runsc: the sandbox's CPU is the
    sentry's (and the gofer's), in the container's cgroup like a runc container's processes."""
    key, measure, unit, _ = ROWS[3]
    from codeact.image.engine import runtimes

    if "runsc" not in runtimes():
        return na(key, measure, unit, "runsc is not registered with dockerd (scripts/ensure-docker.sh)")
    config = ctx.subject.model_copy(update={"runtime": "runsc"})
    raw, raw_note = open_floor(ctx.docker, config)
    if raw is None:
        return na(key, measure, unit, raw_note)
    blocks, calls = ctx.n(8, 2), ctx.n(1000, 100)
    call_s, call_f = _Split(1e6), _Split(1e6)
    try:
        raw_box = cpu_usage_path(raw.container_id)
        if raw_box is None:
            return na(key, measure, unit, "cannot find the runsc floor container's CPU cgroup")
        with Runtime([echo], config) as rt, rt.session() as session:
            session.run("x = 1")
            box = _container(session)
            many = functools.partial(_many, session, _CALLS.format(n=calls))
            many()  # warm-up
            raw.ping(calls)
            for _ in range(blocks):
                call_s.block(box, calls, many)
                call_f.block(raw_box, calls, lambda: raw.ping(calls))
    finally:
        raw.close()
    return _row(key, measure, unit, call_s, call_f, "runsc floor (raw ping-pong, same socket)",
                f" of {calls} calls in one action")


def _many(session: Session, code: str) -> None:
    result = session.run(code)
    if not result.ok:
        raise RuntimeError(f"the tool-call cell failed: {result.termination} {result.reason}")


def _acquire_and_run(rt: Runtime, into: list[Session]) -> None:
    into.append(rt.session())
    _run_one(into)


def _run_one(holder: list[Session]) -> None:
    if holder[0].run("1").value != 1:
        raise RuntimeError("the pooled session did not answer")


def _pooled(ctx: Context, raw: FloorContainer, raw_box: Path) -> Row:
    samples = ctx.n(12, 2)
    first, warm_after, raw_idle, raw_back = _Split(1e3), _Split(1e3), _Split(1e3), _Split(1e3)
    with Runtime([], ctx.subject.model_copy(update={"pool_size": 2})) as rt:
        pool = rt.pool
        assert pool is not None
        for _ in range(samples + 1):
            if not pool.wait_ready(120):
                raise RuntimeError(f"the pool did not fill: {pool.last_error}")
            ready: Any = pool._ready[0]  # the kernel the next acquire takes (benchmarks may peek)
            box = cpu_usage_path(str(ready.sandbox.container_id))
            if box is None:
                raise RuntimeError("cannot find the pooled container's CPU cgroup")
            time.sleep(IDLE_S)
            holder: list[Session] = []
            first.block(box, 1, functools.partial(_acquire_and_run, rt, holder))
            warm_after.block(box, 1, functools.partial(_run_one, holder))
            holder[0].close()
            time.sleep(IDLE_S)
            raw_idle.block(raw_box, 1, lambda: raw.exec_loop(1))
            raw_back.block(raw_box, 1, lambda: raw.exec_loop(1))
    for split in (first, warm_after, raw_idle, raw_back):  # the first sample warmed things up
        for values in (split.wall, split.host, split.box):
            del values[0]
    w = warm_after.parts()
    back = raw_back.parts()
    return _row("pooled_split", "pooled acquire → first result: where the ms go", "ms", first, raw_idle,
                f"transport floor after {IDLE_S:g} s idle (raw exec round trip)",
                f" (one sample each, after {IDLE_S:g} s idle)",
                [_describe("codeact's next run, back to back", w, "ms"),
                 _describe("transport floor back to back", back, "ms")])


def measure(ctx: Context) -> list[Row]:
    ctx = dataclasses.replace(ctx, subject=ctx.subject.model_copy(update={"spin_us": 0}))
    if not ctx.docker:
        reason = ctx.docker_error or "the split needs the Docker backend (the container's CPU cgroup)"
        return [na(key, measure, unit, reason) for key, measure, unit, _ in ROWS]
    raw, raw_note = open_floor(ctx.docker, ctx.subject)
    if raw is None:
        return [na(key, measure, unit, raw_note) for key, measure, unit, _ in ROWS]
    try:
        raw_box = cpu_usage_path(raw.container_id)
        if raw_box is None:
            return [na(key, measure, unit, "cannot find the floor container's CPU cgroup")
                    for key, measure, unit, _ in ROWS]
        rows = [*_warm_and_calls(ctx, raw, raw_box), _pooled(ctx, raw, raw_box)]
    finally:
        raw.close()
    return [*rows, _gvisor_calls(ctx)]
