"""A small BM25 ranker over tool specs: names, descriptions, parameter names and groups.

No network, no model: the words of a task ("add a comment to an issue") are matched against the
words of each tool (``issues/create-comment``: "Create an issue comment"). Identifiers are split at
``_``, ``-``, ``/``, ``.`` and camelCase humps; words are lower-cased and lightly stemmed, and a few
verbs APIs spell differently (add/create, remove/delete, fetch/get, edit/update…) count as one.
"""

from __future__ import annotations

import functools
import math
import re
from collections import Counter
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass

from codeact.tool_stubs.spec import ToolSpec

__all__ = ["SearchIndex", "words"]

_K1 = 1.2
_B = 0.75
#: How much a word counts by where it appears.
_WEIGHTS = {"name": 3.0, "group": 2.0, "summary": 2.0, "params": 1.0, "description": 1.0}
_SPLIT = re.compile(r"[^0-9A-Za-z]+")
_HUMPS = re.compile(r"(?<=[a-z0-9])(?=[A-Z])|(?<=[A-Z])(?=[A-Z][a-z])")
_STOP = frozenset(
    "a an and are as at be by for from i in into is it its me my of on or our please that the their them "
    "then this to us use using want we with you your which what can do does should all any".split()
)
#: Verbs (and a few nouns) that mean the same action in API names; each maps to one canonical word.
_SYNONYMS = {
    "add": "create", "make": "create", "new": "create", "open": "create", "post": "create", "start": "create",
    "remove": "delete", "erase": "delete", "destroy": "delete", "drop": "delete", "cancel": "delete",
    "fetch": "get", "retrieve": "get", "show": "get", "read": "get", "view": "get", "look": "get",
    "find": "search", "query": "search", "lookup": "search",
    "edit": "update", "modify": "update", "change": "update", "rename": "update", "set": "update",
    "enumerate": "list", "all": "list",
    "repository": "repo", "repositories": "repo", "org": "organization", "orgs": "organization",
    "pr": "pull", "prs": "pull", "user": "user", "users": "user", "member": "member",
}
_MAX_DESCRIPTION_WORDS = 120


def _stem(word: str) -> str:
    """A light stemmer: plurals and -ing/-ed off, then a final e (create, creates, created → creat)."""
    if len(word) > 4 and word.endswith("ies"):
        word = word[:-3] + "y"
    elif len(word) > 3 and word.endswith("s") and not word.endswith(("ss", "us", "is")):
        word = word[:-1]
    elif len(word) > 5 and word.endswith("ing"):
        word = word[:-3]
    elif len(word) > 4 and word.endswith("ed"):
        word = word[:-2]
    return word[:-1] if len(word) > 3 and word.endswith("e") else word


_STEMMED_SYNONYMS = {_stem(k): _stem(v) for k, v in _SYNONYMS.items()}


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
    """The searchable words of ``text`` (identifiers split, lower-cased, stop words out, stemmed),
    at most about ``limit``."""
    out: list[str] = []
    for chunk in _SPLIT.split(text):
        if chunk:
            out.extend(_normal(chunk))
            if len(out) >= limit:
                break
    return out


@dataclass(frozen=True)
class _Doc:
    name: str
    weights: Mapping[str, float]  # word → weighted term frequency
    length: float


class SearchIndex:
    """BM25 over the specs' fields (built once; a search is a few milliseconds for thousands of tools)."""

    def __init__(self, specs: Iterable[ToolSpec], groups: Mapping[str, str] | None = None,
                 python_names: Mapping[str, str] | None = None) -> None:
        groups = groups or {}
        python_names = python_names or {}
        self._docs: list[_Doc] = []
        self._postings: dict[str, list[int]] = {}
        for spec in specs:
            fields = _fields(spec, groups.get(spec.name, ""), python_names.get(spec.name, ""))
            weights: dict[str, float] = {}
            for field, text in fields.items():
                for word in words(text, _MAX_DESCRIPTION_WORDS)[:_MAX_DESCRIPTION_WORDS]:
                    weights[word] = weights.get(word, 0.0) + _WEIGHTS[field]
            doc_id = len(self._docs)
            self._docs.append(_Doc(spec.name, weights, sum(weights.values())))
            for word in weights:
                self._postings.setdefault(word, []).append(doc_id)
        self._avg = sum(d.length for d in self._docs) / len(self._docs) if self._docs else 1.0

    def __len__(self) -> int:
        return len(self._docs)

    def search(self, query: str, limit: int = 10) -> list[tuple[str, float]]:
        """``(tool name, score)`` best first; at most ``limit``; tools sharing no word are left out."""
        terms = Counter(words(query))
        scores: dict[int, float] = {}
        total = len(self._docs)
        for term, count in terms.items():
            posting = self._postings.get(term, ())
            if not posting:
                continue
            idf = math.log(1 + (total - len(posting) + 0.5) / (len(posting) + 0.5))
            for doc_id in posting:
                doc = self._docs[doc_id]
                tf = doc.weights[term]
                norm = tf * (_K1 + 1) / (tf + _K1 * (1 - _B + _B * doc.length / self._avg))
                scores[doc_id] = scores.get(doc_id, 0.0) + idf * norm * count
        ranked = sorted(scores.items(), key=lambda item: (-item[1], self._docs[item[0]].name))
        return [(self._docs[i].name, round(s, 4)) for i, s in ranked[: max(limit, 0)]]


def _fields(spec: ToolSpec, group: str, python_name: str) -> dict[str, str]:
    summary, _, rest = spec.description.strip().partition("\n")
    props = spec.input_schema.get("properties")
    params: Sequence[str] = list(props) if isinstance(props, dict) else []
    name = spec.name if python_name in ("", spec.name) else f"{spec.name} {python_name}"
    return {"name": name, "group": group, "summary": summary, "params": " ".join(params), "description": rest}
