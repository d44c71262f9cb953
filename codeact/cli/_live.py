"""Live output of a run on the terminal: events as JSON lines (``--events``) or readable lines."""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any, TextIO

from rich.console import Console
from rich.markup import escape

from ..results import ExecutionResult
from ..runtime.events import CallFinished, CallStarted, EgressFinished, OutputChunk, RunEvent


def event_json_printer(out: TextIO) -> Callable[[RunEvent], None]:
    """Print each event as one JSON line on ``out``, flushed (for other programs reading as it runs)."""

    def print_event_json(event: RunEvent) -> None:
        out.write(event.model_dump_json() + "\n")
        out.flush()

    return print_event_json


def _short(value: Any, limit: int = 60) -> str:
    text = json.dumps(value, ensure_ascii=False, default=repr)
    return text if len(text) <= limit else text[: limit - 1] + "…"


class LivePrinter:
    """Shows a run as it happens on stderr: what the code writes, and each call as it starts and ends.

    stdout stays for the summary (``print_result``) so a pipe gets the same text as without it.
    """

    def __init__(self, console: Console | None = None) -> None:
        self.console = console or Console(stderr=True, highlight=False, soft_wrap=True)

    def __call__(self, event: RunEvent) -> None:
        c = self.console
        if isinstance(event, OutputChunk):
            c.out(event.text, end="", style="yellow" if event.type == "stderr" else None)
        elif isinstance(event, CallStarted):
            c.print(f"[dim]→ {escape(event.id)} {escape(event.name)}({escape(_short(event.arguments))})[/dim]",
                    markup=True, highlight=False)
        elif isinstance(event, CallFinished):
            if event.ok:
                what = f"[green]ok[/green]{' (cached)' if event.cached else ''} {escape(_short(event.result))}"
            else:
                what = f"[red]{escape(event.error.code) if event.error else 'error'}[/red]"
            c.print(f"[dim]← {escape(event.id)} {escape(event.name)}[/dim] {what} "
                    f"[dim]{event.duration_ms:.1f} ms[/dim]", markup=True, highlight=False)
        elif isinstance(event, EgressFinished):
            style = "dim" if event.record.allowed else "red"
            c.print(f"[{style}]⇄ egress {escape(event.record.describe())}[/{style}]", markup=True, highlight=False)



def listener(events: bool, as_json: bool, out: TextIO, *, live: bool) -> Any:
    """The listener ``codeact exec`` runs with: JSON lines on ``out``, live lines on a terminal
    (``live``: stdout and stderr are terminals), or none."""
    if events:
        return event_json_printer(out)
    if not as_json and live:  # a pipe gets what it always got
        return LivePrinter()
    return None


def not_yet_shown(result: ExecutionResult, listener: Any) -> ExecutionResult:
    """What the summary still has to show: the streams were shown live already by a LivePrinter."""
    if isinstance(listener, LivePrinter):
        return result.model_copy(update={"stdout": "", "stderr": ""})
    return result
