"""A private asyncio loop on a daemon thread, where the host runs every tool call, and the pool of
daemon threads that runs sync tools.

The pool's threads are daemons and nothing joins them: a tool that hangs forever can hold one
thread, never the process (``concurrent.futures.ThreadPoolExecutor`` joins its workers at exit,
so one ``time.sleep(3600)`` in a tool would keep ``codeact exec`` alive for an hour).
"""

from __future__ import annotations

import asyncio
import collections
import concurrent.futures
import threading
from collections.abc import Callable, Coroutine
from typing import Any, TypeVar

T = TypeVar("T")

#: How long closing waits for tasks to wind down before it lets them go.
CLOSE_GRACE_S = 2.0


class DaemonPool(concurrent.futures.Executor):
    """Runs callables on up to ``max_workers`` daemon threads; threads start on demand and stay.

    ``shutdown`` never waits for a running callable: queued work is cancelled, running work is
    abandoned (its thread exits when the callable returns, or with the process).
    """

    def __init__(self, max_workers: int, name: str = "codeact-pool") -> None:
        self.max_workers = max_workers
        self._name = name
        self._cond = threading.Condition()
        self._queue: collections.deque[tuple[concurrent.futures.Future[Any], Callable[[], Any]]] = \
            collections.deque()
        self._threads = 0
        self._idle = 0
        self._closed = False

    def submit(self, fn: Callable[..., T], /, *args: Any, **kwargs: Any) -> concurrent.futures.Future[T]:
        future: concurrent.futures.Future[T] = concurrent.futures.Future()
        self._enqueue(future, (lambda: fn(*args, **kwargs)) if args or kwargs else fn)
        return future

    def run_soon(self, fn: Callable[[], Any]) -> None:
        """Run ``fn()`` on a pool thread, no questions asked (``fn`` handles its own errors)."""
        self._enqueue(concurrent.futures.Future(), fn)

    def _enqueue(self, future: concurrent.futures.Future[Any], fn: Callable[[], Any]) -> None:
        with self._cond:
            if self._closed:
                raise RuntimeError("cannot schedule new work after shutdown")
            self._queue.append((future, fn))
            if self._idle >= len(self._queue):
                self._cond.notify()
            elif self._threads < self.max_workers:
                self._threads += 1
                threading.Thread(target=self._work, name=f"{self._name}-{self._threads}", daemon=True).start()

    def _work(self) -> None:
        while True:
            with self._cond:
                while not self._queue and not self._closed:
                    if self._threads > self.max_workers:  # an abandoned call's stand-in is no longer needed
                        self._threads -= 1
                        return
                    self._idle += 1
                    self._cond.wait()
                    self._idle -= 1
                if not self._queue:
                    self._threads -= 1
                    return
                future, fn = self._queue.popleft()
            if not future.set_running_or_notify_cancel():
                continue
            try:
                value = fn()
            except BaseException as exc:  # even SystemExit from a tool ends the call, not the thread
                future.set_exception(exc)
            else:
                future.set_result(value)
            del future, fn

    def grow(self, delta: int) -> None:
        """Lend (+1) or take back (-1) a thread: a call abandoned after its timeout still holds
        its thread, and the pool's capacity should not shrink while it does."""
        with self._cond:
            self.max_workers += delta
            if delta > 0 and self._queue and self._threads < self.max_workers:
                self._threads += 1
                threading.Thread(target=self._work, name=f"{self._name}-{self._threads}", daemon=True).start()

    def shutdown(self, wait: bool = True, *, cancel_futures: bool = False) -> None:
        """Stop taking work; cancel what is queued; never join a running callable."""
        with self._cond:
            self._closed = True
            queued, self._queue = list(self._queue), collections.deque()
            self._cond.notify_all()
        for future, _ in queued:
            future.cancel()


class LoopThread:
    """Owns an event loop running forever on its own thread, plus a pool for sync tools."""

    def __init__(self, max_workers: int = 32, name: str = "codeact-tools") -> None:
        self.loop = asyncio.new_event_loop()
        self.max_workers = max_workers
        self.pool = DaemonPool(max_workers, name=f"{name}-pool")
        self._thread = threading.Thread(target=self._serve, name=name, daemon=True)
        self._thread.start()

    def _serve(self) -> None:
        # A BaseException escaping a callback (a bug, or a tool's SystemExit) would stop the loop
        # for every later call; run_forever is resumed instead.
        while not self.loop.is_closed():
            try:
                self.loop.run_forever()
                return
            except BaseException:  # keep serving whatever escaped
                continue

    def submit(self, coro: Coroutine[Any, Any, T]) -> concurrent.futures.Future[T]:
        return asyncio.run_coroutine_threadsafe(coro, self.loop)

    def run(self, coro: Coroutine[Any, Any, T], timeout: float | None = None) -> T:
        return self.submit(coro).result(timeout)

    def close(self, grace_s: float = CLOSE_GRACE_S) -> None:
        """Cancel every task (waiting at most ``grace_s`` for them), stop the loop; never join a tool."""
        if self.loop.is_closed():
            return

        async def cancel_all() -> None:
            tasks = [t for t in asyncio.all_tasks() if t is not asyncio.current_task()]
            for task in tasks:
                task.cancel()
            await asyncio.wait(tasks, timeout=grace_s) if tasks else None

        try:
            self.submit(cancel_all()).result(timeout=grace_s + 1)
        except (concurrent.futures.TimeoutError, RuntimeError):
            pass
        self.pool.shutdown(wait=False, cancel_futures=True)
        try:
            self.loop.call_soon_threadsafe(self.loop.stop)
        except RuntimeError:
            pass
        self._thread.join(timeout=grace_s)
        if not self.loop.is_running():
            self.loop.close()
