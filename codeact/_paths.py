"""Where codeact keeps its files on the host (floor 0: standard library only)."""

from __future__ import annotations

import os
from pathlib import Path

__all__ = ["cache_dir"]


def cache_dir() -> Path:
    """``$CODEACT_CACHE``, else ``$XDG_CACHE_HOME/codeact``, else ``~/.cache/codeact`` (created).

    The one cache directory: image tarballs, kernel files, workspace images, the snapshot key."""
    env = os.environ.get("CODEACT_CACHE")
    if env:
        path = Path(env)
    else:
        xdg = os.environ.get("XDG_CACHE_HOME")
        path = (Path(xdg) if xdg else Path.home() / ".cache") / "codeact"
    path.mkdir(parents=True, exist_ok=True)
    return path
