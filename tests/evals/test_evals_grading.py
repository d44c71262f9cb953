"""A corpus of answers graded wrong (or right) for the wrong reason before, in both modes' shapes.

Each row: checker, answer (a code-mode value or a prose reply), the right grade. The first rows are
the audit's cases (issue 18)."""

from __future__ import annotations

from typing import Any

import pytest

from codeact.evals.answers import instruction, to_value
from codeact.evals.checks import Check, exact, list_equal, numeric, set_equal

WARMER = numeric(2.0, abs_tol=0.05, unit="°C")

CORPUS: list[tuple[str, Check, Any, bool]] = [
    # the audit's cases
    ("prose: the first number is not the answer", WARMER,
     "Pittsburgh is 18 °C and Beijing 20 °C, so Beijing is 2 °C warmer.", True),
    ("bold city name", exact("Cairo"), "**Cairo**", True),
    ("colder is the opposite sign", WARMER, "Beijing is 2.0 °C colder", False),
    ("True is not 1", exact(1), True, False),
    ("True is not 1 (numeric)", numeric(1.0), True, False),
    ("1 is not True", exact(True), 1, False),
    # the answer line
    ("answer line after prose", numeric(17.25, abs_tol=0.01),
     "Pittsburgh 18, Beijing 20, Cairo 33, Moscow -2 → mean.\nANSWER: 17.25", True),
    ("bold answer line", exact("Cairo"), "Cairo is at 33 °C.\n**ANSWER:** Cairo", True),
    ("answer line with a JSON list", set_equal(["Beijing", "Cairo"]), 'Two cities.\nANSWER: ["Cairo", "Beijing"]', True),
    ("the last answer line counts", exact("Cairo"), "ANSWER: Moscow\nWait, Moscow is in °F.\nANSWER: Cairo", True),
    ("answer line with a JSON object", exact({"completed": 60, "pending": 15}),
     'Counts:\nANSWER: {"pending": 15, "completed": 60}', True),
    ("object with a wrong count", exact({"completed": 60, "pending": 15}), '{"pending": 15, "completed": 61}', False),
    # numbers, signs and units
    ("unicode minus", numeric(-3.5), "\u22123.5", True),
    ("unicode minus in prose", numeric(-3.5, unit="°C"), "It is \u22123.5 °C in Moscow.", True),
    ("a lone negative number keeps its sign", numeric(3.5), "-3.5", False),
    ("the number in the wanted unit", numeric(20.0, abs_tol=0.05, unit="°C"), "68 °F, that is 20 °C.", True),
    ("only a number in another unit", numeric(20.0, abs_tol=0.05, unit="°C"), "68 °F", False),
    ("thousands separator", numeric(11440.64, abs_tol=0.01), "11,440.64 USD", True),
    ("a year is not the total", numeric(1234.5, abs_tol=0.01), "1234.50 USD in January to March 2024.\n"
     "ANSWER: 1234.50", True),
    ("number as text equals the number", exact(42), "42", True),
    ("number words are not parsed", numeric(42.0), "forty-two", False),
    ("a code value is taken as is", numeric(2.0, abs_tol=0.05), 2, True),
    ("a code value of the wrong type", exact(2), "2 apples", False),
    # sets and lists
    ("and joins the last item", set_equal(["BR", "DE"]), "BR and DE.", True),
    ("Oxford comma", set_equal(["Beijing", "Cairo", "Lima"]), "Beijing, Cairo, and Lima", True),
    ("an item with 'and' in it", set_equal(["Trinidad and Tobago", "Cairo"]), "Trinidad and Tobago, Cairo", True),
    ("one extra item", set_equal(["Beijing", "Cairo"]), "Beijing, Cairo, Moscow", False),
    ("a duplicate is not the set", set_equal(["Beijing", "Cairo"]), ["Beijing", "Beijing", "Cairo"], False),
    ("bullets", set_equal(["Beijing", "Cairo"]), "- Beijing\n- Cairo", True),
    ("bools are not numbers in a set", set_equal([1, 0]), [True, False], False),
    ("list order counts", list_equal([12, 17, 11]), [17, 12, 11], False),
    ("list as Python text", list_equal([12, 17, 11]), "ANSWER: [12, 17, 11]", True),
    ("list from a Python literal", list_equal(["a", "b"]), "['a', 'b']", True),
    ("exact with a set expected", exact({"Beijing", "Cairo"}), 'ANSWER: ["Cairo", "Beijing"]', True),
]


@pytest.mark.parametrize(("why", "check", "answer", "right"), CORPUS, ids=[row[0] for row in CORPUS])
def test_grading_corpus(why: str, check: Check, answer: Any, right: bool) -> None:
    assert check(answer) is right, why


def test_both_modes_are_asked_for_the_same_value_and_parse_alike() -> None:
    code, json_ = instruction("code"), instruction("json")
    assert "final_answer(value)" in code and "ANSWER: <value>" in json_
    assert code.split(" with ", 1)[1].rstrip(".") in json_  # the same description of the value
    for value in (2.0, "Cairo", ["Beijing", "Cairo"], {"a": 1}, -3, True):
        import json

        assert to_value(f"Done.\nANSWER: {json.dumps(value)}") == value  # json mode gives what code mode gives
    assert to_value("ANSWER: **Cairo**") == "Cairo" and to_value("no answer line") == "no answer line"
    assert to_value("ANSWER: " + "[" * 200_000) == "[" * 200_000  # too long to parse: kept as text
