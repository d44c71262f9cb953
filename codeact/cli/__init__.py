"""The ``codeact`` command. Exit status: 0 ok, 1 the code failed, 2 usage error, 3 sandbox unavailable."""

from __future__ import annotations

import sys

import typer

from ..errors import CodeactError, SandboxUnavailable
from . import _exec, _sandbox

app = typer.Typer(add_completion=False, no_args_is_help=True, pretty_exceptions_enable=False,
                  help="Run LLM-written Python that calls tools, in a sandbox, with every call recorded.")
_exec.register(app)
_sandbox.register(app)

__all__ = ["app", "main"]


def _register_optional() -> None:
    # Commands from later layers register themselves here when their modules exist.
    import importlib

    for name in ("_agent", "_serve", "_evals", "_view"):
        try:
            module = importlib.import_module(f"{__name__}.{name}")
        except ModuleNotFoundError as exc:
            if exc.name != f"{__name__}.{name}":
                raise
            continue
        module.register(app)


_register_optional()


def main() -> None:
    """Entry point: one-line errors, contract exit statuses."""
    try:
        app(standalone_mode=True)
    except SandboxUnavailable as exc:
        print(f"codeact: sandbox unavailable: {exc}", file=sys.stderr)
        sys.exit(3)
    except CodeactError as exc:
        print(f"codeact: {exc}", file=sys.stderr)
        sys.exit(2)
