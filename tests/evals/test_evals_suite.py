"""Suites and checkers: loading by name, file, directory and module; what each checker accepts."""

from __future__ import annotations

import textwrap
from pathlib import Path

import pytest

from codeact import Toolset, tool
from codeact.evals.checks import custom, decode, exact, list_equal, numeric, set_equal
from codeact.evals.suite import EpisodeKey, Suite, Task, load_suite


@tool
def ping() -> str:
    """Answer pong."""
    return "pong"


def _tools() -> Toolset:
    return Toolset([ping])


def test_decode_unwraps_json_fences_and_prefixes() -> None:
    assert decode('```json\n{"a": 1}\n```') == {"a": 1}
    assert decode("Answer: [1, 2]") == [1, 2]
    assert decode("  Cairo ") == "Cairo"
    assert decode(3.5) == 3.5


def test_exact() -> None:
    check = exact("Cairo")
    assert check("Cairo") and check(" cairo. ") and check('"Cairo"')
    assert not check("Cairo, Egypt") and not check(None)
    assert exact({"a": 1})('{"a": 1}') and not exact({"a": 1})({"a": 2})


def test_numeric_takes_the_first_number_of_a_text() -> None:
    check = numeric(2.0, abs_tol=0.05)
    assert check(2) and check("2.04") and check("Beijing is 2.0 °C warmer (20.0 vs 18.0)")
    assert not check("20.0 vs 18.0") and not check("no idea") and not check(True)
    assert numeric(11440.64, abs_tol=0.01)("11,440.64 USD")


def test_set_and_list_equality() -> None:
    assert set_equal(["Beijing", "Cairo"])("cairo, Beijing")
    assert set_equal(["Beijing", "Cairo"])(["Cairo", "Beijing"])
    assert set_equal(["BR", "DE"])("BR and DE.")
    assert not set_equal(["Beijing", "Cairo"])("Beijing, Cairo, Moscow")
    assert set_equal([12, 15])("12, 15") and set_equal([12, 15])([15.0, 12])
    assert list_equal([12, 17, 11])("[12, 17, 11]") and not list_equal([12, 17, 11])([17, 12, 11])


def test_custom_checker_and_a_crashing_one() -> None:
    assert custom(lambda a: a["x"] > 1)('{"x": 2}')
    assert not custom(lambda a: a["missing"])({"x": 2})  # a checker that raises grades wrong, never crashes


def test_task_validation() -> None:
    with pytest.raises(ValueError, match="letters"):
        Task(id="bad id", instruction="x", tools=_tools, expected=1)
    with pytest.raises(ValueError, match="expected"):
        Task(id="t", instruction="x", tools=_tools)
    with pytest.raises(ValueError, match="unknown modes"):
        Task(id="t", instruction="x", tools=_tools, expected=1, scripts={"yaml": []})
    with pytest.raises(ValueError, match="duplicate"):
        Suite("s", [Task(id="t", instruction="x", tools=_tools, expected=1)] * 2)
    # a field of the wrong kind fails at load, not as every episode's harness failure or wrong grade
    with pytest.raises(TypeError, match="check must be a Check or a predicate"):
        Task(id="t", instruction="x", tools=_tools, check="5")  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="budget field 'max_turn'"):
        Task(id="t", instruction="x", tools=_tools, expected=1, budget={"max_turn": 3})
    with pytest.raises(ValueError, match="budget field 'max_turns'"):
        Task(id="t", instruction="x", tools=_tools, expected=1, budget={"max_turns": "three"})
    with pytest.raises(TypeError, match="instruction"):
        Task(id="t", instruction=None, tools=_tools, expected=1)  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="tags"):
        Task(id="t", instruction="x", tools=_tools, expected=1, tags="fast")  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="list of replies"):
        Task(id="t", instruction="x", tools=_tools, expected=1, scripts={"code": "final_answer(1)"})
    with pytest.raises(ValueError, match="item 1 of its tasks is a str"):
        Suite("s", [Task(id="t", instruction="x", tools=_tools, expected=1), "junk"])  # type: ignore[list-item]
    task = Task(id="t", instruction="x", tools=_tools, expected="pong")
    assert task.grade("pong") and task.make_tools().names == ["ping"]
    assert task.make_tools() is not task.make_tools()  # fresh tool state per episode


def test_episode_key_round_trip() -> None:
    key = EpisodeKey("weather.compare", "json", 3)
    assert EpisodeKey.parse(str(key)) == key


@pytest.mark.parametrize("name", ["weather", "data", "multitool"])
def test_builtin_suites_have_scripts_for_both_modes(name: str) -> None:
    suite = load_suite(name)
    assert suite.name == name and suite.ref == name and len(suite) >= 5
    for task in suite:
        assert set(task.scripts) == {"code", "json"}, task.id
        assert len(task.make_tools()) >= 2


def test_weather_suite_covers_the_seed_cases() -> None:
    ids = load_suite("weather").ids
    for case in ("compare", "convert", "ambiguous_city", "timeout", "warmest"):
        assert f"weather.{case}" in ids


def test_select_by_id_and_tag() -> None:
    suite = load_suite("weather", ["weather.compare", "weather.convert"])
    assert suite.ids == ["weather.compare", "weather.convert"]
    with pytest.raises(KeyError):
        load_suite("weather", ["nope"])


def _write(path: Path, text: str) -> None:
    path.write_text(textwrap.dedent(text), encoding="utf-8")


_TASK_FILE = """
from codeact import Toolset, tool
from codeact.evals.suite import Task

@tool
def ping() -> str:
    \"\"\"Answer pong.\"\"\"
    return "pong"

TASKS = [Task(id="{id}", instruction="Say pong", tools=lambda: Toolset([ping]), expected="pong",
              scripts={{"code": ["pong"], "json": ["pong"]}})]
"""


def test_load_from_file_directory_and_module(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    one = tmp_path / "one.py"
    _write(one, _TASK_FILE.format(id="one.ping"))
    suite = load_suite(str(one))
    assert suite.name == "one" and suite.ids == ["one.ping"] and suite.ref == str(one.resolve())

    folder = tmp_path / "mysuite"
    folder.mkdir()
    _write(folder / "a_first.py", _TASK_FILE.format(id="a.ping"))
    _write(folder / "b_second.py", _TASK_FILE.format(id="b.ping"))
    _write(folder / "_helpers.py", "raise RuntimeError('not a task file')\n")
    suite = load_suite(str(folder))
    assert suite.name == "mysuite" and suite.ids == ["a.ping", "b.ping"]

    monkeypatch.syspath_prepend(str(tmp_path))
    pkg = tmp_path / "pkgsuite"
    pkg.mkdir()
    _write(pkg / "__init__.py", _TASK_FILE.format(id="pkg.ping").replace("TASKS =", "_T =")
           + "\nfrom codeact.evals.suite import Suite\nSUITE = Suite('pkgsuite', _T)\n")
    assert load_suite("pkgsuite").ids == ["pkg.ping"]  # a dotted module name
    assert load_suite(str(pkg)).ids == ["pkg.ping"]  # the same package as a directory


def test_a_broken_suite_file_is_one_clear_error(tmp_path: Path) -> None:
    cases = {"syntax": ("TASKS = [", "line 1: SyntaxError"),
             "imports": ("import no_such_module_xyz\nTASKS = []", "ModuleNotFoundError"),
             "not_a_list": (_TASK_FILE.format(id="t") + "\nTASKS = TASKS[0]\n", "TASKS must be a list of Task"),
             "empty": ("TASKS = []", "the suite has no tasks")}
    for name, (text, said) in cases.items():
        path = tmp_path / f"{name}.py"
        _write(path, text)
        with pytest.raises(ValueError, match=said):
            load_suite(str(path))


def test_an_edited_suite_file_is_loaded_again(tmp_path: Path) -> None:
    # A notebook edits its suite and loads it again: the new content, not the module imported before.
    path = tmp_path / "edited.py"
    _write(path, _TASK_FILE.format(id="first"))
    assert load_suite(str(path)).ids == ["first"]
    _write(path, _TASK_FILE.format(id="second") + "\n# longer now\n")
    assert load_suite(str(path)).ids == ["second"]


def test_unknown_suite_says_what_is_known() -> None:
    with pytest.raises(ValueError, match="weather"):
        load_suite("no.such.suite")


def test_public_names_are_pinned_and_optional_extras_stay_lazy() -> None:
    import subprocess
    import sys

    import codeact.evals

    assert sorted(codeact.evals.__all__) == sorted([
        "MODES", "Check", "EpisodeKey", "EpisodeResult", "ModelSpec", "ResultsStore", "RunMeta", "RunSummary",
        "ScriptedProvider", "Suite", "Task", "custom", "exact", "function_code", "list_equal", "load_run",
        "load_suite", "map_code", "numeric", "run_suite", "set_equal", "summarize", "wilson", "write_report",
    ])
    probe = "import sys, codeact.evals, codeact.cli; print(sorted({'ray', 'matplotlib'} & set(sys.modules)))"
    out = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "[]"
