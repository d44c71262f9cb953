"""Small text and header helpers shared by every floor (floor 0: standard library only)."""

from __future__ import annotations

import email.utils
import re
import time
from collections.abc import Mapping
from typing import Any

__all__ = ["one_line", "parse_retry_after", "retry_after_seconds", "valid_json", "valid_text"]

_SURROGATE = re.compile("[\ud800-\udfff]")


def valid_text(text: str) -> str:
    """``text`` with each surrogate code point (text no UTF-8 writer can encode) replaced by
    U+FFFD; ``text`` itself when it holds none (an ASCII text costs one flag check)."""
    if text.isascii():
        return text
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return _SURROGATE.sub("\ufffd", text)
    return text


def valid_json(value: Any) -> Any:
    """A JSON value (dicts, lists or tuples, scalars) with :func:`valid_text` applied to every
    string, keys included (a tuple becomes a list); other objects are returned as they are."""
    if type(value) is str:
        return valid_text(value)
    if type(value) in (list, tuple):
        return [valid_json(item) for item in value]
    if type(value) is dict:
        return {valid_text(k) if type(k) is str else k: valid_json(v) for k, v in value.items()}
    return value


def one_line(text: str, limit: int = 500) -> str:
    """One printable line: unprintable characters become spaces, whitespace runs collapse to one
    space, and a text longer than ``limit`` characters is cut (an ellipsis marking the cut)."""
    flat = " ".join("".join(c if c.isprintable() else " " for c in text).split())
    return flat if len(flat) <= limit else flat[: limit - 1].rstrip() + "…"


def parse_retry_after(value: str | None) -> float | None:
    """``Retry-After`` as seconds from now: delta-seconds or an HTTP date; None when absent or bad."""
    if not value:
        return None
    value = value.strip()
    try:
        return max(0.0, float(value))
    except ValueError:
        pass
    try:
        when = email.utils.parsedate_to_datetime(value)
    except (TypeError, ValueError):
        return None
    return max(0.0, when.timestamp() - time.time())


def retry_after_seconds(headers: Mapping[str, str]) -> float | None:
    """The wait a server asked for: ``retry-after-ms`` (OpenAI's, more precise) or ``retry-after``."""
    ms = headers.get("retry-after-ms")
    if ms is not None:
        try:
            return max(0.0, float(ms) / 1000.0)
        except ValueError:
            pass
    return parse_retry_after(headers.get("retry-after"))
