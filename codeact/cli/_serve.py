"""``codeact serve-mcp``: codeact's ``execute_python`` as an MCP server (stdio or streamable HTTP)."""

from __future__ import annotations

import os
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
    unix: Annotated[Path | None, typer.Option(
        "--unix", help="HTTP on this Unix socket (mode 0600) instead of a port")] = None,
    token: Annotated[str | None, typer.Option(
        "--token", help="the bearer token clients must send (default: $CODEACT_MCP_TOKEN, else a new one, "
                        "printed once to stderr and written to a 0600 file)")] = None,
    no_auth: Annotated[bool, typer.Option("--no-auth", help="accept requests without a token (any local "
                                                             "process or user can then run code)")] = False,
    # defaults: the agent's DEFAULT_MAX_SESSIONS, DEFAULT_SESSION_IDLE_S (not imported: the SDK loads slowly)
    max_sessions: Annotated[int, typer.Option(help="live MCP sessions at most (HTTP; more get 503)")] = 8,
    session_idle: Annotated[float, typer.Option(help="seconds an MCP session may go without a request before "
                                                     "it ends and its Python session closes (HTTP)")] = 1800.0,
    backend: Annotated[str, typer.Option(help="docker or local")] = "docker",
    timeout: Annotated[float, typer.Option(help="seconds per code run")] = 30.0,
    memory: Annotated[int, typer.Option(help="memory limit in MB")] = 512,
    image: Image = None,
    pip: Pip = None,
    cluster: Annotated[str | None, typer.Option(
        "--cluster", help="run each MCP session on this Ray cluster (ADDRESS as for ray.init; 'local' starts "
                          "a loopback one): see codeact.cluster")] = None,
) -> None:
    """Serve execute_python (the tools available inside) and reset_session over MCP.

    Over stdio, stdout carries only MCP frames: what the tools print on the host (when their
    file is loaded, or in a call) goes to stderr."""
    from ..agent.mcp_server import serve_mcp
    from ..runtime.session import Runtime

    over_http = http or unix is not None
    if over_http:
        _check_http_flags(token, no_auth, max_sessions, session_idle)
    if unix is not None:
        _check_socket_path(unix)
    config = sandbox_config(backend, timeout, memory, image=image, pip=pip)
    with machine_stdout():  # a tools file printing at import time; the stdio transport guards calls
        toolset = load_toolset(tools or [], tool_spec or [])
        try:
            check_sandbox(config)
        except SandboxUnavailable as exc:
            say_unavailable(exc)
            raise typer.Exit(3) from None
    on = None
    if cluster is not None:
        from ..cluster import RayCluster

        on = RayCluster(None if cluster == "local" else cluster)
    with Runtime(toolset, config, cluster=on) as runtime:
        if not over_http:
            serve_mcp(runtime)
            return
        serve_mcp(runtime, transport="http", host="127.0.0.1", port=port, unix=unix, token=token,
                  auth=not no_auth, max_sessions=max_sessions, session_idle_s=session_idle)


def _check_http_flags(token: str | None, no_auth: bool, max_sessions: int, session_idle: float) -> None:
    """One-line usage errors for the HTTP flags (a bad token from the environment included)."""
    from ..agent.mcp_server import TOKEN_ENV, token_problem

    if no_auth and token is not None:
        raise typer.BadParameter("--token and --no-auth contradict each other")
    given = ("--token", token) if token is not None else (f"${TOKEN_ENV}", os.environ.get(TOKEN_ENV) or None)
    problem = None if no_auth or given[1] is None else token_problem(given[1])
    if problem:
        raise typer.BadParameter(f"{given[0]}: {problem}")
    if max_sessions < 1:
        raise typer.BadParameter(f"--max-sessions must be at least 1 (got {max_sessions})")
    if not 0 < session_idle < float("inf"):
        raise typer.BadParameter(f"--session-idle must be a positive number of seconds (got {session_idle:g})")


def _check_socket_path(path: Path) -> None:
    """A path a Unix socket can be made at: short enough, in a directory, not another file."""
    if len(os.fsencode(path)) >= 108:  # sun_path holds 108 bytes, the final NUL included
        raise typer.BadParameter(f"--unix: {path} is too long for a socket path (at most 107 bytes)")
    if not path.parent.is_dir():
        raise typer.BadParameter(f"--unix: no such directory: {path.parent}")
    if path.is_symlink() or (path.exists() and not path.is_socket()):
        raise typer.BadParameter(f"--unix: {path} exists and is not a socket")


def register(app: typer.Typer) -> None:
    app.command("serve-mcp")(serve_mcp_command)
