"""Old sandbox images go: ``codeact image prune`` and, after every build, keep the newest N.

Every kernel change builds a new ``codeact-sandbox:<hash>`` (tens of MB each, sharing the base).
Only images labelled ``codeact.image`` in the given repository are considered; an image a container
still uses is skipped (the engine refuses, we never force). The automatic prune after a build also
spares images younger than an hour, so a concurrent process that just built its own is not hurt.
"""

from __future__ import annotations

import os
import time
from dataclasses import dataclass, field
from typing import Any

from .engine import APIError, ImageNotFound

__all__ = ["DEFAULT_KEEP", "PruneReport", "auto_prune", "prune_images"]

DEFAULT_KEEP = 5
_AUTO_MIN_AGE_S = 3600.0


@dataclass
class PruneReport:
    removed: list[str] = field(default_factory=list)
    kept: list[str] = field(default_factory=list)
    in_use: list[str] = field(default_factory=list)


def prune_images(client: Any, *, repo: str = "codeact-sandbox", keep: int = DEFAULT_KEEP,
                 min_age_s: float = 0.0) -> PruneReport:
    """Remove all but the ``keep`` newest images of ``repo`` (only those older than ``min_age_s``)."""
    if keep < 0:
        raise ValueError("keep must be >= 0")
    images = client.api.images(name=repo, filters={"label": "codeact.image"})
    images.sort(key=lambda info: info.get("Created", 0), reverse=True)
    report = PruneReport()
    now = time.time()
    for index, info in enumerate(images):
        tags = [t for t in info.get("RepoTags") or [] if t.startswith(f"{repo}:")]
        name = tags[0] if tags else info["Id"][:19]
        if index < keep or now - info.get("Created", 0) < min_age_s:
            report.kept.append(name)
            continue
        try:
            for tag in tags or [info["Id"]]:
                client.api.remove_image(tag, noprune=False)
            report.removed.append(name)
        except ImageNotFound:
            report.removed.append(name)  # another process pruned it first
        except APIError:
            report.in_use.append(name)  # a container still uses it (409)
    return report


def auto_prune(client: Any, repo: str) -> PruneReport | None:
    """After a build: keep ``$CODEACT_IMAGE_KEEP`` (default 5) newest images, sparing recent ones."""
    raw = os.environ.get("CODEACT_IMAGE_KEEP", str(DEFAULT_KEEP))
    try:
        keep = int(raw)
    except ValueError:
        return None
    if keep <= 0:  # 0 or negative: automatic pruning off
        return None
    return prune_images(client, repo=repo, keep=keep, min_age_s=_AUTO_MIN_AGE_S)
