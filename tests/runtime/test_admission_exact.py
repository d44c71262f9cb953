"""Admission's exact behaviour: the rate limiter's spacing, the session gate's slots given back
(counted), the lend cap at N / N+1, the fast flat-schema check against jsonschema, and argument
conversion."""

from __future__ import annotations

import asyncio
import time
import types
from typing import Any

import jsonschema
import pytest
from pydantic import BaseModel

from codeact.runtime import _admission
from codeact.runtime._admission import RateLimiter, SessionGate
from codeact.runtime._arguments import ArgumentConverter, converter_for, fast_check_for


def _starts(limiter: RateLimiter, n: int) -> list[float]:
    """When each of ``n`` calls passed ``limiter``, one after another."""
    starts: list[float] = []

    async def go() -> None:
        for _ in range(n):
            await limiter.wait()
            starts.append(time.monotonic())

    asyncio.run(go())
    return starts


def test_rate_limiter_spaces_starts_by_the_interval() -> None:
    limiter = RateLimiter(20.0)
    assert limiter.interval == pytest.approx(0.05)
    starts = _starts(limiter, 3)
    assert starts[1] - starts[0] >= 0.05 and starts[2] - starts[1] >= 0.05
    assert starts[1] < limiter.last_start <= starts[2]


def test_rate_limiter_waits_again_after_an_early_wake_up(monkeypatch: pytest.MonkeyPatch) -> None:
    """A sleep that returns early (half the delay) is followed by another: starts stay an interval apart."""
    real_sleep = asyncio.sleep

    async def early(delay: float) -> None:
        await real_sleep(delay / 2)

    monkeypatch.setattr(_admission, "asyncio", types.SimpleNamespace(Lock=asyncio.Lock, sleep=early))
    starts = _starts(RateLimiter(10.0), 2)
    assert starts[1] - starts[0] >= 0.1


def test_rate_limiter_first_call_does_not_wait() -> None:
    limiter = RateLimiter(0.001)  # a 1000 s interval: a wait would hang the test (and time out)

    async def go() -> None:
        await asyncio.wait_for(limiter.wait(), 5)

    asyncio.run(go())
    assert limiter.last_start > 0


def test_gate_runs_limit_at_once_and_passes_slots_on() -> None:
    gate = SessionGate(2)
    started: list[int] = []
    for i in range(4):
        gate.enter(lambda i=i: started.append(i))
    assert started == [0, 1] and gate.running == 2
    assert not gate.try_enter()
    gate.leave()
    assert started == [0, 1, 2] and gate.running == 2  # the slot passed straight on
    gate.leave()
    assert started == [0, 1, 2, 3] and gate.running == 2
    gate.leave()
    gate.leave()
    assert gate.running == 0
    assert gate.try_enter() and gate.try_enter() and not gate.try_enter()
    assert gate.running == 2


def test_gate_try_enter_yields_to_a_waiting_call() -> None:
    gate = SessionGate(1)
    assert gate.try_enter()
    ran: list[str] = []
    gate.enter(lambda: ran.append("queued"))
    gate.leave()  # the waiting call takes the slot
    assert ran == ["queued"] and gate.running == 1 and not gate.try_enter()
    assert SessionGate(0).limit == 1 and SessionGate(-3).limit == 1 and SessionGate(5).limit == 5


def test_lend_allows_exactly_cap() -> None:
    gate = SessionGate(1)
    assert [gate.lend(2) for _ in range(3)] == [True, True, False]
    assert gate.lent == 2
    gate.unlend()
    assert gate.lent == 1 and gate.lend(2) and not gate.lend(2)


class _Call:
    def __init__(self, claimable: bool) -> None:
        self.claimable = claimable
        self.lent = False

    def claim(self) -> bool:
        return self.claimable


def test_lend_for_and_returned_count_threads_exactly() -> None:
    gate = SessionGate(4)
    first, second, third = _Call(True), _Call(True), _Call(True)
    assert gate.lend_for(first, 2) is True and gate.lend_for(second, 2) is True
    assert gate.lend_for(third, 2) is False and third.lent is False  # the cap of 2: the call keeps its slot
    assert gate.lent == 2
    assert gate.lend_for(_Call(False), 2) is None and gate.lent == 2  # it returned first: nothing lent
    assert gate.returned(first) is True and gate.lent == 1
    assert gate.returned(third) is False and gate.lent == 1


FLAT = {"type": "object", "properties": {
    "s": {"type": "string"}, "i": {"type": "integer", "description": "d"}, "n": {"type": "number"},
    "b": {"type": "boolean"}, "z": {"type": "null"}, "u": {"type": ["string", "integer"]}},
    "required": ["s"]}

VALUES: list[Any] = ["x", "", 0, 1, -2, 1.0, 1.5, True, False, None, [], {}]


@pytest.mark.parametrize("closed", [True, False])
def test_fast_check_agrees_with_jsonschema_on_every_field_type(closed: bool) -> None:
    schema = {**FLAT, "additionalProperties": not closed}
    check = fast_check_for(schema)
    assert check is not None
    for key in [*FLAT["properties"], "extra"]:
        for value in VALUES:
            args = {"s": "ok", key: value}
            valid = jsonschema.Draft202012Validator(schema).is_valid(args)
            assert check(args) == valid, (key, value)
    assert not check({}) and not check({"i": 1})  # "s" is required


def test_fast_check_without_additional_properties_is_open() -> None:
    check = fast_check_for({"type": "object", "properties": {"s": {"type": "string"}}})
    assert check is not None and check({"s": "a", "other": [1]}) and not check({"s": 1})


def test_fast_check_declines_what_it_cannot_vouch_for() -> None:
    base = {"type": "object", "properties": {"x": {"type": "string"}}}
    assert fast_check_for(base) is not None
    assert fast_check_for({"type": "object"}) is not None
    for odd in ({**base, "type": "array"}, {**base, "minProperties": 1}, {**base, "additionalProperties": {}},
                {**base, "properties": []}, {**base, "properties": {"x": {"type": "string", "minLength": 1}}},
                {**base, "properties": {"x": "string"}}, {**base, "required": "x"}, {**base, "required": [1]},
                {**base, "properties": {"x": {"type": "array"}}}, [base],
                *({"type": "object", "properties": {"x": {"type": odd}}}
                  for odd in ([], ["string", "date"], [["string"]], [1], {"string": 1}, 3, None))):
        assert fast_check_for(odd) is None, odd
    assert fast_check_for({**base, "properties": {"x": {"type": "string", "default": "a", "title": "X"}}}) is not None
    assert fast_check_for({**base, "additionalProperties": False, "$schema": "s", "title": "t"}) is not None
    one = fast_check_for({"type": "object", "properties": {"x": {"type": ["integer", "string"]}}})
    assert one is not None and one({"x": 2.0}) and one({"x": "a"}) and not one({"x": 2.5})
    # Schemas jsonschema reads otherwise are left to it: invalid ones (a repeated type, a title
    # that is not text) and draft 4's, whose ``integer`` refuses ``2.0``.
    for other in ({"type": "object", "properties": {"x": {"type": ["integer", "integer"]}}},
                  {**base, "title": 3}, {**base, "properties": {"x": {"type": "string", "description": 1}}},
                  {**base, "$schema": "http://json-schema.org/draft-04/schema#"}):
        assert fast_check_for(other) is None, other


def _numbers(a: int, b: float, c: str = "s", d: Any = None, *rest: int, **kw: int) -> None: ...


def test_converter_for_plain_numbers_converts_without_pydantic() -> None:
    convert = converter_for(_numbers)
    assert convert is not None and convert._model is None
    args = {"a": 2.0, "b": 3, "c": "x"}
    out = convert(args)
    assert out == {"a": 2, "b": 3.0, "c": "x"} and type(out["a"]) is int and type(out["b"]) is float
    assert type(args["a"]) is float and type(args["b"]) is int  # the caller's dict is not changed
    same = {"a": 2, "b": 3.0}
    assert convert(same) is same  # nothing to change: no copy
    kept = convert({"a": 2.5, "b": True})
    assert kept == {"a": 2.5, "b": True} and type(kept["a"]) is float  # not integral: left to the tool


class _Point(BaseModel):
    x: int


def _model_tool(p: _Point, n: int, label: str) -> None: ...


def test_converter_for_models_uses_pydantic_and_lists_problems() -> None:
    convert = converter_for(_model_tool)
    assert convert is not None and convert._model is not None
    out = convert({"p": {"x": 1.0}, "n": 2.0, "label": "a", "other": 1})
    assert out == {"p": _Point(x=1), "n": 2, "label": "a", "other": 1}
    with pytest.raises(ValueError, match=r"^p\.x: .*; n: ") as caught:
        convert({"p": {"x": "no"}, "n": "no"})
    assert "\n" not in str(caught.value)


def test_converter_lists_at_most_twenty_problems() -> None:
    convert = converter_for(_WIDE["_wide"])
    assert convert is not None
    with pytest.raises(ValueError) as caught:
        convert({f"v{i}": "no" for i in range(25)} | {"p": {"x": 1}})
    assert str(caught.value).count(";") == 19 and "v19:" in str(caught.value) and "v20:" not in str(caught.value)


_WIDE: dict[str, Any] = {"_Point": _Point}
exec(f"def _wide(p: _Point, {', '.join(f'v{i}: int' for i in range(25))}) -> None: ...", _WIDE)  # 26 parameters


class _Plain:
    """Not a pydantic type: checked by isinstance (arbitrary types allowed)."""


def _arbitrary(thing: _Plain, n: int) -> None: ...


def test_converter_takes_arbitrary_classes() -> None:
    convert = converter_for(_arbitrary)
    assert convert is not None
    thing = _Plain()
    assert convert({"thing": thing, "n": 1.0}) == {"thing": thing, "n": 1}


def _mixed(p: int, /, s: str, *rest: int, b: float, **kw: int) -> None: ...


def test_converter_looks_past_skipped_parameters() -> None:
    convert = converter_for(_mixed)
    assert convert is not None and convert({"b": 1, "p": 1.0}) == {"b": 1.0, "p": 1.0}


def _untyped(a, b):  # type: ignore[no-untyped-def]
    ...


def _strings(a: str, b: bool, c: None, d: Any) -> None: ...


def _positional(a: int, /) -> None: ...


def test_converter_for_none_when_nothing_would_change() -> None:
    assert converter_for(_untyped) is None and converter_for(_strings) is None
    assert converter_for(_positional) is None and converter_for(len) is None
    assert converter_for(lambda x: x) is None
    assert isinstance(converter_for(_numbers), ArgumentConverter)
