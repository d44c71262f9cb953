"""Readable terminal output for results."""

from __future__ import annotations

import json
from typing import Any

from rich.console import Console
from rich.table import Table

from ..results import ExecutionResult

console = Console(stderr=False, highlight=False, soft_wrap=True)


def _short(value: Any, limit: int = 80) -> str:
    text = json.dumps(value, ensure_ascii=False, default=repr)
    return text if len(text) <= limit else text[: limit - 1] + "…"


def print_result(result: ExecutionResult) -> None:
    """A human summary of one ExecutionResult."""
    if result.stdout:
        console.rule("stdout", style="dim")
        console.out(result.stdout.rstrip("\n") + (" …[truncated]" if result.stdout_truncated else ""))
    if result.stderr:
        console.rule("stderr", style="dim")
        console.out(result.stderr.rstrip("\n"), style="yellow")
    if result.calls:
        table = Table("id", "tool", "arguments", "status", "result / error", "ms", title="tool calls")
        for call in result.calls:
            if call.ok:
                status = "ok (cached)" if call.cached else "ok"
            else:
                status = call.error.code if call.error else "?"
            detail = _short(call.result) if call.ok else (call.error.message if call.error else "")
            table.add_row(call.id, call.name, _short(call.arguments, 50), status, detail[:80],
                          f"{call.duration_ms:.1f}", style=None if call.ok else "red")
        console.print(table)
    if result.value is not None:
        console.print(f"[bold]value:[/bold] {_short(result.value, 2000)}", markup=True)
    if result.error is not None:
        where = f" (line {result.error.lineno})" if result.error.lineno else ""
        console.print(f"[red]error{where}: {result.error.type}: {result.error.message}[/red]", markup=True)
    colour = "green" if result.ok else "red"
    reason = f" — {result.reason}" if result.reason else ""
    console.print(f"[{colour}]{result.termination}[/{colour}] in {result.duration_ms:.0f} ms{reason}", markup=True)
