"""Answer checkers: exact, numeric tolerance, set/list equality, or a custom function.

A checker is called with the episode's answer and says whether it is correct. Answers arrive in
two shapes: a value from ``final_answer(x)`` in code mode, or the model's final text (JSON mode, or
a plain-text reply in code mode). Text is decoded first (:func:`decode`): JSON text becomes its
value (``"[1, 2]"`` → ``[1, 2]``), a fenced block is unwrapped, and "Answer:" prefixes are dropped.
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any

__all__ = ["Check", "custom", "decode", "exact", "list_equal", "numeric", "set_equal"]

_NUMBER = re.compile(r"[-+]?(?:\d{1,3}(?:,\d{3})+|\d+)(?:\.\d+)?(?:[eE][-+]?\d+)?|[-+]?\.\d+")
_FENCE = re.compile(r"^```[a-zA-Z]*\n(.*?)\n?```$", re.S)
_PREFIX = re.compile(r"^(?:final answer|answer|result)\s*[:=]\s*", re.I)


@dataclass(frozen=True)
class Check:
    """A named checker: ``check(answer) -> bool``; ``name`` shows in reports."""

    name: str
    fn: Callable[[Any], bool]

    def __call__(self, answer: Any) -> bool:
        try:
            return bool(self.fn(answer))
        except Exception:  # a checker never crashes a run: an answer it cannot read is wrong
            return False


def decode(answer: Any) -> Any:
    """The answer as a value: JSON text decoded, fences and "Answer:" prefixes removed."""
    if not isinstance(answer, str):
        return answer
    text = answer.strip()
    fenced = _FENCE.match(text)
    if fenced:
        text = fenced.group(1).strip()
    text = _PREFIX.sub("", text).strip()
    try:
        return json.loads(text)
    except ValueError:
        return text


def _norm_text(value: Any) -> str:
    return " ".join(str(value).split()).strip(" .\"'`").casefold()


def _number(value: Any) -> float | None:
    if isinstance(value, bool):
        return None
    if isinstance(value, (int, float)):
        return float(value)
    if isinstance(value, str):
        match = _NUMBER.search(value)
        if match:
            return float(match.group(0).replace(",", ""))
    return None


def _item(value: Any) -> Any:
    """A hashable, normalized form of one collection item."""
    number = _number(value) if not isinstance(value, str) or _NUMBER.fullmatch(value.strip()) else None
    if number is not None:
        return round(number, 6)
    if isinstance(value, (list, tuple)):
        return tuple(_item(v) for v in value)
    if isinstance(value, dict):
        return tuple(sorted((str(k), _item(v)) for k, v in value.items()))
    return _norm_text(value)


def _as_items(value: Any) -> list[Any] | None:
    value = decode(value)
    if isinstance(value, (list, tuple, set, frozenset)):
        return list(value)
    if isinstance(value, dict):
        return list(value)
    if isinstance(value, str):
        parts = re.split(r"\s*(?:,|;|\n|\band\b)\s*", value.strip().strip("."))
        return [p for p in parts if p]
    return None


def exact(expected: Any) -> Check:
    """Equal after decoding; strings compare case- and whitespace-insensitively."""

    def check(answer: Any) -> bool:
        value = decode(answer)
        if value == expected:
            return True
        if isinstance(expected, str):
            return _norm_text(value) == _norm_text(expected)
        return False

    return Check(f"exact({expected!r})", check)


def numeric(expected: float, *, abs_tol: float = 1e-6, rel_tol: float = 1e-6) -> Check:
    """A number within tolerance. From text, the first number in it counts ("2.0 °C warmer" → 2.0)."""

    def check(answer: Any) -> bool:
        got = _number(decode(answer))
        return got is not None and math.isclose(got, expected, abs_tol=abs_tol, rel_tol=rel_tol)

    return Check(f"numeric({expected!r}, ±{abs_tol:g})", check)


def set_equal(expected: Iterable[Any]) -> Check:
    """The same items in any order (a list, or text like "a, b and c")."""
    want = {_item(v) for v in expected}

    def check(answer: Any) -> bool:
        items = _as_items(answer)
        return items is not None and {_item(v) for v in items} == want

    return Check(f"set_equal({sorted(map(str, want))!r})", check)


def list_equal(expected: Iterable[Any]) -> Check:
    """The same items in the same order."""
    want = [_item(v) for v in expected]

    def check(answer: Any) -> bool:
        items = _as_items(answer)
        return items is not None and [_item(v) for v in items] == want

    return Check(f"list_equal({want!r})", check)


def custom(fn: Callable[[Any], bool], name: str | None = None) -> Check:
    """Any predicate on the decoded answer."""
    return Check(name or str(getattr(fn, "__name__", "custom")), lambda answer: fn(decode(answer)))
