"""What a data-flow policy costs (issue 31): the tool call round trip and a warm ``x = 1`` in a
session of a runtime with a ``FlowPolicy`` against the same in a runtime without one, alternating
chunk by chunk; and a CPU-bound loop over data a tool returned, labelled (``untrusted``) and not,
under the policy, against the same loop with no policy.

The tool call is timed inside the code as in ``toolcall.py`` (with a policy, the cell is rewritten
and each call is judged on the host, off the inline lane); the warm run from the host; the loop
inside the code around the loop alone (the result's conversion to labelled values is not in it).
Each run of the CPU sessions starts at a trusted point (``session.trust()``), so what an earlier run
showed never labels the loop's literals.
"""

from __future__ import annotations

import time
from collections.abc import Callable

from codeact import UNTRUSTED, FlowPolicy, Runtime, Session, tool

from ._common import Baseline, Context, Row, echo, interleave, med_p90, ratio
from .toolcall import _chunk

ROWS = [("flow_tool_call", "tool call round trip, flow policy on vs off", "µs", "report"),
        ("flow_warm_run", "warm `x = 1`, flow policy on vs off", "µs", "report"),
        ("flow_cpu_labelled", "CPU-bound loop over labelled data, policy on", "ms", "report"),
        ("flow_cpu_plain", "CPU-bound loop over unlabelled data, policy on", "ms", "report")]

LOOP = """
_data = {source}({n})
import time as _t
_s = _t.perf_counter()
_acc = 0
for _v in _data:
    _acc = (_acc + _v * _v) % 1000003
_ms = (_t.perf_counter() - _s) * 1000
_ms
"""


@tool(labels={UNTRUSTED})
def labelled_numbers(n: int) -> list[int]:
    """``n`` integers a third party wrote (their results carry ``untrusted``).

    Args:
        n: How many.
    """
    return list(range(n))


@tool
def plain_numbers(n: int) -> list[int]:
    """``n`` integers with no label.

    Args:
        n: How many.
    """
    return list(range(n))


TOOLS = [echo, labelled_numbers, plain_numbers]


def _loop_ms(session: Session, source: str, n: int) -> float:
    session.trust()
    result = session.run(LOOP.format(source=source, n=n))
    if not result.ok or not isinstance(result.value, (int, float)):
        raise RuntimeError(f"flow CPU cell failed: {result.termination} {result.error or result.reason}")
    return float(result.value)


def _row(key: str, measure: str, unit: str, on: list[float], off: list[float], off_name: str,
         note: str, extra_baselines: list[Baseline] | None = None) -> Row:
    med, p90 = med_p90(on)
    o_med, o_p90 = med_p90(off)
    r = ratio(med, o_med)
    return Row(key=key, measure=measure, unit=unit, median=med, p90=p90, samples=len(on),
               baselines=[Baseline(off_name, o_med, o_p90), *(extra_baselines or [])], ratio=r,
               ratio_label="× no policy", target="report", note=note,
               extra={"overhead_pct": None if r is None else round((r - 1) * 100, 1)})


def measure(ctx: Context) -> list[Row]:
    chunks, per_chunk, warm_per = ctx.n(10, 2), ctx.n(1000, 150), ctx.n(100, 20)
    rounds, items = ctx.n(5, 1), ctx.n(100_000, 5_000)
    calls: dict[str, list[float]] = {"on": [], "off": []}
    warm: dict[str, list[float]] = {"on": [], "off": []}
    loop: dict[str, list[float]] = {"labelled": [], "plain": [], "off": []}
    with Runtime(TOOLS, ctx.subject, flow=FlowPolicy()) as rt_on, Runtime(TOOLS, ctx.subject) as rt_off, \
            rt_on.session() as on, rt_off.session() as off, rt_on.session() as cpu_on, \
            rt_off.session() as cpu_off:
        sessions = {"on": on, "off": off}
        for session in sessions.values():
            _chunk(session, 200)  # warm-up: imports, caches, the first frames (and the rewrite's)

        def step(mode: str) -> Callable[[int], None]:
            def run(_round: int) -> None:
                session = sessions[mode]
                calls[mode] += _chunk(session, per_chunk)["lat_us"]
                for _ in range(warm_per):
                    start = time.perf_counter()
                    session.run("x = 1")
                    warm[mode].append((time.perf_counter() - start) * 1e6)
            return run

        interleave(chunks, step("off"), step("on"))
        if on.flow_context:
            raise RuntimeError(f"the policy session saw labelled output: {sorted(on.flow_context)}")
        loops: dict[str, Callable[[], float]] = {
            "labelled": lambda: _loop_ms(cpu_on, "labelled_numbers", items),
            "plain": lambda: _loop_ms(cpu_on, "plain_numbers", items),
            "off": lambda: _loop_ms(cpu_off, "plain_numbers", items)}
        for fn in loops.values():
            fn()  # warm-up
        interleave(rounds, *(lambda _r, name=name, fn=fn: loop[name].append(fn()) for name, fn in loops.items()))
    where = ctx.subject_label
    note = "FlowPolicy() (deny) vs no policy, two runtimes, chunks alternate"
    loop_note = (f"a loop of {items:,} iterations over a tool's list, timed inside the code; "
                 "runs alternate between the three")
    labelled_vs_plain = ratio(med_p90(loop["labelled"])[0], med_p90(loop["plain"])[0])
    plain_policy = Baseline("unlabelled data, policy on", *med_p90(loop["plain"]))
    return [
        _row("flow_tool_call", f"tool call round trip, flow policy on ({where})", "µs", calls["on"], calls["off"],
             "the same code, no policy", note),
        _row("flow_warm_run", f"warm `x = 1`, flow policy on ({where})", "µs", warm["on"], warm["off"],
             "the same code, no policy", note),
        _row("flow_cpu_labelled", f"CPU-bound loop over labelled data, policy on ({where})", "ms",
             loop["labelled"], loop["off"], "unlabelled data, no policy",
             loop_note + (f"; {labelled_vs_plain:.2f}× unlabelled under the policy" if labelled_vs_plain else ""),
             [plain_policy]),
        _row("flow_cpu_plain", f"CPU-bound loop over unlabelled data, policy on ({where})", "ms",
             loop["plain"], loop["off"], "unlabelled data, no policy", loop_note),
    ]

