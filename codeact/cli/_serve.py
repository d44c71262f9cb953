"""``codeact serve-mcp``: codeact's ``execute_python`` as an MCP server (stdio or streamable HTTP)."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from ..errors import SandboxUnavailable
from ._exec import load_toolset
from ._options import Image, Pip, check_sandbox, machine_stdout, sandbox_config, say_unavailable

__all__ = ["register"]


def serve_mcp_command(
    tools: Annotated[list[Path] | None, typer.Option("--tools", help="Python file with @tool functions")] = None,
    tool_spec: Annotated[list[Path] | None, typer.Option("--tool-spec", help="JSON list of tool definitions")] = None,
    http: Annotated[bool, typer.Option("--http", help="streamable HTTP on 127.0.0.1 instead of stdio")] = False,
    port: Annotated[int, typer.Option(help="HTTP port")] = 8000,
    backend: Annotated[str, typer.Option(help="docker or local")] = "docker",
    timeout: Annotated[float, typer.Option(help="seconds per code run")] = 30.0,
    memory: Annotated[int, typer.Option(help="memory limit in MB")] = 512,
    image: Image = None,
    pip: Pip = None,
) -> None:
    """Serve execute_python (the tools available inside) and reset_session over MCP.

    Over stdio, stdout carries only MCP frames: what the tools print on the host (when their
    file is loaded, or in a call) goes to stderr."""
    from ..agent.mcp_server import serve_mcp
    from ..runtime.session import Runtime

    config = sandbox_config(backend, timeout, memory, image=image, pip=pip)
    with machine_stdout():  # a tools file printing at import time; the stdio transport guards calls
        toolset = load_toolset(tools or [], tool_spec or [])
        try:
            check_sandbox(config)
        except SandboxUnavailable as exc:
            say_unavailable(exc)
            raise typer.Exit(3) from None
    with Runtime(toolset, config) as runtime:
        serve_mcp(runtime, transport="http" if http else "stdio", host="127.0.0.1", port=port)


def register(app: typer.Typer) -> None:
    app.command("serve-mcp")(serve_mcp_command)
