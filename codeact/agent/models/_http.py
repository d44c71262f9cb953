"""Shared HTTP plumbing for the vendor clients: retries, backoff, timeouts, SSE, error messages.

Retried: connection/transport failures, 408, 409, 429 and every 5xx (529 is Anthropic's
"overloaded"), with exponential backoff and jitter, honouring ``retry-after`` /
``retry-after-ms`` and ``x-should-retry``. Any other status raises :class:`ModelError` at once
with the provider's message on one line. A stream is retried only until its status line arrives;
a stream cut after that simply ends (the caller's accumulator reports it as truncated).

Each request is written once, as an *exchange*: a generator that yields the I/O it needs and is
sent the result. One loop drives it (``Transport._drive``): :meth:`Transport.run` with blocking
steps, run to its end without an event loop, :meth:`Transport.arun` with awaited ones; the two
steps (one op's I/O) are all that the sync and async clients do not share.
"""

from __future__ import annotations

import asyncio
import functools
import json
import random
import re
import ssl
import threading
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Coroutine, Generator, Iterator
from dataclasses import dataclass
from typing import Any, TypeVar

import httpx

from codeact._text import one_line, retry_after_seconds
from codeact.errors import ModelError

__all__ = ["Exchange", "HTTPOptions", "SSEDecoder", "SSEEvent", "Transport"]

_RETRY_STATUSES = frozenset({408, 409, 429})

_T = TypeVar("_T")


@functools.lru_cache(maxsize=1)
def _ssl_context() -> ssl.SSLContext:
    """One verifying context for every async client: building one loads the system's CA store, which is slow."""
    return ssl.create_default_context()


@dataclass(frozen=True)
class HTTPOptions:
    """Timeouts and the retry policy of one client."""

    timeout: float = 60.0  # httpx's per-operation timeout: connect, write, and each read (gap between chunks)
    max_retries: int = 3
    backoff_base: float = 0.5
    backoff_max: float = 8.0
    max_retry_after: float = 60.0
    #: The most bytes of one answer (a body, or a whole stream) read before it fails as a ModelError.
    max_response_bytes: int = 64 * 1024 * 1024


@dataclass(frozen=True)
class SSEEvent:
    """One server-sent event."""

    event: str
    data: str


class SSEDecoder:
    """Incremental Server-Sent Events decoder fed with lines (without their line ending)."""

    def __init__(self) -> None:
        self._event = ""
        self._data: list[str] = []

    def feed(self, line: str) -> SSEEvent | None:
        """Take one line; return the event a blank line completes, if any."""
        if not line:
            if not self._data and not self._event:
                return None
            event = SSEEvent(self._event or "message", "\n".join(self._data))
            self._event, self._data = "", []
            return event
        if line.startswith(":"):
            return None
        name, _, value = line.partition(":")
        value = value[1:] if value.startswith(" ") else value
        if name == "event":
            self._event = value
        elif name == "data":
            self._data.append(value)
        return None


def error_detail(body: bytes) -> str:
    """The provider's error message from an OpenAI- or Anthropic-shaped error body."""
    try:
        data = json.loads(body)
    except ValueError:
        return one_line(body.decode("utf-8", "replace")) or "(empty body)"
    err = data.get("error") if isinstance(data, dict) else None
    if isinstance(err, dict):
        kind = err.get("type") or err.get("code")
        message = str(err.get("message") or "")
        return one_line(f"{kind}: {message}" if kind else message)
    if isinstance(err, str):
        return one_line(err)
    return one_line(json.dumps(data))


class Transport:
    """POSTs JSON to one provider with retries; plain JSON answers or SSE event streams."""

    def __init__(self, provider: str, options: HTTPOptions, secret: str | None = None) -> None:
        self.provider = provider
        self.options = options
        self._secret = secret
        self._client: httpx.Client | None = None
        self._lock = threading.Lock()

    # -- policy -------------------------------------------------------------------------------

    def redact(self, text: str) -> str:
        """Remove the API key from ``text``."""
        if self._secret and len(self._secret) >= 4:
            text = text.replace(self._secret, "***")
        return text

    def _delay(self, attempt: int, response: httpx.Response | None) -> float | None:
        """Seconds to wait before retrying, or ``None`` when the failure is final."""
        if attempt >= self.options.max_retries:
            return None
        if response is not None:
            should = response.headers.get("x-should-retry")
            status = response.status_code
            retryable = status in _RETRY_STATUSES or status >= 500
            if should in ("true", "false"):
                retryable = should == "true"
            if not retryable:
                return None
            hint = retry_after_seconds(response.headers)
            if hint is not None and 0 <= hint <= self.options.max_retry_after:
                return hint
        backoff: float = min(self.options.backoff_base * 2**attempt, self.options.backoff_max)
        return backoff * (1 - 0.25 * random.random())

    def _status_error(self, response: httpx.Response, attempts: int) -> ModelError:
        status = response.status_code
        detail = error_detail(response.content)
        hint = " (check the API key)" if status in (401, 403) else ""
        tries = f" after {attempts} attempts" if attempts > 1 else ""
        retryable = status in _RETRY_STATUSES or status >= 500
        message = f"{self.provider} API error {status}{tries}: {detail}{hint}"
        return ModelError(self.redact(message), status=status, retryable=retryable)

    def _transport_error(self, exc: httpx.TransportError, attempts: int) -> ModelError:
        tries = f" after {attempts} attempts" if attempts > 1 else ""
        message = one_line(f"{self.provider} request failed{tries}: {type(exc).__name__}: {exc}")
        return ModelError(self.redact(message), retryable=True)

    def _decode(self, body: bytes) -> dict[str, Any]:
        try:
            data = json.loads(body)
        except ValueError:
            text = body.decode("utf-8", "replace")
            raise ModelError(self.redact(f"{self.provider} returned a non-JSON body: {one_line(text, 200)}")) from None
        if not isinstance(data, dict):
            raise ModelError(f"{self.provider} returned JSON that is not an object")
        return data

    def _counted(self, size: int, seen: list[int]) -> None:
        """Count ``size`` more bytes of the answer; a ModelError once past ``max_response_bytes``."""
        seen[0] += size
        if seen[0] > self.options.max_response_bytes:
            raise ModelError(f"{self.provider} sent an answer larger than {self.options.max_response_bytes} bytes")

    def _error_body(self, response: httpx.Response, body: bytes) -> httpx.Response:
        """A failed answer with its body (at most ``_ERROR_BODY`` bytes of it) loaded, for its message.
        ``body`` is decoded already: the headers that describe the wire form do not come along."""
        headers = [(k, v) for k, v in response.headers.multi_items()
                   if k.lower() not in ("content-encoding", "content-length", "transfer-encoding")]
        return httpx.Response(response.status_code, headers=headers, content=body, request=response.request)

    # -- the exchanges: every request's logic, once, without I/O --------------------------------
    # An exchange is a generator that yields the I/O it needs (an _Op) and is sent its result (or
    # thrown the httpx.TransportError it raised); :meth:`run` and :meth:`arun` drive it, and one op's
    # I/O (_step blocking, _astep awaited) is the only code that differs between sync and async.

    def post_json(self, url: str, headers: dict[str, str], body: dict[str, Any]) -> Exchange[dict[str, Any]]:
        """POST and return the decoded JSON answer, retrying per the policy (a transport failure
        while reading the body is a failed attempt like any other)."""
        data = yield from self._attempts(url, headers, body, read=True)
        assert isinstance(data, bytes)
        return self._decode(data)

    def post_events(self, url: str, headers: dict[str, str], body: dict[str, Any],
                    sink: Callable[[SSEEvent], None]) -> Exchange[None]:
        """POST and hand each SSE event of the answer to ``sink``; a cut stream just ends."""
        wire = yield from self._attempts(url, headers, body, read=False)
        assert isinstance(wire, _Wire)
        decoder, lines = SSEDecoder(), _LineSplitter(self)
        try:
            while (chunk := (yield _Next(wire))) is not None:
                for line in lines.feed(chunk):
                    if (event := decoder.feed(line)) is not None:
                        sink(event)
        except httpx.TransportError:
            return  # cut mid-stream: the accumulator sees no terminal event
        for line in lines.end():
            if (event := decoder.feed(line)) is not None:
                sink(event)
        yield _Next(wire, close=True)

    def _attempts(self, url: str, headers: dict[str, str], body: dict[str, Any],
                  read: bool) -> Generator[_Op, Any, _Wire | bytes]:
        """The request's attempts (:class:`_Attempts` decides) until a success: its open wire, or
        with ``read`` its body read within ``max_response_bytes``."""
        attempts = _Attempts(self)
        for delay in attempts:
            if delay:
                yield _Sleep(delay)
            try:
                wire: _Wire = yield _Send(url, headers, body)
                if wire.response.is_success:
                    return (yield from self._read(wire, None)) if read else wire
                head = yield from self._read(wire, _ERROR_BODY)  # the error's body, for its message
                attempts.failed(self._error_body(wire.response, head))
            except httpx.TransportError as exc:
                attempts.failed(exc)
        raise attempts.error() from None

    def _read(self, wire: _Wire, limit: int | None) -> Generator[_Op, Any, bytes]:
        """The wire's body, then the wire closed: all of it, counted against ``max_response_bytes``,
        or its first ``limit`` bytes."""
        seen, parts, size = [0], [], 0
        while (chunk := (yield _Next(wire))) is not None:
            if limit is None:
                self._counted(len(chunk), seen)
            parts.append(chunk)
            size += len(chunk)
            if limit is not None and size >= limit:
                break
        yield _Next(wire, close=True)
        data = b"".join(parts)
        return data if limit is None else data[:limit]

    # -- the I/O ------------------------------------------------------------------------------

    def _sync_client(self) -> httpx.Client:
        with self._lock:
            if self._client is None:
                self._client = httpx.Client(timeout=self.options.timeout)
            return self._client

    def close(self) -> None:
        with self._lock:
            if self._client is not None:
                self._client.close()
                self._client = None

    def run(self, exchange: Exchange[_T]) -> _T:
        """Drive ``exchange`` with blocking I/O on the pooled client; its value."""
        client = self._sync_client()

        async def step(op: _Op, opened: list[httpx.Response]) -> _Wire | bytes | None:
            return self._step(client, op, opened)  # blocks: this coroutine never suspends

        async def close(response: httpx.Response) -> None:
            response.close()

        return _blocking(self._drive(exchange, step, close))

    async def arun(self, exchange: Exchange[_T]) -> _T:
        """:meth:`run` awaited, on a fresh ``httpx.AsyncClient`` (safe across event loops)."""
        async with httpx.AsyncClient(timeout=self.options.timeout, verify=_ssl_context()) as client:
            async def step(op: _Op, opened: list[httpx.Response]) -> _Wire | bytes | None:
                return await self._astep(client, op, opened)

            async def close(response: httpx.Response) -> None:
                await response.aclose()

            return await self._drive(exchange, step, close)

    @staticmethod
    async def _drive(exchange: Exchange[_T], step: _Step, close: Callable[[httpx.Response], Awaitable[None]]) -> _T:
        """The one loop of :meth:`run` and :meth:`arun`: do each step the exchange asks for and
        hand it the result (or throw it the transport error); in the end close what is still open."""
        opened: list[httpx.Response] = []
        try:
            op = next(exchange)
            while True:
                try:
                    result = await step(op, opened)
                except httpx.TransportError as exc:
                    op = exchange.throw(exc)
                else:
                    op = exchange.send(result)
        except StopIteration as stop:
            value: _T = stop.value
            return value
        finally:
            exchange.close()
            for response in opened:  # those an error left open
                await close(response)

    @staticmethod
    def _step(client: httpx.Client, op: _Op, opened: list[httpx.Response]) -> _Wire | bytes | None:
        if isinstance(op, _Sleep):
            time.sleep(op.seconds)
        elif isinstance(op, _Send):
            response = client.send(client.build_request("POST", op.url, headers=op.headers, json=op.body),
                                   stream=True)
            opened.append(response)
            return _Wire(response, response.iter_bytes())
        elif op.close:
            op.wire.response.close()
        else:
            assert isinstance(op.wire.chunks, Iterator)
            return next(op.wire.chunks, None)
        return None

    @staticmethod
    async def _astep(client: httpx.AsyncClient, op: _Op, opened: list[httpx.Response]) -> _Wire | bytes | None:
        if isinstance(op, _Sleep):
            await asyncio.sleep(op.seconds)
        elif isinstance(op, _Send):
            response = await client.send(client.build_request("POST", op.url, headers=op.headers, json=op.body),
                                         stream=True)
            opened.append(response)
            return _Wire(response, response.aiter_bytes())
        elif op.close:
            await op.wire.response.aclose()
        else:
            assert isinstance(op.wire.chunks, AsyncIterator)
            return await anext(op.wire.chunks, None)
        return None


def _blocking(coroutine: Coroutine[Any, Any, _T]) -> _T:
    """Run to its end a coroutine that never suspends (its steps block instead)."""
    try:
        coroutine.send(None)
    except StopIteration as stop:
        value: _T = stop.value
        return value
    coroutine.close()
    raise RuntimeError("a blocking exchange suspended")


@dataclass(frozen=True)
class _Wire:
    """A sent request's response, its body unread, and the one iterator over its chunks."""

    response: httpx.Response
    chunks: Iterator[bytes] | AsyncIterator[bytes]


@dataclass(frozen=True)
class _Sleep:
    """Wait before the next attempt."""

    seconds: float


@dataclass(frozen=True)
class _Send:
    """POST this JSON body; the result is the response's :class:`_Wire`."""

    url: str
    headers: dict[str, str]
    body: dict[str, Any]


@dataclass(frozen=True)
class _Next:
    """The next chunk of the wire's body (``None`` at its end); with ``close``, release its connection."""

    wire: _Wire
    close: bool = False


_Op = _Sleep | _Send | _Next
#: Does one op, blocking or awaited, noting each response it opens; the op's result.
_Step = Callable[[_Op, list[httpx.Response]], Awaitable["_Wire | bytes | None"]]
#: A request's logic as a generator of the I/O it needs, returning its value.
Exchange = Generator[_Op, Any, _T]


#: Bytes of a failed answer's body read for its error message.
_ERROR_BODY = 64 * 1024
_NEWLINE = re.compile(rb"\r\n|\r|\n")


class _LineSplitter:
    """Bytes in, the text lines they complete out (``\r\n``, ``\r`` or ``\n`` end one, as in SSE),
    every byte counted against the transport's ``max_response_bytes``. Only the new bytes are
    searched, and a line's pieces are joined once, when it ends (a long line stays linear)."""

    def __init__(self, transport: Transport) -> None:
        self._transport = transport
        self._seen = [0]
        self._pieces: list[bytes] = []  # the line so far
        self._after_cr = False  # the last byte seen was a \r: a \n next belongs to it

    def feed(self, chunk: bytes) -> list[str]:
        self._transport._counted(len(chunk), self._seen)
        if not chunk:
            return []
        if self._after_cr and chunk.startswith(b"\n"):
            chunk = chunk[1:]
        self._after_cr = False
        if not chunk:
            return []
        parts = _NEWLINE.split(chunk)
        lines = []
        if len(parts) > 1:
            lines.append(b"".join([*self._pieces, parts[0]]).decode("utf-8", "replace"))
            lines += [part.decode("utf-8", "replace") for part in parts[1:-1]]
            self._pieces = []
            self._after_cr = chunk.endswith(b"\r")
        if parts[-1]:
            self._pieces.append(parts[-1])
        return lines

    def end(self) -> list[str]:
        rest, self._pieces = b"".join(self._pieces), []
        return [rest.decode("utf-8", "replace")] if rest else []


class _Attempts:
    """The one retry loop of every request, without I/O: iterating yields the seconds to wait before
    each attempt (0 before the first) and stops once a failure is final; :meth:`failed` reports an
    attempt's failure, :meth:`error` is the final one. The attempt count lives here, not in callers."""

    def __init__(self, transport: Transport) -> None:
        self._transport = transport
        self._attempts = 0
        self._failure: httpx.Response | httpx.TransportError | None = None

    def __iter__(self) -> Iterator[float]:
        while True:
            delay = self._next_delay()
            if delay is None:
                return
            self._attempts += 1
            self._failure = None
            yield delay

    def _next_delay(self) -> float | None:
        if not self._attempts:
            return 0.0
        assert self._failure is not None, "an attempt ended without success or failed()"
        response = self._failure if isinstance(self._failure, httpx.Response) else None
        return self._transport._delay(self._attempts - 1, response)

    def failed(self, outcome: httpx.Response | httpx.TransportError) -> None:
        """The attempt under way failed with this non-success response (body read) or transport error."""
        self._failure = outcome

    def error(self) -> ModelError:
        """The ModelError of the last, final failure."""
        failure = self._failure
        if isinstance(failure, httpx.Response):
            return self._transport._status_error(failure, self._attempts)
        assert failure is not None
        return self._transport._transport_error(failure, self._attempts)
