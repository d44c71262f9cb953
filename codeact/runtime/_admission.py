"""Admission of tool calls: per-tool rate limits, a per-session share of the tool pool, and the
conversion of validated arguments to a Python tool's annotated types."""

from __future__ import annotations

import asyncio
import collections
import inspect
import threading
import time
import typing
from collections.abc import Callable
from typing import Any

from pydantic import BaseModel, ConfigDict, ValidationError, create_model

__all__ = ["ArgumentConverter", "RateLimiter", "SessionGate", "converter_for", "fast_check_for"]


class RateLimiter:
    """Lets calls of one tool start at least 1/rate seconds apart (waits; never fails the call).

    Calls pass one at a time and the next slot is measured from when a call actually started, so
    a late wake-up on a loaded machine can never bring two starts closer than the interval.
    """

    def __init__(self, per_second: float) -> None:
        self.interval = 1.0 / per_second
        self.last_start = -float("inf")
        self._lock: asyncio.Lock | None = None

    async def wait(self) -> None:  # only ever runs on the host's loop thread
        if self._lock is None:
            self._lock = asyncio.Lock()
        async with self._lock:
            delay = self.last_start + self.interval - time.monotonic()
            while delay > 0:
                await asyncio.sleep(delay)
                delay = self.last_start + self.interval - time.monotonic()
            self.last_start = time.monotonic()


class SessionGate:
    """One session's share of the host's tool capacity: at most ``limit`` of its calls execute at
    once; the rest wait here, in the session's own queue, not in the shared pool, so a session
    flooding the host with calls cannot starve another session. Thread-safe.
    """

    def __init__(self, limit: int) -> None:
        self.limit = max(1, limit)
        self._lock = threading.Lock()
        self._running = 0
        self._waiting: collections.deque[Callable[[], None]] = collections.deque()
        #: Threads lent to the pool for this session's calls still running past their timeout.
        self.lent = 0

    def enter(self, start: Callable[[], None]) -> None:
        """Call ``start()`` now if the session has room, else when an earlier call leaves.
        ``start`` must not raise; whatever it starts must call :meth:`leave` exactly once."""
        with self._lock:
            if self._running >= self.limit:
                self._waiting.append(start)
                return
            self._running += 1
        start()

    def try_enter(self) -> bool:
        """Take a slot now if the session has one free and no call is waiting for one; the caller
        then runs the call itself and must call :meth:`leave` exactly once."""
        with self._lock:
            if self._running >= self.limit or self._waiting:
                return False
            self._running += 1
            return True

    def leave(self) -> None:
        with self._lock:
            if not self._waiting:
                self._running -= 1
                return
            start = self._waiting.popleft()
        start()  # the slot passes straight on to the next waiting call

    @property
    def running(self) -> int:
        return self._running

    def lend(self, cap: int) -> bool:
        """Count one thread lent to the pool for a call of this session past its timeout; False
        (nothing counted) when ``cap`` are lent already: the session's calls may pin that many
        host threads beyond its share, no more."""
        with self._lock:
            if self.lent >= cap:
                return False
            self.lent += 1
            return True

    def unlend(self) -> None:
        with self._lock:
            self.lent -= 1

    def lend_for(self, call: Any, cap: int) -> bool | None:
        """A plain call given up while its thread may still run it: ``call.claim()`` its slot and
        decide whether a thread is lent for it (``call.lent``), both under this gate's lock, so the
        call's own thread, finding its claim gone, reads the decision with :meth:`returned`.
        None when the call had claimed its slot first (it returned)."""
        with self._lock:
            if not call.claim():
                return None
            call.lent = self.lent < cap
            if call.lent:
                self.lent += 1
            return bool(call.lent)

    def returned(self, call: Any) -> bool:
        """The thread of a call :meth:`lend_for` let go has returned: True when a thread was lent
        for it (no longer counted), False when the call kept its slot (the caller gives it back)."""
        with self._lock:
            if call.lent:
                self.lent -= 1
            return bool(call.lent)


#: Keywords a flat schema may use and still be checked by :func:`fast_check_for`'s checker.
_FLAT_KEYS = {"type", "properties", "required", "additionalProperties", "description", "title", "$schema"}
_FIELD_KEYS = {"type", "description", "title", "default"}


def _is_integer(v: Any) -> bool:
    return (type(v) is int) or (type(v) is float and v.is_integer())


_TYPE_CHECKS: dict[str, Callable[[Any], bool]] = {
    "string": lambda v: type(v) is str,
    "integer": _is_integer,
    "number": lambda v: type(v) in (int, float),
    "boolean": lambda v: type(v) is bool,
    "null": lambda v: v is None,
}


def _type_check(kind: Any) -> Callable[[Any], bool] | None:
    """The check for a field's ``type``: one name, or a list of them (``["string", "null"]``, as
    OpenAPI's ``nullable`` and MCP/OpenAI schemas write it); None for any other value."""
    if isinstance(kind, str):
        return _TYPE_CHECKS.get(kind)
    if not isinstance(kind, list) or not kind or not all(isinstance(k, str) and k in _TYPE_CHECKS for k in kind):
        return None
    tests = tuple(_TYPE_CHECKS[k] for k in dict.fromkeys(kind))
    return tests[0] if len(tests) == 1 else lambda v: any(test(v) for test in tests)


def fast_check_for(schema: Any) -> Callable[[dict[str, Any]], bool] | None:
    """A checker for the common flat schema (an object of string/integer/number/boolean/null fields,
    or a list of those types), True only when the arguments are certainly valid; None for any other
    schema. A False answer means "ask the full validator", which lists the problems (so messages
    never change)."""
    if not isinstance(schema, dict) or set(schema) - _FLAT_KEYS or schema.get("type") != "object":
        return None
    props = schema.get("properties", {})
    if not isinstance(props, dict) or schema.get("additionalProperties", True) not in (True, False):
        return None
    checks: dict[str, Callable[[Any], bool]] = {}
    for name, sub in props.items():
        test = _type_check(sub.get("type")) if isinstance(sub, dict) and not set(sub) - _FIELD_KEYS else None
        if test is None:
            return None
        checks[name] = test
    listed = schema.get("required", [])
    if not isinstance(listed, list) or not all(isinstance(key, str) for key in listed):
        return None
    required = frozenset(listed)
    closed = schema.get("additionalProperties", True) is False

    def check(args: dict[str, Any]) -> bool:
        if not required.issubset(args):
            return False
        for key, value in args.items():
            test = checks.get(key)
            if test is None:
                if closed:
                    return False
            elif not test(value):
                return False
        return True

    return check


class ArgumentConverter:
    """Converts validated JSON arguments to a Python function's annotated parameter types with
    pydantic in lax mode: ``1.0`` → ``1`` for ``int``, ``2`` → ``2.0`` for ``float``, a dict → a
    model for a pydantic-model parameter. Only the arguments given are returned (the function's
    own defaults fill the rest)."""

    def __init__(self, model: type[BaseModel] | None, numbers: dict[str, type]) -> None:
        self._model = model
        self._numbers = numbers  # parameters annotated plain int/float: converted without pydantic

    def __call__(self, args: dict[str, Any]) -> dict[str, Any]:
        """Raises ``ValueError`` with one line per problem when a value cannot be converted."""
        if self._model is None:
            out = args
            for key, want in self._numbers.items():
                value: Any = args.get(key)
                if type(value) is not want and type(value) in (int, float):
                    if out is args:
                        out = dict(args)
                    out[key] = want(value) if want is float or value.is_integer() else value
            return out
        try:
            converted = self._model.model_validate(args)
        except ValidationError as exc:
            problems = [f"{'.'.join(map(str, e['loc'])) or '(root)'}: {e['msg']}" for e in exc.errors()[:20]]
            raise ValueError("; ".join(problems)) from None
        fields = converted.__dict__
        return {k: fields[k] if k in fields else v for k, v in args.items()}


_SIMPLE = (str, bool, type(None))


def converter_for(fn: Callable[..., Any]) -> ArgumentConverter | None:
    """A converter for ``fn``'s annotated parameters, or None when nothing would change (no
    annotations, only ``str``/``bool``/``Any``, or hints that cannot be resolved)."""
    try:
        hints = typing.get_type_hints(fn)
        params = inspect.signature(fn).parameters
    except Exception:  # unresolvable forward references, builtins without signatures
        return None
    fields: dict[str, Any] = {}
    numbers: dict[str, type] = {}
    for name, param in params.items():
        hint = hints.get(name)
        if hint is None or hint is Any or hint in _SIMPLE:
            continue
        if param.kind in (param.VAR_POSITIONAL, param.VAR_KEYWORD, param.POSITIONAL_ONLY):
            continue
        fields[name] = (hint, None)
        if hint in (int, float):
            numbers[name] = hint
    if not fields:
        return None
    if len(numbers) == len(fields):  # the common case, and the hot path: no pydantic needed
        return ArgumentConverter(None, numbers)
    try:
        model = create_model(
            f"_{getattr(fn, '__name__', 'tool')}_args",
            __config__=ConfigDict(arbitrary_types_allowed=True, extra="ignore"), **fields)
    except Exception:
        return None
    return ArgumentConverter(model, numbers)
