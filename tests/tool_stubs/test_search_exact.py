"""BM25F search against a hand computation of its formula, each field's weight and length
normalization, the name bonus, the cuts, and (property-based) ranking invariants."""

from __future__ import annotations

import math
import random
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from codeact.tool_stubs.search import SearchIndex
from codeact.tool_stubs.spec import ToolSpec

K1 = 1.2


def _spec(name: str, description: str = "", props: dict[str, Any] | None = None) -> ToolSpec:
    return ToolSpec(name=name, description=description, input_schema={"type": "object", "properties": props or {}})


def _idf(total: int, having: int) -> float:
    return math.log(1 + (total - having + 0.5) / (having + 0.5))


def _bm25(idf: float, tf: float, count: float = 1.0) -> float:
    return idf * count * tf * (K1 + 1) / (tf + K1)


CORPUS = [_spec("fox", "dog"), _spec("cat", "dog dog cat"), _spec("owl", "bird")]


def test_scores_match_a_hand_computation() -> None:
    index = SearchIndex(CORPUS)
    assert len(index) == 3
    # Summary lengths 1, 3, 1: average 5/3; summary weight 2.0, b 0.5. Names: one word each, weight 3.0.
    tf_fox = 2.0 / (1 - 0.5 + 0.5 * 1 / (5 / 3))
    tf_cat_dog = 2 * 2.0 / (1 - 0.5 + 0.5 * 3 / (5 / 3))
    tf_cat_cat = 3.0 / (1 - 0.3 + 0.3 * 1 / 1) + 2.0 / (1 - 0.5 + 0.5 * 3 / (5 / 3))
    dog = _idf(3, 2)
    assert index.search("dog") == [("cat", round(_bm25(dog, tf_cat_dog), 4)), ("fox", round(_bm25(dog, tf_fox), 4))]
    cat = _idf(3, 1)
    both = _bm25(dog, tf_cat_dog) + _bm25(cat, tf_cat_cat) + 2.5 * 1 / 1  # the whole name covered: the bonus
    assert index.search("cat dog")[0] == ("cat", round(both, 4))
    assert index.search("dog dog")[0] == ("cat", round(_bm25(dog, tf_cat_dog, 2.0), 4))  # a word said twice
    assert index.search("bird") == [("owl", round(_bm25(_idf(3, 1), 2.0 / (0.5 + 0.5 * 1 / (5 / 3))), 4))]
    assert index.search("nothing here") == []


def test_name_bonus_is_scaled_by_the_share_of_the_name_covered() -> None:
    index = SearchIndex([_spec("kiwi_plum"), _spec("yak")])
    name_tf = 3.0 / (1 - 0.3 + 0.3 * 2 / 1.5)  # name lengths 2 and 1: average 1.5
    assert index.search("kiwi") == [("kiwi_plum", round(_bm25(_idf(2, 1), name_tf) + 2.5 / 2, 4))]
    full = 2 * _bm25(_idf(2, 1), name_tf) + 2.5
    assert index.search("kiwi plum") == [("kiwi_plum", round(full, 4))]


def test_group_field_is_not_length_normalized_and_python_names_count() -> None:
    specs = [_spec("a1"), _spec("a2")]
    index = SearchIndex(specs, groups={"a1": "zebra zebra yak", "a2": "zebra"})
    assert index.search("zebra") == [("a1", round(_bm25(_idf(2, 2), 2.0), 4)), ("a2", round(_bm25(_idf(2, 2), 1.0), 4))]
    named = SearchIndex([_spec("t1"), _spec("t2")], python_names={"t1": "fox_owl", "t2": "t2"})
    assert [n for n, _ in named.search("owl")] == ["t1"] and named.search("t2")[0][0] == "t2"


def test_parameters_and_their_descriptions_and_values() -> None:
    specs = [_spec("p1", "x", {"colour": {"type": "string"}}),
             _spec("p2", "x", {"q": {"type": "string", "description": "a kiwi", "enum": ["plum", 3]}}),
             _spec("p3", "first line\nthe owl details")]
    index = SearchIndex(specs)
    assert [n for n, _ in index.search("colour")] == ["p1"]
    assert [n for n, _ in index.search("kiwi")] == ["p2"] and [n for n, _ in index.search("plum")] == ["p2"]
    assert index.search("3") == [] and [n for n, _ in index.search("owl")] == ["p3"]
    assert SearchIndex([_spec("p4", "", {"q": True})]).search("true") == []


def test_long_fields_are_cut_at_120_words() -> None:
    filler = " ".join(["dog"] * 119)
    index = SearchIndex([_spec("d1", f"s\n{filler} kiwi plum"), _spec("d2", "", {
        "a": {"type": "string", "description": f"{filler} yak"}, "b": {"type": "string", "description": "owl"}})])
    assert [n for n, _ in index.search("kiwi")] == ["d1"]  # the 120th word of the description
    assert index.search("plum") == []  # the 121st
    assert [n for n, _ in index.search("yak")] == ["d2"] and index.search("owl") == []


def test_limit_and_tie_order() -> None:
    index = SearchIndex([_spec(n, "same words") for n in ("b", "c", "a")])
    assert [n for n, _ in index.search("same")] == ["a", "b", "c"]
    assert len(index.search("same", limit=2)) == 2 and index.search("same", limit=0) == []
    assert index.search("same", limit=-1) == [] and len(index.search("same")) == 3
    assert len(SearchIndex([_spec(f"t{i}", "same") for i in range(12)]).search("same")) == 10
    assert len(SearchIndex([])) == 0 and SearchIndex([]).search("x") == []


def test_longer_texts_weigh_a_word_less() -> None:
    index = SearchIndex([_spec("short", "kiwi"), _spec("long", "kiwi owl bird yak zebra plum")])
    (first, a), (second, b) = index.search("kiwi")
    assert (first, second) == ("short", "long") and a > b


_VOCAB = ["fox", "dog", "cat", "owl", "bird", "yak", "kiwi", "plum"]
_TEXT = st.lists(st.sampled_from(_VOCAB), max_size=8).map(" ".join)
_CORPORA = st.lists(st.tuples(st.sampled_from(_VOCAB), _TEXT), min_size=1, max_size=8, unique_by=lambda t: t[0])


@settings(max_examples=30, deadline=None)
@given(_CORPORA, st.lists(st.sampled_from(_VOCAB), min_size=1, max_size=3).map(" ".join), st.randoms())
def test_ranking_invariants(corpus: list[tuple[str, str]], query: str, rnd: random.Random) -> None:
    specs = [_spec(name, text) for name, text in corpus]
    results = SearchIndex(specs).search(query, limit=100)
    shuffled = list(specs)
    rnd.shuffle(shuffled)
    assert SearchIndex(shuffled).search(query, limit=100) == results  # the order of the specs does not matter
    assert results == sorted(results, key=lambda r: (-r[1], r[0]))
    assert all(score > 0 for _, score in results)
    matching = {name for name, text in corpus if set(query.split()) & {name, *text.split()}}
    assert {name for name, _ in results} == matching  # every tool sharing a word, and only those
    assert SearchIndex(specs).search(query, limit=2) == results[:2]


@pytest.mark.parametrize("word", ["fox", "kiwi"])
def test_adding_the_word_to_a_tool_raises_it(word: str) -> None:
    base = [_spec("t1", "owl"), _spec("t2", "owl"), _spec("t3", f"{word} bird")]
    before = dict(SearchIndex(base).search(f"owl {word}"))
    after = dict(SearchIndex([_spec("t1", f"owl {word}"), *base[1:]]).search(f"owl {word}"))
    assert after["t1"] > before["t1"]
