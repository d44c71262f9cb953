"""Readable terminal output for results. Everything printed here came from the sandbox or a tool:
it is shown as plain text (``Text``/``markup=False``), never parsed as Rich markup."""

from __future__ import annotations

import json
from typing import Any, TextIO

from rich.console import Console
from rich.table import Table
from rich.text import Text

from ..results import ExecutionResult

__all__ = ["plural", "print_result"]


def plural(n: int, word: str, many: str | None = None) -> str:
    """``1 container``, ``2 containers``."""
    return f"{n} {word if n == 1 else (many or word + 's')}"


def _short(value: Any, limit: int = 80) -> str:
    text = json.dumps(value, ensure_ascii=False, default=repr)
    return text if len(text) <= limit else text[: limit - 1] + "…"


def _labelled(label: str, text: str, style: str | None = None) -> Text:
    line = Text(label, style="bold")
    line.append(text, style=style)
    return line


def print_result(result: ExecutionResult, file: TextIO | None = None) -> None:
    """A human summary of one ExecutionResult (on ``file``, else stdout)."""
    console = Console(file=file, highlight=False, soft_wrap=True)
    for found in result.diagnostics:
        console.print(Text(f"line {found.line}, col {found.column}: {found.severity} [{found.code}] {found.message}",
                           style="red" if found.severity == "error" else "yellow"))
    if result.stdout:
        console.rule("stdout", style="dim")
        console.print(Text(result.stdout.rstrip("\n") + (" …[truncated]" if result.stdout_truncated else "")))
    if result.stderr:
        console.rule("stderr", style="dim")
        console.print(Text(result.stderr.rstrip("\n"), style="yellow"))
    if result.calls:
        table = Table("id", "tool", "arguments", "status", "result / error", "ms", title="tool calls")
        for call in result.calls:
            if call.ok:
                status = "ok (cached)" if call.cached else "ok"
            else:
                status = call.error.code if call.error else "?"
            detail = _short(call.result) if call.ok else (call.error.message if call.error else "")
            table.add_row(Text(call.id), Text(call.name), Text(_short(call.arguments, 50)), Text(status),
                          Text(detail[:80]), f"{call.duration_ms:.1f}", style=None if call.ok else "red")
        console.print(table)
    if result.value is not None:
        console.print(_labelled("value: ", _short(result.value, 2000)))
    if result.answered:
        console.print(_labelled("final_answer: ", _short(result.final_answer, 2000)))
    if result.error is not None:
        where = f" (line {result.error.lineno})" if result.error.lineno else ""
        console.print(Text(f"error{where}: {result.error.type}: {result.error.message}", style="red"))
    line = Text(result.termination, style="green" if result.ok else "red")
    line.append(f" in {result.duration_ms:.0f} ms" + (f" — {result.reason}" if result.reason else ""))
    console.print(line)
