"""Deprecated path: moved to :mod:`codeact.image.prune`.

Importing it still works and warns once (``DeprecationWarning`` naming the new path).
"""

from __future__ import annotations

from codeact._deprecated import moved_module
from codeact.image.prune import DEFAULT_KEEP, PruneReport, auto_prune, prune_images

__all__ = ["DEFAULT_KEEP", "PruneReport", "auto_prune", "prune_images"]

moved_module("codeact.sandbox.prune", "codeact.image.prune")
