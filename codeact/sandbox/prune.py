"""Moved to :mod:`codeact.image.prune`; this path stays."""

from __future__ import annotations

from codeact.image.prune import DEFAULT_KEEP, PruneReport, auto_prune, prune_images

__all__ = ["DEFAULT_KEEP", "PruneReport", "auto_prune", "prune_images"]
