"""A tool catalog: what the model can look up when a toolset is too large to show whole.

* :meth:`ToolCatalog.search` ranks tools for a task (see :mod:`codeact.tool_stubs.search`); each hit
  has ``name``, ``python_name``, ``signature`` (the stub's ``def`` line) and ``description`` (its
  first paragraph);
* :meth:`ToolCatalog.describe` is one tool's full typed stub: the ``def``, its docstring and the
  ``TypedDict`` classes it uses, rendered on demand and kept;
* :meth:`ToolCatalog.prompt_view` is the model's view within a character budget: every stub when
  they fit; else the header, how to search and describe, and an index of groups with counts and
  example names.
"""

from __future__ import annotations

import re
import threading
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from codeact.tool_stubs.render import HEADER, render_module
from codeact.tool_stubs.search import SearchIndex
from codeact.tool_stubs.spec import ToolSpec, python_names

__all__ = ["DEFAULT_PROMPT_BUDGET", "SEARCH_HELP", "ToolCatalog"]

DEFAULT_PROMPT_BUDGET = 8000
#: describe_tool's answer is cut here (a stub with a huge response type is still readable).
MAX_DESCRIBE_CHARS = 24_000
_MAX_SUMMARY = 300
_UNGROUPED = "other"

SEARCH_HELP = """\
# {count} tools are available: too many to show here, but every one is already defined as a
# function in this sandbox; call it by its python_name. Find and read them with two built-ins:
#   search_tools(query: str, limit: int = 10) -> list[dict]
#       best matches first; each hit: {{"name", "python_name", "signature", "description"}}
#   describe_tool(name: str) -> str
#       the full stub of a tool (by name or python_name): signature, docstring, TypedDicts
# For example:
#   for hit in search_tools("create a comment on an issue", limit=5):
#       print(hit["signature"], "#", hit["description"])
#   print(describe_tool(hit["python_name"]))"""


class ToolCatalog:
    """Search, describe and the budgeted prompt view over a fixed list of specs."""

    def __init__(self, specs: Sequence[ToolSpec], groups: Mapping[str, str | None] | None = None,
                 names: Mapping[str, str] | None = None) -> None:
        self.specs = {s.name: s for s in specs}
        self.names = dict(names) if names is not None else python_names(specs)
        self.by_python_name = {py: name for name, py in self.names.items()}
        self.groups = {s.name: (groups or {}).get(s.name) or _UNGROUPED for s in specs}
        self._index: SearchIndex | None = None
        self._index_lock = threading.Lock()
        self._described: dict[str, str] = {}

    def index(self) -> SearchIndex:
        """The search index, built at the first use (or by :meth:`prepare`)."""
        with self._index_lock:
            if self._index is None:
                self._index = SearchIndex(self.specs.values(), self.groups, self.names)
            return self._index

    def prepare(self) -> None:
        """Build the search index on a background thread, so the first search does not wait for it."""
        threading.Thread(target=self.index, name="codeact-tool-index", daemon=True).start()

    # -- lookups -------------------------------------------------------------------------------
    def resolve(self, name_or_python_name: str) -> ToolSpec | None:
        """The spec named by its tool name or its python name."""
        spec = self.specs.get(name_or_python_name)
        if spec is None and name_or_python_name in self.by_python_name:
            spec = self.specs[self.by_python_name[name_or_python_name]]
        return spec

    def describe(self, name_or_python_name: str) -> str | None:
        """The full typed stub of one tool (classes it uses first), or None if there is no such tool."""
        spec = self.resolve(name_or_python_name)
        if spec is None:
            return None
        if spec.name not in self._described:
            text = render_module([spec], self.names, prompt=True, header="").strip("\n") + "\n"
            if len(text) > MAX_DESCRIBE_CHARS:
                cut = len(text) - MAX_DESCRIBE_CHARS
                text = text[:MAX_DESCRIBE_CHARS] + f"\n# … [{cut} more characters of type definitions]\n"
            self._described[spec.name] = text
        return self._described[spec.name]

    def signature(self, name: str) -> str:
        """The stub's ``def`` line, on one line."""
        text = self.describe(name) or ""
        match = re.search(r"^def .*?\) -> .*?:$", text, re.MULTILINE | re.DOTALL)
        if match is None:
            return ""
        flat = re.sub(r"\(\n\s+", "(", match.group(0))
        flat = re.sub(r",\n\s+", ", ", flat)
        return re.sub(r",?\n\) ->", ") ->", flat)

    def search(self, query: str, limit: int = 10) -> list[dict[str, Any]]:
        """The best tools for ``query`` (see the module docstring for each hit's keys)."""
        hits = []
        for name, _score in self.index().search(query, limit):
            spec = self.specs[name]
            hits.append({"name": name, "python_name": self.names[name], "signature": self.signature(name),
                         "description": _first_paragraph(spec.description), "group": self.groups[name]})
        return hits

    # -- the prompt view -------------------------------------------------------------------------
    def full_view(self, shown: Iterable[ToolSpec]) -> str:
        """Every stub in ``shown``, as the model reads them."""
        return render_module(list(shown), self.names, prompt=True)

    def fits(self, shown: Sequence[ToolSpec], budget: int) -> str | None:
        """The full view of ``shown`` if it is within ``budget`` characters, else None. Renders in
        growing batches, so a toolset far over the budget costs about one budget's worth of work."""
        size = 8
        while True:
            view = self.full_view(shown[:size])
            if len(view) > budget:
                return None
            if size >= len(shown):
                return view
            size *= 4

    def index_view(self, budget: int, extra_help: str = "") -> str:
        """The header, how to search and describe, and the groups with counts and example names,
        fitted to ``budget`` by showing fewer examples (and, at worst, fewer groups)."""
        members: dict[str, list[str]] = {}
        for name, group in self.groups.items():
            members.setdefault(group, []).append(self.names[name])
        # the largest groups first; the shortest names make the best examples (repos_get, not
        # repos_get_actions_cache_retention_limit_for_enterprise)
        ordered = [(group, sorted(names, key=len)) for group, names in
                   sorted(members.items(), key=lambda item: (-len(item[1]), item[0]))]
        top = "\n\n".join(t for t in (HEADER, SEARCH_HELP.format(count=len(self.specs)), extra_help) if t)
        for examples in (4, 3, 2, 1, 0):
            lines = [f"#   {group} ({len(names)}): " + ", ".join(names[:examples]) + (", …" if examples else "")
                     for group, names in ordered]
            lines = [line.removesuffix(": , …").removesuffix(": ") for line in lines]
            view = _index_text(top, lines, len(ordered))
            if len(view) <= budget:
                return view
        kept: list[str] = []
        for line in lines:
            if len(_index_text(top, [*kept, line], len(ordered))) > budget:
                break
            kept.append(line)
        return _index_text(top, kept, len(ordered))

    def prompt_view(self, shown: Sequence[ToolSpec], budget: int = DEFAULT_PROMPT_BUDGET,
                    extra_help: str = "") -> str:
        """Every stub of ``shown`` when they fit ``budget``, else :meth:`index_view`."""
        view = self.fits(shown, budget)
        return view if view is not None else self.index_view(budget, extra_help)


def _index_text(top: str, lines: list[str], groups: int) -> str:
    more = groups - len(lines)
    tail = [f"#   … and {more} more groups: search_tools finds their tools"] if more else []
    return "\n".join([top, "", "# Tool groups (tools in it): examples", *lines, *tail]) + "\n"


def _first_paragraph(text: str) -> str:
    paragraph = text.strip().split("\n\n", 1)[0]
    flat = " ".join(paragraph.split())
    return flat if len(flat) <= _MAX_SUMMARY else flat[: _MAX_SUMMARY - 1].rstrip() + "…"
