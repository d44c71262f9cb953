"""Moved to :mod:`codeact.runtime.sources.openapi`; this path re-exports it."""

from .sources.openapi import load_openapi, openapi_endpoints, openapi_tools

__all__ = ["load_openapi", "openapi_endpoints", "openapi_tools"]
