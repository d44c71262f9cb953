"""Readable terminal output for results. Everything printed here came from the sandbox or a tool:
it is shown as plain text (``Text``/``markup=False``), never parsed as Rich markup."""

from __future__ import annotations

import json
from typing import Any, TextIO

from rich import box
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


def _json_cell(value: Any, limit: int) -> Text:
    """JSON on one line, cut with an ellipsis where the column ends (wrapped, it would be mangled)."""
    return Text(_short(value, limit), no_wrap=True, overflow="ellipsis")


def _calls_table(result: ExecutionResult, width: int) -> Table:
    """The tool calls: id, tool, status and ms always whole; the arguments and the result on one
    line each, sharing what is left of ``width`` (the whole of each is in ``--json``)."""
    rows = []
    for call in result.calls:
        if call.ok:
            status = "ok (cached)" if call.cached else "ok"
            detail = _json_cell(call.result, 80)
        else:
            status = call.error.code if call.error else "?"
            detail = Text(call.error.message[:200] if call.error else "")  # prose: wraps
        rows.append((call.id, call.name, _json_cell(call.arguments, 50), status, detail, f"{call.duration_ms:.1f}"))
    fixed = sum(max(len(head), *(len(row[i]) for row in rows)) for i, head in
                ((0, "id"), (1, "tool"), (3, "status"), (5, "ms")))
    room = max(20, width - fixed - 2 * 5)  # two spaces between the six columns
    table = Table(title="tool calls", box=box.SIMPLE_HEAD, show_edge=False, pad_edge=False, collapse_padding=True)
    table.add_column("id", no_wrap=True)
    table.add_column("tool", no_wrap=True)
    table.add_column("arguments", max_width=max(10, room * 2 // 5))
    table.add_column("status", no_wrap=True)
    table.add_column("result / error", max_width=max(10, room - room * 2 // 5))
    table.add_column("ms", no_wrap=True, justify="right")
    for call, (ident, name, arguments, status, detail, ms) in zip(result.calls, rows, strict=True):
        table.add_row(Text(ident), Text(name), arguments, Text(status), detail, ms, style=None if call.ok else "red")
    return table


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
        console.print(_calls_table(result, console.width))
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
