"""Deprecated path: moved to :mod:`codeact.runtime.sources.http`.

Importing it still works and warns once (``DeprecationWarning`` naming the new path).
"""

from codeact._deprecated import moved_module

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

moved_module("codeact.runtime.http_tools", "codeact.runtime.sources.http")
