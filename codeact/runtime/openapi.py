"""Deprecated path: moved to :mod:`codeact.runtime.sources.openapi`.

Importing it still works and warns once (``DeprecationWarning`` naming the new path).
"""

from codeact._deprecated import moved_module

from .sources.openapi import load_openapi, openapi_endpoints, openapi_tools

__all__ = ["load_openapi", "openapi_endpoints", "openapi_tools"]

moved_module("codeact.runtime.openapi", "codeact.runtime.sources.openapi")
