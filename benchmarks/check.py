"""The check before each run (issue 30): tier 1's latency per cell for a 20-tool toolset and for
GitHub's (or the GitHub-like document when GitHub's is not cached), its cold first check, tier 2
(ty) when installed, and the warm ``x = 1`` run with the check on beside the same run with it off.

The cells are model-style code: a few generated valid calls of the toolset's tools (real schemas:
nested objects, enums, nullable, defaults), a loop over a result and a print, 6 to 10 lines each.
"""

from __future__ import annotations

import random
import sys
import time
from pathlib import Path
from typing import Any

from codeact import Runtime
from codeact.runtime.toolset import Toolset

from ._common import Baseline, Context, Row, med_p90, na, ratio

TARGET_MS = 10.0
ROWS = [("check_20", "check per cell, 20 tools (tier 1)", "µs", f"≤ {TARGET_MS:g} ms p50"),
        ("check_github", "check per cell, GitHub's toolset (tier 1)", "µs", f"≤ {TARGET_MS:g} ms p50"),
        ("check_tier2", "tier 2 (ty server, warm) per cell", "ms", "—"),
        ("check_warm_run", "warm `x = 1`, check='block' (vs 'off' in the same run)", "µs", "—")]


def _corpus() -> Any:
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
    from tests.tool_stubs import test_check_corpus

    return test_check_corpus


def _toolsets() -> list[tuple[str, Toolset, str]]:
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
    from tests.servers.big_openapi import big_document
    from tests.servers.github_tasks import github_document

    big = Toolset.from_openapi(big_document())
    twenty = Toolset(list(big)[:20])
    github = github_document()
    if github.is_file():
        return [("check_20", twenty, "20 operations of the GitHub-like document"),
                ("check_github", Toolset.from_openapi(str(github), base_url="http://127.0.0.1:9"),
                 "GitHub api.github.com.json")]
    return [("check_20", twenty, "20 operations of the GitHub-like document"),
            ("check_github", big, "generated GitHub-like document (GitHub's is not cached)")]


def _cells(toolset: Toolset, count: int, seed: int) -> list[str]:
    corpus = _corpus()
    rng = random.Random(seed)
    specs = [s for s in toolset.specs if s.input_schema.get("properties")]
    names = toolset.python_names
    cells = []
    while len(cells) < count:
        lines = []
        for i in range(rng.randint(2, 4)):
            spec = rng.choice(specs)
            args = corpus._value(spec.input_schema, spec.input_schema, rng)
            if isinstance(args, dict) and corpus._valid(spec, args):
                lines.append(f"r{i} = {corpus._source(names[spec.name], spec, args, rng)}")
        if lines:
            lines += ["for item in [r0]:", "    print(type(item).__name__, len(str(item)))", "summary = {'n': 1}"]
            cells.append("\n".join(lines) + "\n")
    return cells


def _latencies(toolset: Toolset, cells: list[str], rounds: int) -> tuple[list[float], float, int]:
    with Runtime(toolset, check="off") as rt:
        session = rt.session()
        start = time.perf_counter()
        errors = sum(d.severity == "error" for d in session.check(cells[0]))
        cold = (time.perf_counter() - start) * 1e6
        lat = []
        for _ in range(rounds):
            for cell in cells:
                start = time.perf_counter()
                errors += sum(d.severity == "error" for d in session.check(cell))
                lat.append((time.perf_counter() - start) * 1e6)
    return lat, cold, errors


def _tier2(toolset: Toolset, cells: list[str]) -> Row:
    key, label, unit, target = ROWS[2]
    try:
        rt = Runtime(toolset, check="off", check_types=True)
    except Exception as exc:  # the extra is not installed
        return na(key, label, unit, f"{type(exc).__name__}: {exc}"[:200], target)
    with rt:
        start = time.perf_counter()
        rt.check(cells[0])  # starts the server
        cold = (time.perf_counter() - start) * 1e3
        lat = []
        for _ in range(3):
            for cell in cells:
                start = time.perf_counter()
                rt.check(cell)
                lat.append((time.perf_counter() - start) * 1e3)
    med, p90 = med_p90(lat)
    return Row(key=key, measure=label, unit=unit, median=med, p90=p90, samples=len(lat), target=target,
               note=f"tier 1 and ty (kept running) over the cell and the stubs of the tools it names; its findings "
                    f"only warn; the first check, starting the server: {cold:.0f} ms", extra={"cold_ms": cold})


def _warm(ctx: Context) -> Row:
    key, _label, unit, target = ROWS[3]
    lat: dict[str, list[float]] = {"block": [], "off": []}
    per, blocks = ctx.n(100, 20), ctx.n(10, 2)
    with Runtime([], ctx.subject, check="block") as on, Runtime([], ctx.subject, check="off") as off, \
            on.session() as s_on, off.session() as s_off:
        runs = {"block": s_on, "off": s_off}
        for session in runs.values():
            for _ in range(20):
                session.run("x = 1")
        for _ in range(blocks):
            for mode, session in runs.items():
                for _ in range(per):
                    start = time.perf_counter()
                    session.run("x = 1")
                    lat[mode].append((time.perf_counter() - start) * 1e6)
    med, p90 = med_p90(lat["block"])
    off_med, off_p90 = med_p90(lat["off"])
    return Row(key=key, measure=f"warm `x = 1` in a live {ctx.subject_label} session, check='block'", unit=unit,
               median=med, p90=p90, samples=len(lat["block"]),
               baselines=[Baseline("the same, check='off'", off_med, off_p90)], ratio=ratio(med, off_med),
               ratio_label="× check off", target=target, note="the check's share of a warm run")


def measure(ctx: Context) -> list[Row]:
    rows = []
    twenty = None
    for key, toolset, note in _toolsets():
        cells = _cells(toolset, ctx.n(40, 8), seed=len(toolset))
        lat, cold, errors = _latencies(toolset, cells, ctx.n(10, 2))
        med, p90 = med_p90(lat)
        label = next(r[1] for r in ROWS if r[0] == key)
        rows.append(Row(key=key, measure=label, unit="µs", median=med, p90=p90, samples=len(lat),
                        target=f"≤ {TARGET_MS:g} ms p50", met=med <= TARGET_MS * 1000 and errors == 0,
                        note=f"{note}: {len(toolset)} tools; cold first check {cold:.0f} µs; "
                             f"{errors} errors on valid cells", extra={"cold_us": cold, "errors": errors}))
        twenty = twenty or (toolset, cells)
    assert twenty is not None
    rows.append(_tier2(twenty[0], twenty[1][: ctx.n(20, 3)]))
    rows.append(_warm(ctx) if ctx.docker or ctx.subject.backend == "local" else
                na(*ROWS[3][:3], ctx.docker_error or "no sandbox", ROWS[3][3]))
    return rows
