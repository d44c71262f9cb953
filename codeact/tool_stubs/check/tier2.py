"""Tier 2 of the check: a real type checker (``ty``, the ``codeact[check]`` extra) over the cell,
with the stubs of the tools it names, the sandbox helpers and the earlier cells' names as ``Any``.

Chosen by measurement (``benchmarks/check_tier2.py``): of ``ty``, ``pyrefly``, ``basedpyright`` and
``mypy`` on the project's model-style code, ``ty`` had the fewest false errors among those that find
the mutated calls, and the fastest start; kept running as a language server (``ty server``) it
answers a cell without a process start (``make bench`` measures it). It still reports errors on
code that runs (a dynamic idiom, a ``max`` over a mixed list), so its findings are warnings, never
a reason to block. The code is read, never run: ty parses it on the host.
"""

from __future__ import annotations

import ast
import os
import shutil
import tempfile
import textwrap
import threading
from collections.abc import Collection, Mapping, Sequence
from pathlib import Path
from typing import Any

from codeact.errors import CheckerUnavailable
from codeact.results import Diagnostic
from codeact.tool_stubs.check._lsp import LspClient, LspError
from codeact.tool_stubs.render import render_module
from codeact.tool_stubs.spec import ToolSpec

__all__ = ["TypeCheck", "ty_binary"]

_HELPERS = ("ToolError", "parallel", "final_answer", "aio", "display")
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
    """``ty server`` kept running (a check then costs a request, not a process start),
    one scratch directory of its own; :meth:`close` ends both. A server that dies or does not answer
    in ``timeout_s`` is dropped (that cell gets no tier-2 findings) and started again for the next."""

    def __init__(self, specs: Sequence[ToolSpec], names: Mapping[str, str], timeout_s: float = TIMEOUT_S) -> None:
        self._binary = ty_binary()
        self._specs = {names[s.name]: s for s in specs}
        self._names = dict(names)
        self._timeout_s = timeout_s
        self._dir = Path(tempfile.mkdtemp(prefix="codeact-check-"))
        self._lock = threading.Lock()
        self._client: LspClient | None = None
        self._version = 0
        self._stubbed: set[str] = set()  # the tools whose stubs the server's tools.py holds

    def check(self, code: str, defined: Collection[str] | None) -> list[Diagnostic]:
        """ty's findings in ``code`` as warnings at the cell's own lines (none if it cannot say)."""
        try:
            nodes = list(ast.walk(ast.parse(code)))
        except (SyntaxError, ValueError, RecursionError, MemoryError):
            return []  # tier 1 said so
        used = {n.id for n in nodes if isinstance(n, ast.Name)}
        used |= {n.attr for n in nodes if isinstance(n, ast.Attribute)}
        earlier = sorted(n for n in (defined or ()) if n.isidentifier() and n not in self._specs)
        head = ["from typing import Any", "from tools import *  # noqa", *(f"{n}: Any" for n in _HELPERS),
                *(f"{n}: Any" for n in earlier), "async def __cell__() -> None:"]
        body = textwrap.indent(code, "    ") if code.strip() else ""
        text = "\n".join(head) + "\n" + body + "\n    pass\n"
        with self._lock:
            try:
                items = self._diagnose(used & self._specs.keys(), text)
            except (LspError, OSError):
                self._stop()
                return []
        return _diagnostics(items, len(head), code.splitlines())

    def _diagnose(self, tools: set[str], text: str) -> list[dict[str, Any]]:
        client = self._client or self._start()
        if not tools <= self._stubbed:
            self._stubbed |= tools
            stubs = render_module([self._specs[n] for n in sorted(self._stubbed)], self._names, prompt=True, header="")
            self._change(client, "tools.py", stubs)
        self._change(client, "cell.py", text)
        result = client.request("textDocument/diagnostic", {"textDocument": {"uri": self._uri("cell.py")}},
                                self._timeout_s)
        items = result.get("items") if isinstance(result, dict) else None
        return [i for i in items if isinstance(i, dict)] if isinstance(items, list) else []

    def _start(self) -> LspClient:
        client = LspClient([self._binary, "server"], self._dir)
        try:
            client.request("initialize", {
                "processId": os.getpid(), "rootUri": self._dir.as_uri(),
                "workspaceFolders": [{"uri": self._dir.as_uri(), "name": "check"}],
                "capabilities": {"general": {"positionEncodings": ["utf-32", "utf-16"]},
                                 "textDocument": {"diagnostic": {}}}}, self._timeout_s)
            client.notify("initialized", {})
            for name in ("tools.py", "cell.py"):
                (self._dir / name).write_text("")
                client.notify("textDocument/didOpen", {"textDocument": {
                    "uri": self._uri(name), "languageId": "python", "version": 0, "text": ""}})
        except BaseException:
            client.close()
            raise
        self._client, self._stubbed = client, set()
        return client

    def _change(self, client: LspClient, name: str, text: str) -> None:
        self._version += 1
        client.notify("textDocument/didChange", {"textDocument": {"uri": self._uri(name), "version": self._version},
                                                 "contentChanges": [{"text": text}]})

    def _uri(self, name: str) -> str:
        return (self._dir / name).as_uri()

    def _stop(self) -> None:
        client, self._client = self._client, None
        if client is not None:
            client.close()

    def close(self) -> None:
        with self._lock:
            self._stop()
        shutil.rmtree(self._dir, ignore_errors=True)


def _diagnostics(items: list[dict[str, Any]], offset: int, lines: list[str]) -> list[Diagnostic]:
    found = []
    for item in items:
        if item.get("severity") not in (1, 2):  # an information or a hint (an unused name) is no finding
            continue
        where = item.get("range")
        where = where if isinstance(where, dict) else {}
        start, end = where.get("start") or {}, where.get("end") or {}
        try:
            line = int(start.get("line", -1)) + 1 - offset
            end_line = int(end.get("line", -1)) + 1 - offset
            column, end_column = int(start.get("character", 0)) - 3, int(end.get("character", 0)) - 3
        except (TypeError, ValueError):
            continue
        if not 1 <= line <= len(lines):
            continue
        found.append(Diagnostic(line=line, column=max(column, 1), end_line=max(end_line, line),
                                end_column=max(end_column, 1), code=f"type:{item.get('code') or 'ty'}",
                                message=str(item.get("message", "")).split("\n\n")[0][:1000], severity="warning"))
    return found
