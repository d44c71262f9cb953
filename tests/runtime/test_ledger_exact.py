"""The call ledger's exact counting: each bound at N allowed / N+1 refused, ids, kept results,
message cuts, and every record ending exactly once."""

from __future__ import annotations

import json
import threading
import types

import pytest

from codeact.results import ToolCallError
from codeact.runtime import ledger as ledger_module
from codeact.runtime.ledger import CallLedger, CallStore, cache_key, stand_in


def test_arrive_allows_exactly_max_calls_then_refuses() -> None:
    ledger = CallLedger()
    assert [ledger.arrive(1, 3, 100) for _ in range(3)] == [None, None, None]
    assert ledger.arrive(1, 3, 100) == "calls"
    assert ledger.arrived == 4 and ledger.argument_bytes == 3


def test_arrive_allows_exactly_max_bytes_then_refuses() -> None:
    ledger = CallLedger()
    assert ledger.arrive(6, 10, 10) is None
    assert ledger.arrive(4, 10, 10) is None  # 10 of 10: at the bound, allowed
    assert ledger.arrive(1, 10, 10) == "bytes"  # a refused call's bytes are not counted
    assert ledger.argument_bytes == 10
    assert CallLedger().arrive(11, 10, 10) == "bytes"


def test_open_running_bounds_are_exact() -> None:
    ledger = CallLedger()
    args = (10, 3, 100, 50, None)
    first = ledger.open_running("t", {}, *args)
    assert first is not None and first.id == "call_1" and first.name == "t"
    assert ledger.arrived == 1 and ledger.argument_bytes == 10 and ledger.store.in_flight == 1
    assert ledger.open_running("t", {}, 90, 3, 100, 50, None) is not None  # 100 of 100 bytes
    assert ledger.open_running("t", {}, 1, 3, 100, 50, None) is None  # 101: refused, nothing counted
    assert ledger.arrived == 2 and ledger.argument_bytes == 100 and ledger.store.in_flight == 2
    assert ledger.counts == {"t": 2}


def test_open_running_max_calls_and_in_flight_boundaries() -> None:
    ledger = CallLedger()
    assert ledger.open_running("a", 1, 0, 2, 100, 9, None) is not None
    assert ledger.open_running("a", 2, 0, 2, 100, 9, None) is not None
    assert ledger.open_running("a", 3, 0, 2, 100, 9, None) is None  # the third of max_calls=2
    other = CallLedger()
    assert other.open_running("a", 1, 0, 9, 100, 1, None) is not None
    assert other.open_running("a", 2, 0, 9, 100, 1, None) is None  # one in flight of 1
    other.finish(other.records()[0].model_copy(), result=None)  # a copy: not this ledger's record
    assert other.store.in_flight == 0
    assert other.open_running("a", 3, 0, 9, 100, 1, None) is not None


def test_open_running_tool_limit_counts_admitted_calls_only() -> None:
    ledger = CallLedger()
    record = ledger.open_running("t", {}, 0, 9, 100, 9, 1)
    assert record is not None
    # open_running does not admit: the limit is reached only once start admitted the call.
    assert ledger.open_running("t", {}, 0, 9, 100, 9, 1) is not None
    assert ledger.start(record, 1) is True
    assert ledger.open_running("t", {}, 0, 9, 100, 9, 1) is None
    assert ledger.open_running("u", {}, 0, 9, 100, 9, 1) is not None  # each tool its own count


def test_admit_allows_exactly_limit_per_tool() -> None:
    ledger = CallLedger()
    assert [ledger.admit("a", 2) for _ in range(3)] == [True, True, False]
    assert [ledger.admit("b", 2) for _ in range(3)] == [True, True, False]
    assert all(ledger.admit("c", None) for _ in range(50))
    assert ledger.admit("d", 0) is False


def test_start_and_begin_refuse_an_ended_record() -> None:
    ledger = CallLedger()
    record = ledger.open("t", {})
    other = ledger.open("t", {})
    assert not ledger.begun(record)
    assert ledger.start(record, 1) is True and ledger.begun(record)
    assert ledger.start(other, 1) is False  # the tool's limit of 1 is used up
    ended = ledger.open("t", {})
    assert ledger.finish(ended, error=ToolCallError(code="timeout", message="m")) is True
    assert ledger.start(ended, None) is None and ledger.begin(ended) is False and not ledger.begun(ended)
    fresh = ledger.open("u", {})
    assert ledger.begin(fresh) is True and ledger.begun(fresh)


def test_ids_are_sequential_across_ledgers_of_one_store() -> None:
    store = CallStore()
    first, second = CallLedger(store), CallLedger(store, prefix="x")
    assert [first.open("a", {}).id, second.open("a", {}).id, first.open("b", {}).id] == ["call_1", "x_2", "call_3"]
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
    record = ledger.open("t", {"a": 1})
    assert ledger.finish(record, result={"r": 1}) is True
    assert record.finished and record.ok and record.result == {"r": 1} and record.error is None
    assert not record.cached and record.duration_ms >= 0
    assert ledger.store.in_flight == 0
    assert ledger.finish(record, error=ToolCallError(code="x", message="y")) is False
    assert record.ok and ledger.store.in_flight == 0  # the second end changes nothing
    failed = ledger.open("t", {})
    ledger.finish(failed, result="ignored", error=ToolCallError(code="bad", message="no"), cached=True)
    assert not failed.ok and failed.result is None and failed.error is not None and failed.cached
    assert {"ok", "result", "error", "cached", "finished", "duration_ms"} <= failed.model_fields_set


def test_a_new_record_and_ledger_start_blank() -> None:
    ledger = CallLedger()
    assert not ledger.ended and ledger.arrived == 0 and ledger.holds == [] and ledger.trace is None
    ledger.open("t", {"a": 1})
    (copy,) = ledger.records()
    assert (copy.ok, copy.result, copy.error, copy.duration_ms, copy.cached, copy.finished) == (
        False, None, None, 0.0, False, False)
    assert copy.id == "call_1" and copy.arguments == {"a": 1} and copy.model_fields_set == {"id", "name", "arguments"}


def test_duration_is_in_milliseconds(monkeypatch: pytest.MonkeyPatch) -> None:
    clock = iter([10.0, 99.0, 10.25])  # open; finish's fallback start; finish
    monkeypatch.setattr(ledger_module, "time", types.SimpleNamespace(perf_counter=lambda: next(clock)))
    ledger = CallLedger()
    record = ledger.open("t", {})
    ledger.finish(record, result=1)
    assert record.duration_ms == 250.0


def test_finish_cuts_long_messages_at_the_bound() -> None:
    ledger = CallLedger()
    exact, longer = ledger.open("t", {}), ledger.open("t", {})
    ledger.finish(exact, error=ToolCallError(code="c", message="m" * 4000))
    ledger.finish(longer, error=ToolCallError(code="c", message="m" * 4001))
    assert exact.error is not None and exact.error.message == "m" * 4000
    assert longer.error is not None and longer.error.message == "m" * 4000 + "… [4001 characters]"


def test_close_pending_ends_begun_and_unbegun_calls_differently() -> None:
    ledger = CallLedger()
    done, running, queued = ledger.open("t", {}), ledger.open("t", {}), ledger.open("t", {})
    ledger.finish(done, result=1)
    ledger.begin(running)
    ledger.close_pending("timeout", "the run finished first")
    assert ledger.ended
    assert running.error is not None and running.error.message == "the run finished first"
    assert running.error.retryable and running.error.code == "timeout"
    assert queued.error is not None and queued.error.message == "the run started first (it was not run)"
    assert done.ok and done.result == 1
    other = CallLedger()
    pending = other.open("t", {})
    other.close_pending("cancelled", "m")
    assert pending.error is not None and not pending.error.retryable
    assert other.store.in_flight == 0


def test_records_are_copies_and_final_records_shallow() -> None:
    ledger = CallLedger()
    record = ledger.open("t", {"k": [1]})
    copies = ledger.records()
    copies[0].arguments["k"].append(2)
    assert record.arguments == {"k": [1]}
    ledger.finish(record, result=[1])
    final = ledger.final_records()
    assert final[0] is not record and final[0].result is record.result and final[0].finished


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
