"""``codeact eval``, ``codeact report`` and ``codeact batch``."""

from __future__ import annotations

import functools
import json
import threading
from collections.abc import Callable
from pathlib import Path
from typing import Annotated, Any

import typer
from rich import box
from rich.console import Console
from rich.table import Table
from rich.text import Text

from ..errors import SandboxUnavailable
from ..results import ExecutionResult
from ..sandbox import SandboxConfig
from ._interrupt import EXIT_INTERRUPTED, interrupts
from ._options import Image, Pip, check_sandbox, machine_stdout, read_text, sandbox_config, say_unavailable
from ._output import plural

_err = Console(stderr=True, highlight=False)


def _csv(value: str | None) -> list[str] | None:
    return [v.strip() for v in value.split(",") if v.strip()] if value else None


Backend = Annotated[str, typer.Option(help="docker or local (local is not a security boundary)")]
Timeout = Annotated[float, typer.Option(help="seconds per code run")]
Memory = Annotated[int, typer.Option(help="memory limit in MB per sandbox")]
Policy = Annotated[str, typer.Option(help="auto, none or restricted (local backend)")]
EngineOpt = Annotated[str, typer.Option(help="local (sandboxes here) or ray (sessions on a Ray cluster's nodes)")]
Workers = Annotated[int, typer.Option(min=1, help="--engine ray: runs at once are --workers × --concurrency")]
RayAddress = Annotated[str | None, typer.Option(help="join this Ray cluster; default: a local one on 127.0.0.1")]


def eval_command(
    suite: Annotated[str, typer.Argument(help="built-in suite (weather, data, multitool, "
                                              "bfcl-multi-turn[:CATEGORY], flow-injection), a .py file, a directory "
                                              "or a module")],
    out: Annotated[Path, typer.Option("--out", help="run directory (resumed when it exists)")],
    model: Annotated[str, typer.Option(help="scripted, openai:MODEL or anthropic:MODEL")] = "scripted",
    wire: Annotated[str, typer.Option(help="scripted: the client/wire format, openai or anthropic")] = "openai",
    base_url: Annotated[str | None, typer.Option(help="provider base URL (else the SDK env vars)")] = None,
    modes: Annotated[str, typer.Option(help="comma-separated: code, json")] = "code,json",
    repeats: Annotated[int, typer.Option(min=1)] = 1,
    concurrency: Annotated[int, typer.Option(min=1, help="episodes at once (× --workers with --engine ray)")] = 4,
    tasks: Annotated[str | None, typer.Option(help="comma-separated task ids or tags")] = None,
    limit: Annotated[int | None, typer.Option(help="run at most this many new episodes")] = None,
    engine: EngineOpt = "local",
    workers: Workers = 2,
    ray_address: RayAddress = None,
    backend: Backend = "docker",
    timeout: Timeout = 30.0,
    memory: Memory = 512,
    policy: Policy = "auto",
    image: Image = None,
    pip: Pip = None,
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
    flow: Annotated[str | None, typer.Option(help="flow-injection: the data-flow policy, off, deny (its default), "
                                                  "audit or ask")] = None,
) -> None:
    """Run every (task, mode, repeat) episode of SUITE; results go to OUT/results.jsonl (resumable)."""
    from ..evals.providers import ModelSpec
    from ..evals.runner import run_suite

    if engine not in ("local", "ray"):
        raise typer.BadParameter("--engine must be local or ray")
    if flow is not None:  # the suite's variant: ``flow-injection:ask``
        if suite.partition(":")[0] != _FLOW_SUITE:
            raise typer.BadParameter(f"--flow is an option of the {_FLOW_SUITE} suite")
        suite = f"{_FLOW_SUITE}:{flow}"
    try:
        spec = ModelSpec(model, wire=wire, base_url=base_url)  # type: ignore[arg-type]
    except ValueError as exc:
        raise typer.BadParameter(str(exc)) from None
    budget = {"max_turns": max_turns, "max_tokens": max_tokens, "max_wall_s": max_wall_s,
              "max_tool_calls": max_tool_calls}
    config = sandbox_config(backend, timeout, memory, policy=policy, image=image, pip=pip)
    try:
        check_sandbox(config)  # before any model call
        # The runner handles the first Ctrl-C (finishes the running episodes, keeps them, says so);
        # the second abandons them at once (exit 130, this process's sandboxes removed).
        with interrupts(raise_first=True, message=""):
            summary = run_suite(suite, spec, out=out, modes=_csv(modes) or [], repeats=repeats,
                                concurrency=concurrency, engine=engine, sandbox=config, budget=budget,  # type: ignore[arg-type]
                                tasks=_csv(tasks), limit=limit, progress=progress, stream=stream,
                                ray_address=ray_address, workers=workers, force_new=force_new,
                                retry_errors=retry_errors)
    except SandboxUnavailable as exc:
        say_unavailable(exc)
        raise typer.Exit(3) from None
    except (ValueError, KeyError) as exc:  # a KeyError's text is its quoted key: the message without quotes
        raise typer.BadParameter(str(exc.args[0]) if isinstance(exc, KeyError) and exc.args else str(exc)) from None
    _print_modes(out)
    if suite.partition(":")[0] == _FLOW_SUITE:
        _print_flow(out)
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
        raise typer.Exit(EXIT_INTERRUPTED)
    raise typer.Exit(1 if summary.failures else 0)


def _print_modes(out: Path) -> None:
    from ..evals.report import mode_table, summarize
    from ..evals.results_store import load_run

    meta, results = load_run(out)
    if not results:
        return
    header, rows = mode_table(summarize(results, meta))
    keep = [0, 2, 3, 4, 5, 6, 7, 8, 9]
    # 80 columns hold it: no cell wraps or is cut (the long headers break where they say), no side borders
    table = Table(title=Text(f"{meta.suite if meta else ''} · {meta.model if meta else ''}"),
                  box=box.SIMPLE_HEAD, show_edge=False, pad_edge=False, collapse_padding=True)
    for i in keep:
        table.add_column(_SHORT_HEADERS.get(header[i], header[i]), no_wrap=True,
                         justify="left" if i == 0 else "right")
    for row in rows:
        table.add_row(*(Text(str(row[i])) for i in keep))
    if _err.measure(table, options=_err.options.update_width(1000)).maximum > _err.width:
        table.padding = (0, 0)  # one space between the columns rather than two: still whole cells
    _err.print(table)


_FLOW_SUITE = "flow-injection"


def _print_flow(out: Path) -> None:
    """The flow-injection outcomes per mode (tasks solved, attacks that reached a sink, decisions),
    printed and written to ``OUT/flow.json``."""
    from ..evals.results_store import load_run
    from ..evals.suites.flow_injection import flow_rows

    rows = flow_rows(load_run(out)[1])
    (out / "flow.json").write_text(json.dumps(rows, indent=2) + "\n", encoding="utf-8")
    table = Table(title="data-flow policy", box=box.SIMPLE_HEAD, show_edge=False, pad_edge=False)
    for header in ("mode", "utility", "attacks", "denied", "asked", "refused", "audited"):
        table.add_column(header, justify="left" if header == "mode" else "right")
    for row in rows:
        n = row["episodes"]
        table.add_row(row["mode"], f"{row['utility']}/{n}", f"{row['attacked']}/{n}",
                      *(str(row[k]) for k in ("denied", "asked", "refused", "audited")))
    _err.print(table)


_SHORT_HEADERS = {"95% CI (Wilson)": "95% CI\n(Wilson)", "model calls": "model\ncalls", "tokens in": "tokens\nin",
                  "tokens out": "tokens\nout", "tool calls": "tool\ncalls", "wall s": "wall\ns"}


def report_command(
    run_dir: Annotated[Path, typer.Argument(help="a run directory written by codeact eval")],
    plots: Annotated[bool, typer.Option(help="draw the PNGs (needs matplotlib: the 'plots' extra)")] = True,
) -> None:
    """Write OUT/report.md, report.html, summary.json and PNG plots from the run's results."""
    from ..evals.report import write_report

    if not (run_dir / "results.jsonl").is_file():
        raise typer.BadParameter(f"{run_dir}: no results.jsonl (run `codeact eval ... --out {run_dir}` first)")
    written = write_report(run_dir, plots=plots)
    meta = json.loads((run_dir / "run.json").read_text(encoding="utf-8")) if (run_dir / "run.json").is_file() else {}
    if str(meta.get("suite", "")).partition(":")[0] == _FLOW_SUITE:
        _print_flow(run_dir)
        written["flow"] = run_dir / "flow.json"
    if plots and not any(k.endswith(".png") for k in written):
        typer.echo("matplotlib is not installed: no plots (pip install 'codeact[plots]')", err=True)
    for path in written.values():
        typer.echo(str(path))


def _read_inputs(path: Path) -> list[Any]:
    items = []
    for n, line in enumerate(read_text(path, "inputs file").splitlines(), 1):
        if not line.strip():
            continue
        try:
            items.append(json.loads(line))
        except ValueError as exc:
            raise typer.BadParameter(f"{path}:{n}: not JSON: {exc}") from None
    return items


def _done_lines(out: Path, count: int) -> dict[int, str]:
    """Result lines of an earlier run in ``out`` (by input index); interrupted ones are run again."""
    done: dict[int, str] = {}
    if not out.is_file():
        return done
    for line in out.read_text(encoding="utf-8", errors="replace").splitlines():
        try:
            row = json.loads(line)
        except ValueError:
            continue  # a line cut short when the earlier run was killed
        index = row.get("index") if isinstance(row, dict) else None
        if isinstance(index, int) and 0 <= index < count and row.get("termination") != "interrupted":
            done[index] = line + "\n"
    return done


# Alike by design (eval_command's options): typer reads each command's options from its own signature;
# the shared ones are one alias each (_options.py, EngineOpt, Workers, …), declared per command.
def batch_command(
    code_file: Annotated[Path, typer.Argument(help="the code action; each input is bound as `item`")],
    inputs: Annotated[Path, typer.Argument(help="JSONL: one JSON value per line")],
    tools: Annotated[list[Path] | None, typer.Option("--tools", help="Python file with @tool functions")] = None,
    tool_spec: Annotated[list[Path] | None, typer.Option("--tool-spec", help="JSON list of tool definitions")] = None,
    concurrency: Annotated[int, typer.Option(min=1, help="items at once (× --workers with --engine ray)")] = 4,
    out: Annotated[Path | None, typer.Option(help="results JSONL (default: stdout); written as items finish, "
                                                   "resumed when it exists")] = None,
    resume: Annotated[bool, typer.Option(help="skip the inputs whose results --out already holds")] = True,
    isolation: Annotated[str, typer.Option(help="auto, namespace (warm session, fresh namespace) or sandbox")] = "auto",
    engine: EngineOpt = "local",
    workers: Workers = 2,
    ray_address: RayAddress = None,
    backend: Backend = "docker",
    timeout: Timeout = 30.0,
    memory: Memory = 512,
    policy: Policy = "auto",
    image: Image = None,
    pip: Pip = None,
    progress: Annotated[bool, typer.Option(help="show a progress bar")] = True,
    allow_failed: Annotated[bool, typer.Option("--allow-failed", help="exit 0 even when items failed "
                                               "(their result lines are written all the same)")] = False,
) -> None:
    """Run CODE_FILE once per input line; one result line per input, in order, failures included.

    Exit 0 when every item ended ok, 1 when any failed (raised, timed out, was killed; 0 with
    --allow-failed), 2 usage error, 3 sandbox unavailable. Ctrl-C stops starting items and
    interrupts the running ones; finished results are kept (with --out, a re-run resumes) and the
    exit status is 130."""
    from ._exec import load_toolset

    if isolation not in ("auto", "namespace", "sandbox") or engine not in ("local", "ray"):
        raise typer.BadParameter("--isolation is auto, namespace or sandbox; --engine is local or ray")
    code, items = read_text(code_file, "code file"), _read_inputs(inputs)
    if out is not None and out.is_dir():
        raise typer.BadParameter(f"--out {out} is a directory, not a results file")
    config = sandbox_config(backend, timeout, memory, policy=policy, image=image, pip=pip)
    make_tools = functools.partial(load_toolset, list(tools or []), list(tool_spec or []))
    with machine_stdout() as stdout:
        make_tools()  # usage errors (a missing tools file) before any sandbox starts
        done = _done_lines(out, len(items)) if out is not None and resume else {}
        if done:
            typer.echo(f"resuming: {plural(len(done), 'result')} already in {out}", err=True)
        sink = _Sink(out, done)
        try:
            interrupted = _run_batch(engine, make_tools, config, code, items, sink, concurrency=concurrency,
                                     isolation=isolation, progress=progress, workers=workers,
                                     ray_address=ray_address)
        except SandboxUnavailable as exc:
            sink.close(complete=False)
            say_unavailable(exc)
            raise typer.Exit(3) from None
        sink.close(complete=not interrupted and len(sink.lines) == len(items))
        if out is None:
            stdout.writelines(sink.lines[i] for i in sorted(sink.lines))
    failed = sorted(sink.failed - sink.interrupted)
    shown = ", ".join(map(str, failed[:10])) + (" …" if len(failed) > 10 else "")
    of = f" of {len(items)}" if len(sink.lines) != len(items) else ""
    cut = f", {len(sink.interrupted)} interrupted" if sink.interrupted else ""
    typer.echo(f"{plural(len(sink.lines), 'result')}{of}, {len(failed)} failed"
               + (f" (inputs {shown})" if failed else "") + cut, err=True)
    if interrupted:
        if out is not None:
            typer.echo(f"interrupted: run the same command again to resume ({out})", err=True)
        raise typer.Exit(EXIT_INTERRUPTED)
    raise typer.Exit(1 if failed and not allow_failed else 0)


class _Sink:
    """Result lines by input index; with a file, each one is appended (and flushed) as it comes."""

    def __init__(self, out: Path | None, done: dict[int, str]) -> None:
        self.out = out
        self.lines = dict(done)
        self.failed = {i for i, line in done.items() if not json.loads(line).get("ok")}
        self.interrupted: set[int] = set()  # not ok, but cut short by Ctrl-C rather than failed
        self._lock = threading.Lock()
        self._file = None
        if out is not None:
            self._file = out.open("w", encoding="utf-8")  # rewritten: only the kept lines of an earlier run
            self._file.writelines(done[i] for i in sorted(done))
            self._file.flush()

    def add(self, index: int, result: ExecutionResult) -> None:
        line = json.dumps({"index": index, **result.model_dump(mode="json")}, ensure_ascii=False) + "\n"
        with self._lock:
            self.lines[index] = line
            (self.failed.add if not result.ok else self.failed.discard)(index)
            (self.interrupted.add if result.termination == "interrupted" else self.interrupted.discard)(index)
            if self._file is not None:
                self._file.write(line)
                self._file.flush()

    def close(self, *, complete: bool) -> None:
        """Close the file; when every input has its line, rewrite it in input order."""
        if self._file is None:
            return
        self._file.close()
        if complete and self.out is not None:
            tmp = self.out.with_name(self.out.name + ".tmp")
            tmp.write_text("".join(self.lines[i] for i in sorted(self.lines)), encoding="utf-8")
            tmp.replace(self.out)


def _run_batch(engine: str, make_tools: Callable[[], Any], config: SandboxConfig, code: str, items: list[Any],
               sink: _Sink, *, concurrency: int, isolation: str, progress: bool, workers: int,
               ray_address: str | None) -> bool:
    """Run the items ``sink`` does not hold yet; True when Ctrl-C stopped the run."""
    from ..runtime.batch import map_code
    from ..runtime.session import Runtime

    todo = [i for i in range(len(items)) if i not in sink.lines]
    cluster = None
    if engine == "ray":  # the same batch, its sessions on the cluster's nodes (codeact.cluster)
        from ..cluster import RayCluster

        cluster = RayCluster(ray_address, tools=make_tools, num_cpus=max(2, workers))
        concurrency *= max(1, workers)

    def keep(position: int, result: ExecutionResult) -> None:
        sink.add(todo[position], result)  # an item interrupted mid-run is kept, and run again on resume

    try:
        runtime = Runtime(make_tools(), config, cluster=cluster)
        with interrupts(runtime.interrupt) as stop, runtime:
            map_code(runtime, code, [items[i] for i in todo], concurrency=concurrency, progress=progress,
                     isolation=isolation, on_result=keep, stop=stop.event)  # type: ignore[arg-type]
    finally:
        if cluster is not None:
            cluster.shutdown()  # stops Ray if it started it
    return stop.requested


def register(app: typer.Typer) -> None:
    app.command("eval")(eval_command)
    app.command("report")(report_command)
    app.command("batch")(batch_command)
