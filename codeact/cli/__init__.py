"""The ``codeact`` command. Exit status: 0 ok, 1 the code failed, 2 usage error (one line on stderr),
3 sandbox unavailable, 130 interrupted (Ctrl-C: what finished is still printed or written).

Floor 7 of the layers (docs/architecture.md): imports everything below, never a higher floor.
"""

from __future__ import annotations

import sys
from typing import Annotated

import typer
from typer._click import exceptions as click  # typer vendors click; its errors live here

from ..errors import CodeActError, SandboxUnavailable
from . import _exec, _sandbox

app = typer.Typer(add_completion=False, no_args_is_help=True, pretty_exceptions_enable=False,
                  help="Run LLM-written Python that calls tools, in a sandbox, with every call recorded.")
_exec.register(app)
_sandbox.register(app)

__all__ = ["app", "main"]


def _show_version(value: bool) -> None:
    if value:
        from .._version import __version__

        typer.echo(f"codeact {__version__}")
        raise typer.Exit(0)


@app.callback()
def _root(version: Annotated[bool, typer.Option("--version", is_eager=True, callback=_show_version,
                                                help="print the version and exit")] = False) -> None:
    """Run LLM-written Python that calls tools, in a sandbox, with every call recorded."""


def _register_optional() -> None:
    # Commands from later layers register themselves here when their modules exist.
    import importlib

    for name in ("_agent", "_serve", "_evals", "_view", "_check"):
        try:
            module = importlib.import_module(f"{__name__}.{name}")
        except ModuleNotFoundError as exc:
            if exc.name != f"{__name__}.{name}":
                raise
            continue
        module.register(app)


_register_optional()


def _usage_line(exc: click.UsageError) -> str:
    command = exc.ctx.command_path if exc.ctx is not None else "codeact"
    message = " ".join(exc.format_message().split())
    return f"{command}: {message} (see '{command} --help')"


def _command() -> typer.core.TyperGroup:
    """The click command of ``app``, its on/off flags shown without a value (``--json``, not
    ``--json <bool>``: they take none)."""
    group = typer.main.get_command(app)
    stack = [group]
    while stack:
        command = stack.pop()
        for param in command.params:
            if getattr(param, "is_flag", False):
                param.metavar = ""
        stack.extend(getattr(command, "commands", {}).values())
    return group  # type: ignore[return-value]


def main() -> None:
    """Entry point: one-line errors, contract exit statuses."""
    try:
        status = _command().main(standalone_mode=False, prog_name="codeact")
    except click.NoArgsIsHelpError as exc:
        typer.echo(exc.ctx.get_help() if exc.ctx is not None else exc.format_message(), err=True)
        sys.exit(2)
    except click.UsageError as exc:
        print(_usage_line(exc), file=sys.stderr)
        sys.exit(2)
    except click.ClickException as exc:
        print(f"codeact: {' '.join(exc.format_message().split())}", file=sys.stderr)
        sys.exit(exc.exit_code)
    except typer.Abort:
        sys.exit(130)
    except SandboxUnavailable as exc:
        from ._options import say_unavailable

        say_unavailable(exc)
        sys.exit(3)
    except CodeActError as exc:
        print(f"codeact: {exc}", file=sys.stderr)
        sys.exit(2)
    sys.exit(status if isinstance(status, int) else 0)
