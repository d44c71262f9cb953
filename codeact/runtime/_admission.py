"""Admission of tool calls: per-tool rate limits and a per-session share of the tool pool."""

from __future__ import annotations

import asyncio
import collections
import threading
import time
from collections.abc import Callable
from typing import Any

__all__ = ["RateLimiter", "SessionGate"]


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
