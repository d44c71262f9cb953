"""``codeact eval``, ``codeact report`` and ``codeact batch``."""

from __future__ import annotations

import functools
import json
import sys
from pathlib import Path
from typing import Annotated, Any

import typer
from rich.console import Console
from rich.table import Table

from ..errors import SandboxUnavailable
from ..results import ExecutionResult
from ..sandbox import SandboxConfig

_err = Console(stderr=True, highlight=False)


def _sandbox(backend: str, timeout: float, memory: int, policy: str) -> SandboxConfig:
    if backend not in ("docker", "local"):
        raise typer.BadParameter("--backend must be docker or local")
    if policy not in ("auto", "none", "restricted"):
        raise typer.BadParameter("--policy must be auto, none or restricted")
    try:
        return SandboxConfig(backend=backend, timeout_s=timeout, memory_mb=memory, policy=policy)  # type: ignore[arg-type]
    except ValueError as exc:
        raise typer.BadParameter(str(exc).splitlines()[-1]) from None


def _csv(value: str | None) -> list[str] | None:
    return [v.strip() for v in value.split(",") if v.strip()] if value else None


Backend = Annotated[str, typer.Option(help="docker or local (local is not a security boundary)")]
Timeout = Annotated[float, typer.Option(help="seconds per code run")]
Memory = Annotated[int, typer.Option(help="memory limit in MB per sandbox")]
Policy = Annotated[str, typer.Option(help="auto, none or restricted (local backend)")]
EngineOpt = Annotated[str, typer.Option(help="local (threads) or ray (Ray actors)")]
Workers = Annotated[int, typer.Option(help="Ray actors (--engine ray)")]
RayAddress = Annotated[str | None, typer.Option(help="join this Ray cluster; default: a local one on 127.0.0.1")]


def eval_command(
    suite: Annotated[str, typer.Argument(help="built-in suite (weather, data, multitool), a .py file, a directory "
                                              "or a module")],
    out: Annotated[Path, typer.Option("--out", help="run directory (resumed when it exists)")],
    model: Annotated[str, typer.Option(help="scripted, openai:MODEL or anthropic:MODEL")] = "scripted",
    wire: Annotated[str, typer.Option(help="scripted: the client/wire format, openai or anthropic")] = "openai",
    base_url: Annotated[str | None, typer.Option(help="provider base URL (else the SDK env vars)")] = None,
    modes: Annotated[str, typer.Option(help="comma-separated: code, json")] = "code,json",
    repeats: Annotated[int, typer.Option(min=1)] = 1,
    concurrency: Annotated[int, typer.Option(min=1, help="episodes at once (per Ray worker with --engine ray)")] = 4,
    tasks: Annotated[str | None, typer.Option(help="comma-separated task ids or tags")] = None,
    limit: Annotated[int | None, typer.Option(help="run at most this many new episodes")] = None,
    engine: EngineOpt = "local",
    workers: Workers = 2,
    ray_address: RayAddress = None,
    backend: Backend = "docker",
    timeout: Timeout = 30.0,
    memory: Memory = 512,
    policy: Policy = "auto",
    max_turns: Annotated[int, typer.Option(min=1)] = 10,
    max_tokens: Annotated[int, typer.Option(min=1)] = 200_000,
    max_wall_s: Annotated[float, typer.Option()] = 300.0,
    max_tool_calls: Annotated[int, typer.Option(min=0)] = 100,
    stream: Annotated[bool, typer.Option(help="stream model replies (SSE)")] = False,
    progress: Annotated[bool, typer.Option(help="show a progress bar")] = True,
    report: Annotated[bool, typer.Option(help="write the report when done")] = False,
    force_new: Annotated[bool, typer.Option("--force-new", help="move OUT's old contents to OUT.old-<time> and "
                                                                  "start afresh")] = False,
    retry_errors: Annotated[bool, typer.Option(help="re-run episodes stored with a retryable provider error "
                                                    "(connection, 5xx, 429)")] = True,
) -> None:
    """Run every (task, mode, repeat) episode of SUITE; results go to OUT/results.jsonl (resumable)."""
    from ..evals.providers import ModelSpec
    from ..evals.runner import run_suite

    if engine not in ("local", "ray"):
        raise typer.BadParameter("--engine must be local or ray")
    try:
        spec = ModelSpec(model, wire=wire, base_url=base_url)  # type: ignore[arg-type]
    except ValueError as exc:
        raise typer.BadParameter(str(exc)) from None
    budget = {"max_turns": max_turns, "max_tokens": max_tokens, "max_wall_s": max_wall_s,
              "max_tool_calls": max_tool_calls}
    try:
        summary = run_suite(suite, spec, out=out, modes=_csv(modes) or [], repeats=repeats, concurrency=concurrency,
                            engine=engine, sandbox=_sandbox(backend, timeout, memory, policy), budget=budget,  # type: ignore[arg-type]
                            tasks=_csv(tasks), limit=limit, progress=progress, stream=stream,
                            ray_address=ray_address, workers=workers, force_new=force_new,
                            retry_errors=retry_errors)
    except SandboxUnavailable as exc:
        typer.echo(f"codeact: sandbox unavailable: {exc}", err=True)
        raise typer.Exit(3) from None
    except (ValueError, KeyError) as exc:
        raise typer.BadParameter(str(exc).strip("'\"")) from None
    _print_modes(out)
    if summary.set_aside is not None:
        typer.echo(f"--force-new: the previous contents of {out} are in {summary.set_aside}", err=True)
    left = summary.planned - summary.already_done - summary.ran
    typer.echo(f"{summary.ran} episode(s) run, {summary.already_done} already done, {left} left; "
               f"results: {summary.results_path}", err=True)
    for failure in summary.failures:
        typer.echo(f"harness failure: {failure.key}: {failure.error}", err=True)
    if report:
        report_command(out)
    if summary.interrupted:
        raise typer.Exit(130)
    raise typer.Exit(1 if summary.failures else 0)


def _print_modes(out: Path) -> None:
    from ..evals.report import mode_table, summarize
    from ..evals.results_store import load_run

    meta, results = load_run(out)
    if not results:
        return
    header, rows = mode_table(summarize(results, meta))
    keep = [0, 2, 3, 4, 5, 6, 7, 8, 9]
    table = Table(*(header[i] for i in keep), title=f"{meta.suite if meta else ''} · {meta.model if meta else ''}")
    for row in rows:
        table.add_row(*(row[i] for i in keep))
    _err.print(table)


def report_command(
    run_dir: Annotated[Path, typer.Argument(help="a run directory written by codeact eval")],
    plots: Annotated[bool, typer.Option(help="draw the PNGs (needs matplotlib: the 'plots' extra)")] = True,
) -> None:
    """Write OUT/report.md, report.html, summary.json and PNG plots from the run's results."""
    from ..evals.report import write_report

    if not (run_dir / "results.jsonl").is_file():
        raise typer.BadParameter(f"{run_dir}: no results.jsonl (run `codeact eval ... --out {run_dir}` first)")
    written = write_report(run_dir, plots=plots)
    if plots and not any(k.endswith(".png") for k in written):
        typer.echo("matplotlib is not installed: no plots (pip install 'codeact[plots]')", err=True)
    for path in written.values():
        typer.echo(str(path))


def _read_inputs(path: Path) -> list[Any]:
    if not path.is_file():
        raise typer.BadParameter(f"no such file: {path}")
    items = []
    for n, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
        if not line.strip():
            continue
        try:
            items.append(json.loads(line))
        except ValueError as exc:
            raise typer.BadParameter(f"{path}:{n}: not JSON: {exc}") from None
    return items


def batch_command(
    code_file: Annotated[Path, typer.Argument(help="the code action; each input is bound as `item`")],
    inputs: Annotated[Path, typer.Argument(help="JSONL: one JSON value per line")],
    tools: Annotated[list[Path] | None, typer.Option("--tools", help="Python file with @tool functions")] = None,
    tool_spec: Annotated[list[Path] | None, typer.Option("--tool-spec", help="JSON list of tool definitions")] = None,
    concurrency: Annotated[int, typer.Option(min=1, help="items at once (per Ray worker with --engine ray)")] = 4,
    out: Annotated[Path | None, typer.Option(help="results JSONL (default: stdout)")] = None,
    isolation: Annotated[str, typer.Option(help="auto, namespace (warm session, fresh namespace) or sandbox")] = "auto",
    engine: EngineOpt = "local",
    workers: Workers = 2,
    ray_address: RayAddress = None,
    backend: Backend = "docker",
    timeout: Timeout = 30.0,
    memory: Memory = 512,
    policy: Policy = "auto",
    progress: Annotated[bool, typer.Option(help="show a progress bar")] = True,
) -> None:
    """Run CODE_FILE once per input line; one result line per input, in order, failures included."""
    from ..evals.batch import map_code
    from ..runtime.session import Runtime
    from ._exec import load_toolset

    if not code_file.is_file():
        raise typer.BadParameter(f"no such file: {code_file}")
    if isolation not in ("auto", "namespace", "sandbox") or engine not in ("local", "ray"):
        raise typer.BadParameter("--isolation is auto, namespace or sandbox; --engine is local or ray")
    code, items = code_file.read_text(encoding="utf-8"), _read_inputs(inputs)
    config = _sandbox(backend, timeout, memory, policy)
    make_tools = functools.partial(load_toolset, list(tools or []), list(tool_spec or []))
    make_tools()  # usage errors (a missing tools file) before any sandbox starts
    try:
        if engine == "ray":
            from ..evals._progress import Bar
            from ..evals.ray_engine import map_code_ray

            with Bar(len(items), "batch", enabled=progress) as bar:

                def done(chunk: list[ExecutionResult]) -> None:
                    for r in chunk:
                        bar.advance(failed=not r.ok)

                results = map_code_ray(make_tools, config, code, items, workers=workers, threads=concurrency,
                                       address=ray_address, on_done=done)
        else:
            with Runtime(make_tools(), config) as runtime:
                results = map_code(runtime, code, items, concurrency=concurrency, progress=progress,
                                   isolation=isolation)  # type: ignore[arg-type]
    except SandboxUnavailable as exc:
        typer.echo(f"codeact: sandbox unavailable: {exc}", err=True)
        raise typer.Exit(3) from None
    lines = [json.dumps({"index": i, **r.model_dump(mode="json")}, ensure_ascii=False) + "\n"
             for i, r in enumerate(results)]
    if out is None:
        sys.stdout.writelines(lines)
    else:
        tmp = out.with_name(out.name + ".tmp")
        tmp.write_text("".join(lines), encoding="utf-8")
        tmp.replace(out)
    failed = [i for i, r in enumerate(results) if not r.ok]
    shown = ", ".join(map(str, failed[:10])) + (" …" if len(failed) > 10 else "")
    typer.echo(f"{len(results)} results, {len(failed)} failed" + (f" (inputs {shown})" if failed else ""), err=True)
    raise typer.Exit(1 if failed else 0)


def register(app: typer.Typer) -> None:
    app.command("eval")(eval_command)
    app.command("report")(report_command)
    app.command("batch")(batch_command)
