"""The words search compares: identifiers split, lower-cased, stop words out, lightly stemmed, and
the verbs (and a few nouns) that APIs spell differently mapped to one canonical word."""

from __future__ import annotations

import functools
import itertools
import re
from collections.abc import Iterable, Mapping

__all__ = ["joined_pairs", "query_terms", "words"]

_SPLIT = re.compile(r"[^0-9A-Za-z]+")
_HUMPS = re.compile(r"(?<=[a-z0-9])(?=[A-Z])|(?<=[A-Z])(?=[A-Z][a-z])")
_STOP = frozenset(
    "a an and are as at be by for from i in into is it its of on or our please that the their them "
    "then this to us use using want we with you your which what can do does should all any".split()
)
#: Words that mean the same action (or thing) in API names; each maps to one canonical word.
_SYNONYMS = {
    "add": "create", "make": "create", "new": "create", "open": "create", "post": "create", "start": "create",
    "remove": "delete", "erase": "delete", "destroy": "delete", "drop": "delete", "cancel": "delete",
    "fetch": "get", "retrieve": "get", "read": "get", "look": "get",
    "find": "search", "query": "search", "lookup": "search",
    "edit": "update", "modify": "update", "change": "update", "rename": "update", "set": "update",
    "enumerate": "list",
    "repository": "repo", "repositories": "repo", "org": "organization", "orgs": "organization",
    "pr": "pull", "prs": "pull", "put": "create",
}
#: Query words that stand for several words at once, each with a weight: "show the pull requests"
#: may mean listing them or getting one; "my repositories" are the authenticated user's; a person
#: is a user or a member; to stop may be to cancel; to do again is to re-do.
_SHOW = {"get": 0.6, "list": 0.6}
_PERSON = {"user": 1.0, "member": 0.5}
_ME = {"authenticated": 0.4}
_EXPANSIONS: dict[str, dict[str, float]] = {
    "show": _SHOW, "see": _SHOW, "view": _SHOW, "who": {"list": 0.5, "user": 0.5},
    "my": _ME, "me": _ME, "mine": _ME,
    "person": _PERSON, "people": _PERSON, "someone": _PERSON, "somebody": _PERSON, "account": _PERSON,
    "stop": {"stop": 1.0, "delete": 0.5}, "again": {"re": 1.0},
}
#: Letters a stemmed -ed/-ing word doubles (starred → star, running → run, committed → commit).
_DOUBLED = frozenset("bgmnprt")


def _stem(word: str) -> str:
    """A light stemmer: a plural, -ee, -ing or -ed off, then a final e (create, creates, created →
    creat; assignees → assign; settings → setting)."""
    plural = True
    if len(word) > 4 and word.endswith("ies"):
        word = word[:-3] + "y"
    elif len(word) > 3 and word.endswith("s") and not word.endswith(("ss", "us", "is")):
        word = word[:-1]
    else:
        plural = False
    if len(word) > 5 and word.endswith("ee"):  # assignee → assign
        return word[:-2]
    if not plural and ((len(word) > 5 and word.endswith("ing")) or (len(word) > 4 and word.endswith("ed"))):
        word = word[:-3] if word.endswith("ing") else word[:-2]
        if len(word) > 2 and word[-1] == word[-2] and word[-1] in _DOUBLED:
            word = word[:-1]
    return word[:-1] if len(word) > 3 and word.endswith("e") else word


_STEMMED_SYNONYMS = {_stem(k): _stem(v) for k, v in _SYNONYMS.items()}
_STEMMED_EXPANSIONS = {_stem(k): {_stem(w): x for w, x in v.items()} for k, v in _EXPANSIONS.items()}


@functools.lru_cache(maxsize=65536)
def _normal(chunk: str) -> tuple[str, ...]:
    """One identifier-ish chunk's words (cached: API texts repeat the same words thousands of times)."""
    out = []
    for part in _HUMPS.split(chunk):
        word = part.lower()
        if word and word not in _STOP:
            stem = _stem(word)
            out.append(_STEMMED_SYNONYMS.get(stem, stem))
    return tuple(out)


def words(text: str, limit: int = 1 << 30) -> list[str]:
    """The searchable words of ``text``, at most about ``limit``."""
    out: list[str] = []
    for chunk in _SPLIT.split(text):
        if chunk:
            out.extend(_normal(chunk))
            if len(out) >= limit:
                break
    return out


def query_terms(query: str) -> dict[str, float]:
    """A query's words with their weights (a word said twice counts twice; see ``_EXPANSIONS``)."""
    terms: dict[str, float] = {}
    for chunk in _SPLIT.split(query):
        for part in _HUMPS.split(chunk):
            word = part.lower()
            expanded: Mapping[str, float] = _STEMMED_EXPANSIONS.get(_stem(word), {}) if word else {}
            for term, weight in (expanded.items() if expanded else ((t, 1.0) for t in _normal(part))):
                terms[term] = terms.get(term, 0.0) + weight
    return terms


_PREFIXES = frozenset({"re", "un", "de", "dis", "pre", "sub", "non", "co"})


def joined_pairs(name_words: Iterable[str]) -> list[str]:
    """Neighbouring words of a name written as one when the first is a prefix (``re-run`` is also
    ``rerun``, ``un-star`` also ``unstar``)."""
    return [a + b for a, b in itertools.pairwise(name_words) if a in _PREFIXES]
