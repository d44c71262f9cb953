"""The task hash and run fingerprint change when each input changes, and only then: every field of
a task, what its checker and tool factory reach (closures, defaults, keyword defaults, globals,
nested code), the run's configuration; plus the diff and the id."""

from __future__ import annotations

import datetime
import decimal
import enum
import fractions
import functools
import itertools
import re
from dataclasses import replace
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from codeact import SandboxConfig
from codeact.evals import fingerprint as fpmod
from codeact.evals._episode import RunConfig
from codeact.evals.checks import Check
from codeact.evals.fingerprint import ANSWER_PROTOCOL, diff, fingerprint, fingerprint_id, task_hash
from codeact.evals.providers import ModelSpec
from codeact.evals.suite import Suite, Task

TABLE = {"rate": 2}
TOLERANCE = 0.5


def _tools() -> list[Any]:
    return []


def _other_tools() -> list[Any]:
    return [TABLE]


def _task(**change: Any) -> Task:
    fields: dict[str, Any] = {"id": "t1", "instruction": "Do it.", "tools": _tools, "expected": 3}
    return Task(**{**fields, **change})


def test_each_task_field_changes_the_hash() -> None:
    base = task_hash(_task())
    assert task_hash(_task()) == base and len(base) == 16
    changes = [{"instruction": "Do it again."}, {"expected": 4}, {"expected": "3"}, {"budget": {"max_turns": 3}},
               {"tags": ("x",)}, {"scripts": {"code": [{"text": "hi"}]}}, {"tools": _other_tools},
               {"check": Check("named", lambda a: a == 3)}]
    hashes = [task_hash(_task(**c)) for c in changes]
    assert base not in hashes and len(set(hashes)) == len(hashes)
    assert task_hash(_task(id="t2")) == base  # the id is the key, not the content


def test_the_checker_code_and_what_it_reaches() -> None:
    def by_closure(limit: float) -> Check:
        return Check("near", lambda a: abs(a - 3) <= limit)

    assert task_hash(_task(check=by_closure(0.1))) != task_hash(_task(check=by_closure(0.2)))
    assert task_hash(_task(check=by_closure(0.1))) == task_hash(_task(check=by_closure(0.1)))

    def with_default(a: Any, tol: float = 0.1) -> bool:
        return abs(a - 3) <= tol

    def with_kwdefault(a: Any, *, tol: float = 0.1) -> bool:
        return abs(a - 3) <= tol

    for fn in (with_default, with_kwdefault):
        one = task_hash(_task(check=Check("c", fn)))
        if fn.__defaults__:
            fn.__defaults__ = (0.2,)
        else:
            fn.__kwdefaults__ = {"tol": 0.2}
        assert task_hash(_task(check=Check("c", fn))) != one, fn.__name__


def _reads_global(a: Any) -> bool:
    return bool(abs(a - 3) <= TOLERANCE)


def _reads_in_a_comprehension(a: Any) -> bool:
    return any(v == TABLE["rate"] for v in [a])  # TABLE named by the generator's own code


@pytest.mark.parametrize(("fn", "name", "changed"), [
    (_reads_global, "TOLERANCE", 0.25), (_reads_in_a_comprehension, "TABLE", {"rate": 3})])
def test_module_globals_named_by_the_code_count(monkeypatch: pytest.MonkeyPatch, fn: Any, name: str,
                                                changed: Any) -> None:
    one = task_hash(_task(check=Check("c", fn)))
    monkeypatch.setattr(f"{__name__}.{name}", changed)
    assert task_hash(_task(check=Check("c", fn))) != one


def test_partials_and_bound_methods() -> None:
    def near(limit: float, a: Any) -> bool:
        return bool(abs(a - 3) <= limit)

    assert task_hash(_task(check=functools.partial(near, 0.1))) != task_hash(_task(check=functools.partial(near, 0.2)))
    kw = [task_hash(_task(check=functools.partial(near, limit=x))) for x in (0.1, 0.2)]
    assert kw[0] != kw[1]

    class Holder:
        def __init__(self, v: int) -> None:
            self.v = v

        def check(self, a: Any) -> bool:
            return bool(a == self.v)

    assert fpmod._identity(Holder(1).check)[0] == fpmod._identity(Holder(2).check)[0]


def test_data_values_are_typed_and_stable() -> None:
    budget = [fpmod._MAX_DATA]
    assert fpmod._data(1, budget) == 1 and fpmod._data(True, budget) is True and fpmod._data("s", budget) == "s"
    assert fpmod._data(1.0, budget) == ["float", "1.0"] and fpmod._data(b"x", budget) == ["bytes", "b'x'"]
    assert fpmod._data(1j, budget) == ["complex", "1j"] and fpmod._data(None, budget) is None
    assert fpmod._data((1,), budget) != fpmod._data([1], budget)
    assert fpmod._data({3, 1, 2}, budget) == ["set", [1, 2, 3]] == fpmod._data(frozenset({2, 3, 1}), budget)
    assert fpmod._data({"b": 1, "a": 2}, budget) == ["map", [["a", 2], ["b", 1]]]
    assert fpmod._data(re.compile("a+", re.I), budget) == ["pattern", "a+", re.I | re.U]
    assert fpmod._data(re.compile(b"a"), budget) == ["pattern", "b'a'", re.compile(b"a").flags]

    class Colour(enum.Enum):
        RED = 1

    for value in (Colour.RED, decimal.Decimal("1.5"), fractions.Fraction(1, 3), datetime.date(2020, 1, 2),
                  datetime.time(1, 2), datetime.timedelta(seconds=3)):
        assert fpmod._data(value, budget) == repr(value)
    assert fpmod._data(object(), budget) is None
    assert fpmod._data([1, 2, 3], [2]) == ["list", [1, "…", "…"]]  # the budget cuts a huge value
    assert fpmod._data(1, [0]) == "…" and fpmod._data(1, [1]) == 1


def test_identity_follows_wrappers_and_stops() -> None:
    check = Check("c", _reads_global)
    assert fpmod._identity(check)[0] == "wraps" and fpmod._identity(check)[1] == "c"
    assert fpmod._identity(len) == "builtins.len"
    assert fpmod._identity([1, 2]) == ["list", [1, 2]]
    assert fpmod._identity(_tools, depth=5) is None and fpmod._identity(_tools, depth=4) is not None
    seen = {id(_tools)}
    assert fpmod._identity(_tools, seen=seen) is None
    source, reached = fpmod._identity(_other_tools)
    assert "def _other_tools" in source and reached == {"global:TABLE": ["map", [["rate", 2]]]}
    _, only_data = fpmod._identity(_reads_global)
    assert "global:abs" not in only_data and "global:bool" not in only_data  # builtins are not globals


zeta_table = [1, 2]


def _uses_a_module_a_class_and_data(a: Any) -> bool:
    return isinstance(a, enum.Enum) or isinstance(a, Check) or a in zeta_table


def test_modules_and_classes_are_named_by_the_source_and_data_after_them_counts() -> None:
    _, reached = fpmod._identity(_uses_a_module_a_class_and_data)
    assert reached == {"global:zeta_table": ["list", [1, 2]]}


def _chain(n: int) -> Any:
    fns: list[Any] = []
    for i in range(n):
        namespace: dict[str, Any] = {}
        exec(f"def f{i}():\n    return f{i + 1}()", namespace)
        fns.append(namespace[f"f{i}"])
    for fn, nxt in itertools.pairwise(fns):
        fn.__globals__[nxt.__name__] = nxt
    return fns[0]


def test_identity_follows_five_levels_of_code() -> None:
    node = fpmod._identity(_chain(7))
    levels = 0
    while node is not None:
        levels += 1
        (node,) = node[1].values()
    assert levels == 5  # depths 0 to 4

    def near(limit: float, a: Any) -> bool:
        return bool(abs(a - 3) <= limit)

    assert fpmod._identity(functools.partial(near, 1), depth=3)[1] is not None
    assert fpmod._identity(functools.partial(near, 1), depth=4)[1] is None
    assert fpmod._identity(Check("c", near), depth=3)[2] is not None
    assert fpmod._identity(Check("c", near), depth=4)[2] is None
    assert fpmod._identity(near, depth=4) is not None and fpmod._identity(near, depth=5) is None


def test_a_closure_cell_not_assigned_yet_is_left_out() -> None:
    def outer() -> Any:
        def inner() -> Any:
            return later

        if not inner:
            later = 1
        return inner

    source, reached = fpmod._identity(outer())
    assert "return later" in source and reached == {}


def test_the_digest_is_sha256_of_sorted_unescaped_json() -> None:
    import hashlib
    import json

    value = {"b": "é", "a": [1, {"d": 1, "c": 2}]}
    text = json.dumps(value, sort_keys=True, ensure_ascii=False)
    assert fpmod._digest(value) == hashlib.sha256(text.encode()).hexdigest()[:16]
    mixed = {1: "é", "a": 2}
    assert fpmod._digest(mixed) == hashlib.sha256(json.dumps(mixed, ensure_ascii=False).encode()).hexdigest()[:16]


def test_a_suite_module_name_is_neutral() -> None:
    def f() -> None: ...

    f.__module__ = fpmod._SUITE_MODULE + "123"
    assert fpmod._name(f).startswith("suite.")
    assert fpmod._name(len) == "builtins.len"


def test_digest_handles_sets_and_mixed_keys() -> None:
    assert fpmod._digest({"a": {3, 1}}) == fpmod._digest({"a": {1, 3}})
    assert fpmod._digest({1: "x", "a": "y"}) != fpmod._digest({1: "x", "a": "z"})  # unsortable keys still hash
    assert len(fpmod._digest(object())) == 16


def _config(**change: Any) -> RunConfig:
    base = RunConfig(suite_ref="s", model=ModelSpec(), sandbox=SandboxConfig(backend="local"), out_dir="/tmp/x")
    return replace(base, **change)


def test_each_run_setting_changes_the_fingerprint_and_the_out_dir_does_not() -> None:
    suite = Suite("s", [_task()])
    base = fingerprint(_config(), suite)
    assert base["answer_protocol"] == ANSWER_PROTOCOL and "check" not in base and base["system_prompt"] is None
    assert base["tasks"] == {"t1": task_hash(_task())} and "backend" not in base["sandbox"]
    assert fingerprint(_config(out_dir="/elsewhere", tasks=("t1",)), suite) == base
    changes = [{"suite_ref": "other"}, {"model": ModelSpec(wire="anthropic")}, {"model": ModelSpec(base_url="http://x")},
               {"budget": {"max_turns": 2}}, {"sandbox": SandboxConfig(backend="docker")},
               {"sandbox": SandboxConfig(backend="local", timeout_s=7)}, {"stream": True}, {"system_prompt": "P"},
               {"check": "block"}]
    ids = {fingerprint_id(fingerprint(_config(**c), suite)) for c in changes}
    assert fingerprint_id(base) not in ids and len(ids) == len(changes)
    assert fingerprint(_config(system_prompt="P"), suite)["system_prompt"] == fpmod._digest("P")
    assert list(fingerprint(_config(budget={"b": 1, "a": 2}), suite)["budget"]) == ["a", "b"]


def test_fingerprint_id_takes_the_own_task_only() -> None:
    fp = {"model": "m", "tasks": {"a": "h1", "b": "h2"}}
    assert fingerprint_id(fp, "a") != fingerprint_id(fp, "b") != fingerprint_id(fp)
    assert fingerprint_id(fp, "a") == fingerprint_id({**fp, "tasks": {"a": "h1", "b": "changed"}}, "a")
    assert fingerprint_id(fp, "a") != fingerprint_id({**fp, "model": "n"}, "a")
    assert fingerprint_id({"model": "m"}, "a") == fingerprint_id({"model": "m", "tasks": {}}, "a")


def test_diff_lists_each_field_and_changed_tasks_only() -> None:
    old = {"model": "m", "sandbox": {"a": 1, "b": {"c": 2}}, "tasks": {"t1": "x", "t2": "y"}}
    new = {"model": "n", "sandbox": {"a": 1, "b": {"c": 3}}, "extra": 1, "tasks": {"t1": "x", "t2": "z", "t3": "w"}}
    assert diff(old, new) == ["extra: '(none)' → 1", "model: 'm' → 'n'", "sandbox.b.c: 2 → 3",
                              "task content changed: t2"]
    assert diff(old, old) == [] and diff({}, {}) == []


@settings(max_examples=40, deadline=None)
@given(st.recursive(st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(max_size=4),
                    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=3), inner, max_size=3)
                    | st.frozensets(st.integers(), max_size=3), max_leaves=10))
def test_the_hash_of_plain_data_is_stable_and_tells_types_apart(value: Any) -> None:
    one = task_hash(_task(expected=value if value is not None else 0))
    assert task_hash(_task(expected=value if value is not None else 0)) == one
    assert fpmod._data(value, [fpmod._MAX_DATA]) == fpmod._data(value, [fpmod._MAX_DATA])
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        assert fpmod._data(value, [9]) != fpmod._data(str(value), [9])
