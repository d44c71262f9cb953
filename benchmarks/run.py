"""``python -m benchmarks.run``: every measure, fast ones first, the heavy ones last with a time guard.

    python -m benchmarks.run                     # the full run (`make bench`), rewrites docs/benchmarks.md's table
    python -m benchmarks.run --quick --backend local --out /tmp/b --no-table    # the smoke test's run
    python -m benchmarks.run --only toolcall,warm --no-table                     # a subset while working
"""

from __future__ import annotations

import argparse
import os
import time
import traceback
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from types import ModuleType
from typing import Any

from rich.console import Console

from . import (
    _report,
    check,
    cluster,
    cpu,
    egress,
    flow,
    fresh,
    gvisor,
    idle,
    memory,
    parallel,
    sessions,
    split,
    throughput,
    toolcall,
    toolsets,
    tracing,
    warm,
)
from ._common import Context, Row, make_configs, na

ROOT = Path(__file__).resolve().parent.parent
DEFAULT_BUDGET_S = 780.0  # `make bench` must end within 15 minutes, install and image included
IDLE_RESERVE_S = 15.0  # idle runs last (its clean-up is inside its budget): kept for writing the results


@dataclass
class Measure:
    name: str
    module: ModuleType
    min_s: float  # don't start it with less time than this left
    docker_only: bool = False

    def rows_meta(self) -> list[tuple[str, str, str, str]]:
        return list(self.module.ROWS)


MEASURES = [
    Measure("toolcall", toolcall, 30),
    Measure("warm", warm, 15),
    Measure("check", check, 20),  # issue 30: the check before each run, beside the warm run
    Measure("cpu", cpu, 60),
    Measure("parallel", parallel, 45),
    Measure("throughput", throughput, 20),
    Measure("fresh", fresh, 40),
    Measure("split", split, 40, docker_only=True),  # issue 34: where a missed target's time goes
    Measure("sessions", sessions, 60),
    Measure("bwrap", __import__("benchmarks.bwrap", fromlist=["measure"]), 30),  # issue 14: bwrap's cost
    Measure("toolsets", toolsets, 30),
    Measure("tracing", tracing, 30),  # issue 33: what OpenTelemetry costs
    Measure("flow", flow, 60),  # issue 31: what a data-flow policy costs
    Measure("egress", egress, 30),  # issue 32: a request through the egress broker
    Measure("cluster", cluster, 90, docker_only=True),  # issue 29: sessions on a Ray cluster
    Measure("memory", memory, 30, docker_only=True),
    Measure("gvisor", gvisor, 60, docker_only=True),
    Measure("idle", idle, 60, docker_only=True),  # last: it takes whatever budget is left
]


def _placeholder(m: Measure, status: str, reason: str) -> list[Row]:
    return [na(key, label, unit, reason, target, status=status)  # type: ignore[arg-type]
            for key, label, unit, target in m.rows_meta()]


def _docker_error(ctx: Context) -> str | None:
    """Why the Docker backend cannot run here (engine, image), or None."""
    try:
        from codeact.image.engine import docker_client
        from codeact.sandbox.docker import sandbox_image

        docker_client().close()
        sandbox_image(ctx.subject)
    except Exception as exc:
        return f"Docker unavailable: {type(exc).__name__}: {exc}"[:300]
    return None


def _run_one(m: Measure, ctx: Context) -> list[Row]:
    if m.docker_only and ctx.subject.backend != "docker":
        return _placeholder(m, "n/a", "needs the Docker backend (this run: --backend local)")
    if ctx.subject.backend == "docker" and ctx.docker_error:
        return _placeholder(m, "n/a", ctx.docker_error)
    if ctx.remaining() < m.min_s:
        return _placeholder(m, "n/a", f"skipped: time budget ({ctx.remaining():.0f} s left, needs {m.min_s:.0f} s)")
    run: Callable[[], list[Row]] = lambda: m.module.measure(ctx)  # noqa: E731
    if m.name == "idle":
        budget = max(10.0, ctx.remaining() - IDLE_RESERVE_S)
        run = lambda: idle.measure(ctx, budget)  # noqa: E731
    try:
        return run()
    except Exception as exc:
        ctx.console.print(f"[red]{m.name} failed:[/]\n{traceback.format_exc()}")
        return _placeholder(m, "error", f"{type(exc).__name__}: {exc}"[:300])


def parse(argv: list[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(prog="python -m benchmarks.run", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--quick", action="store_true", help="a few iterations, no peers (the smoke test)")
    p.add_argument("--backend", choices=("docker", "local"), default="docker",
                   help="what 'codeact' is measured on (the floor is always the local kernel)")
    p.add_argument("--out", type=Path, default=ROOT / "benchmarks" / "results", help="where the JSON goes")
    p.add_argument("--table", "--readme", dest="table", type=Path, default=ROOT / "docs" / "benchmarks.md",
                   help="the Markdown file whose bench markers get the table")
    p.add_argument("--no-table", "--no-readme", dest="no_table", action="store_true",
                   help="leave the table alone (implied by --quick and --only)")
    p.add_argument("--budget", type=float, default=DEFAULT_BUDGET_S, help="seconds for the whole run")
    p.add_argument("--only", default="", help=f"comma-separated subset of {','.join(m.name for m in MEASURES)}")
    return p.parse_args(argv)


def main(argv: list[str] | None = None) -> dict[str, Any]:
    args = parse(argv)
    console = Console(width=max(Console().width, 170))
    started, t0, load0 = time.time(), time.monotonic(), round(os.getloadavg()[0], 2)
    containers0 = _report.running_containers() if args.backend == "docker" else None
    subject, floor = make_configs(args.backend)
    ctx = Context(quick=args.quick, subject=subject, floor=floor, deadline=t0 + args.budget, console=console)
    if subject.backend == "docker":
        ctx.docker_error = _docker_error(ctx)
        if ctx.docker_error:
            console.print(f"[yellow]{ctx.docker_error}[/]")
    only = {name.strip() for name in args.only.split(",") if name.strip()}
    unknown = only - {m.name for m in MEASURES}
    if unknown:
        raise SystemExit(f"unknown measure(s): {', '.join(sorted(unknown))}")
    rows: list[Row] = []
    timings: dict[str, float] = {}
    for m in MEASURES:
        if only and m.name not in only:
            continue
        console.log(f"[bold]{m.name}[/] … ({ctx.remaining():.0f} s of budget left)")
        start = time.monotonic()
        rows += _run_one(m, ctx)
        timings[m.name] = round(time.monotonic() - start, 2)
        console.log(f"{m.name} done in {timings[m.name]:.1f} s")
    data: dict[str, Any] = {
        "schema": _report.SCHEMA, "mode": "quick" if args.quick else "full", "subject_backend": args.backend,
        "started_epoch": started, "started_at": time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime(started)),
        "finished_at": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()),
        "duration_s": round(time.monotonic() - t0, 1), "loadavg_start": load0, "containers_at_start": containers0,
        "budget_s": args.budget,
        "measure_seconds": timings,
        "machine": _report.machine_info(), "measures": [r.to_dict() for r in rows],
    }
    _report.print_table(data, console)
    path = _report.write_json(data, args.out)
    console.print(f"JSON: {path} (and {args.out / 'latest.json'})")
    if not (args.no_table or args.quick or only):
        if _report.update_table(data, args.table):
            console.print(f"rewrote the section between the bench markers in {args.table}")
        else:
            console.print(f"[yellow]no bench markers in {args.table}; left alone[/]")
    console.print(f"total {data['duration_s']:.0f} s")
    return data


if __name__ == "__main__":
    main()
