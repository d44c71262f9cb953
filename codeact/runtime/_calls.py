"""The tool host's small parts: how a tool is invoked (whatever it raises becomes a ToolError),
how a call waits for its session's share of the pool, and how refusals and errors are shaped."""

from __future__ import annotations

import asyncio
import json
import math
from collections.abc import Callable
from typing import Any

from pydantic_core import to_jsonable_python

from .._text import valid_json, valid_text
from ..errors import ToolError
from ..results import ToolCallError, ToolCallRecord, bounded_value
from ._admission import SessionGate
from .toolset import Tool


def _jsonable(name: str, value: Any) -> Any:
    """A tool's value as JSON data (pydantic's conversions: sets, dates, models, ...); ToolError
    when it cannot be one, NaN and Infinity included: JSON has no such numbers and the sandbox
    refuses them, so sending one would leave the calling code waiting for its answer. A lone
    surrogate in its text becomes U+FFFD: every value the ledger keeps is valid Unicode, so every
    writer of results, traces and snapshots can encode it."""
    if value is None or type(value) in _SCALARS:  # what pydantic would give back unchanged
        if type(value) is str:
            return valid_text(value)
        if type(value) is float and not math.isfinite(value):
            raise ToolError("tool_exception", f"{name!r} returned {value!r}, which is not JSON "
                                              "(return None or a string)")
        if type(value) is int and value.bit_length() > _LONG_INT_BITS:
            try:
                json.dumps(value)  # past Python's int-to-text digit limit: no JSON for it
            except ValueError as exc:
                raise ToolError("tool_exception", f"{name!r} returned a value that is not JSON: {exc}") from None
        return value
    try:
        try:
            converted = to_jsonable_python(value)
        except UnicodeEncodeError:  # pydantic encodes text as UTF-8: lone surrogates in lists and dicts
            converted = to_jsonable_python(valid_json(value))
        text = json.dumps(converted, allow_nan=False)  # NaN/Infinity deep inside, a cycle, too deep: in C
        if "\\ud" in text:  # a surrogate, perhaps lone: no writer of results could encode it
            converted = valid_json(converted)
    except Exception as exc:
        raise ToolError("tool_exception", f"{name!r} returned a value that is not JSON: {exc}") from None
    return converted


_SCALARS = frozenset({str, int, float, bool})
#: Ints this long may pass Python's limit on int-to-text conversion (4,300 digits by default).
_LONG_INT_BITS = 14_000


class _Refusal:
    """A call refused at the front: its record (None when not even recorded) and its reply."""

    __slots__ = ("payload", "record")

    def __init__(self, record: ToolCallRecord | None, payload: dict[str, Any]) -> None:
        self.record = record
        self.payload = payload


class _Once:
    """Whichever of a plain call's end and its expiry claims it first releases its slot."""

    __slots__ = ("_token", "lent")

    def __init__(self) -> None:
        self._token = [True]
        #: Whether a thread was lent to the pool for it once given up (see ``SessionGate.lend_for``).
        self.lent = False

    def claim(self) -> bool:
        # list.pop is atomic (one C call under the GIL; a per-list lock in free-threaded builds):
        # exactly one claim gets the token, without a lock made per call.
        try:
            return self._token.pop()
        except IndexError:
            return False

    def unclaimed(self) -> bool:
        return bool(self._token)


def _refusal(code: str, message: str, retryable: bool = False) -> dict[str, Any]:
    return {"ok": False, "error": {"code": code, "message": message, "retryable": retryable}}


def _error(exc: ToolError) -> ToolCallError:
    """A ToolError as a record's error. A tool that filled one in wrongly (``ToolError(code, None)``,
    a code that is not text) still gets its call recorded, as a ``tool_exception`` when the code
    is unusable: a tool's mistake must not fail the recording (and kill its run)."""
    try:
        extra = _extras(exc) if exc.retry_after is not None or exc.data is not None else {}
        return ToolCallError(code=valid_text(exc.code), message=valid_text(exc.message), retryable=exc.retryable,
                             **extra)
    except BaseException:
        pass
    try:
        code, message, retryable = exc.code, exc.message, exc.retryable
        if type(message) is not str:
            message = _describe(exc) if message is None else _text(message)
        return ToolCallError(code=valid_text(code) if type(code) is str and code else "tool_exception",
                             message=valid_text(message), retryable=retryable is True)
    except BaseException:  # attributes that raise when read
        return ToolCallError(code="tool_exception", message=_describe(exc))


#: The most characters of JSON a ToolError's ``data`` keeps in a record and in the sandbox's reply.
MAX_ERROR_DATA_CHARS = 64_000


def _extras(exc: ToolError) -> dict[str, Any]:
    """A ToolError's ``retry_after`` (a finite number of seconds, at least 0) and ``data`` (JSON,
    bounded) as the record keeps them and the sandbox's ToolError gets them; what is not usable
    is left out rather than failing the call's recording."""
    extra: dict[str, Any] = {}
    after = exc.retry_after
    if isinstance(after, (int, float)) and type(after) is not bool and math.isfinite(after) and after >= 0:
        extra["retry_after"] = float(after)
    if exc.data is not None:
        try:
            extra["data"] = bounded_value(_jsonable("data", exc.data), MAX_ERROR_DATA_CHARS, "data")
        except ToolError:
            extra["data"] = _text(exc.data)
    return extra


def _text(value: Any) -> str:
    try:
        return valid_text(str(value)[:2000])
    except BaseException:  # a hostile __str__
        return f"<{type(value).__name__}>"


def _describe(exc: BaseException) -> str:
    try:
        text = f"{type(exc).__name__}: {exc}"
    except BaseException:  # a hostile __str__
        text = type(exc).__name__
    return valid_text(text[:2000])


def _max_calls_error(tool: Tool) -> ToolError:
    return ToolError("permission_denied",
                     f"{tool.name!r} may be called at most {tool.policy.max_calls} times per execution")


def _invoke(fn: Callable[..., Any], args: Any) -> Any:
    """Call a sync tool (keyword arguments from a dict, else positional); whatever it raises
    comes out as a ToolError, so no BaseException ever reaches a pool thread or the loop."""
    try:
        return fn(**args) if isinstance(args, dict) else fn(*args)
    except ToolError:
        raise
    except ConnectionError as exc:  # a Python tool's network failure: worth retrying, like HTTP's
        raise ToolError("upstream_error", _describe(exc)) from None
    except BaseException as exc:  # even sys.exit(): data, not a host crash
        raise ToolError("tool_exception", _describe(exc)) from None


async def _guarded(start: Callable[[], Any]) -> Any:
    """Await an async tool (``start()`` makes its awaitable), mapping what it raises like :func:`_invoke`.
    A ``CancelledError`` is passed on only when this task is really being cancelled."""
    try:
        return await start()
    except ToolError:
        raise
    except ConnectionError as exc:
        raise ToolError("upstream_error", _describe(exc)) from None
    except asyncio.CancelledError as exc:
        task = asyncio.current_task()
        if task is not None and task.cancelling():
            raise
        raise ToolError("tool_exception", _describe(exc)) from None
    except GeneratorExit:  # this coroutine is being closed (an abandoned call at shutdown); a
        raise  # tool's own GeneratorExit is still a tool_exception record, made by the caller
    except BaseException as exc:
        raise ToolError("tool_exception", _describe(exc)) from None


def _retrieved(future: asyncio.Future[Any]) -> None:
    """Done callback of a call no one waits for: its exception is taken, so asyncio does not log it."""
    if not future.cancelled():
        future.exception()


async def _enter(gate: SessionGate) -> None:
    """Wait for a slot in the session's share of the pool (given back by the caller)."""
    loop = asyncio.get_running_loop()
    granted: asyncio.Future[None] = loop.create_future()

    def grant() -> None:
        if granted.cancelled():
            gate.leave()
        else:
            granted.set_result(None)

    def start() -> None:
        try:
            loop.call_soon_threadsafe(grant)
        except RuntimeError:  # the loop closed meanwhile
            gate.leave()

    gate.enter(start)
    try:
        await granted
    except asyncio.CancelledError:
        if granted.done() and not granted.cancelled():
            gate.leave()
        raise
