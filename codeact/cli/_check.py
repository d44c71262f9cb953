"""``codeact check``: what the check finds in a code file, without running it."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Annotated

import typer

from ._exec import _read_code, load_toolset
from ._options import machine_stdout

__all__ = ["check_command", "register"]


def check_command(
    file: Annotated[str, typer.Argument(help="Python file to check, or - for stdin")],
    tools: Annotated[list[Path] | None, typer.Option("--tools", help="Python file with @tool functions")] = None,
    tool_spec: Annotated[list[Path] | None, typer.Option("--tool-spec", help="JSON list of tool definitions")] = None,
    as_json: Annotated[bool, typer.Option("--json", help="print the diagnostics as one JSON list")] = False,
) -> None:
    """Check FILE as the first code action of a session with these tools; nothing runs.

    One line per finding, FILE:LINE:COLUMN: severity [code] message. Exit 0 no error (warnings
    may be printed), 1 at least one error (a cell Runtime(check="block") would not run), 2 usage."""
    from ..runtime.session import Runtime

    code = _read_code(file)
    with machine_stdout() as out:
        with Runtime(load_toolset(tools or [], tool_spec or []), check="off") as runtime:
            found = runtime.check(code)
        if as_json:
            out.write(json.dumps([d.model_dump() for d in found]) + "\n")
        else:
            for d in found:
                out.write(f"{file}:{d.line}:{d.column}: {d.severity} [{d.code}] {d.message}\n")
    raise typer.Exit(1 if any(d.severity == "error" for d in found) else 0)


def register(app: typer.Typer) -> None:
    app.command("check")(check_command)
