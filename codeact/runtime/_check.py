"""The session's side of the check: what names its namespace may hold, and the result of a cell
the check rejected (``Runtime(check="block")``)."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any, get_args

from ..results import Diagnostic, ExecutionResult
from ..tool_stubs.check import Checker, CheckMode, cell_names, has_errors
from ..tool_stubs.check.tier2 import TypeCheck

__all__ = ["SessionNames", "check_mode", "rejected"]

_MAX_NAME_CHARS = 200


def check_mode(value: Any) -> CheckMode:
    """``value`` if it is a check mode, else a ValueError naming the modes."""
    modes: tuple[CheckMode, ...] = get_args(CheckMode)
    for mode in modes:
        if value == mode and isinstance(value, str):
            return mode
    raise ValueError(f"check must be one of {', '.join(map(repr, modes))}, not {value!r}")


class SessionNames:
    """The names a session's namespace may hold besides what every kernel starts with: a superset
    (a name once bound stays in, even if a later cell deletes it), so a use is never wrongly
    unknown. ``known`` False: a cell may have bound names nobody reported (the check then claims
    no name is missing); ``dynamic``: a cell could have rebound anything, a tool stub included."""

    def __init__(self) -> None:
        self.names: set[str] = set()
        self.known = True
        self.dynamic = False
        #: The last cell checked and what it binds as read: the :meth:`learn` after its run does
        #: not parse it again.
        self._read: tuple[str, frozenset[str], bool] | None = None

    def learn(self, code: str, reported: Any) -> None:
        """After a run of ``code``: the names it binds as read, and those the kernel reported
        (``done``'s ``names``: a list of strings; anything else is "cannot tell")."""
        read = self._read
        if read is not None and read[0] == code:
            bound, dynamic = set(read[1]), read[2]
        else:
            bound, dynamic = cell_names(code)
        self.dynamic = self.dynamic or dynamic
        if type(reported) is list and all(type(n) is str and len(n) <= _MAX_NAME_CHARS for n in reported):
            bound.update(reported)
        elif dynamic:
            self.known = False
        self._add(bound)

    def read(self, code: str) -> None:
        """Read what ``code`` binds ahead of :meth:`learn` (while it runs), unless a check did."""
        if self._read is None or self._read[0] != code:
            bound, dynamic = cell_names(code)
            self._read = (code, frozenset(bound), dynamic)

    def learn_cells(self, codes: Iterable[str]) -> None:
        """Cells a restored session will replay before its next run: what they bind, as read."""
        for code in codes:
            bound, dynamic = cell_names(code)
            self._add(bound)
            if dynamic:  # its names are reported only when it replays, after the next check
                self.known, self.dynamic = False, True

    def bind(self, names: Iterable[str]) -> None:
        self._add(set(names))

    def _add(self, names: set[str]) -> None:
        # A new set rather than an update: a check on another thread may be reading the old one.
        if not names <= self.names:
            self.names = self.names | names

    def check(self, checker: Checker, code: str, types: TypeCheck | None = None) -> list[Diagnostic]:
        """Tier 1, then (``types``) tier 2's warnings on the lines tier 1 found nothing on."""
        defined = self.names if self.known else None
        found, facts = checker.read(code, defined, dynamic=self.dynamic)
        self._read = (code, frozenset(facts.bound), facts.dynamic) if facts is not None else (code, frozenset(), True)
        if types is not None and not any(d.code == "syntax" for d in found):
            seen = {d.line for d in found}
            found += [d for d in types.check(code, defined) if d.line not in seen]
            found.sort(key=lambda d: (d.line, d.column, d.code))
        return found


def rejected(diagnostics: list[Diagnostic]) -> ExecutionResult:
    """The result of a cell that did not run: the check found an error in it."""
    errors = sum(d.severity == "error" for d in diagnostics)
    assert has_errors(diagnostics)
    return ExecutionResult(ok=False, termination="rejected", diagnostics=diagnostics,
                           reason=f"the check found {errors} error{'s' if errors != 1 else ''}; the code did not run")
