"""The inline lane (``runtime/_inline.py``) fuses the pipeline's steps for a plain call run on the
reading thread; it must never decide anything the full pipeline would decide differently. The same
sequence of calls, dispatched with and without ``inline``, gives the same records and replies, for
calls the lane takes and for every kind of call it hands to the full front."""

from __future__ import annotations

import time
from dataclasses import replace
from typing import Any

import pytest

from codeact import Runtime, ToolError, tool
from codeact.runtime.ledger import CallLedger
from tests._configs import LOCAL


@tool
def add(a: int, b: float = 0.5) -> float:
    """Add.

    Args:
        a: A whole number.
        b: Another number.
    """
    return a + b


@tool(max_calls=2)
def twice(x: int) -> int:
    """At most two calls a run.

    Args:
        x: A number.
    """
    return x


@tool
def fails(x: int) -> int:
    """Always fails.

    Args:
        x: A number.
    """
    raise ToolError("not_found", f"nothing for {x}")


@tool
def unsendable(x: int) -> Any:
    """Returns what JSON cannot hold.

    Args:
        x: A number.
    """
    return object()


CALLS: list[tuple[str, Any]] = [
    ("add", {"a": 1}),                  # taken by the lane
    ("add", {"a": 2.0, "b": 1}),        # converted: 2.0 -> 2, 1 -> 1.0
    ("add", {"a": "x"}),                # invalid: the full front refuses
    ("add", {}),                        # missing a required argument
    ("nope", {"a": 1}),                 # unknown tool
    ("add", ["not", "an", "object"]),   # not an object
    ("twice", {"x": 1}),
    ("twice", {"x": 2}),
    ("twice", {"x": 3}),                # over the tool's max_calls: the full front records the refusal
    ("fails", {"x": 7}),                # the tool's ToolError
    ("unsendable", {"x": 1}),           # not JSON
    ("add", {"a": 1, "zzz": 2}),        # an argument the schema does not know
]


def _settled(rt: Runtime, inline: bool, size: int = 20, **limits: Any) -> tuple[list[Any], list[Any]]:
    """The records and the replies (sorted) of CALLS dispatched in one run, once each has answered
    (calls the lane does not take run on pool threads)."""
    host = rt.host
    saved = host.limits
    host.limits = replace(saved, **limits)
    try:
        ledger = CallLedger(host.new_store())
        replies: list[Any] = []
        for name, arguments in CALLS:
            handed = host.dispatch(ledger, name, arguments, replies.append, size, inline=inline)
            if handed is not None and handed[2] is not None:
                handed[2]()  # the caller runs what the lane hands it, as the driver does
        deadline = time.monotonic() + 10
        while len(replies) < len(CALLS) and time.monotonic() < deadline:
            time.sleep(0.01)
        assert len(replies) == len(CALLS), "every call is answered exactly once"
        records = [(r.id, r.name, r.arguments, r.ok, r.result, r.error and (r.error.code, r.error.message), r.finished)
                   for r in ledger.final_records()]
        return records, sorted(replies, key=repr)
    finally:
        host.limits = saved


@pytest.fixture(scope="module")
def rt() -> Any:
    with Runtime([add, twice, fails, unsendable], LOCAL) as runtime:
        yield runtime


def test_the_lane_takes_plain_calls_and_records_as_the_full_front(rt: Runtime) -> None:
    lane_records, lane_replies = _settled(rt, inline=True)
    full_records, full_replies = _settled(rt, inline=False)
    assert lane_records == full_records
    assert lane_replies == full_replies
    assert [r[3] for r in lane_records] == [True, True, False, False, False, False, True, True, False, False, False,
                                            False]
    assert lane_records[1][4] == 3.0


@pytest.mark.parametrize("limits", [
    {"max_calls_per_run": 3},            # the rest refused, not recorded
    {"max_run_argument_bytes": 50},      # the run's argument bytes
    {"max_argument_bytes": 10},          # one call's arguments
    {"max_in_flight_per_session": 0},    # the session's calls in flight
])
def test_every_bound_the_lane_declines_is_refused_as_by_the_full_front(rt: Runtime, limits: dict[str, int]) -> None:
    lane = _settled(rt, inline=True, **limits)
    full = _settled(rt, inline=False, **limits)
    assert lane == full
    assert any(not r[3] for r in lane[0]) or len(lane[0]) < len(CALLS)


def test_the_lane_counts_nothing_when_it_declines(rt: Runtime) -> None:
    ledger = CallLedger(rt.host.new_store())
    assert ledger.open_running("add", {"a": 1}, 10, max_calls=0, max_bytes=100, max_in_flight=5, limit=None) is None
    assert ledger.open_running("add", {"a": 1}, 10, max_calls=5, max_bytes=5, max_in_flight=5, limit=None) is None
    assert ledger.open_running("add", {"a": 1}, 10, max_calls=5, max_bytes=100, max_in_flight=0, limit=None) is None
    assert ledger.open_running("add", {"a": 1}, 10, max_calls=5, max_bytes=100, max_in_flight=5, limit=0) is None
    assert (ledger.arrived, ledger.argument_bytes, ledger.store.in_flight, ledger.final_records()) == (0, 0, 0, [])
    record = ledger.open_running("add", {"a": 1}, 10, max_calls=5, max_bytes=100, max_in_flight=5, limit=1)
    assert record is not None
    assert (ledger.arrived, ledger.argument_bytes, ledger.store.in_flight, ledger.count("add")) == (1, 10, 1, 1)
    assert ledger.start(record, 1) is True  # begun and admitted when it runs, as any call
    assert not ledger.admit("add", 1)  # admitted once already


def test_a_lane_call_whose_run_ended_before_it_started_never_runs(rt: Runtime) -> None:
    """The reading thread may get to the call late (a leader thread that starts late): if its
    record ended meanwhile, the tool never runs and the record says it was not started."""
    ran: list[int] = []

    @tool
    def effect(x: int) -> int:
        """Has a side effect.

        Args:
            x: A number.
        """
        ran.append(x)
        return x

    with Runtime([effect], LOCAL) as runtime:
        ledger = CallLedger(runtime.host.new_store())
        replies: list[Any] = []
        handed = runtime.host.dispatch(ledger, "effect", {"x": 1}, replies.append, 10, inline=True)
        assert handed is not None and handed[2] is not None
        ledger.close_pending("tool_exception", "the run ended before this call finished")
        handed[2]()
        assert ran == [] and replies == []
        (record,) = ledger.final_records()
        assert record.error is not None and "it was not run" in record.error.message
        assert ledger.store.gate.running == 0 and ledger.store.in_flight == 0


def test_a_fault_in_the_lanes_ledger_step_is_answered_like_the_full_fronts(rt: Runtime) -> None:
    """An observer's hook that raises when a call opens: the lane gives its slot back and the
    full front answers the call as ``tool_exception``; the run is not killed."""
    from codeact.runtime.events import ObservedLedger

    def boom(record: Any) -> None:
        raise OSError("injected")

    ledger = ObservedLedger(rt.host.new_store(), boom, lambda record: None)
    replies: list[Any] = []
    assert rt.host.dispatch(ledger, "add", {"a": 1}, replies.append, 10, inline=True) is None
    assert [r["error"]["code"] for r in replies] == ["tool_exception"]
    assert ledger.store.gate.running == 0


def test_a_slow_plain_tool_leaves_the_lane(rt: Runtime) -> None:
    """A plain tool seen running past the inline budget goes to the pool (no work handed back)."""
    host = rt.host
    ledger = CallLedger(host.new_store())
    host._slow.add("add")
    try:
        replies: list[Any] = []
        handed = host.dispatch(ledger, "add", {"a": 1}, replies.append, 10, inline=True)
        assert handed is not None and handed[2] is None  # pooled: the caller only keeps its deadline
    finally:
        host._slow.discard("add")
