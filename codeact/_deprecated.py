"""Deprecated names that still work but say what replaced them (floor 0: standard library only).

A module keeps an old name out of its namespace and out of ``__all__``, and answers it from its
module ``__getattr__`` with :func:`deprecated_alias`, which warns (``DeprecationWarning`` naming the
new name) and returns the new object. Type checkers see the name bound under ``TYPE_CHECKING``.

A module kept at an old path (a shim re-exporting what moved) calls :func:`moved_module` in its body,
so the warning fires once, when the old path is first imported, and names the new one.
"""

from __future__ import annotations

import warnings
from collections.abc import Mapping
from typing import Any

__all__ = ["deprecated_alias", "moved_module"]


def deprecated_alias(module: str, name: str, aliases: Mapping[str, tuple[str, Any]]) -> Any:
    """For a module ``__getattr__``: ``aliases`` maps each old name to (the new dotted name, the new
    object); an old name warns and returns the object, any other name raises AttributeError."""
    if name not in aliases:
        raise AttributeError(f"module {module!r} has no attribute {name!r}")
    new_name, value = aliases[name]
    # stacklevel 3: past this function and the module __getattr__, at the line that used the name
    warnings.warn(f"{module}.{name} is deprecated; use {new_name}", DeprecationWarning, stacklevel=3)
    return value


def moved_module(old: str, new: str) -> None:
    """For the body of a module kept at an old path: warn that ``old`` moved to ``new``. The body runs
    once per process, so the warning fires once, at the first import."""
    # stacklevel 3: past this function and the shim's body (the import machinery's frames are skipped),
    # at the line that imported the old path
    warnings.warn(f"{old} is deprecated; import from {new}", DeprecationWarning, stacklevel=3)
