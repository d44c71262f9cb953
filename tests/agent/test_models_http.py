"""The model clients' one retry loop (``_Attempts``), without I/O."""

from __future__ import annotations

import httpx
import pytest

from codeact.agent.models._http import HTTPOptions, Transport, _Attempts


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
