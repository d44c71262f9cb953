"""Batches moved to :mod:`codeact.runtime.batch` (``progress=True`` draws the bar there); this
module keeps the import path ``codeact.evals.batch`` (and ``codeact.evals``) working."""

from __future__ import annotations

from ..runtime.batch import Isolation, function_code, map_code

__all__ = ["Isolation", "function_code", "map_code"]
