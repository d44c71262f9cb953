"""Deprecated path: batches moved to :mod:`codeact.runtime.batch` (``progress=True`` draws the bar
there); ``codeact.evals`` re-exports them from there.

Importing it still works and warns once (``DeprecationWarning`` naming the new path).
"""

from __future__ import annotations

from .._deprecated import moved_module
from ..runtime.batch import Isolation, function_code, map_code

__all__ = ["Isolation", "function_code", "map_code"]

moved_module("codeact.evals.batch", "codeact.runtime.batch (or codeact.evals)")
