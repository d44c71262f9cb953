"""The old name of :mod:`.progress`, kept only while ``evals/batch.py`` imports it (batch moves into
``runtime/`` under issue 17, and imports the public module then); delete it with that move."""

from __future__ import annotations

from .progress import Bar, ModeRates

__all__ = ["Bar", "ModeRates"]
