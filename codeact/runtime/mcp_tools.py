"""Deprecated path: moved to :mod:`codeact.runtime.sources.mcp`; this path re-exports it and keeps the
functions that returned a ``Toolset`` (now ``Toolset.from_mcp`` / ``afrom_mcp``).

Importing it still works and warns once (``DeprecationWarning`` naming the new path).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from codeact._deprecated import moved_module

from .sources.mcp import MCPConnection, MCPServerRef, MCPTools, aconnect, connect, connect_all, is_mcp_server
from .toolset import Toolset

__all__ = ["MCPConnection", "MCPServerRef", "MCPTools", "amcp_toolset", "is_mcp_server", "mcp_toolset",
           "mcp_toolsets"]

moved_module("codeact.runtime.mcp_tools", "codeact.runtime.sources.mcp (a Toolset: Toolset.from_mcp)")


def mcp_toolset(server: MCPServerRef, **options: Any) -> Toolset:
    """``Toolset.from_mcp(server, ...)`` for one server (see :func:`~codeact.runtime.sources.mcp.connect`)."""
    return Toolset._connected([connect(server, **options)])


async def amcp_toolset(server: MCPServerRef, **options: Any) -> Toolset:
    """``Toolset.afrom_mcp(server, ...)``."""
    return Toolset._connected([await aconnect(server, **options)])


def mcp_toolsets(servers: Mapping[str, MCPServerRef], **options: Any) -> Toolset:
    """``Toolset.from_mcp({group name: server, ...})`` (see :func:`~codeact.runtime.sources.mcp.connect_all`)."""
    return Toolset._connected(connect_all(servers, **options))
