"""Who reads the kernel's channel: one thread at a time holds the right to. Standard library only.

Between runs the main thread reads its next request itself; a thread that made a tool call reads
until its own result arrives (handing the results of other threads' calls to them); the reader
thread reads only when nobody else does and someone must: async calls are waiting, or a run's code
has computed for a while without calling (an interrupt may come). So a warm run or a tool call
costs no hand-off between threads in the kernel. A thread wanting the channel from the reader
thread (or the main thread wanting it back from a caller left over from an ended run) wakes it
through a pipe.
"""

from __future__ import annotations

import collections
import os
import select
import threading
import time

TYPE_CHECKING = False
if TYPE_CHECKING:  # typing costs every idle kernel memory; annotations are never evaluated
    from typing import Any, Protocol

try:  # flat in the sandbox image; a package when imported on the host
    from . import protocol
except ImportError:
    import protocol  # type: ignore[no-redef]

#: While a run's code computes and no caller reads the channel, the reader thread takes it over
#: after this long (to see an interrupt frame; Docker's SIGINT needs no reader); shorter runs and
#: calls never wake it. It also wakes on this period while a run is in progress: each wake costs
#: the main thread a GIL hand-off, so a period much shorter than this one slowed warm runs in an
#: interleaved A/B (the figures are in its commit); this one does not.
_READER_AFTER_S = 0.02
#: After a run, the reader thread keeps waking on that period this long (so back-to-back runs
#: need not wake it each), then sleeps until the next run.
_READER_LINGER_S = 0.05


if TYPE_CHECKING:  # what the reading needs, for the type checker only
    class _Calls(Protocol):
        def has_async_waiting(self) -> bool: ...


    class _Kernel(Protocol):
        """What the reading needs of the kernel."""

        channel: protocol.FrameSocket
        running: bool
        runs: collections.deque[dict[str, Any]]

        @property
        def client(self) -> _Calls: ...

        def dispatch(self, message: dict[str, Any]) -> None: ...


class Reading:
    """Which thread reads the channel now (see the module docstring); all state under ``mu``."""

    def __init__(self, kernel: _Kernel) -> None:
        self.kernel = kernel
        self.channel = kernel.channel
        self.mu = threading.Lock()
        self.waiters = threading.Condition(self.mu)  # threads waiting for the channel or their result
        self.idle = threading.Condition(self.mu)  # the reader thread, while it need not read
        self.owner: int | None = None  # thread ident of the reader of the moment
        self.owner_yields = False  # the owner gives the channel up when woken (reader thread, ended run)
        self.nudged = False  # a byte is in the wake pipe
        self.waiting = 0  # threads in ``waiters``
        self.released = self.started = time.monotonic()
        self.reader_timed = False  # the reader thread waits with a timeout (it is notified otherwise)
        self.wake_r, self.wake_w = os.pipe()
        self.poll = select.poll()
        self.poll.register(self.channel.sock.fileno(), select.POLLIN)
        self.poll.register(self.wake_r, select.POLLIN)
        self.main = threading.get_ident()
        #: SIGINT arrived while the main thread was reading a frame: raised once the frame is in.
        self.defer = False
        self.pending_sigint = False

    # -- SIGINT on the main thread -------------------------------------------------------------
    def on_sigint(self, signum: int, frame: Any) -> None:
        if not self.kernel.running:
            return  # between runs an interrupt means nothing
        if self.defer:
            self.pending_sigint = True
            return
        raise KeyboardInterrupt

    def _blocking(self, fn: Any, *args: Any) -> Any:
        """Run a blocking wait where an interrupt may land (the main thread's defer lifted)."""
        if threading.get_ident() != self.main:
            return fn(*args)
        self.defer = False
        try:
            if self.pending_sigint:
                self.pending_sigint = False
                raise KeyboardInterrupt
            return fn(*args)
        finally:
            self.defer = True

    # -- taking and giving back the channel (``mu`` held) -----------------------------------------
    def _take(self, done: Any, evict: bool) -> bool:
        """Become the reader, or wait until ``done()``; False when done first. ``evict``: wake
        whatever thread reads now to give the channel up (else only the reader thread is)."""
        while not done():
            if self.owner is None:
                self.owner = threading.get_ident()
                self.owner_yields = False
                return True
            if (evict or self.owner_yields) and not self.nudged:
                self.nudged = True
                os.write(self.wake_w, b"\0")
            self.waiting += 1
            try:
                self._blocking(self.waiters.wait)
            finally:
                self.waiting -= 1
        return False

    def _give_back(self) -> None:
        self.owner = None
        self.owner_yields = False
        self.released = time.monotonic()
        if self.waiting:
            self.waiters.notify_all()
        elif self.kernel.running and self.kernel.client.has_async_waiting():
            self.idle.notify()

    def wake_waiters(self) -> None:
        if self.waiting:
            with self.mu:
                self.waiters.notify_all()

    def want_reader(self) -> None:
        """An async call is waiting: the reader thread reads for it unless someone else does."""
        with self.mu:
            if self.owner is None:
                self.idle.notify()

    def run_started(self) -> None:
        with self.mu:
            self.kernel.running = True
            self.released = self.started = time.monotonic()
            if not self.reader_timed:
                self.idle.notify()

    # -- reading -----------------------------------------------------------------------------
    def _pump(self, done: Any) -> None:
        """Read and act on frames until ``done()``, or until woken to give the channel up while
        someone waits for it. The caller owns the channel."""
        chan = self.channel
        main = threading.get_ident() == self.main
        try:
            while not done():
                # The main thread reads straight away, without a poll first: no thread needs to
                # evict it (it reads their results for them), and an interrupt needs no wake-up
                # here: the host sends an ``interrupt`` frame with every SIGINT (the handler only
                # defers it while a frame is read; it is raised once that frame is in).
                if not chan.has_buffered() and not main:
                    ready = self._blocking(self.poll.poll)
                    if any(fd == self.wake_r for fd, _ in ready):
                        with self.mu:
                            os.read(self.wake_r, 64)
                            self.nudged = False
                            if self.waiting:
                                return
                        continue
                message = chan.recv()
                self.kernel.dispatch(message)
                if main and self.pending_sigint and self.kernel.running:
                    self.pending_sigint = False
                    raise KeyboardInterrupt
        except (protocol.FrameError, OSError):
            os._exit(0)

    def _read_until(self, done: Any, evict: bool) -> None:
        main = threading.get_ident() == self.main
        if main:
            self.defer = True
        try:
            while not done():
                with self.mu:
                    if not self._take(done, evict):
                        break
                try:
                    self._pump(done)
                finally:
                    with self.mu:
                        self._give_back()
        finally:
            if main:
                self.defer = False
        if main and self.pending_sigint and self.kernel.running:
            self.pending_sigint = False
            raise KeyboardInterrupt

    def await_reply(self, slot: Any) -> None:
        """A thread that sent a call: read until its result is in (or another reader hands it over)."""
        self._read_until(lambda: slot.reply is not None, evict=False)

    def next_request(self) -> dict[str, Any]:
        """The main thread between runs: the next run or setup request, read by itself."""
        runs = self.kernel.runs
        self._read_until(lambda: bool(runs), evict=True)
        return runs.popleft()

    def reader(self) -> None:
        """The reader thread: reads while nobody else does and a run needs it (async calls wait,
        or the code has not called for ``_READER_AFTER_S``); gives the channel up when woken."""
        kernel = self.kernel
        while True:
            with self.mu:
                while True:
                    now = time.monotonic()
                    if self.owner is None and kernel.running and (
                            kernel.client.has_async_waiting() or now - self.released >= _READER_AFTER_S):
                        self.owner = threading.get_ident()
                        self.owner_yields = True
                        break
                    timeout = None
                    if kernel.running:
                        timeout = max(self.released + _READER_AFTER_S - now, 0.0) if self.owner is None \
                            else _READER_AFTER_S
                    elif now - self.started < _READER_LINGER_S:
                        timeout = _READER_AFTER_S
                    self.reader_timed = timeout is not None
                    self.idle.wait(timeout)
                self.reader_timed = False
            try:
                self._pump(lambda: False)
            finally:
                with self.mu:
                    self._give_back()

