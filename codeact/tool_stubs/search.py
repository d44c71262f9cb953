"""A small BM25F ranker over tool specs: names, summaries, descriptions, parameters and groups.

No network, no model: the words of a task ("add a comment to an issue") are matched against the
words of each tool (``issues/create-comment``: "Create an issue comment"), see
:mod:`codeact.tool_stubs._words` for how text becomes words. Each field has its own weight and
length normalization (a long description neither drowns nor carries a tool), the words of a
parameter's description and allowed values count a little ("close an issue" finds the update
whose ``state`` is ``"open"`` or ``"closed"``), and a tool whose name the task covers gets a bonus:
"create an issue" means ``issues/create`` more than ``issues/create-milestone``.
"""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from codeact.tool_stubs._words import joined_pairs, query_terms, words
from codeact.tool_stubs.spec import ToolSpec

__all__ = ["SearchIndex", "words"]

_K1 = 1.2
#: field → (weight, length normalization b)
_FIELDS: dict[str, tuple[float, float]] = {
    "name": (3.0, 0.3), "group": (1.0, 0.0), "summary": (2.0, 0.5), "params": (0.7, 0.5),
    "details": (0.3, 0.75), "description": (0.6, 0.75),
}
#: The most a name the task covers whole adds to a score (scaled by the share of it covered).
_COVER = 2.5
_MAX_FIELD_WORDS = 120


@dataclass(frozen=True)
class _Doc:
    name: str
    weights: Mapping[str, float]  # word → length-normalized, field-weighted term frequency
    name_words: frozenset[str]


class SearchIndex:
    """BM25F over the specs' fields (built once, so a search is a scan of the index, not of the specs)."""

    def __init__(self, specs: Iterable[ToolSpec], groups: Mapping[str, str] | None = None,
                 python_names: Mapping[str, str] | None = None) -> None:
        groups = groups or {}
        python_names = python_names or {}
        counted = []
        totals: Counter[str] = Counter()
        for spec in specs:
            fields = _fields(spec, groups.get(spec.name, ""), python_names.get(spec.name, ""))
            counts = {field: Counter(text) for field, text in fields.items()}
            totals.update({field: len(text) for field, text in fields.items()})
            counted.append((spec.name, counts, frozenset(words(spec.name))))
        avg = {field: max(totals[field] / len(counted), 1.0) if counted else 1.0 for field in _FIELDS}
        self._docs: list[_Doc] = []
        self._postings: dict[str, list[int]] = {}
        for name, counts, name_words in counted:
            weights: dict[str, float] = {}
            for field, counter in counts.items():
                weight, b = _FIELDS[field]
                norm = weight / (1 - b + b * sum(counter.values()) / avg[field])
                for word, tf in counter.items():
                    weights[word] = weights.get(word, 0.0) + tf * norm
            doc_id = len(self._docs)
            self._docs.append(_Doc(name, weights, name_words))
            for word in weights:
                self._postings.setdefault(word, []).append(doc_id)

    def __len__(self) -> int:
        return len(self._docs)

    def search(self, query: str, limit: int = 10) -> list[tuple[str, float]]:
        """``(tool name, score)`` best first; at most ``limit``; tools sharing no word are left out."""
        terms = query_terms(query)
        scores: dict[int, float] = {}
        total = len(self._docs)
        for term, count in terms.items():
            posting = self._postings.get(term, ())
            if not posting:
                continue
            idf = math.log(1 + (total - len(posting) + 0.5) / (len(posting) + 0.5))
            for doc_id in posting:
                tf = self._docs[doc_id].weights[term]
                scores[doc_id] = scores.get(doc_id, 0.0) + idf * count * tf * (_K1 + 1) / (tf + _K1)
        for doc_id in scores:
            name_words = self._docs[doc_id].name_words
            if name_words:
                scores[doc_id] += _COVER * len(name_words.intersection(terms)) / len(name_words)
        ranked = sorted(scores.items(), key=lambda item: (-item[1], self._docs[item[0]].name))
        return [(self._docs[i].name, round(s, 4)) for i, s in ranked[: max(limit, 0)]]


def _fields(spec: ToolSpec, group: str, python_name: str) -> dict[str, list[str]]:
    """Each field's words (the longer texts cut at ``_MAX_FIELD_WORDS``)."""
    summary, _, rest = spec.description.strip().partition("\n")
    props = spec.input_schema.get("properties")
    props = props if isinstance(props, dict) else {}
    name = words(spec.name)
    if python_name and python_name != spec.name:
        name += [w for w in words(python_name) if w not in name]
    details: list[str] = []
    for sub in props.values():
        details += words(_param_text(sub), _MAX_FIELD_WORDS)
    return {"name": [*name, *joined_pairs(name)], "group": words(group), "summary": words(summary),
            "params": words(" ".join(props)), "details": details[:_MAX_FIELD_WORDS],
            "description": words(rest, _MAX_FIELD_WORDS)[:_MAX_FIELD_WORDS]}


def _param_text(schema: Any) -> str:
    if not isinstance(schema, dict):
        return ""
    text = schema.get("description")
    enum = schema.get("enum")
    values = " ".join(str(v) for v in enum if isinstance(v, str)) if isinstance(enum, list) else ""
    return f"{text if isinstance(text, str) else ''} {values}"
