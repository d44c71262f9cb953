"""A warm pool of started, handshaken, never-used sandboxes, so a fresh session skips the start."""

from __future__ import annotations

import shutil
import threading
import time
from collections import deque
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

from ..errors import SandboxUnavailable
from . import create_sandbox
from ._owner import new_session_dir
from .base import SandboxConfig
from .driver import KernelDriver

__all__ = ["SandboxPool", "open_kernel"]


def open_kernel(config: SandboxConfig, stubs: str, workspace: Path | None = None,
                inputs: Mapping[str, Path] | None = None) -> KernelDriver:
    """Start a sandbox, install the tool stubs, and hand back its driver."""
    session_dir = new_session_dir()
    try:
        sandbox = create_sandbox(config, session_dir, workspace or session_dir / "workspace", inputs)
    except BaseException:  # nothing started: only the directory to take back
        shutil.rmtree(session_dir, ignore_errors=True)
        raise
    try:
        sandbox.start()
        driver = KernelDriver(sandbox)
        driver.handshake(stubs)
        if config.preload or config.seed is not None:
            _preload(driver, config)
    except BaseException:
        sandbox.close()
        raise
    return driver


def _preload(driver: KernelDriver, config: SandboxConfig) -> None:
    """Import ``config.preload`` in the kernel (into ``sys.modules``; nothing is bound in the
    namespace), so the first run that imports them does not pay for it; seed ``random`` with
    ``config.seed``. No tool may be called."""
    code = "".join(f"__import__({name!r})\n" for name in config.preload)
    if config.seed is not None:
        code += f"__import__('random').seed({int(config.seed)})\n"

    def refuse(seq: int, name: str, arguments: Any, size: int) -> None:
        driver.reply(seq, {"ok": False, "error": {"code": "permission_denied", "retryable": False,
                                                  "message": "no tool calls while preloading"}})

    outcome = driver.run(code, refuse, max(config.timeout_s, 60.0), output_cap=config.output_cap,
                         output_limit=config.output_limit, grace_s=config.grace_s)
    done = outcome.done
    if done is None or done.termination != "completed" or done.error is not None:
        why = f"{done.error.type}: {done.error.message}" if done is not None and done.error else \
            outcome.reason or outcome.termination
        what = ", ".join(config.preload) or "the random seed"
        raise SandboxUnavailable(f"preloading {what} failed in the sandbox: {why}"[:500])


class SandboxPool:
    """Keeps ``size`` kernels ready; a background thread refills after each ``acquire``.

    A refill starts ``REFILL_DELAY_S`` after the acquire that called for it: starting a kernel is
    Docker API calls in this process (holding the GIL) and engine work beside it, which would
    otherwise land on the acquiring session's first run (an interleaved A/B of the pooled first
    result chose the delay; the numbers are in its commit)."""

    REFILL_DELAY_S = 0.05

    def __init__(self, config: SandboxConfig, size: int, stubs: str,
                 prepare: Callable[[KernelDriver], None] | None = None) -> None:
        self.config = config
        self.size = size
        self.stubs = stubs
        #: Called in the refill thread on each new kernel before it is ready (work its user would
        #: otherwise do at acquire: e.g. the runtime notes the empty workspace's snapshot).
        self.prepare = prepare
        self._ready: deque[KernelDriver] = deque()
        self._cond = threading.Condition()
        self._closed = False
        #: When each acquire not yet refilled for happened: a refill waits for its own acquire's
        #: delay (not the latest one's, or a steady stream of acquires would put refills off forever).
        self._owed: deque[float] = deque()
        self.last_error: str | None = None
        self._thread = threading.Thread(target=self._fill, name="codeact-pool", daemon=True)
        self._thread.start()

    def _fill(self) -> None:
        while True:
            with self._cond:
                while not self._closed and len(self._ready) >= self.size:
                    self._cond.wait()
                while not self._closed and self._owed and \
                        (wait := self._owed[0] + self.REFILL_DELAY_S - time.monotonic()) > 0:
                    self._cond.wait(wait)
                if self._closed:
                    return
                if self._owed:
                    self._owed.popleft()
            try:
                driver = open_kernel(self.config, self.stubs)
                if self.prepare is not None:
                    try:
                        self.prepare(driver)
                    except Exception:  # only a head start: the session does the same work itself
                        pass
            except SandboxUnavailable as exc:
                self.last_error = str(exc)
                with self._cond:
                    self._cond.wait(timeout=5.0)  # don't spin on a broken engine
                continue
            with self._cond:
                if self._closed:
                    driver.sandbox.close()
                    return
                self._ready.append(driver)
                self._cond.notify_all()

    def acquire(self, wait_s: float = 0.0) -> KernelDriver | None:
        """A ready kernel, or None if none is ready within ``wait_s``."""
        with self._cond:
            if not self._ready and wait_s > 0:
                self._cond.wait_for(lambda: bool(self._ready) or self._closed, timeout=wait_s)
            if not self._ready:
                return None
            driver = self._ready.popleft()
            self._owed.append(time.monotonic())
            self._cond.notify_all()
            return driver

    @property
    def idle(self) -> int:
        """Warm kernels waiting to be taken now."""
        return len(self._ready)

    def wait_ready(self, timeout_s: float = 60.0) -> bool:
        """Block until the pool is full (for benchmarks and tests)."""
        with self._cond:
            return self._cond.wait_for(lambda: len(self._ready) >= self.size or self._closed, timeout_s)

    def close(self) -> None:
        with self._cond:
            self._closed = True
            drained = list(self._ready)
            self._ready.clear()
            self._cond.notify_all()
        for driver in drained:
            driver.sandbox.close()
        self._thread.join(timeout=30)
