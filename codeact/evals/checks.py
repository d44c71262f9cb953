"""Answer checkers: exact, numeric tolerance, set/list equality, or a custom function.

A checker is called with the episode's answer and says whether it is correct. Every answer is
first turned into a typed value by :func:`decode` (:func:`.answers.to_value`): a value from
``final_answer(x)`` as is; text through its last ``ANSWER:`` line (else the whole text) read as
JSON, a Python literal, or plain text without Markdown emphasis. Checkers then compare typed
values: ``True`` is not ``1``; strings compare case- and space-insensitively; a number found in
prose keeps its sign (``-``, Unicode ``−``, or a direction word right after it: "2 °C colder" is
-2) and, with ``unit=``, numbers in another unit are not taken; sets and lists split on commas,
semicolons, lines and bullets, and on "and" only where that yields the expected items.
"""

from __future__ import annotations

import math
import re
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any

from .answers import to_value

__all__ = ["Check", "custom", "decode", "exact", "list_equal", "numeric", "set_equal"]

_NUMBER = re.compile(r"(?<![\w.])[-+]?(?:\d{1,3}(?:,\d{3})+|\d+)(?:\.\d+)?(?:[eE][-+]?\d+)?(?![\w.]\d)|"
                     r"(?<![\w.])[-+]?\.\d+")
_UNIT = (r"°\s*[CF]|degrees?(?:\s+(?:Celsius|Fahrenheit|C|F))?|[CFK](?![A-Za-z])|%|percent|points?|"
         r"USD|EUR|JPY|BRL|dollars?|euros?|\$|€")
_AFTER = re.compile(rf"\s*({_UNIT})?\s*(\w+)?", re.I)
_NEGATIVE = frozenset({"colder", "cooler", "lower", "less", "fewer", "smaller", "below", "down", "behind",
                       "cheaper", "shorter", "slower", "decrease", "decreased", "drop", "loss"})
_POSITIVE = frozenset({"warmer", "hotter", "higher", "more", "greater", "larger", "above", "up", "ahead",
                       "dearer", "longer", "faster", "increase", "increased", "gain"})
_BULLET = re.compile(r"^\s*(?:[-*•]|\d+[.)])\s+", re.M)


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
    """The answer as a typed value (see the module docstring)."""
    return to_value(answer)


def _norm_text(value: Any) -> str:
    return " ".join(str(value).split()).strip(" .,;:!\"'`*_").casefold()


def _unit_key(unit: str) -> str:
    u = unit.replace(" ", "").casefold()
    if u.startswith("degree"):
        return "°c" if u.endswith(("celsius", "c")) else "°f" if u.endswith(("fahrenheit", "f")) else "°"
    return {"c": "°c", "f": "°f", "$": "usd", "dollar": "usd", "dollars": "usd", "€": "eur", "euro": "eur",
            "euros": "eur", "percent": "%"}.get(u, u)


def _numbers(text: str, unit: str | None) -> list[tuple[float, bool, bool]]:
    """Each number in ``text``: (signed value, a direction word follows it, its unit is ``unit``)."""
    found = []
    want = _unit_key(unit) if unit else None
    for match in _NUMBER.finditer(text):
        value = float(match.group(0).replace(",", ""))
        after = _AFTER.match(text, match.end())
        got_unit = after.group(1) if after else None
        word = (after.group(2) or "").casefold() if after else ""
        if want and got_unit and _unit_key(got_unit) not in (want, "°"):
            continue  # a number in another unit is not the answer
        directed = word in _NEGATIVE or word in _POSITIVE
        if word in _NEGATIVE and match.group(0)[0] not in "+-":
            value = -value
        found.append((value, directed, bool(want and got_unit)))
    return found


def _number(value: Any, unit: str | None = None) -> float | None:
    """A number from a typed value; from text: the number with a direction word, else the only
    value, else the one in the wanted unit, else the last one (the conclusion of the text)."""
    if isinstance(value, bool):
        return None
    if isinstance(value, (int, float)):
        return float(value)
    if not isinstance(value, str):
        return None
    found = _numbers(value, unit)
    if not found:
        return None
    for pick in ([n for n in found if n[1]], [n for n in found if n[2]]):
        if pick:
            return pick[-1][0]
    return found[-1][0]


def _same(a: Any, b: Any) -> bool:
    """Typed equality: bool is not a number, numbers compare as numbers, text normalized."""
    if isinstance(a, bool) or isinstance(b, bool):
        return isinstance(a, bool) and isinstance(b, bool) and a == b
    if isinstance(a, (int, float)) and isinstance(b, (int, float)):
        return math.isclose(a, b, rel_tol=1e-9, abs_tol=1e-9)
    if isinstance(a, dict) and isinstance(b, dict):
        keys = {_norm_text(k): v for k, v in a.items()}
        other = {_norm_text(k): v for k, v in b.items()}
        return keys.keys() == other.keys() and all(_same(keys[k], other[k]) for k in keys)
    if isinstance(b, (set, frozenset)) and isinstance(a, (list, set, frozenset)):
        return len(a) == len(b) and {_item(x) for x in a} == {_item(y) for y in b}
    if isinstance(a, list) and isinstance(b, list):
        return len(a) == len(b) and all(_same(x, y) for x, y in zip(a, b, strict=True))
    if isinstance(a, str) and isinstance(b, str):
        return _norm_text(a) == _norm_text(b)
    if isinstance(a, str) != isinstance(b, str):  # "42" and 42: the text must be exactly that number
        text, number = (a, b) if isinstance(a, str) else (b, a)
        if isinstance(number, (int, float)) and _NUMBER.fullmatch(_norm_text(text)):
            return _same(float(_norm_text(text).replace(",", "")), number)
    return False


def _item(value: Any) -> Any:
    """A hashable, normalized form of one collection item (bools stay apart from numbers)."""
    if isinstance(value, bool):
        return ("bool", value)
    if isinstance(value, (int, float)):
        return round(float(value), 6)
    if isinstance(value, str):
        text = _norm_text(value)
        if _NUMBER.fullmatch(text):
            return round(float(text.replace(",", "")), 6)
        return text
    if isinstance(value, (list, tuple)):
        return tuple(_item(v) for v in value)
    if isinstance(value, dict):
        return tuple(sorted((_norm_text(k), _item(v)) for k, v in value.items()))
    return _norm_text(value)


def _splits(value: Any) -> list[list[Any]]:
    """The ways to read an answer as a collection: the value itself, or text split into items."""
    value = decode(value)
    if isinstance(value, (list, tuple, set, frozenset)):
        return [list(value)]
    if isinstance(value, dict):
        return [list(value)]
    if not isinstance(value, str):
        return [[value]]
    text = _BULLET.sub("", value.strip()).strip().rstrip(".")
    parts = [p.strip() for p in re.split(r"\s*(?:,|;|\n)\s*", text) if p.strip()]
    parts = [re.sub(r"^(?:and|&)\s+", "", p, flags=re.I) for p in parts]
    splits = [parts]
    anded = [q for p in parts for q in re.split(r"\s+(?:and|&)\s+", p, flags=re.I) if q]
    if anded != parts:
        splits.append(anded)
    return splits


def exact(expected: Any) -> Check:
    """Equal as typed values (see :func:`_same`); strings compare case- and whitespace-insensitively."""

    def check(answer: Any) -> bool:
        return _same(decode(answer), expected)

    # a set's repr changes order between processes; the checker's name (in the run fingerprint) must not
    is_set = isinstance(expected, (set, frozenset))
    shown = "{" + ", ".join(sorted(map(repr, expected))) + "}" if is_set else repr(expected)
    return Check(f"exact({shown})", check)


def numeric(expected: float, *, abs_tol: float = 1e-6, rel_tol: float = 1e-6, unit: str | None = None) -> Check:
    """A number within tolerance. From text: the number a direction word qualifies ("2 °C warmer"),
    else the only number, else the one in ``unit``, else the last one; its sign counts."""

    def check(answer: Any) -> bool:
        got = _number(decode(answer), unit)
        return got is not None and math.isclose(got, expected, abs_tol=abs_tol, rel_tol=rel_tol)

    suffix = f", {unit}" if unit else ""
    return Check(f"numeric({expected!r}, ±{abs_tol:g}{suffix})", check)


def set_equal(expected: Iterable[Any]) -> Check:
    """The same items in any order (a list, or text like "a, b and c")."""
    want = {_item(v) for v in expected}

    def check(answer: Any) -> bool:
        return any({_item(v) for v in items} == want and len(items) == len(want) for items in _splits(answer))

    return Check(f"set_equal({sorted(map(str, want))!r})", check)


def list_equal(expected: Iterable[Any]) -> Check:
    """The same items in the same order."""
    want = [_item(v) for v in expected]

    def check(answer: Any) -> bool:
        return any([_item(v) for v in items] == want for items in _splits(answer))

    return Check(f"list_equal({want!r})", check)


def custom(fn: Callable[[Any], bool], name: str | None = None) -> Check:
    """Any predicate on the decoded answer."""
    return Check(name or str(getattr(fn, "__name__", "custom")), lambda answer: fn(decode(answer)))
