"""The tool host's front decides everything about a call once and gives an ``Accepted`` call with
its lane (``runtime/_accepted.py``); the lanes only execute it. A plain call on the inline lane (the
thread that read its frame) and on the pool lane gives the same record and reply, and the front
picks the lane: inline only when asked, for a plain tool quick lately, with the session's slot."""

from __future__ import annotations

import threading
import time
from dataclasses import replace
from typing import Any

import pytest

from codeact import Runtime, ToolError, tool
from codeact.runtime._accepted import Accepted, Lane
from codeact.runtime.cutoffs import run_ended
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
def test_every_bound_refuses_alike_whichever_lane_was_asked(rt: Runtime, limits: dict[str, int]) -> None:
    lane = _settled(rt, inline=True, **limits)
    full = _settled(rt, inline=False, **limits)
    assert lane == full
    assert any(not r[3] for r in lane[0]) or len(lane[0]) < len(CALLS)


def _record(record: Any) -> tuple[Any, ...]:
    return (record.name, record.arguments, record.ok, record.result, record.error, record.finished, record.labels)


@pytest.mark.parametrize("call", [("add", {"a": 2.0, "b": 1}), ("twice", {"x": 1}), ("fails", {"x": 7}),
                                  ("unsendable", {"x": 1})])
def test_one_accepted_call_gives_the_same_record_on_the_inline_and_the_pool_lane(
        rt: Runtime, call: tuple[str, Any]) -> None:
    host = rt.host
    seen: dict[Lane, tuple[Any, ...]] = {}
    for via in (Lane.INLINE, Lane.POOL):
        ledger = CallLedger(host.new_store())
        accepted = host._front(ledger, *call, 20, via=via)
        assert isinstance(accepted, Accepted) and accepted.lane is via
        replies: list[Any] = []
        answered = threading.Event()

        def reply(payload: Any, replies: list[Any] = replies, answered: threading.Event = answered) -> None:
            replies.append(payload)
            answered.set()

        handed = host.execute(ledger, accepted, reply)
        assert handed is not None and (handed[2] is not None) is (via is Lane.INLINE)
        if handed[2] is not None:
            handed[2]()  # the reading thread runs it
        assert answered.wait(10)
        (record,) = ledger.final_records()
        seen[via] = (_record(record), replies)
        assert ledger.store.gate.running == 0 and ledger.store.in_flight == 0
    assert seen[Lane.INLINE] == seen[Lane.POOL]


def test_the_front_picks_the_lane(rt: Runtime) -> None:
    host = rt.host
    ledger = CallLedger(host.new_store())
    lanes = [host._front(ledger, name, arguments, 20, via=via)
             for name, arguments, via in [("add", {"a": 1}, Lane.INLINE), ("add", {"a": 1}, Lane.POOL),
                                          ("add", {"a": 1}, Lane.LOOP), ("read_result", {"call_id": "x"}, Lane.INLINE)]]
    assert [c.lane for c in lanes if isinstance(c, Accepted)] == [Lane.INLINE, Lane.POOL, Lane.LOOP, Lane.BUILTIN]
    assert ledger.store.gate.running == 1  # the inline call holds the session's slot (its lane gives it back)
    ledger.store.gate.leave()
    gate = ledger.store.gate
    held = [gate.try_enter() for _ in range(gate.limit)]  # the session's share is in use
    assert all(held)
    assert host._front(ledger, "add", {"a": 1}, 20, via=Lane.INLINE).lane is Lane.POOL  # type: ignore[union-attr]
    for _ in held:
        gate.leave()


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
        ledger.close_pending(run_ended("killed"))
        handed[2]()
        assert ran == [] and replies == []
        (record,) = ledger.final_records()
        assert record.error is not None and "it was not run" in record.error.message
        assert ledger.store.gate.running == 0 and ledger.store.in_flight == 0


def test_a_fault_in_the_ledger_step_is_answered_and_holds_no_slot(rt: Runtime) -> None:
    """An observer's hook that raises when a call opens: the front answers the call as
    ``tool_exception``, no lane holds the session's slot, and the run is not killed."""
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


@pytest.mark.parametrize("inline", [True, False])
def test_a_done_plain_call_is_no_longer_held_and_a_running_one_is(inline: bool) -> None:
    """A plain call leaves the ledger's holds once done (a run of many calls keeps none of them
    alive); one still running at the run's end stays held, and ``release_abandoned`` lets it go."""
    release = threading.Event()
    started = threading.Event()

    @tool
    def quick(x: int) -> int:
        """Quick.

        Args:
            x: A number.
        """
        return x

    @tool
    def hangs(x: int) -> int:
        """Waits to be released.

        Args:
            x: A number.
        """
        started.set()
        release.wait(10)
        return x

    with Runtime([quick, hangs], LOCAL) as runtime:
        host = runtime.host
        ledger = CallLedger(host.new_store())
        replies: list[Any] = []
        for i in range(5):
            handed = host.dispatch(ledger, "quick", {"x": i}, replies.append, 10, inline=inline)
            if handed is not None and handed[2] is not None:
                handed[2]()
        deadline = time.monotonic() + 10
        while len(replies) < 5 and time.monotonic() < deadline:
            time.sleep(0.01)
        assert sorted(r["value"] for r in replies) == [0, 1, 2, 3, 4]
        assert ledger.holds == {}
        handed = host.dispatch(ledger, "hangs", {"x": 9}, replies.append, 10, inline=False)
        assert handed is not None and started.wait(10)
        (held,) = ledger.holds.values()
        assert held.record.name == "hangs" and ledger.store.gate.running == 1
        ledger.close_pending(run_ended("killed"))
        host.release_abandoned(ledger)
        assert ledger.holds == {} and ledger.store.gate.running == 0
        release.set()
