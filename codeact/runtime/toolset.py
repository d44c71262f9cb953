"""``Toolset``: an ordered collection of tools with unique names, and its constructors.

The tool model (``Tool``, ``ToolPolicy``, ``@tool``) lives in ``_tool.py`` and is re-exported here.
"""

from __future__ import annotations

import importlib
import importlib.util
import os
import sys
from collections.abc import Callable, Iterable, Iterator, Mapping
from pathlib import Path
from types import ModuleType
from typing import Any, TypeAlias

from codeact.errors import ToolDefinitionError
from codeact.tool_stubs import ToolSpec, python_names, render_stubs
from codeact.tool_stubs.catalog import DEFAULT_PROMPT_BUDGET, ToolCatalog

from ._tool import PermissionRule, Tool, ToolPolicy, tool

__all__ = ["PermissionRule", "Tool", "ToolPolicy", "Toolset", "tool"]

ToolLike: TypeAlias = "Tool | ToolSpec | Callable[..., Any] | Mapping[str, Any] | Toolset"


class Toolset:
    """An ordered collection of tools with unique names.

    Accepts :class:`Tool` objects, plain callables (wrapped with :func:`tool`), :class:`ToolSpec`
    objects and OpenAI/Anthropic/MCP dicts (no implementation), and other toolsets.
    """

    def __init__(self, tools: Iterable[ToolLike] = ()) -> None:
        self._tools: dict[str, Tool] = {}
        self._closers: list[Callable[[], None]] = []
        for item in tools:
            if isinstance(item, Toolset):
                for t in item:
                    self.add(t)
                self._closers.extend(item._closers)
            else:
                self.add(item)

    def on_close(self, closer: Callable[[], None]) -> None:
        """Register a cleanup (e.g. an MCP connection) run by :meth:`close`."""
        self._closers.append(closer)

    def close(self) -> None:
        """Release what the tools hold (connections); the runtime calls this when it closes."""
        closers, self._closers = self._closers, []
        for closer in reversed(closers):
            closer()

    def add(self, item: Tool | ToolSpec | Callable[..., Any] | Mapping[str, Any]) -> Tool:
        """Add one tool (usable as a decorator); returns the Tool. A duplicate name raises."""
        new = _as_tool(item)
        if new.name in self._tools:
            raise ToolDefinitionError(f"duplicate tool name {new.name!r}: tool names in a toolset must be unique")
        self._tools[new.name] = new
        return new

    def get(self, name: str) -> Tool | None:
        return self._tools.get(name)

    def __getitem__(self, name: str) -> Tool:
        return self._tools[name]

    def __iter__(self) -> Iterator[Tool]:
        return iter(list(self._tools.values()))

    def __len__(self) -> int:
        return len(self._tools)

    def __contains__(self, item: object) -> bool:
        if isinstance(item, Tool):
            return self._tools.get(item.name) is item
        return item in self._tools

    def __repr__(self) -> str:
        return f"Toolset({self.names!r})"

    @property
    def names(self) -> list[str]:
        return list(self._tools)

    @property
    def specs(self) -> list[ToolSpec]:
        return [t.spec for t in self._tools.values()]

    @property
    def groups(self) -> dict[str, str | None]:
        """Tool name → its group (None: ungrouped)."""
        return {name: t.group for name, t in self._tools.items()}

    @property
    def python_names(self) -> dict[str, str]:
        """Tool name → the identifier its stub has (collisions resolved as in the stubs)."""
        return python_names(self.specs)

    def merge(self, other: Toolset | Iterable[ToolLike]) -> Toolset:
        """A new toolset with this one's tools, then ``other``'s; a shared name raises."""
        return Toolset([self, other if isinstance(other, Toolset) else Toolset(other)])

    def stubs(self) -> str:
        """The typed stub module for these tools (what a sandbox executes)."""
        return render_stubs(self.specs)

    def prompt_view(self, budget: int = DEFAULT_PROMPT_BUDGET) -> str:
        """What a model is shown of these tools: every stub within ``budget`` characters, else an
        index of groups and how to search (``Runtime.prompt_view`` adds the runtime's built-ins)."""
        return ToolCatalog(self.specs, self.groups).prompt_view(self.specs, budget)

    def to_openai(self) -> list[dict[str, Any]]:
        return [s.to_openai() for s in self.specs]

    def to_anthropic(self) -> list[dict[str, Any]]:
        return [s.to_anthropic() for s in self.specs]

    def to_mcp(self) -> list[dict[str, Any]]:
        return [s.to_mcp() for s in self.specs]

    @classmethod
    def from_openai(cls, definitions: Iterable[Mapping[str, Any]]) -> Toolset:
        return cls(ToolSpec.from_openai(d) for d in definitions)

    @classmethod
    def from_anthropic(cls, definitions: Iterable[Mapping[str, Any]]) -> Toolset:
        return cls(ToolSpec.from_anthropic(d) for d in definitions)

    @classmethod
    def from_mcp(cls, source: Any, **options: Any) -> Toolset:
        """An MCP server's tools, connected now: ``source`` is a stdio command (a list of strings or
        ``mcp.StdioServerParameters``) or a streamable-HTTP URL (``options``: see
        :func:`~codeact.runtime.mcp_tools.mcp_toolset`; :meth:`close` ends the connection); or
        ``{group name: server}`` for several servers at once, each a group (see ``mcp_toolsets``).
        Or tools without implementation from MCP tool dicts / ``mcp.types.Tool`` objects."""
        from .mcp_tools import is_mcp_server, mcp_toolset, mcp_toolsets

        if is_mcp_server(source):
            return mcp_toolset(source, **options)
        if isinstance(source, Mapping):  # {group name: server}: several servers, each a group
            return mcp_toolsets(source, **options)
        if options:
            raise TypeError(f"options {sorted(options)} apply to an MCP server, not to tool definitions")
        return cls(ToolSpec.from_mcp(d) for d in source)

    @classmethod
    async def afrom_mcp(cls, source: Any, **options: Any) -> Toolset:
        """:meth:`from_mcp` for a server, without blocking the caller's event loop."""
        from .mcp_tools import amcp_toolset

        return await amcp_toolset(source, **options)

    @classmethod
    def from_openapi(cls, spec: Mapping[str, Any] | str | os.PathLike[str], operations: Iterable[str] | None = None,
                     base_url: str | None = None, auth: Any = None, **options: Any) -> Toolset:
        """HTTP tools for an OpenAPI 3 document's operations (a dict, a file or a URL); ``operations``
        picks some (operationIds or ``"GET /path"``); ``auth``: an ``HttpAuth``. See ``runtime.openapi``."""
        from .openapi import openapi_tools

        return cls(openapi_tools(spec, operations, base_url, auth, **options))

    @classmethod
    def from_http(cls, endpoints: Iterable[Any], *, base_url: str | None = None, auth: Any = None,
                  client: Any = None) -> Toolset:
        """HTTP tools from ``HttpEndpoint`` definitions sharing a base URL, a default ``HttpAuth`` and a
        client. See ``runtime.http_tools``."""
        from .http_tools import http_tools

        return cls(http_tools(endpoints, base_url=base_url, auth=auth, client=client))

    @classmethod
    def from_module(cls, module: ModuleType | str | os.PathLike[str]) -> Toolset:
        """Every :class:`Tool` bound at the top level of a module (an object, a dotted name, or a
        ``.py`` path loaded with importlib), in definition order; one Tool bound twice counts once."""
        if not isinstance(module, ModuleType):
            module = _load_module(module)
        found: dict[int, Tool] = {}
        for value in vars(module).values():
            if isinstance(value, Tool):
                found.setdefault(id(value), value)
        return cls(found.values())


def _as_tool(item: Any) -> Tool:
    if isinstance(item, Tool):
        return item
    if isinstance(item, ToolSpec):
        return Tool(spec=item)
    if isinstance(item, Mapping) or (hasattr(item, "name") and hasattr(item, "inputSchema")):
        return Tool(spec=ToolSpec.from_dict(item))
    if callable(item):
        made: Tool = tool(item)
        return made
    raise ToolDefinitionError(
        f"cannot make a tool from {type(item).__name__}: pass a Tool, a function, a ToolSpec or a tool dict"
    )


def _load_module(source: str | os.PathLike[str]) -> ModuleType:
    path = Path(source)
    if path.suffix != ".py" and not path.exists() and isinstance(source, str):
        try:
            return importlib.import_module(source)
        except ImportError as exc:
            raise ToolDefinitionError(f"cannot import tools module {source!r}: {exc}") from exc
    if not path.is_file():
        raise ToolDefinitionError(f"no such tools file: {path}")
    resolved = path.resolve()
    module_name = f"_codeact_tools_{resolved.stem}_{abs(hash(str(resolved))):x}"
    spec = importlib.util.spec_from_file_location(module_name, resolved)
    if spec is None or spec.loader is None:
        raise ToolDefinitionError(f"cannot load tools file {path}: not a Python module")
    module = importlib.util.module_from_spec(spec)
    sys.modules[module_name] = module
    sys.path.insert(0, str(resolved.parent))  # let the file import its neighbours, as `python file.py` would
    try:
        spec.loader.exec_module(module)
    except Exception as exc:
        sys.modules.pop(module_name, None)
        raise ToolDefinitionError(f"cannot load tools file {path}: {type(exc).__name__}: {exc}") from exc
    finally:
        sys.path.remove(str(resolved.parent))
    return module
