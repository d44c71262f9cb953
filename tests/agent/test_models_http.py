"""The model clients' one retry loop (``_Attempts``) and their exchanges, without I/O."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import httpx
import pytest

from codeact.agent.models._http import (
    Exchange,
    HTTPOptions,
    SSEEvent,
    Transport,
    _Attempts,
    _Next,
    _Send,
    _Sleep,
    _Wire,
)


def _response(status: int, **headers: str) -> httpx.Response:
    return httpx.Response(status, headers=headers, json={"error": {"type": "x", "message": "no"}})


def test_attempts_count_every_try_and_stop_after_max_retries() -> None:
    attempts = _Attempts(Transport("p", HTTPOptions(max_retries=2, backoff_base=0.0)))
    delays = []
    for delay in attempts:
        delays.append(delay)
        attempts.failed(_response(503))
    assert delays == [0.0, 0.0, 0.0]  # the first try and two retries
    error = attempts.error()
    assert error.status == 503 and "after 3 attempts" in str(error)


def test_a_final_failure_stops_at_once_and_a_hint_is_honoured() -> None:
    attempts = _Attempts(Transport("p", HTTPOptions(max_retries=5)))
    delays = []
    for delay in attempts:
        delays.append(delay)
        attempts.failed(_response(429, **{"retry-after": "0.25"}) if len(delays) == 1 else _response(400))
    assert delays == [0.0, 0.25]
    assert attempts.error().status == 400 and "after 2 attempts" in str(attempts.error())
    attempts = _Attempts(Transport("p", HTTPOptions(max_retries=0)))
    for _ in attempts:
        attempts.failed(httpx.ConnectError("refused"))
    assert "request failed: ConnectError: refused" in str(attempts.error())


def test_an_attempt_must_end_in_success_or_failed() -> None:
    attempts = iter(_Attempts(Transport("p", HTTPOptions())))
    next(attempts)
    with pytest.raises(AssertionError):
        next(attempts)


def _wire(status: int, *chunks: bytes) -> _Wire:
    return _Wire(httpx.Response(status, request=httpx.Request("POST", "http://x/")), iter(chunks))


def _drive(exchange: Exchange[Any], wires: list[_Wire], log: list[str]) -> Any:
    """What Transport.run does, with the wires given instead of a network."""
    try:
        op = next(exchange)
        while True:
            if isinstance(op, _Send):
                log.append("send")
                op = exchange.send(wires.pop(0))
            elif isinstance(op, _Sleep):
                log.append(f"sleep {op.seconds > 0}")
                op = exchange.send(None)
            elif op.close:
                log.append("close")
                op = exchange.send(None)
            else:
                assert isinstance(op.wire.chunks, Iterator)
                chunk = next(op.wire.chunks, None)
                log.append("read" if chunk is not None else "end")
                op = exchange.send(chunk)
    except StopIteration as stop:
        return stop.value


def test_one_exchange_holds_the_retries_and_the_reading_for_both_drivers() -> None:
    """A JSON post: a 503 is read for its message, then retried after a sleep; the success's body
    is read to its end and the wire released. The drivers (run, arun) only do what is asked."""
    log: list[str] = []
    exchange = Transport("p", HTTPOptions(backoff_base=0.5)).post_json("http://x/", {}, {"q": 1})
    wires = [_wire(503, b'{"error": "busy"}'), _wire(200, b'{"a"', b": 1}")]
    assert _drive(exchange, wires, log) == {"a": 1}
    assert log == ["send", "read", "end", "close", "sleep True", "send", "read", "read", "end", "close"]


def test_a_stream_cut_by_the_transport_just_ends() -> None:
    events: list[SSEEvent] = []
    exchange = Transport("p", HTTPOptions()).post_events("http://x/", {}, {}, events.append)
    assert isinstance(next(exchange), _Send)
    assert isinstance(exchange.send(_wire(200)), _Next)
    exchange.send(b"data: 1\n\ndata: 2")
    with pytest.raises(StopIteration):
        exchange.throw(httpx.ReadError("cut"))
    assert [e.data for e in events] == ["1"]
