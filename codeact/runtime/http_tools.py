"""Moved to :mod:`codeact.runtime.sources.http`; this path re-exports it."""

from .sources.http import (
    HttpAuth,
    HttpClient,
    HttpEndpoint,
    HttpParam,
    Location,
    Secret,
    http_tool,
    http_tools,
)

__all__ = ["HttpAuth", "HttpClient", "HttpEndpoint", "HttpParam", "Location", "Secret", "http_tool", "http_tools"]
