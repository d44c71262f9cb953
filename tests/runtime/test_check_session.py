"""The check in a real session (Docker): ``warn`` runs and reports, ``block`` leaves a cell with an
error unrun (no call, namespace and ledger untouched), and later cells may use what earlier cells
made, however they made it (the kernel reports the names each cell bound)."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from codeact import Runtime, SandboxConfig, render_observation
from codeact.runtime.snapshot import Snapshot
from tests.conftest import Counter, make_tools

pytestmark = pytest.mark.docker


@pytest.fixture(scope="module")
def counter() -> Counter:
    return Counter()


@pytest.fixture(scope="module")
def blocking(docker_image: str, counter: Counter) -> Iterator[Runtime]:
    with Runtime(make_tools(counter), SandboxConfig(timeout_s=20, policy="none"), check="block") as rt:
        yield rt


def test_a_rejected_cell_does_not_run_and_changes_nothing(blocking: Runtime, counter: Counter) -> None:
    with blocking.session() as session:
        first = session.run("x = 1\nw = get_weather('Beijing')")
        assert first.ok and len(first.calls) == 1
        before = counter.count("get_weather"), len(session.cells), session.calls.cache.copy()
        code = "x = 2\nget_weather('Beijing')\nprint('ran')\nget_weather(citty='Beijing')"
        result = session.run(code)
        assert (result.ok, result.termination, result.calls, result.stdout) == (False, "rejected", [], "")
        assert [(d.line, d.code) for d in result.diagnostics] == [(4, "missing-argument"), (4, "unknown-argument")]
        assert (counter.count("get_weather"), len(session.cells), session.calls.cache) == before
        observation = render_observation(result)
        assert observation.startswith("rejected before running (2 errors; nothing ran, no tool was called):")
        assert "- line 4, col 13: error [unknown-argument] get_weather() got an unexpected keyword argument " \
               "'citty'; did you mean 'city'?" in observation
        after = session.run("x")
        assert after.value == 1 and after.diagnostics == []  # the rejected cell's x = 2 never ran
        # the ledger numbered no call for the rejected cell: the next call takes the next number
        second = session.run("w2 = get_weather('Beijing')").calls[0].id
        assert (first.calls[0].id[:-1], int(first.calls[0].id[-1]) + 1) == (second[:-1], int(second[-1]))


def test_later_cells_use_what_earlier_cells_made(blocking: Runtime) -> None:
    made = ("import json\nfrom collections import Counter as C\ndef helper(v):\n    return v * 2\n"
            "class Box:\n    pass\nexec('from_exec = 3')\nglobals()['from_globals'] = 4\n"
            "for loop_var in range(2):\n    pass\n")
    with blocking.session() as session:
        assert session.run(made).ok
        uses = "print(json.dumps(helper(from_exec)), C, Box, from_globals, loop_var)"
        assert session.check(uses) == []
        result = session.run(uses)
        assert result.ok and result.stdout == "6 <class 'collections.Counter'> <class '__main__.Box'> 4 1\n"
        # the exec-made names came from the kernel's report, so a name nobody made is still certain
        missing = session.run("print(never_made)")
        assert missing.termination == "rejected" and missing.diagnostics[0].code == "undefined-name"


def test_too_many_new_names_make_the_namespace_unknown(blocking: Runtime) -> None:
    """Past the kernel's cap of names in one report (5000), it says "cannot tell": no name is then
    certainly missing, so nothing is rejected for one."""
    with blocking.session() as session:
        assert session.run("exec(''.join(f'n{i} = {i}\\n' for i in range(5001)))").ok
        assert [d.severity for d in session.check("print(n5000, never_made)")] == ["warning", "warning"]
        assert session.run("print(n5000)").stdout == "5000\n"


def test_warn_runs_the_cell_and_says_what_it_found(docker_image: str, counter: Counter) -> None:
    with Runtime(make_tools(counter), SandboxConfig(timeout_s=20, policy="none")) as rt:
        assert rt.check_mode == "warn"
        result = rt.run("print('before')\nget_weather(city=1)")
    assert result.termination == "error" and result.stdout == "before\n"
    assert [(d.line, d.code, d.severity) for d in result.diagnostics] == [(2, "argument-type", "error")]
    assert render_observation(result).startswith("check (1 finding, the code ran anyway):\n- line 2, col 18")


def test_with_the_check_off_a_session_still_learns_what_its_cells_bind(docker_image: str, counter: Counter) -> None:
    """``check="off"``: no diagnostics in results, but ``Session.check`` still knows each cell's
    names, as read while it ran (a name only a function body binds is in the superset too) and as
    the kernel reported them."""
    with Runtime(make_tools(counter), SandboxConfig(timeout_s=20, policy="none"), check="off") as rt, \
            rt.session() as session:
        first = session.run("def helper():\n    inner = 1\n    return inner\nexec('from_exec = 2')\nget_weather(city=1)")
        assert first.diagnostics == [] and first.termination == "error"
        assert session.run("y = 3").ok
        assert session.check("print(helper, inner, from_exec, y)") == []
        assert [d.code for d in session.check("print(never_made)")] == ["undefined-name"]


def test_batch_items_and_restored_cells_are_known_names(blocking: Runtime) -> None:
    results = blocking.map("item * 2", [1, 2])
    assert [r.value for r in results] == [2, 4]  # `item` is bound by the batch, not by the code
    with blocking.session() as session:
        assert session.run("kept = 5").ok
        snapshot = Snapshot.model_validate_json(session.snapshot().model_dump_json())
    restored = blocking.restore(snapshot, lazy=True)
    with restored:
        result = restored.run("kept + 1")
        assert result.ok and result.value == 6, result


def test_the_check_mode_is_checked() -> None:
    with pytest.raises(ValueError, match="check must be one of 'off', 'warn', 'block'"):
        Runtime([], check="strict")  # type: ignore[arg-type]


def test_a_hostile_namespace_key_leaves_the_names_unknown_not_the_run_broken(blocking: Runtime) -> None:
    # a key that collides with a name the kernel knows and whose == raises once armed
    code = ("class Key:\n    armed = False\n    def __hash__(self):\n        return hash('ToolError')\n"
            "    def __eq__(self, other):\n        if Key.armed:\n            raise ValueError('no')\n"
            "        return self is other\nglobals()[Key()] = 1\nKey.armed = True\n")
    with blocking.session() as session:
        assert session.run(code).ok
        assert session.run("print('next')").stdout == "next\n"
        assert {d.severity for d in session.check("print(never_made)")} == {"warning"}  # cannot tell now
