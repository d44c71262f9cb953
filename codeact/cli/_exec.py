"""``codeact exec`` and ``codeact stubs``."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Annotated, Any

import typer

from ..errors import SandboxUnavailable, SnapshotError, ToolDefinitionError
from ..results import ExecutionResult
from ..runtime.toolset import Toolset
from ..sandbox import SandboxConfig
from ..tool_stubs import ToolSpec, render_stubs
from ._output import print_result


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
    try:
        data = json.loads(path.read_text())
    except (OSError, ValueError) as exc:
        raise typer.BadParameter(f"{path}: {exc}") from None
    items = data if isinstance(data, list) else data.get("tools", [data]) if isinstance(data, dict) else [data]
    return [spec_from_any(item) for item in items]


def load_toolset(tool_files: list[Path], spec_files: list[Path]) -> Toolset:
    toolset = Toolset([])
    for path in tool_files:
        if not path.is_file():
            raise typer.BadParameter(f"no such tools file: {path}")
        toolset = toolset.merge(Toolset.from_module(path))
    for path in spec_files:
        for spec in load_spec_file(path):
            if spec.name not in toolset:
                toolset.add(spec)
    return toolset


def _read_code(file: str) -> str:
    if file == "-":
        return sys.stdin.read()
    path = Path(file)
    if not path.is_file():
        raise typer.BadParameter(f"no such file: {file}")
    return path.read_text()


def exec_command(
    file: Annotated[str, typer.Argument(help="Python file to run, or - for stdin")],
    tools: Annotated[list[Path] | None, typer.Option("--tools", help="Python file with @tool functions")] = None,
    tool_spec: Annotated[list[Path] | None, typer.Option("--tool-spec", help="JSON list of tool definitions")] = None,
    backend: Annotated[str, typer.Option(help="docker or local")] = "docker",
    timeout: Annotated[float, typer.Option(help="seconds for the whole run")] = 30.0,
    memory: Annotated[int, typer.Option(help="memory limit in MB")] = 512,
    as_json: Annotated[bool, typer.Option("--json", help="print exactly one ExecutionResult JSON")] = False,
    session_file: Annotated[Path | None, typer.Option(
        "--session", help="snapshot file: restore the session from it first (if it exists), save it after")] = None,
) -> None:
    """Run FILE as one code action in a fresh sandbox, the tools exposed as functions."""
    from ..runtime.session import Runtime

    if backend not in ("docker", "local"):
        raise typer.BadParameter("--backend must be docker or local")
    code = _read_code(file)
    toolset = load_toolset(tools or [], tool_spec or [])
    config = SandboxConfig(backend=backend, timeout_s=timeout, memory_mb=memory)  # type: ignore[arg-type]
    try:
        with Runtime(toolset, config) as runtime:
            if session_file is None:
                result: ExecutionResult = runtime.run(code)
            else:
                result = _run_in_saved_session(runtime, code, session_file, config)
    except SandboxUnavailable as exc:
        typer.echo(f"codeact: sandbox unavailable: {exc}", err=True)
        raise typer.Exit(3) from None
    except SnapshotError as exc:
        typer.echo(f"codeact: session file {session_file}: {exc}", err=True)
        raise typer.Exit(2) from None
    if as_json:
        sys.stdout.write(result.model_dump_json() + "\n")
    else:
        print_result(result)
    raise typer.Exit(0 if result.ok else 1)


def _run_in_saved_session(runtime: Any, code: str, path: Path, config: SandboxConfig) -> ExecutionResult:
    """Restore the session saved in ``path`` (a fresh one if there is no file), run, save it back
    (a cell that cannot be replayed exactly is left out of the saved state)."""
    from ..runtime.snapshot import Snapshot

    session = runtime.restore(Snapshot.load(path), config=config) if path.exists() else runtime.session()
    with session:
        result: ExecutionResult = session.run(code)
        session.snapshot(allow_inexact=True).save(path)
    return result


def stubs_command(json_file: Annotated[Path, typer.Argument(help="JSON list of tool definitions")]) -> None:
    """Print the stub module (the model's view) for those tool definitions."""
    if not json_file.is_file():
        raise typer.BadParameter(f"no such file: {json_file}")
    sys.stdout.write(render_stubs(load_spec_file(json_file)))


def register(app: typer.Typer) -> None:
    app.command("exec")(exec_command)
    app.command("stubs")(stubs_command)
