"""The host's check of a run's rich outputs (``display()``, open figures): the kernel applied the
caps already, but the sandbox is hostile, so every bundle is checked again here. Nothing the
kernel sends makes this raise: what does not pass is dropped, and a note says what and why."""

from __future__ import annotations

import base64
import binascii
import re
from typing import Any

from ..sandbox import SandboxConfig

__all__ = ["MIMES", "caps", "checked"]

#: The MIME types a bundle may carry; any other is dropped (a viewer would not know how to show it).
MIMES = frozenset({"text/plain", "text/html", "text/markdown", "image/png", "image/jpeg", "image/svg+xml",
                   "application/json"})
_BASE64 = re.compile(r"[A-Za-z0-9+/]*={0,2}")
_MAGIC = {"image/png": b"\x89PNG\r\n\x1a\n", "image/jpeg": b"\xff\xd8\xff"}


def caps(config: SandboxConfig) -> dict[str, int]:
    """The caps sent to the kernel with each run."""
    return {"display_cap": config.display_cap, "display_limit": config.display_limit,
            "display_count": config.display_count}


def _problem(mime: Any, data: Any, cap: int) -> str | None:
    """Why one entry is dropped, or None."""
    if type(mime) is not str or mime not in MIMES:
        return "of an unknown MIME type" if type(mime) is str else "with a key that is not a string"
    if type(data) is not str:
        return f"{mime} not a string"
    if len(data) > cap:
        return f"{mime} over display_cap={cap}"
    magic = _MAGIC.get(mime)
    if magic is not None:
        if not _BASE64.fullmatch(data):
            return f"{mime} not base64"
        try:
            head = base64.b64decode(data[:16])
        except (binascii.Error, ValueError):
            return f"{mime} not base64"
        if not head.startswith(magic):
            return f"{mime} not a {mime.split('/')[1].upper()}"
    return None


def checked(raw: Any, config: SandboxConfig) -> list[dict[str, str]]:
    """The bundles of ``raw`` that pass: ``{mime: str}`` of known types, within the caps (entry,
    count and total); a last ``text/plain`` bundle notes what was dropped."""
    if raw is None:
        return []
    if type(raw) is not list:
        return [{"text/plain": "<the sandbox sent rich outputs that were not a list: dropped>"}]
    bundles: list[dict[str, str]] = []
    why: dict[str, int] = {}
    total = 0
    for item in raw[: config.display_count + 1]:  # the kernel's own note may follow the last one
        if type(item) is not dict:
            why["not an object"] = why.get("not an object", 0) + 1
            continue
        bundle: dict[str, str] = {}
        if len(item) > len(MIMES):  # more entries than there are types: the rest are not looked at
            why["entries past the known types' number"] = why.get("entries past the known types' number", 0) + \
                len(item) - len(MIMES)
        for mime, data in list(item.items())[: len(MIMES)]:
            problem = _problem(mime, data, config.display_cap)
            if problem is None:
                bundle[mime] = data
            else:
                why[problem] = why.get(problem, 0) + 1
        size = sum(len(d) for d in bundle.values())
        if bundle and total + size > config.display_limit:
            why[f"over display_limit={config.display_limit}"] = why.get(f"over display_limit={config.display_limit}",
                                                                         0) + 1
        elif bundle:
            total += size
            bundles.append(bundle)
    if len(raw) > config.display_count + 1:
        why[f"over display_count={config.display_count}"] = len(raw) - config.display_count - 1
    if why:
        listed = "; ".join(f"{n} {what}" for what, n in list(why.items())[:10])
        bundles.append({"text/plain": f"<outputs dropped by the host: {listed}>"[:2000]})
    return bundles
