"""A private asyncio loop on a daemon thread, where the host runs every tool call."""

from __future__ import annotations

import asyncio
import concurrent.futures
import threading
from collections.abc import Coroutine
from typing import Any, TypeVar

T = TypeVar("T")


class LoopThread:
    """Owns an event loop running forever on its own thread, plus a pool for sync tools."""

    def __init__(self, max_workers: int = 32, name: str = "codeact-tools") -> None:
        self.loop = asyncio.new_event_loop()
        self.max_workers = max_workers
        self.pool = concurrent.futures.ThreadPoolExecutor(max_workers, thread_name_prefix=name)
        self.loop.set_default_executor(self.pool)
        self._thread = threading.Thread(target=self.loop.run_forever, name=name, daemon=True)
        self._thread.start()

    def submit(self, coro: Coroutine[Any, Any, T]) -> concurrent.futures.Future[T]:
        return asyncio.run_coroutine_threadsafe(coro, self.loop)

    def run(self, coro: Coroutine[Any, Any, T], timeout: float | None = None) -> T:
        return self.submit(coro).result(timeout)

    def close(self) -> None:
        if self.loop.is_closed():
            return

        async def cancel_all() -> None:
            tasks = [t for t in asyncio.all_tasks() if t is not asyncio.current_task()]
            for task in tasks:
                task.cancel()
            await asyncio.gather(*tasks, return_exceptions=True)

        try:
            self.submit(cancel_all()).result(timeout=5)
        except (concurrent.futures.TimeoutError, RuntimeError):
            pass
        self.loop.call_soon_threadsafe(self.loop.stop)
        self._thread.join(timeout=5)
        self.pool.shutdown(wait=False, cancel_futures=True)
        if not self.loop.is_running():
            self.loop.close()
