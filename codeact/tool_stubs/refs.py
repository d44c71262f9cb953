"""Local JSON references: ``$ref`` (``#`` or ``#/json/pointer``) resolved against a document.

Public because tool sources outside this package resolve them too (``runtime/sources/openapi.py``
follows an OpenAPI document's ``$ref`` chains with it).
"""

from __future__ import annotations

from typing import Any

__all__ = ["resolve_ref"]


def resolve_ref(root: Any, ref: str) -> Any:
    """Resolve a local ``$ref`` (``#`` or ``#/json/pointer``) against ``root``; None when it does not exist."""
    if ref == "#":
        return root
    if not ref.startswith("#/"):
        return None
    node = root
    for raw in ref[2:].split("/"):
        token = raw.replace("~1", "/").replace("~0", "~")
        if isinstance(node, dict) and token in node:
            node = node[token]
        elif isinstance(node, list) and token.isdigit() and int(token) < len(node):
            node = node[int(token)]
        else:
            return None
    return node
