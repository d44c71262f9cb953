"""The CLI's Ctrl-C contract, the same for every long command.

First SIGINT: stop starting work, interrupt the running code, keep and print/write everything that
finished; the command then exits 130. Second SIGINT: abandon at once: this process's sandboxes
are removed and the process exits 130 without waiting for anything else. SIGTERM or SIGHUP (a
supervisor, ``timeout``, a closed terminal): abandon at once the same way, exit 128 + the signal.
"""

from __future__ import annotations

import contextlib
import os
import signal
import sys
import threading
from collections.abc import Callable, Iterator
from types import FrameType

__all__ = ["EXIT_INTERRUPTED", "Interrupts", "interrupts"]

#: Exit status of a command stopped by Ctrl-C (128 + SIGINT), after the first or the second one.
EXIT_INTERRUPTED = 130


class Interrupts:
    """Counts SIGINTs; runs ``on_first`` (on a helper thread: it may block) at the first one.

    ``raise_first``: raise ``KeyboardInterrupt`` in the main thread at the first one instead
    (for code that already handles it by finishing what runs, like ``codeact eval``).
    """

    def __init__(self, on_first: Callable[[], None] | None = None, *, raise_first: bool = False,
                 message: str = "interrupted: stopping; Ctrl-C again to abandon") -> None:
        self.on_first = on_first
        self.raise_first = raise_first
        self.message = message
        self.event = threading.Event()
        self.count = 0

    @property
    def requested(self) -> bool:
        return self.event.is_set()

    def handle(self, signum: int, frame: FrameType | None) -> None:
        self.count += 1
        if self.count > 1:
            abandon()
        self.event.set()
        if self.message:
            _say(self.message)
        if self.raise_first:
            raise KeyboardInterrupt
        if self.on_first is not None:
            threading.Thread(target=self.on_first, name="codeact-interrupt", daemon=True).start()


def _say(text: str) -> None:
    with contextlib.suppress(OSError, ValueError):
        os.write(2, f"codeact: {text}\n".encode())


def abandon(status: int = EXIT_INTERRUPTED, why: str = "abandoned") -> None:
    """Remove this process's containers and session directories, then exit at once."""
    _say(why)
    with contextlib.suppress(Exception):
        _remove_own_sandboxes()
    with contextlib.suppress(Exception):
        sys.stderr.flush()
    os._exit(status)


def _terminated(signum: int, frame: FrameType | None) -> None:
    abandon(128 + signum, f"terminated by {signal.Signals(signum).name}: sandboxes removed")


def _remove_own_sandboxes() -> None:
    from ..sandbox.cleanup import remove_own

    client = None
    if "docker" in sys.modules:  # a process that never spoke to Docker has no containers
        from ..image.engine import docker_client

        client = docker_client()
    remove_own(client)


@contextlib.contextmanager
def interrupts(on_first: Callable[[], None] | None = None, **kwargs: object) -> Iterator[Interrupts]:
    """Install the contract's SIGINT, SIGTERM and SIGHUP handlers for the block (main thread
    only; else a no-op)."""
    state = Interrupts(on_first, **kwargs)  # type: ignore[arg-type]
    if threading.current_thread() is not threading.main_thread():
        yield state
        return
    previous = {signal.SIGINT: signal.signal(signal.SIGINT, state.handle)}
    for signum in (signal.SIGTERM, signal.SIGHUP):
        if signal.getsignal(signum) is not signal.SIG_IGN:  # nohup's choice stands
            previous[signum] = signal.signal(signum, _terminated)
    try:
        yield state
    finally:
        for signum, handler in previous.items():
            if handler is not None:  # None: a handler installed from C, which Python cannot put back
                signal.signal(signum, handler)
