"""``Toolset``: an ordered collection of tools with unique names, and its constructors.

The floor plan of tools, lowest first: the tool model (``Tool``, ``ToolPolicy``, ``@tool``) in
``_tool.py``; the tool sources in ``sources/`` (python modules, HTTP, OpenAPI, MCP), which build
``Tool``s from that model and never import this module; then this module, whose ``from_*``
constructors call the sources. So no two of them import each other. The MCP source is imported when
``from_mcp`` is called, not with this module: the MCP SDK takes a good part of a second to import,
and ``import codeact`` should not pay it. ``Tool``, ``ToolPolicy`` and ``tool`` are re-exported here.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from types import ModuleType
from typing import TYPE_CHECKING, Any, TypeAlias

from codeact.errors import ToolDefinitionError
from codeact.tool_stubs import ToolSpec, python_names, render_stubs
from codeact.tool_stubs.catalog import DEFAULT_PROMPT_BUDGET, ToolCatalog

from ._http_client import HttpClient
from ._tool import PermissionRule, Tool, ToolPolicy, labeled, tool
from .sources.http import HttpAuth, HttpEndpoint, http_tools
from .sources.python import module_tools

if TYPE_CHECKING:
    import httpx

    from .sources.mcp import MCPServerRef, MCPTools

__all__ = ["PermissionRule", "Tool", "ToolPolicy", "Toolset", "tool"]

ToolLike: TypeAlias = "Tool | ToolSpec | Callable[..., Any] | Mapping[str, Any] | Toolset"


class Toolset:
    """An ordered collection of tools with unique names.

    Accepts :class:`Tool` objects, plain callables (wrapped with :func:`tool`), :class:`ToolSpec`
    objects and OpenAI/Anthropic/MCP dicts (no implementation), and other toolsets.

    ``skipped`` lists what a source could not make a tool of, as ``(name, reason)``: the operations
    :meth:`from_openapi` left out (no JSON request body); a toolset made of toolsets lists theirs.
    """

    def __init__(self, tools: Iterable[ToolLike] = ()) -> None:
        self._tools: dict[str, Tool] = {}
        self._closers: list[Callable[[], None]] = []
        self.skipped: list[tuple[str, str]] = []
        for item in tools:
            if isinstance(item, Toolset):
                for t in item:
                    self.add(t)
                self._closers.extend(item._closers)
                self.skipped.extend(item.skipped)
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
        """The typed stub module for these tools (a runtime's sandbox runs it with its ``typing`` part
        compiled at first use: ``render_stubs(specs, defer_typing=True)``)."""
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
    def from_mcp(cls, source: MCPServerRef | Mapping[str, MCPServerRef] | Iterable[Any], **options: Any) -> Toolset:
        """An MCP server's tools, connected now: ``source`` is a stdio command (a list of strings or
        ``mcp.StdioServerParameters``) or a streamable-HTTP URL (``options``: see
        :func:`~codeact.runtime.sources.mcp.connect`; :meth:`close` ends the connection); or
        ``{group name: server}`` for several servers at once, each a group (see ``connect_all``).
        Or tools without implementation from MCP tool dicts / ``mcp.types.Tool`` objects.
        ``labels``: what every result of these tools carries (``runtime.flow``), unless a tool's
        own policy says."""
        from .sources.mcp import connect, connect_all, is_mcp_server  # the MCP SDK is slow to import: on use

        labels = options.pop("labels", None)
        if is_mcp_server(source):
            return cls._connected([connect(source, **options)], labels)
        if isinstance(source, Mapping):  # {group name: server}: several servers, each a group
            return cls._connected(connect_all(source, **options), labels)
        if options:
            raise TypeError(f"options {sorted(options)} apply to an MCP server, not to tool definitions")
        return cls(labeled((Tool(spec=ToolSpec.from_mcp(d)) for d in source), labels))

    @classmethod
    async def afrom_mcp(cls, source: MCPServerRef, **options: Any) -> Toolset:
        """:meth:`from_mcp` for a server, without blocking the caller's event loop."""
        from .sources.mcp import aconnect

        labels = options.pop("labels", None)
        return cls._connected([await aconnect(source, **options)], labels)

    @classmethod
    def _connected(cls, servers: Sequence[MCPTools], labels: Any = None) -> Toolset:
        """The servers' tools; :meth:`close` closes their connections (at once, if this raises)."""
        try:
            made = cls(labeled((t for server in servers for t in server.tools), labels))
        except BaseException:
            for server in servers:
                server.connection.close()
            raise
        for server in servers:
            made.on_close(server.connection.close)
        return made

    @classmethod
    def from_openapi(cls, spec: Mapping[str, Any] | str | os.PathLike[str], operations: Iterable[str] | None = None,
                     base_url: str | None = None, auth: HttpAuth | httpx.Auth | None = None, *,
                     client: HttpClient | None = None, timeout_s: float = 30.0,
                     labels: Iterable[str] | None = None) -> Toolset:
        """HTTP tools for an OpenAPI 3 document's operations (a dict, a file or a URL); ``operations``
        picks some (operationIds or ``"GET /path"``). Operations that cannot be called with JSON
        arguments (a non-JSON request body) are left out and listed in :attr:`skipped`. ``labels``:
        what every result carries (``runtime.flow``). See ``runtime.sources.openapi``."""
        from .sources.openapi import openapi_tools  # it imports httpx: loaded on use, not with codeact

        skipped: list[tuple[str, str]] = []
        made = cls(labeled(openapi_tools(spec, operations, base_url, auth, client=client, timeout_s=timeout_s,
                                         skipped=skipped), labels))
        made.skipped.extend(skipped)
        return made

    @classmethod
    def from_http(cls, endpoints: Iterable[HttpEndpoint], *, base_url: str | None = None,
                  auth: HttpAuth | httpx.Auth | None = None, client: HttpClient | None = None,
                  labels: Iterable[str] | None = None) -> Toolset:
        """HTTP tools from ``HttpEndpoint`` definitions sharing a base URL, a default ``HttpAuth`` and a
        client; ``labels``: what every result carries (``runtime.flow``). See ``runtime.sources.http``."""
        return cls(labeled(http_tools(endpoints, base_url=base_url, auth=auth, client=client), labels))

    @classmethod
    def from_module(cls, module: ModuleType | str | os.PathLike[str]) -> Toolset:
        """Every :class:`Tool` bound at the top level of a module (an object, a dotted name, or a
        ``.py`` path loaded with importlib), in definition order; one Tool bound twice counts once."""
        return cls(module_tools(module))


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
