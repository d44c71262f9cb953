"""Where a fresh Docker session's milliseconds go: each step of ``rt.session()`` → first result.

:class:`StepClock` wraps, for as long as it is entered, the engine client's ``create_container``
and ``start``, the channel's ``accept`` and the driver's ``handshake`` with timestamps, so one
cold sample splits into: set-up before the engine is asked (image lookup, directories, the
listener), the engine's create, the engine's start (runc: namespaces, mounts, cgroups, init), the
container's start until the kernel connects (interpreter start, kernel imports), the handshake
(hello, setup, ready) and the first run (with what the session adds around it).
"""

from __future__ import annotations

import itertools
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

STEPS = ("before the engine", "engine create", "engine start", "start → kernel connects", "handshake",
         "first run")


class StepClock:
    """Timestamps of one sample's steps (``mark``), turned into milliseconds per step (``split``)."""

    def __init__(self) -> None:
        self.marks: dict[str, float] = {}

    def mark(self, name: str) -> None:
        self.marks.setdefault(name, time.perf_counter())

    def split(self, started: float, first: float) -> dict[str, float] | None:
        """The sample's steps in ms, or None when a step was not seen (a pooled start, say)."""
        m = self.marks
        names = ("create0", "create1", "start0", "start1", "accepted", "ready")
        if any(n not in m for n in names):
            return None
        edges = [started, m["create0"], m["create1"], m["start0"], m["start1"], m["accepted"], m["ready"], first]
        # the engine's create and start are consecutive; the gap between them (the workspace
        # join) is counted with the create
        ms = [(b - a) * 1000 for a, b in itertools.pairwise(edges)]
        return {"before the engine": ms[0], "engine create": ms[1] + ms[2], "engine start": ms[3],
                "start → kernel connects": ms[4], "handshake": ms[5], "first run": ms[6]}

    @contextmanager
    def patched(self) -> Iterator[StepClock]:
        """Wrap the four calls while the block runs (benchmarks may peek at privates)."""
        from codeact.sandbox import _channel, driver
        from codeact.sandbox.docker import _client

        api = _client().api
        undo: list[Callable[[], None]] = []

        def wrap(owner: Any, attr: str, before: str | None, after: str) -> None:
            original = getattr(owner, attr)

            def timed(*args: Any, **kwargs: Any) -> Any:
                if before:
                    self.mark(before)
                result = original(*args, **kwargs)
                self.mark(after)
                return result

            setattr(owner, attr, timed)
            undo.append(lambda: setattr(owner, attr, original) if owner is not api else delattr(owner, attr))

        wrap(api, "create_container", "create0", "create1")
        wrap(api, "start", "start0", "start1")
        wrap(_channel.ChannelListener, "accept", None, "accepted")
        wrap(driver.KernelDriver, "handshake", None, "ready")
        try:
            yield self
        finally:
            for step in reversed(undo):
                step()

    def reset(self) -> None:
        self.marks.clear()
