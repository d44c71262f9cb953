"""``codeact serve-mcp``: codeact's ``execute_python`` as an MCP server (stdio or streamable HTTP)."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from ..sandbox import SandboxConfig
from ._exec import load_toolset

__all__ = ["register"]


def serve_mcp_command(
    tools: Annotated[list[Path] | None, typer.Option("--tools", help="Python file with @tool functions")] = None,
    tool_spec: Annotated[list[Path] | None, typer.Option("--tool-spec", help="JSON list of tool definitions")] = None,
    http: Annotated[bool, typer.Option("--http", help="streamable HTTP on 127.0.0.1 instead of stdio")] = False,
    port: Annotated[int, typer.Option(help="HTTP port")] = 8000,
    backend: Annotated[str, typer.Option(help="docker or local")] = "docker",
    timeout: Annotated[float, typer.Option(help="seconds per code run")] = 30.0,
    memory: Annotated[int, typer.Option(help="memory limit in MB")] = 512,
) -> None:
    """Serve execute_python (the tools available inside) and reset_session over MCP."""
    from ..agent.mcp_server import serve_mcp
    from ..runtime.session import Runtime

    if backend not in ("docker", "local"):
        raise typer.BadParameter("--backend must be docker or local")
    toolset = load_toolset(tools or [], tool_spec or [])
    config = SandboxConfig(backend=backend, timeout_s=timeout, memory_mb=memory)  # type: ignore[arg-type]
    with Runtime(toolset, config) as runtime:
        serve_mcp(runtime, transport="http" if http else "stdio", host="127.0.0.1", port=port)


def register(app: typer.Typer) -> None:
    app.command("serve-mcp")(serve_mcp_command)
