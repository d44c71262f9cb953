"""A low-level MCP server (official SDK) whose tools answer with the raw ``tools/call`` arguments
they received, so a test sees exactly what went over the wire. ``python mcp_echo.py NAME``: the
server's name prefixes its tools' descriptions (several can run at once, one group each)."""

from __future__ import annotations

import json
import sys
from typing import Any

import anyio
import mcp_types as types
from mcp.server.lowlevel import Server
from mcp.server.stdio import stdio_server

NAME = sys.argv[1] if len(sys.argv) > 1 else "echo"
TOOLS = [
    types.Tool(name="echo_args", description=f"{NAME}: answer with the arguments received.", input_schema={
        "type": "object",
        "properties": {"text": {"type": "string"}, "times": {"type": "integer", "default": 1},
                       "loud": {"type": "boolean", "default": False}},
        "required": ["text"],
    }),
    types.Tool(name=f"{NAME}_status", description=f"Status of the {NAME} service.",
               input_schema={"type": "object", "properties": {}}),
]


async def list_tools(ctx: Any, params: Any) -> types.ListToolsResult:
    return types.ListToolsResult(tools=TOOLS)


async def call_tool(ctx: Any, params: Any) -> types.CallToolResult:
    text = json.dumps({"tool": params.name, "arguments": params.arguments})
    return types.CallToolResult(content=[types.TextContent(type="text", text=text)])


async def main() -> None:
    server = Server(NAME, on_list_tools=list_tools, on_call_tool=call_tool)
    async with stdio_server() as (read, write):
        await server.run(read, write, server.create_initialization_options())


if __name__ == "__main__":
    anyio.run(main)
