"""A small MCP server written with the official SDK, for the MCP tests.

Run as ``python mcp_server.py`` (stdio) or ``python mcp_server.py --http PORT`` (streamable HTTP
on 127.0.0.1). ``COUNTER_FILE`` in the environment names a file that gets one line per call of
``add``, so a test can count executions from outside the server process.
"""

from __future__ import annotations

import argparse
import asyncio
import os
from typing import Any

try:  # mcp 2.x renamed FastMCP to MCPServer
    from mcp.server.mcpserver import MCPServer as Server
    from mcp.server.mcpserver.exceptions import ToolError
except ImportError:  # pragma: no cover - mcp 1.x
    from mcp.server.fastmcp import FastMCP as Server  # type: ignore[no-redef]
    from mcp.server.fastmcp.exceptions import ToolError  # type: ignore[no-redef]

server = Server("codeact-test")


def _count(name: str) -> None:
    path = os.environ.get("COUNTER_FILE")
    if path:
        with open(path, "a") as f:
            f.write(name + "\n")


@server.tool()
def add(a: int, b: int) -> int:
    """Add two integers."""
    _count("add")
    return a + b


@server.tool()
def get_weather(city: str) -> dict[str, Any]:
    """Current weather for a city.

    Args:
        city: City name.
    """
    table = {"Pittsburgh": {"temperature": 12.0, "unit": "celsius"},
             "Beijing": {"temperature": 68.0, "unit": "fahrenheit"}}
    if city not in table:
        raise ToolError(f"unknown city {city!r}")  # the SDK passes this message on as isError
    return {"city": city, **table[city]}


@server.tool()
def echo_text(text: str) -> str:
    """Return the text unchanged."""
    return text


@server.tool()
async def nap(seconds: float) -> float:
    """Sleep, then answer with the seconds slept."""
    await asyncio.sleep(seconds)
    return seconds


@server.tool()
def whoami() -> dict[str, Any]:
    """Which process answers (to show the server runs on the host, not in the sandbox)."""
    return {"pid": os.getpid()}


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--http", type=int, default=None, help="serve streamable HTTP on this port")
    args = parser.parse_args()
    if args.http is None:
        server.run()
    else:
        server.run("streamable-http", host="127.0.0.1", port=args.http)  # type: ignore[call-overload]


if __name__ == "__main__":
    main()
