"""``codeact view``: a trace or an eval run directory as one self-contained HTML page."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer


def view_command(
    source: Annotated[Path, typer.Argument(help="a JSONL trace (codeact agent --trace) or an eval run directory")],
    out: Annotated[Path | None, typer.Option("-o", "--out", help="HTML file to write (default: beside the "
                                             "trace as .html, or DIR/view.html)")] = None,
    max_chars: Annotated[int, typer.Option(help="most characters shown of one text (code, output, result)")] = 20_000,
) -> None:
    """Write a self-contained HTML timeline of each episode (no network needed to open it)."""
    from ..viewer import write_view

    if max_chars < 100:
        raise typer.BadParameter("--max-chars must be at least 100")
    try:
        path = write_view(source, out, limit=max_chars)
    except (ValueError, OSError) as exc:
        typer.echo(f"codeact: {exc}", err=True)
        raise typer.Exit(2) from None
    typer.echo(str(path))


def register(app: typer.Typer) -> None:
    app.command("view")(view_command)
