"""The call ledger's exact counting: each bound at N allowed / N+1 refused, ids, kept results,
message cuts, and every record ending exactly once."""

from __future__ import annotations

import json
import threading
import types
from typing import Any

import pytest

from codeact.errors import ToolError
from codeact.results import ToolCallError, ToolCallRecord
from codeact.runtime import cutoffs
from codeact.runtime import ledger as ledger_module
from codeact.runtime._accepted import Refusal
from codeact.runtime.ledger import CallLedger, CallStore, cache_key, stand_in
from codeact.runtime.limits import CallLimits


def _open(ledger: CallLedger, name: str, arguments: Any = None, size: int = 0, **limits: int) -> ToolCallRecord:
    record = ledger.arrive(name, arguments, size, CallLimits(**limits))
    assert isinstance(record, ToolCallRecord)
    return record


def _refused(ledger: CallLedger, size: int, problem: ToolError | None = None, early: bool = False,
             **limits: int) -> Refusal:
    refusal = ledger.arrive("t", {"a": 1}, size, CallLimits(**limits), problem, early)
    assert isinstance(refusal, Refusal)
    return refusal


def test_arrive_allows_exactly_max_calls_then_refuses_unrecorded() -> None:
    ledger = CallLedger()
    assert [_open(ledger, "t", {}, 1, max_calls_per_run=3).id for _ in range(3)] == ["call_1", "call_2", "call_3"]
    refusal = _refused(ledger, 1, max_calls_per_run=3)
    assert refusal.record is None and refusal.payload["error"]["code"] == "permission_denied"
    assert ledger.arrived == 4 and ledger.argument_bytes == 3 and len(ledger.final_records()) == 3


def test_arrive_allows_exactly_max_bytes_then_refuses_recorded() -> None:
    ledger = CallLedger()
    _open(ledger, "t", {}, 6, max_run_argument_bytes=10)
    _open(ledger, "t", {}, 4, max_run_argument_bytes=10)  # 10 of 10: at the bound, allowed
    refusal = _refused(ledger, 1, max_run_argument_bytes=10)  # a refused call's bytes are not counted
    assert refusal.record is not None and refusal.record.finished and refusal.record.error is not None
    assert refusal.record.error.code == "permission_denied" and "in all" in refusal.record.error.message
    assert refusal.payload == {"ok": False, "error": refusal.record.error.model_dump()}
    assert ledger.argument_bytes == 10 and ledger.store.in_flight == 2
    assert _refused(CallLedger(), 11, max_run_argument_bytes=10).record is not None


def test_arrive_allows_exactly_max_in_flight_then_refuses() -> None:
    ledger = CallLedger()
    first = _open(ledger, "a", 1, max_in_flight_per_session=1)
    refusal = _refused(ledger, 0, max_in_flight_per_session=1)  # one in flight of 1
    assert refusal.record is not None and refusal.record.error is not None
    assert refusal.record.error.code == "rate_limited" and refusal.record.error.retryable
    assert ledger.store.in_flight == 1
    ledger.finish(first, result=None)
    assert ledger.store.in_flight == 0
    _open(ledger, "a", 3, max_in_flight_per_session=1)
    assert ledger.counts == {"a": 2, "t": 1}


def test_arrive_puts_an_early_problem_before_the_bounds_and_a_late_one_after() -> None:
    bad = ToolError("invalid_arguments", "too big")
    early = _refused(CallLedger(), 11, bad, early=True, max_run_argument_bytes=10)
    assert early.payload["error"]["message"] == "too big"
    assert early.record is not None and early.record.arguments == {"truncated": True, "bytes": 11}
    late = _refused(CallLedger(), 11, bad, max_run_argument_bytes=10)
    assert late.payload["error"]["code"] == "permission_denied"  # the run's bound comes first
    alone = _refused(CallLedger(), 5, bad)
    assert alone.payload["error"]["message"] == "too big"
    assert alone.record is not None and alone.record.arguments == {"a": 1}  # small: kept as given
    big = CallLedger().arrive("\ud800" + "n" * 300, ["x" * 2000], 2010, CallLimits(), bad)
    assert isinstance(big, Refusal) and big.record is not None
    assert len(big.record.name) == 200 and big.record.name[0] == "\ufffd"
    assert big.record.arguments["truncated"] and len(big.record.arguments["preview"]) == 512


def test_admit_allows_exactly_limit_per_tool() -> None:
    ledger = CallLedger()
    assert [ledger.admit("a", 2) for _ in range(3)] == [True, True, False]
    assert [ledger.admit("b", 2) for _ in range(3)] == [True, True, False]
    assert all(ledger.admit("c", None) for _ in range(50))
    assert ledger.admit("d", 0) is False


def test_start_and_begin_refuse_an_ended_record() -> None:
    ledger = CallLedger()
    record = _open(ledger, "t", {})
    other = _open(ledger, "t", {})
    assert not ledger.begun(record)
    assert ledger.start(record, 1) is True and ledger.begun(record)
    assert ledger.start(other, 1) is False  # the tool's limit of 1 is used up
    ended = _open(ledger, "t", {})
    assert ledger.finish(ended, error=ToolCallError(code="timeout", message="m")) is True
    assert ledger.start(ended, None) is None and ledger.begin(ended) is False and not ledger.begun(ended)
    fresh = _open(ledger, "u", {})
    assert ledger.begin(fresh) is True and ledger.begun(fresh)


def test_ids_are_sequential_across_ledgers_of_one_store() -> None:
    store = CallStore()
    first, second = CallLedger(store), CallLedger(store, prefix="x")
    assert [_open(first, "a", {}).id, _open(second, "a", {}).id, _open(first, "b", {}).id] == ["call_1", "x_2", "call_3"]
    assert store.in_flight == 3 and first.counts == {"a": 1, "b": 1} and first.count("a") == 1
    assert first.count("zzz") == 0


def test_store_of_a_plain_dict_is_made_once_and_shares_the_cache() -> None:
    cache: dict[str, object] = {}
    one, two = CallLedger(cache), CallLedger(cache)
    assert one.store is two.store and one.cache is cache
    assert CallStore.of(cache) is one.store
    assert CallLedger().store is not CallLedger().store


def test_finish_ends_once_and_gives_back_the_in_flight_count() -> None:
    ledger = CallLedger()
    record = _open(ledger, "t", {"a": 1})
    assert ledger.finish(record, result={"r": 1}) is True
    assert record.finished and record.ok and record.result == {"r": 1} and record.error is None
    assert not record.cached and record.duration_ms >= 0
    assert ledger.store.in_flight == 0
    assert ledger.finish(record, error=ToolCallError(code="x", message="y")) is False
    assert record.ok and ledger.store.in_flight == 0  # the second end changes nothing
    failed = _open(ledger, "t", {})
    ledger.finish(failed, result="ignored", error=ToolCallError(code="bad", message="no"), cached=True)
    assert not failed.ok and failed.result is None and failed.error is not None and failed.cached
    assert {"ok", "result", "error", "cached", "finished", "duration_ms"} <= failed.model_fields_set


def test_a_new_record_and_ledger_start_blank() -> None:
    ledger = CallLedger()
    assert not ledger.ended and ledger.arrived == 0 and ledger.holds == {} and ledger.trace is None
    _open(ledger, "t", {"a": 1})
    (copy,) = ledger.records()
    assert (copy.ok, copy.result, copy.error, copy.duration_ms, copy.cached, copy.finished) == (
        False, None, None, 0.0, False, False)
    assert copy.id == "call_1" and copy.arguments == {"a": 1} and copy.model_fields_set == {"id", "name", "arguments"}


def test_duration_is_in_milliseconds(monkeypatch: pytest.MonkeyPatch) -> None:
    clock = iter([10.0, 99.0, 10.25])  # open; finish's fallback start; finish
    monkeypatch.setattr(ledger_module, "time", types.SimpleNamespace(perf_counter=lambda: next(clock)))
    ledger = CallLedger()
    record = _open(ledger, "t", {})
    ledger.finish(record, result=1)
    assert record.duration_ms == 250.0


def test_finish_cuts_long_messages_at_the_bound() -> None:
    ledger = CallLedger()
    exact, longer = _open(ledger, "t", {}), _open(ledger, "t", {})
    ledger.finish(exact, error=ToolCallError(code="c", message="m" * 4000))
    ledger.finish(longer, error=ToolCallError(code="c", message="m" * 4001))
    assert exact.error is not None and exact.error.message == "m" * 4000
    assert longer.error is not None and longer.error.message == "m" * 4000 + "… [4001 characters]"


def test_close_pending_ends_begun_and_unbegun_calls_differently() -> None:
    ledger = CallLedger()
    done, running, queued = _open(ledger, "t", {}), _open(ledger, "t", {}), _open(ledger, "t", {})
    ledger.finish(done, result=1)
    ledger.begin(running)
    ledger.close_pending(cutoffs.run_ended("timeout"))
    assert ledger.ended
    assert running.error is not None and running.error.message == "the run ended (timeout) before this call finished"
    assert running.error.retryable and running.error.code == "timeout"
    assert queued.error is not None and queued.error.retryable
    assert queued.error.message == "the run ended (timeout) before this call started (it was not run)"
    assert done.ok and done.result == 1
    other = CallLedger()
    pending = _open(other, "t", {})
    other.close_pending(cutoffs.EPISODE_INTERRUPTED)
    assert pending.error is not None and not pending.error.retryable and pending.error.code == "tool_exception"
    assert other.store.in_flight == 0


def test_records_are_copies_and_final_records_shallow() -> None:
    ledger = CallLedger()
    record = _open(ledger, "t", {"k": [1]})
    copies = ledger.records()
    copies[0].arguments["k"].append(2)
    assert record.arguments == {"k": [1]}
    ledger.finish(record, result=[1])
    final = ledger.final_records()
    assert final[0] is not record and final[0].result is record.result and final[0].finished
    # As model_copy makes it: equal, its own fields (and fields set), the same dump.
    assert final[0] == record and final[0].model_dump(exclude_unset=True) == record.model_dump(exclude_unset=True)
    final[0].result = "changed"
    assert record.result == [1] and "result" in record.model_fields_set
    assert final[0].__pydantic_fields_set__ is not record.__pydantic_fields_set__


def test_store_keeps_results_within_the_budget_oldest_first() -> None:
    store = CallStore(max_kept_chars=10)
    store.keep("a", "12345")
    store.keep("b", "12345")  # 10 of 10: both kept
    assert store.kept("a") == "12345" and store.kept("b") == "12345"
    store.keep("c", "1")
    assert store.kept("a") is None and store.kept("b") == "12345" and store.kept("c") == "1"
    store.keep("d", "x" * 50)  # over the budget alone: the last one is always kept
    assert store.kept("d") == "x" * 50 and store.kept("b") is None and store.kept("c") is None
    assert store.kept("nope") is None


def test_store_track_and_gate() -> None:
    store = CallStore(max_running=3)
    assert store.track(2) == 2 and store.track(-1) == 1 and store.in_flight == 1
    assert store.gate.limit == 3 and store.opened() == 1 and store.opened() == 2 and store.in_flight == 3


def test_store_track_is_thread_safe() -> None:
    store = CallStore()
    threads = [threading.Thread(target=lambda: [store.track(1) for _ in range(2000)]) for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert store.in_flight == 8000


def test_stand_in_keeps_small_arguments_and_previews_large_ones() -> None:
    args = {"a": "x" * 2000}
    assert stand_in(args, 1024) is args
    out = stand_in(args, 1025)
    assert out == {"truncated": True, "bytes": 1025, "preview": json.dumps(args)[:512]}
    assert stand_in(args, 5000, text="y" * 600) == {"truncated": True, "bytes": 5000, "preview": "y" * 512}
    looped: list[object] = []
    looped.append(looped)
    assert stand_in(looped, 2000)["preview"] == ""
    assert stand_in({"é": "ü" * 600}, 2000)["preview"].startswith('{"é": "üü')  # not escaped


def test_cache_key_is_canonical() -> None:
    assert cache_key("t", {"b": 1, "a": [1, 2]}) == 't\0{"a":[1,2],"b":1}'
    assert cache_key("t", {"a": 1, "b": 2}) == cache_key("t", {"b": 2, "a": 1})
    assert cache_key("t", {"a": 1}) != cache_key("u", {"a": 1})
    assert cache_key("t", {"s": {1}}) == 't\0{"s":"{1}"}'
