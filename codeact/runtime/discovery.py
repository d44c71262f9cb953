"""Tool discovery for a runtime: the built-in ``search_tools`` / ``describe_tool`` and the two views
of the tools (what the model is shown, what the sandbox runs).

Design: the two discovery tools are *host built-ins*, like ``read_result``: registered on every
runtime's tool host, with stubs in every sandbox, answered on the host from a :class:`ToolCatalog`
(nothing of the catalog is copied into the sandbox), recorded like any call, no user policy
applied. A user tool of the same name takes precedence.

Views: when every stub fits ``prompt_budget_chars``, the model is shown them all (as before) and the
sandbox gets the same typed module. Otherwise the model is shown an index (header, how to search
and describe, groups with counts and examples) and the sandbox gets *lean* stubs: every tool is
still a function with its real parameters and defaults, callable by its python name, but without
annotations, docstrings or ``TypedDict`` classes, so thousands of tools compile cheaply in every
session; ``describe_tool`` renders a tool's typed stub on demand.
"""

from __future__ import annotations

from typing import Any

from ..errors import ToolError
from ..tool_stubs import ToolSpec, python_names, render_stubs
from ..tool_stubs.catalog import ToolCatalog
from ..tool_stubs.render import render_lean_stubs
from .toolhost import ToolHost
from .toolset import Tool

__all__ = ["DESCRIBE_TOOL", "SEARCH_TOOLS", "ToolViews", "discovery_tools"]

SEARCH_TOOLS = "search_tools"
DESCRIBE_TOOL = "describe_tool"
MAX_HITS = 50

_HIT = {
    "type": "object",
    "properties": {
        "name": {"type": "string", "description": "the tool's own name"},
        "python_name": {"type": "string", "description": "the function to call"},
        "signature": {"type": "string", "description": "the stub's def line"},
        "description": {"type": "string", "description": "the first paragraph of its description"},
        "group": {"type": "string"},
    },
    "required": ["name", "python_name", "signature", "description", "group"],
}
_SEARCH_SPEC = ToolSpec(
    name=SEARCH_TOOLS,
    description="Find tools for a task: the best matches for `query` (words of the task, names, parameters), "
                "best first.",
    input_schema={
        "type": "object",
        "properties": {
            "query": {"type": "string", "description": "What you want to do, in a few words."},
            "limit": {"type": "integer", "minimum": 1, "maximum": MAX_HITS, "default": 10,
                      "description": "Most hits to return."},
        },
        "required": ["query"],
        "additionalProperties": False,
    },
    output_schema={"type": "array", "items": {"$ref": "#/$defs/ToolHit"}, "$defs": {"ToolHit": _HIT}},
)
_DESCRIBE_SPEC = ToolSpec(
    name=DESCRIBE_TOOL,
    description="The full Python stub of one tool: its signature, docstring and the TypedDicts it uses.",
    input_schema={
        "type": "object",
        "properties": {"name": {"type": "string", "description": "The tool's name or python_name."}},
        "required": ["name"],
        "additionalProperties": False,
    },
    output_schema={"type": "string"},
)


def discovery_tools(catalog: ToolCatalog) -> list[Tool]:
    """The ``search_tools`` and ``describe_tool`` built-ins, answered from ``catalog``."""

    def search_tools(query: str, limit: int = 10) -> list[dict[str, Any]]:
        return catalog.search(query, min(limit, MAX_HITS))

    def describe_tool(name: str) -> str:
        text = catalog.describe(name)
        if text is None:
            near = ", ".join(h["python_name"] for h in catalog.search(name, 3)) or "none"
            raise ToolError("not_found", f"no tool named {name!r}; closest by search: {near}")
        return text

    return [Tool(spec=_SEARCH_SPEC, fn=search_tools), Tool(spec=_DESCRIBE_SPEC, fn=describe_tool)]


class ToolViews:
    """Registers the discovery built-ins on ``host`` and renders what the model and the sandbox see."""

    def __init__(self, host: ToolHost, prompt_budget_chars: int) -> None:
        if prompt_budget_chars < 1:
            raise ValueError(f"prompt_budget_chars must be positive, got {prompt_budget_chars!r}")
        toolset = host.toolset
        # python names are decided over everything the sandbox gets, built-ins included
        builtins = {**{n: t.spec for n, t in host.builtins.items()}, SEARCH_TOOLS: _SEARCH_SPEC,
                    DESCRIBE_TOOL: _DESCRIBE_SPEC}
        specs = [*toolset.specs, *(s for n, s in builtins.items() if n not in toolset)]
        #: Every spec the sandbox has a stub of, the built-ins included (what the check reads).
        self.sandbox_specs = specs
        self.catalog = ToolCatalog(toolset.specs, toolset.groups, names=python_names(specs))
        for made in discovery_tools(self.catalog):
            host.builtins.setdefault(made.name, made)
        self.budget = prompt_budget_chars
        discovery = {SEARCH_TOOLS, DESCRIBE_TOOL}
        shown = [s for s in specs if s.name in toolset or s.name not in discovery]
        full = self.catalog.fits(shown, prompt_budget_chars)
        self.large = full is None
        if self.large:
            self.catalog.prepare()  # the model will search: have the index ready by then
        self.prompt_view = full if full is not None else self.catalog.index_view(prompt_budget_chars)
        # the sandbox: every tool, typed when the model sees the stubs, lean when it looks them up
        self.sandbox_stubs = render_lean_stubs(specs) if self.large else render_stubs(specs, defer_typing=True)
