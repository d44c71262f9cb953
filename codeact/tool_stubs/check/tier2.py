"""Tier 2 of the check: a real type checker (``ty``, the ``codeact[check]`` extra) over the cell,
with the stubs of the tools it names, the sandbox helpers and the earlier cells' names as ``Any``.

Chosen by measurement (``benchmarks/check_tier2.py``): of ``ty``, ``pyrefly``, ``basedpyright`` and
``mypy`` on the project's model-style code, ``ty`` had the fewest false errors among those that find
the mutated calls, and the fastest start. It still reports errors on code that runs (a dynamic
idiom, a ``max`` over a mixed list), so its findings are warnings, never a reason to block. The
code is read, never run: ty parses it on the host.
"""

from __future__ import annotations

import ast
import re
import shutil
import subprocess
import tempfile
import textwrap
from collections.abc import Collection, Mapping, Sequence
from pathlib import Path

from codeact.errors import CheckerUnavailable
from codeact.results import Diagnostic
from codeact.tool_stubs.render import render_module
from codeact.tool_stubs.spec import ToolSpec

__all__ = ["TypeCheck", "ty_binary"]

_HELPERS = ("ToolError", "parallel", "final_answer", "aio")
_LINE = re.compile(r"^cell\.py:(\d+):(\d+): (error|warning)\[([\w-]+)\] (.*)$")
#: The longest one type check may take; past it the cell runs without tier 2's findings.
TIMEOUT_S = 10.0


def ty_binary() -> str:
    """The ``ty`` executable, or CheckerUnavailable naming the extra that installs it."""
    try:
        import ty  # type: ignore[import-not-found,unused-ignore]

        found: str | None = str(ty.find_ty_bin())
    except (ImportError, FileNotFoundError):
        found = shutil.which("ty")
    if not found:
        raise CheckerUnavailable("check_types needs the ty type checker: pip install 'codeact[check]'")
    return found


class TypeCheck:
    """Runs ``ty`` once per cell in a scratch directory of its own (removed by :meth:`close`)."""

    def __init__(self, specs: Sequence[ToolSpec], names: Mapping[str, str], timeout_s: float = TIMEOUT_S) -> None:
        self._binary = ty_binary()
        self._specs = {names[s.name]: s for s in specs}
        self._names = dict(names)
        self._timeout_s = timeout_s
        self._dir = Path(tempfile.mkdtemp(prefix="codeact-check-"))

    def check(self, code: str, defined: Collection[str] | None) -> list[Diagnostic]:
        """ty's findings in ``code`` as warnings at the cell's own lines (none if it cannot say)."""
        try:
            used = {n.id for n in ast.walk(ast.parse(code)) if isinstance(n, ast.Name)}
            used |= {n.attr for n in ast.walk(ast.parse(code)) if isinstance(n, ast.Attribute)}
        except (SyntaxError, ValueError, RecursionError, MemoryError):
            return []  # tier 1 said so
        tools = [self._specs[n] for n in sorted(used & self._specs.keys())]
        (self._dir / "tools.py").write_text(render_module(tools, self._names, prompt=True, header=""))
        earlier = sorted(n for n in (defined or ()) if n.isidentifier() and n not in self._specs)
        head = ["from typing import Any", "from tools import *  # noqa", *(f"{n}: Any" for n in _HELPERS),
                *(f"{n}: Any" for n in earlier), "async def __cell__() -> None:"]
        body = textwrap.indent(code, "    ") if code.strip() else ""
        (self._dir / "cell.py").write_text("\n".join(head) + "\n" + body + "\n    pass\n")
        try:
            proc = subprocess.run([self._binary, "check", "--output-format", "concise", "--python-version", "3.11",
                                   "--no-progress", "cell.py"], cwd=self._dir, capture_output=True, text=True,
                                  timeout=self._timeout_s, check=False)
        except (OSError, subprocess.TimeoutExpired):
            return []
        return _diagnostics(proc.stdout, len(head), code.splitlines())

    def close(self) -> None:
        shutil.rmtree(self._dir, ignore_errors=True)


def _diagnostics(output: str, offset: int, lines: list[str]) -> list[Diagnostic]:
    found = []
    for raw in output.splitlines():
        match = _LINE.match(raw.strip())
        if match is None:
            continue
        line = int(match.group(1)) - offset
        if not 1 <= line <= len(lines):
            continue
        column = max(int(match.group(2)) - 4, 1)
        found.append(Diagnostic(line=line, column=column, end_line=line, end_column=column,
                                code=f"type:{match.group(4)}", message=match.group(5), severity="warning"))
    return found
