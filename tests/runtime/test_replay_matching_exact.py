"""Replay's matching, exactly: the rebuild budget, the kernel's facts, the responder's answers and
divergences, the outcome check and the call comparison (main lane in order, concurrent as a
multiset, read_result ids mapped), called directly on constructed records (no kernel)."""

from __future__ import annotations

from typing import Any

import pytest

from codeact.errors import ReplayInterrupted, RestoreDiverged, ToolError
from codeact.results import CodeError, ExecutionResult, ToolCallError, ToolCallRecord
from codeact.runtime import _replay
from codeact.runtime._replay import (
    ReplayResponder,
    _check_calls,
    _check_outcome,
    _over_budget,
    _pair_ids,
    _short,
    _signature,
    kernel_facts,
    rebuild_budget,
)
from codeact.runtime.snapshot import CellRecord, output_digest
from codeact.runtime.toolset import Tool, Toolset
from codeact.tool_stubs.spec import ToolSpec


def _cell(index: int = 3, *, calls: list[ToolCallRecord] | None = None, **kw: Any) -> CellRecord:
    kw.setdefault("status", "completed")
    return CellRecord(index=index, code="pass", calls=calls or [], **kw)


def _call(id: str, name: str = "f", arguments: Any = None, *, ok: bool = True, result: Any = None,
          code: str | None = None, message: str = "m", retryable: bool = False) -> ToolCallRecord:
    error = ToolCallError(code=code, message=message, retryable=retryable) if code else None
    return ToolCallRecord(id=id, name=name, arguments={} if arguments is None else arguments,
                          ok=ok and code is None, result=result, error=error, finished=True)


def _result(**kw: Any) -> ExecutionResult:
    kw.setdefault("ok", True)
    kw.setdefault("termination", "completed")
    return ExecutionResult(**kw)


def _toolset(*names: str) -> Toolset:
    schema = {"type": "object", "properties": {"x": {"type": "integer"}}}
    return Toolset([Tool(spec=ToolSpec(name=n, description="", input_schema=schema), fn=lambda **a: a)
                    for n in names])


# -- rebuild_budget, _over_budget --------------------------------------------------------------------

def test_rebuild_budget_is_twice_the_recorded_time_plus_a_second_between_the_run_limit_and_the_cap() -> None:
    cells = [_cell(1, duration_ms=1000), _cell(2, duration_ms=500)]
    assert rebuild_budget(cells, 3.0, 100.0) == 4.0  # 2 * 1.5 + 1
    assert rebuild_budget(cells, 4.5, 100.0) == 4.5
    assert rebuild_budget(cells, 3.0, 3.5) == 3.5
    assert rebuild_budget([], 0.0, 100.0) == 1.0
    assert rebuild_budget([_cell(1, duration_ms=250)], 0.0, 100.0) == 1.5


def test_over_budget_names_the_cell_and_the_counts() -> None:
    cells = [_cell(1, duration_ms=1250), _cell(2, duration_ms=300)]
    exc = _over_budget(cells[1], 1, cells, 2.5)
    assert isinstance(exc, RestoreDiverged) and exc.cell == 2 and exc.call is None
    assert str(exc) == ("the rebuild passed its time budget of 2.5 s at cell 2 (1 of 2 cells replayed; they took "
                        "1.6 s when recorded): the replay is slower than the original, so it does not behave as "
                        "recorded")


# -- kernel_facts ----------------------------------------------------------------------------------

def test_kernel_facts_keeps_valid_fields_and_drops_malformed_ones() -> None:
    assert kernel_facts(None) is None
    assert kernel_facts([("lanes", "m")]) is None

    class Sub(dict):  # type: ignore[type-arg]
        pass

    assert kernel_facts(Sub(lanes="m")) is None
    assert kernel_facts({}) == {}
    assert kernel_facts({"lanes": "mcm", "threads": 0, "children": 2}) == {"lanes": "mcm", "threads": 0, "children": 2}
    assert kernel_facts({"lanes": ""}) == {"lanes": ""}
    for bad in ("mx", "c m", 5, ["m"]):
        assert kernel_facts({"lanes": bad}) == {}
    limit = _replay._MAX_COUNT
    assert limit == 1_000_000
    assert kernel_facts({"lanes": "m" * limit}) == {"lanes": "m" * limit}
    assert kernel_facts({"lanes": "m" * (limit + 1)}) == {}
    for name in ("threads", "children"):
        assert kernel_facts({name: limit}) == {name: limit}
        bad_counts: tuple[object, ...] = (limit + 1, -1, True, "1", 1.0)
        for count in bad_counts:
            assert kernel_facts({name: count}) == {}, (name, count)


# -- _short, _signature ---------------------------------------------------------------------------

def test_short_renders_sorted_json_and_cuts_at_the_limit() -> None:
    assert _short("f", {"b": 1, "a": [2]}) == 'f({"a":[2],"b":1})'
    assert _short("f", None) == "f(null)"
    at = "f(" + '"' + "a" * 195 + '"' + ")"  # 200 characters
    assert len(at) == 200 and _short("f", "a" * 195) == at
    over = _short("f", "a" * 196)
    assert len(over) == 200 and over == 'f("' + "a" * 196 + "…"
    assert _short("f", "abcdef", limit=6) == 'f("ab…'
    assert _short("f", "abc", limit=7) == 'f("abc")'[:6] + "…"
    assert _short("f", "ab", limit=7) == 'f("ab")'


def test_signature_of_each_outcome() -> None:
    assert _signature(_call("1", "f", {"x": 1})) == 'f({"x":1}) -> ok'
    assert _signature(_call("1", "f", code="timeout")) == "f({}) -> timeout"
    unfinished = ToolCallRecord(id="1", name="f", arguments={})
    assert _signature(unfinished) == "f({}) -> unfinished"


def test_signature_maps_read_result_ids_only_for_read_result() -> None:
    ids = {"r9": "r2"}
    assert _signature(_call("5", "read_result", {"call_id": "r9"}), ids) == 'read_result({"call_id":"r2"}) -> ok'
    assert _signature(_call("5", "read_result", {"call_id": "r9"})) == 'read_result({"call_id":"r9"}) -> ok'
    assert _signature(_call("5", "read_result", {"call_id": "r7"}), ids) == 'read_result({"call_id":"r7"}) -> ok'
    assert _signature(_call("5", "other", {"call_id": "r9"}), ids) == 'other({"call_id":"r9"}) -> ok'
    assert _signature(_call("5", "read_result", ["r9"]), ids) == 'read_result(["r9"]) -> ok'


# -- _pair_ids ------------------------------------------------------------------------------------

def test_pair_ids_maps_equal_calls_in_order_and_skips_read_result() -> None:
    cell = _cell(calls=[_call("a", "f", {"x": 1}), _call("b", "f", {"x": 2}), _call("c", "f", {"x": 1}),
                        _call("d", "read_result", {"call_id": "a"})])
    ids: dict[str, str] = {"old": "kept"}
    got = [_call("p", "f", {"x": 2}), _call("q", "f", {"x": 1}), _call("r", "f", {"x": 1}),
           _call("s", "f", {"x": 1}), _call("t", "read_result", {"call_id": "q"}), _call("u", "g")]
    _pair_ids(cell, got, ids)
    assert ids == {"old": "kept", "p": "b", "q": "a", "r": "c"}


def test_pair_ids_does_not_pair_a_read_result_that_matches_one() -> None:
    cell = _cell(calls=[_call("a", "read_result", {"call_id": "x"})])
    ids: dict[str, str] = {}
    _pair_ids(cell, [_call("b", "read_result", {"call_id": "x"})], ids)
    assert ids == {}


# -- _check_calls ---------------------------------------------------------------------------------

def _diverged(cell: CellRecord, got: list[ToolCallRecord], lanes: str | None,
              ids: dict[str, str] | None = None) -> RestoreDiverged:
    with pytest.raises(RestoreDiverged) as info:
        _check_calls(cell, got, lanes, ids)
    return info.value


A, B, C = {"x": 1}, {"x": 2}, {"x": 3}


def test_check_calls_main_lane_in_order_concurrent_as_multiset() -> None:
    cell = _cell(calls=[_call("1", "f", A), _call("2", "f", B), _call("3", "f", C)], lanes="mcm")
    _check_calls(cell, [_call("1", "f", A), _call("2", "f", C), _call("3", "f", B)], "mmc")
    _check_calls(cell, [_call("1", "f", B), _call("2", "f", A), _call("3", "f", C)], "cmm")
    exc = _diverged(cell, [_call("1", "f", C), _call("2", "f", B), _call("3", "f", A)], "mcm")
    assert exc.cell == 3 and exc.call == 1
    assert str(exc) == ('cell 3 diverged at its tool call 1: the replay called f({"x":3}) -> ok, but the recorded '
                        'sequence had f({"x":1}) -> ok there (the main thread\'s calls must come in the recorded order)')
    exc = _diverged(cell, [_call("1", "f", B), _call("2", "f", C), _call("3", "f", A)], "cmm")
    assert exc.call == 2 and 'had f({"x":1}) -> ok there' in str(exc)


def test_check_calls_main_lane_extra_and_missing_calls() -> None:
    cell = _cell(calls=[_call("1", "f", A)], lanes="m")
    exc = _diverged(cell, [_call("1", "f", A), _call("2", "f", B)], "mm")
    assert exc.call == 2 and "had no further call there" in str(exc)
    cell = _cell(calls=[_call("1", "f", A), _call("2", "f", B)], lanes="mm")
    exc = _diverged(cell, [_call("1", "f", A)], "m")
    assert exc.call is None
    assert str(exc) == 'cell 3 diverged: the replay ended without the recorded call f({"x":2}) -> ok'


def test_check_calls_concurrent_lane_mismatch_is_a_multiset_difference() -> None:
    cell = _cell(calls=[_call("1", "f", A), _call("2", "f", B)], lanes="mc")
    exc = _diverged(cell, [_call("1", "f", A), _call("2", "f", C)], "mc")
    assert exc.call is None
    assert str(exc) == ('cell 3 diverged: the replay called f({"x":3}) -> ok, unlike the recorded calls '
                        "(refused calls and built-ins count too)")
    exc = _diverged(cell, [_call("1", "f", A)], "m")
    assert str(exc).startswith('cell 3 diverged: the replay never called f({"x":2}) -> ok, unlike')
    # a call moved from the concurrent lane to the main one: the main lane has one too many
    exc = _diverged(cell, [_call("1", "f", A), _call("2", "f", B)], "mm")
    assert exc.call == 2


def test_check_calls_as_a_multiset_when_a_lane_is_unknown_or_misfits() -> None:
    calls = [_call("1", "f", A), _call("2", "f", B)]
    swapped = [_call("1", "f", B), _call("2", "f", A)]
    for cell_lanes, lanes in ((None, "mm"), ("mm", None), ("m", "mm"), ("mm", "m"), ("mmm", "mm")):
        _check_calls(_cell(calls=calls, lanes=cell_lanes), swapped, lanes)
    _check_calls(_cell(calls=calls), swapped, None)
    exc = _diverged(_cell(calls=calls), [_call("1", "f", A), _call("2", "f", A)], None)
    assert 'called f({"x":1}) -> ok' in str(exc)
    exc = _diverged(_cell(calls=calls), [_call("1", "f", A)], None)
    assert 'never called f({"x":2}) -> ok' in str(exc)
    # the outcome is part of a call's signature
    exc = _diverged(_cell(calls=calls), [_call("1", "f", A), _call("2", "f", B, code="timeout")], None)
    assert 'called f({"x":2}) -> timeout' in str(exc)


def test_check_calls_maps_read_result_ids_and_extends_the_map() -> None:
    cell = _cell(calls=[_call("r1", "f", A), _call("r2", "f", B), _call("r3", "read_result", {"call_id": "r2"})],
                 lanes="ccm")
    got = [_call("p1", "f", B), _call("p2", "f", A), _call("p3", "read_result", {"call_id": "p1"})]
    ids: dict[str, str] = {}
    _check_calls(cell, got, "ccm", ids)
    assert ids == {"p1": "r2", "p2": "r1"}
    # without the map, the read_result of the replay's id differs
    cell2 = _cell(calls=[_call("r3", "read_result", {"call_id": "r2"})], lanes="m")
    exc = _diverged(cell2, [_call("p3", "read_result", {"call_id": "p1"})], "m", {})
    assert exc.call == 1
    _check_calls(cell2, [_call("p3", "read_result", {"call_id": "p1"})], "m", {"p1": "r2"})
    _check_calls(cell2, [_call("p3", "read_result", {"call_id": "r2"})], "m")  # ids None: a fresh map


# -- _check_outcome -------------------------------------------------------------------------------

def test_check_outcome_stopped_from_outside_is_interrupted_not_diverged() -> None:
    cell = _cell()
    with pytest.raises(ReplayInterrupted) as info:
        _check_outcome(cell, _result(ok=False, termination="interrupted", reason="asked"))
    assert info.value.cell == 3 and info.value.requested is True
    assert str(info.value) == "the replay of cell 3 was stopped (interrupted: asked)"
    with pytest.raises(ReplayInterrupted) as info:
        _check_outcome(cell, _result(ok=False, termination="killed"))
    assert info.value.requested is False
    assert str(info.value) == "the replay of cell 3 was stopped (killed: no reason given)"


@pytest.mark.parametrize("termination", ["timeout", "output_limit", "rejected"])
def test_check_outcome_unfinished_run_diverges(termination: str) -> None:
    with pytest.raises(RestoreDiverged) as info:
        _check_outcome(_cell(), _result(ok=False, termination=termination, reason="why"))
    assert info.value.cell == 3
    assert str(info.value) == f"cell 3 did not finish on replay ({termination}: why); it was recorded as completed"


def test_check_outcome_state_lost_diverges_and_good_terminations_pass() -> None:
    with pytest.raises(RestoreDiverged, match=r"^cell 3 did not finish on replay \(completed: \)"):
        _check_outcome(_cell(), _result(state_lost=True))
    for termination in ("completed", "error", "memory"):
        _check_outcome(_cell(), _result(termination=termination))


def test_check_outcome_errors_against_the_record() -> None:
    err = CodeError(type="KeyError", message="k" * 400, lineno=4)
    with pytest.raises(RestoreDiverged) as info:
        _check_outcome(_cell(), _result(ok=False, termination="error", error=err))
    assert str(info.value) == ("cell 3 completed when recorded but raised on replay: KeyError at line 4: " + "k" * 300)
    raised = _cell(status="raised", error_type="KeyError", error_lineno=4)
    _check_outcome(raised, _result(ok=False, termination="error", error=err))
    with pytest.raises(RestoreDiverged) as info:
        _check_outcome(raised, _result())
    assert str(info.value) == "cell 3 raised KeyError at line 4 when recorded but completed on replay"
    for other in (CodeError(type="ValueError", message="", lineno=4), CodeError(type="KeyError", message="", lineno=5)):
        with pytest.raises(RestoreDiverged) as info:
            _check_outcome(raised, _result(ok=False, termination="error", error=other))
        assert str(info.value) == (f"cell 3 raised KeyError at line 4 when recorded but {other.type} at line "
                                   f"{other.lineno} on replay")
    _check_outcome(_cell(status="inexact"), _result(ok=False, termination="error", error=err))


# -- ReplayResponder --------------------------------------------------------------------------------

def test_responder_answers_equal_calls_in_any_order_and_raises_recorded_errors() -> None:
    responder = ReplayResponder(_toolset("f", "g"))
    cell = _cell(calls=[_call("1", "f", A, result="one"), _call("2", "g", B, code="upstream_error", message="down",
                                                                 retryable=True), _call("3", "f", A, result="three")])
    responder.begin(cell)
    with pytest.raises(ToolError) as info:
        responder.answer("g", {"x": 2})
    assert (info.value.code, info.value.message, info.value.retryable) == ("upstream_error", "down", True)
    assert responder.answer("f", {"x": 1}) == "one"
    assert responder.answer("f", {"x": 1}) == "three"
    responder.finish(_result(calls=[_call("1", "f", A), _call("2", "g", B, code="upstream_error"), _call("3", "f", A)]))
    cell = _cell(calls=[_call("1", "g", B, code="not_found", message="gone")])
    responder.begin(cell)
    with pytest.raises(ToolError) as info:
        responder.answer("g", {"x": 2})
    assert (info.value.code, info.value.retryable) == ("not_found", False)


def test_responder_skips_calls_refused_before_the_tool_and_unknown_tools() -> None:
    responder = ReplayResponder(_toolset("f"))
    cell = _cell(calls=[_call("1", "f", A, code="invalid_arguments"), _call("2", "f", A, code="unknown_tool"),
                        _call("3", "nope", A), _call("4", "f", A, code="denied", message="no")])
    responder.begin(cell)
    with pytest.raises(ToolError) as info:
        responder.answer("f", {"x": 1})
    assert info.value.code == "denied"
    assert responder.divergence is None
    with pytest.raises(ToolError) as info:
        responder.answer("f", {"x": 1})
    assert info.value.code == "replay_diverged"


def test_responder_keeps_arguments_that_fail_validation() -> None:
    responder = ReplayResponder(_toolset("f"))
    responder.begin(_cell(calls=[_call("1", "f", {"x": "not an int"}, result=7)]))
    assert responder.answer("f", {"x": "not an int"}) == 7


def test_responder_divergence_names_the_call_and_the_next_recorded_one_once() -> None:
    responder = ReplayResponder(_toolset("f"))
    responder.begin(_cell(calls=[_call("1", "f", A, result=1), _call("2", "f", B, result=2)]))
    assert responder.answer("f", {"x": 1}) == 1
    with pytest.raises(ToolError) as info:
        responder.answer("f", {"x": 3})
    assert info.value.code == "replay_diverged"
    assert info.value.message == "this call was not recorded; the replay stops here"
    div = responder.divergence
    assert div is not None and div.cell == 3 and div.call == 2
    assert str(div) == ('cell 3 diverged at its tool call 2: the replay asked for f({"x":3}), but the next recorded '
                        'call was f({"x":2}); the cell depends on something that was not recorded (random numbers, '
                        'the clock, the environment)')
    with pytest.raises(ToolError):
        responder.answer("f", {"x": 4})
    assert responder.divergence is div  # the first divergence is kept
    with pytest.raises(RestoreDiverged) as raised:
        responder.finish(_result())
    assert raised.value is div
    # begin clears it
    responder.begin(_cell(calls=[]))
    assert responder.divergence is None
    with pytest.raises(ToolError):
        responder.answer("f", {"x": 1})
    assert responder.divergence is not None and responder.divergence.call == 1
    assert "but no more calls were recorded;" in str(responder.divergence)


def test_responder_without_a_cell_records_no_divergence() -> None:
    responder = ReplayResponder(_toolset("f"))
    with pytest.raises(ToolError):
        responder.answer("f", {"x": 1})
    assert responder.divergence is None


def test_finish_reports_recorded_calls_left_unasked() -> None:
    responder = ReplayResponder(_toolset("f"))
    responder.begin(_cell(calls=[_call("1", "f", A), _call("2", "f", B), _call("3", "f", C)]))
    responder.answer("f", {"x": 1})
    with pytest.raises(RestoreDiverged) as info:
        responder.finish(_result(calls=[_call("1", "f", A)]))
    assert info.value.cell == 3 and info.value.call == 2
    assert str(info.value) == ('cell 3 diverged: the replay ended without the recorded call f({"x":2}) '
                               "(2 recorded calls left unasked)")
    assert responder.divergence is info.value


def _finished(cell: CellRecord, result: ExecutionResult, facts: dict[str, Any] | None = None) -> None:
    responder = ReplayResponder(_toolset("f"))
    responder.begin(cell)
    for record in cell.calls:
        if record.name == "f":
            try:
                responder.answer("f", record.arguments)
            except ToolError:
                pass
    responder.finish(result, facts)


def test_finish_checks_outcome_calls_with_lanes_and_output() -> None:
    cell = _cell(calls=[_call("1", "f", A), _call("2", "f", B)], lanes="mm")
    _finished(cell, _result(calls=[_call("1", "f", A), _call("2", "f", B)]), {"lanes": "mm"})
    _finished(cell, _result(calls=[_call("1", "f", B), _call("2", "f", A)]), None)  # lanes unknown: a multiset
    with pytest.raises(RestoreDiverged) as info:
        _finished(cell, _result(calls=[_call("1", "f", B), _call("2", "f", A)]), {"lanes": "mm"})
    assert info.value.call == 1
    with pytest.raises(RestoreDiverged, match="did not finish on replay"):
        _finished(cell, _result(ok=False, termination="timeout", calls=[_call("1", "f", A), _call("2", "f", B)]))
    out = _result(stdout="hello\n")
    _finished(_cell(output_digest=output_digest(out)), out)
    _finished(_cell(), out)  # no digest recorded: not compared
    with pytest.raises(RestoreDiverged) as info:
        _finished(_cell(output_digest=output_digest(out)), _result(stdout="bye\n"))
    assert str(info.value).startswith("cell 3 diverged: it wrote other output on replay than when recorded;")
    assert info.value.call is None


def test_finish_compares_threads_and_children_left_running() -> None:
    _finished(_cell(threads=1, children=0), _result(), {"threads": 1, "children": 0})
    _finished(_cell(), _result(), {"threads": 2, "children": 3})  # not recorded: not compared
    _finished(_cell(threads=1, children=0), _result(), {})  # not reported: not compared
    with pytest.raises(RestoreDiverged) as info:
        _finished(_cell(threads=1, children=0), _result(), {"threads": 2, "children": 0})
    assert str(info.value) == ("cell 3 diverged: threads left running: 2 on replay, 1 when recorded (what runs on "
                               "after a replay could call tools for real)")
    with pytest.raises(RestoreDiverged) as info:
        _finished(_cell(threads=1, children=0), _result(), {"threads": 1, "children": 1})
    assert str(info.value).startswith("cell 3 diverged: processes left running: 1 on replay, 0 when recorded")
    assert info.value.cell == 3


def test_toolset_for_replay_answers_from_the_record_without_a_timeout() -> None:
    responder = ReplayResponder(_toolset("f", "g"))
    replayed = responder.toolset_for_replay()
    assert [t.name for t in replayed] == ["f", "g"]
    assert all(t.policy.timeout_s is None for t in replayed)
    assert [t.spec for t in replayed] == [t.spec for t in responder.toolset]
    responder.begin(_cell(calls=[_call("1", "g", A, result="from g"), _call("2", "f", A, result="from f")]))
    by_name = {t.name: t for t in replayed}
    assert by_name["f"].fn is not None and by_name["g"].fn is not None
    assert by_name["f"].fn(x=1) == "from f"
    assert by_name["g"].fn(x=1) == "from g"
