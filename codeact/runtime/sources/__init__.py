"""Tool sources: where ``Tool``s come from besides ``@tool`` on a function.

``python`` (the Tools a module defines), ``http`` (one request per call, run on the host with
httpx), ``openapi`` (an OpenAPI 3 document → ``http`` endpoints), ``mcp`` (an MCP server's tools
over one connection). Each builds ``Tool``s from the tool model (``runtime/_tool.py``) and never
imports ``Toolset``: ``Toolset.from_module/from_http/from_openapi/from_mcp`` call into them, so
the dependency points one way. A new source is a module here that returns ``Tool``s (and, if it
holds a connection, something to close), plus a ``Toolset.from_…`` constructor.

Part of floor 3 (``runtime``). Nothing is imported here: ``mcp`` loads the MCP SDK, which is slow.
"""

#: Nothing is re-exported: each source is its module (``from codeact.runtime.sources.http import ...``).
__all__: list[str] = []
