"""Check a code action before it runs, against the tools' stubs and the names the session holds.

Tier 1 (this package, always on): an exact reading of the cell's syntax tree. It finds what is
certain: a call of a tool stub with an unknown keyword, a missing required argument, too many
positional arguments or a literal the tool's input schema refuses (the host validates the same
schema), a ``aio.<name>`` that is no tool, and a name that neither the cell, an earlier cell (the
kernel reports what each cell defined), the sandbox's helpers nor the builtins define, with a
"did you mean" for a misspelt tool. Those are errors; the same findings where the check cannot be
sure (a cell that can make names it cannot see: ``exec``, ``globals()``, star imports; a name read
in a function body that a later cell may define; a read a handler may catch) are warnings.

Tier 2 (``codeact.tool_stubs.check.tier2``, optional, the ``codeact[check]`` extra) runs a real
type checker over the cell and the stubs; its findings are warnings only.
"""

from __future__ import annotations

import ast
import builtins
import difflib
from collections.abc import Collection, Iterable, Mapping, Sequence
from typing import Literal

from codeact.results import Diagnostic
from codeact.tool_stubs.check._calls import ToolShape, call_problems
from codeact.tool_stubs.check._names import NameFacts, name_facts
from codeact.tool_stubs.spec import ToolSpec, python_names

__all__ = ["SANDBOX_NAMES", "CheckMode", "Checker", "cell_names", "has_errors"]

CheckMode = Literal["off", "warn", "block"]

#: What the kernel puts in every namespace besides the tool stubs (``kernel/kernel.py``).
SANDBOX_NAMES = frozenset({"ToolError", "parallel", "final_answer", "aio", "display", "__name__", "__builtins__",
                           "__codeact_call__", "__codeact_args__", "__codeact_mark_defaults__", "__codeact_locals__"})
_BUILTINS = frozenset(dir(builtins))


def has_errors(diagnostics: Iterable[Diagnostic]) -> bool:
    return any(d.severity == "error" for d in diagnostics)


def cell_names(code: str) -> tuple[set[str], bool]:
    """The names ``code`` may bind (every scope, a superset) and whether it is dynamic (can bind
    names no reading sees); ``(set(), True)`` when it does not parse."""
    try:
        facts = name_facts(ast.parse(code))
    except (SyntaxError, ValueError, RecursionError, MemoryError):
        return set(), True
    return facts.bound, facts.dynamic


class Checker:
    """Tier 1 for one set of tool specs (the sandbox's: the user's tools and the built-ins);
    each tool's signature and schema are read the first time a cell names it."""

    def __init__(self, specs: Sequence[ToolSpec], names: Mapping[str, str] | None = None) -> None:
        names = dict(names) if names is not None else python_names(specs)
        self._specs = {names[s.name]: s for s in specs}
        self._shapes: dict[str, ToolShape] = {}
        self._tool_list = sorted(self._specs)

    @property
    def tools(self) -> Collection[str]:
        """The stubs' python names."""
        return self._specs.keys()

    def _shape(self, stub: str) -> ToolShape:
        shape = self._shapes.get(stub)
        if shape is None:
            shape = self._shapes[stub] = ToolShape(self._specs[stub], stub)
        return shape

    def check(self, code: str, defined: Collection[str] | None = (), *, dynamic: bool = False) -> list[Diagnostic]:
        """The diagnostics of ``code``, in source order. ``defined``: the names earlier cells left
        in the namespace (None: unknown, so no name is certainly missing); ``dynamic``: an earlier
        cell could have rebound anything (no tool call is then certainly wrong)."""
        return self.read(code, defined, dynamic=dynamic)[0]

    def read(self, code: str, defined: Collection[str] | None = (), *,
             dynamic: bool = False) -> tuple[list[Diagnostic], NameFacts | None]:
        """:meth:`check`'s diagnostics, and the facts :func:`cell_names` reads of ``code`` (None
        when it does not parse), from one parse."""
        try:
            tree = ast.parse(code)
        except SyntaxError as exc:
            return [_syntax(exc, code)], None
        except (ValueError, RecursionError, MemoryError) as exc:  # a NUL byte, a too deep expression
            return [Diagnostic(line=1, column=1, end_line=1, end_column=1, code="unparsable",
                               message=f"the check could not read the code: {exc}", severity="warning")], None
        facts = name_facts(tree)
        known = defined if isinstance(defined, (set, frozenset)) else frozenset(defined or ())
        lines = code.splitlines()
        found = [*self._call_findings(facts, known, dynamic or facts.dynamic, lines),
                 *self._name_findings(facts, known, defined is None, lines)]
        return sorted(found, key=lambda d: (d.line, d.column, d.code)), facts

    def _call_findings(self, facts: NameFacts, known: Collection[str], dynamic: bool,
                       lines: list[str]) -> Iterable[Diagnostic]:
        bound = facts.bound
        severity: Literal["error", "warning"] = "warning" if dynamic else "error"
        aio_ok = "aio" not in bound and "aio" not in known
        for attr in facts.aio if aio_ok else ():
            if attr.attr not in self._specs and not attr.attr.startswith("__"):
                close = difflib.get_close_matches(attr.attr, self._tool_list, n=1, cutoff=0.6)
                hint = f"; did you mean aio.{close[0]}?" if close else ""
                yield _at(attr, lines, "unknown-tool", f"aio has no tool {attr.attr!r}{hint}", severity)
        for node in facts.calls:
            stub = None
            func = node.func
            if isinstance(func, ast.Name) and func.id in self._specs and func.id not in bound and func.id not in known:
                stub = func.id
            elif (isinstance(func, ast.Attribute) and aio_ok and _is_name(func.value, "aio")
                  and func.attr in self._specs):
                stub = func.attr
            if stub is None:
                continue
            for problem in call_problems(node, self._shape(stub)):
                yield _at(problem.node, lines, problem.code, problem.message, severity)

    def _name_findings(self, facts: NameFacts, known: Collection[str], unknown_namespace: bool,
                       lines: list[str]) -> Iterable[Diagnostic]:
        uncertain = unknown_namespace or facts.dynamic
        specs, bound = self._specs, facts.bound
        for load in facts.loads:
            name = load.name
            if (name in bound or name in _BUILTINS or name in specs or name in known or name in SANDBOX_NAMES
                    or name.startswith("__")):
                continue
            close = difflib.get_close_matches(name, self._tool_list, n=1, cutoff=0.75)
            if close:
                code, message = "unknown-tool", f"{name!r} is not defined; did you mean the tool {close[0]!r}?"
            else:
                others = difflib.get_close_matches(name, sorted({*bound, *known, *SANDBOX_NAMES}), n=1, cutoff=0.8)
                hint = f"; did you mean {others[0]!r}?" if others else ""
                code, message = "undefined-name", f"{name!r} is not defined{hint}"
            if not load.certain:
                message += " (if nothing defines it before this line runs)"
            severity: Literal["error", "warning"] = "error" if load.certain and not uncertain else "warning"
            yield _at(load.node, lines, code, message, severity)


def _is_name(node: ast.AST, name: str) -> bool:
    return isinstance(node, ast.Name) and node.id == name


def _column(lines: list[str], line: int, offset: int) -> int:
    """A 1-based character column from the AST's UTF-8 byte offset."""
    if 1 <= line <= len(lines):
        text = lines[line - 1]
        if not text.isascii():
            return len(text.encode("utf-8")[:offset].decode("utf-8", "replace")) + 1
    return offset + 1


def _at(node: ast.AST, lines: list[str], code: str, message: str,
        severity: Literal["error", "warning"]) -> Diagnostic:
    line = getattr(node, "lineno", 1)
    end_line = getattr(node, "end_lineno", None) or line
    start = _column(lines, line, getattr(node, "col_offset", 0))
    end = _column(lines, end_line, getattr(node, "end_col_offset", None) or 0)
    return Diagnostic(line=line, column=start, end_line=end_line, end_column=max(end, 1), code=code,
                      message=message, severity=severity)


def _syntax(exc: SyntaxError, code: str) -> Diagnostic:
    """A warning: the sandbox's Python may be newer than the host's and take syntax this one refuses
    (a cell that does not compile there fails before anything runs, so blocking it saves nothing)."""
    line = exc.lineno or 1
    column = exc.offset or 1
    return Diagnostic(line=line, column=column, end_line=exc.end_lineno or line,
                      end_column=exc.end_offset or column, code="syntax", message=f"{type(exc).__name__}: {exc.msg}",
                      severity="warning")
