"""``codeact exec`` and ``codeact stubs``."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Annotated, Any

import typer

from .._text import one_line
from ..errors import ReplayInterrupted, SandboxUnavailable, SnapshotError, ToolDefinitionError
from ..results import ExecutionResult
from ..runtime.toolset import Toolset
from ..sandbox import SandboxConfig
from ..tool_stubs import ToolSpec
from ..tool_stubs.catalog import DEFAULT_PROMPT_BUDGET
from . import _live
from ._exec_files import get_files, parse_gets, parse_puts, put_files, session_lock
from ._interrupt import EXIT_INTERRUPTED, interrupts
from ._options import Image, Pip, decode, machine_stdout, read_text, sandbox_config
from ._output import print_result

#: What the Python API's refusal of an inexact cell ends with (the CLI says its own flag instead).
_API_HINT = "; pass allow_inexact=True to snapshot without it"


def spec_from_any(definition: Any) -> ToolSpec:
    """A ToolSpec from a dict in OpenAI, Anthropic or MCP shape (told apart by their keys)."""
    if not isinstance(definition, dict):
        raise ToolDefinitionError(f"a tool definition must be a JSON object, not {type(definition).__name__}")
    if "function" in definition or "parameters" in definition:
        return ToolSpec.from_openai(definition)
    if "inputSchema" in definition:
        return ToolSpec.from_mcp(definition)
    if "input_schema" in definition:
        return ToolSpec.from_anthropic(definition)
    raise ToolDefinitionError(
        f"tool {definition.get('name', '?')!r}: not an OpenAI (function/parameters), Anthropic "
        "(input_schema) or MCP (inputSchema) definition")


def load_spec_file(path: Path) -> list[ToolSpec]:
    """Tool definitions from a JSON file (a list, ``{"tools": [...]}`` or one definition)."""
    text = read_text(path, "tool definitions file")
    try:
        data = json.loads(text)
    except ValueError as exc:
        raise typer.BadParameter(f"{path}: not JSON: {exc}") from None
    items = data if isinstance(data, list) else data.get("tools", [data]) if isinstance(data, dict) else [data]
    return [spec_from_any(item) for item in items]


def load_tools_file(path: Path) -> Toolset:
    """The ``@tool`` functions of a Python file; a file without any is a usage error."""
    read_text(path, "tools file")  # missing, a directory, not UTF-8: one line, before importing it
    toolset = Toolset.from_module(path)
    if not toolset.names:
        raise typer.BadParameter(f"{path} defines no @codeact.tool functions (at the top level of the module)")
    return toolset


def load_toolset(tool_files: list[Path], spec_files: list[Path]) -> Toolset:
    toolset = Toolset([])
    for path in tool_files:
        toolset = toolset.merge(load_tools_file(path))
    for path in spec_files:
        for spec in load_spec_file(path):
            if spec.name not in toolset:
                toolset.add(spec)
    return toolset


def _read_code(file: str) -> str:
    if file == "-":
        return decode(sys.stdin.buffer.read(), "standard input")
    return read_text(Path(file), "code file")


def exec_command(
    file: Annotated[str, typer.Argument(help="Python file to run, or - for stdin")],
    tools: Annotated[list[Path] | None, typer.Option("--tools", help="Python file with @tool functions")] = None,
    tool_spec: Annotated[list[Path] | None, typer.Option("--tool-spec", help="JSON list of tool definitions")] = None,
    backend: Annotated[str, typer.Option(help="docker or local")] = "docker",
    timeout: Annotated[float, typer.Option(help="seconds for the whole run")] = 30.0,
    memory: Annotated[int, typer.Option(help="memory limit in MB")] = 512,
    image: Image = None,
    pip: Pip = None,
    as_json: Annotated[bool, typer.Option("--json", help="print exactly one ExecutionResult JSON")] = False,
    session_file: Annotated[Path | None, typer.Option(
        "--session", help="snapshot file: restore the session from it first (if it exists), save it after")] = None,
    events: Annotated[bool, typer.Option("--events", help="print the run's live events as JSON lines; "
                                         "the last, 'done', holds the result")] = False,
    check: Annotated[str, typer.Option("--check", help="off, warn (run, and say what the check found) or block "
                                       "(a cell with an error does not run)")] = "warn",
    allow_inexact: Annotated[bool, typer.Option("--allow-inexact", help="with --session: save even when this "
                                                "cell cannot be replayed exactly (it is left out)")] = False,
    put: Annotated[list[str] | None, typer.Option("--put", help="LOCAL:REMOTE, a file into the workspace "
                                                  "before the run (repeatable)")] = None,
    get: Annotated[list[str] | None, typer.Option("--get", help="REMOTE:LOCAL, a workspace file out after "
                                                  "the run (repeatable)")] = None,
    allow_host: Annotated[list[str] | None, typer.Option("--allow-host", help="HOST[:PORT] the code may reach "
                                                         "through the host's egress broker (repeatable)")] = None,
) -> None:
    """Run FILE as one code action in a fresh sandbox, the tools exposed as functions.

    Exit 0 completed, 1 failed (the result is printed), 2 usage error, 3 sandbox unavailable,
    130 interrupted by Ctrl-C (the result so far is printed, termination "interrupted"). With
    --session, a session file that cannot be saved (a cell that cannot be replayed exactly, unless
    --allow-inexact) is one line on stderr and exit 1, after the result; invocations sharing one
    session file take turns (a lock beside it). A --get that fails is one line and exit 1 too."""
    from ..runtime.session import Runtime

    config = sandbox_config(backend, timeout, memory, image=image, pip=pip, allow_host=allow_host)
    if check not in ("off", "warn", "block"):
        raise typer.BadParameter(f"--check must be off, warn or block, not {check!r}")
    code = _read_code(file)
    puts, gets = parse_puts(put or []), parse_gets(get or [])
    live = sys.stdout.isatty() and sys.stderr.isatty()  # asked before stdout is set aside
    with machine_stdout() as out:
        listener = _live.listener(events, as_json, out, live=live)
        toolset = load_toolset(tools or [], tool_spec or [])
        runtime = Runtime(toolset, config, check=check)  # type: ignore[arg-type]  # checked above
        not_saved = not_fetched = None
        try:
            # the handler outlives the runtime's close; the lock, the session file's restore and save
            with session_lock(session_file), interrupts(runtime.interrupt) as stop, runtime:
                with _open_session(runtime, session_file, config) as session:
                    if stop.requested:  # Ctrl-C while the sandbox started (nothing ran yet to interrupt)
                        typer.echo("codeact: interrupted before the code started", err=True)
                        raise typer.Exit(EXIT_INTERRUPTED)
                    put_files(session, puts)
                    result: ExecutionResult = session.run(code, on_event=listener)
                    not_fetched = get_files(session, gets)
                    if session_file is not None:
                        try:
                            session.snapshot(allow_inexact=allow_inexact).save(session_file)
                        except (SnapshotError, OSError) as exc:  # the result is printed all the same
                            hint = "; --allow-inexact saves it without that cell" if str(exc).endswith(_API_HINT) \
                                else ""
                            not_saved = (f"codeact: session file {session_file} not saved: "
                                         f"{one_line(str(exc).removesuffix(_API_HINT), 300)}{hint}")
        except SandboxUnavailable as exc:
            typer.echo(f"codeact: sandbox unavailable: {exc}", err=True)
            raise typer.Exit(3) from None
        except (SnapshotError, ReplayInterrupted) as exc:
            if stop.requested:
                typer.echo("codeact: interrupted while the session was restored", err=True)
                raise typer.Exit(EXIT_INTERRUPTED) from None
            typer.echo(f"codeact: session file {session_file}: {exc}", err=True)
            raise typer.Exit(3 if isinstance(exc, ReplayInterrupted) else 2) from None
        if as_json and not events:
            out.write(result.model_dump_json() + "\n")
        elif not events:  # with --events the last line, 'done', carried the result
            print_result(_live.not_yet_shown(result, listener), out)
    if stop.requested:
        raise typer.Exit(EXIT_INTERRUPTED)
    for line in (not_fetched, not_saved):
        if line is not None:
            typer.echo(line, err=True)
    if not_saved is not None or not_fetched is not None:
        raise typer.Exit(1)
    raise typer.Exit(0 if result.ok else 1)


def _open_session(runtime: Any, path: Path | None, config: SandboxConfig) -> Any:
    """The session saved in ``path`` restored (a fresh one if there is no such file or no path)."""
    from ..runtime.snapshot import Snapshot

    if path is None or not path.exists():
        return runtime.session()
    return runtime.restore(Snapshot.load(path), config=config)


def stubs_command(
    file: Annotated[Path, typer.Argument(help="a JSON list of tool definitions, or a .py file with @tool functions")],
    sandbox: Annotated[bool, typer.Option("--sandbox", help="print the module the sandbox executes (with its "
                                          "plumbing), not the model's view")] = False,
    budget: Annotated[int, typer.Option("--budget", min=1, help="the prompt budget in characters: past it the "
                                        "model is shown an index and searches")] = DEFAULT_PROMPT_BUDGET,
) -> None:
    """Print what the model is shown of these tools (the prompt view, built-ins such as read_result
    included): every typed stub within --budget characters, else the index of groups and how to
    search. --sandbox prints the module the sandbox runs instead."""
    from ..runtime.session import Runtime

    with machine_stdout() as out:  # a tools file may print at import: stdout stays the view's
        specs = load_tools_file(file).specs if file.suffix == ".py" else load_spec_file(file)
        with Runtime(specs, prompt_budget_chars=budget, check="off") as runtime:
            out.write(runtime.stubs if sandbox else runtime.prompt_view)


def register(app: typer.Typer) -> None:
    app.command("exec")(exec_command)
    app.command("stubs")(stubs_command)
