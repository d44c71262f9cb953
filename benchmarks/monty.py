"""pydantic-monty as a peer (the ``bench`` extra): Monty's interpreter, a Python subset written in
Rust, run in a pool of ``monty`` worker processes. It has no OS isolation (no container, no
namespaces, no seccomp: its boundary is the interpreter's own), so its rows say what an
interpreter-level sandbox costs, not a like-for-like number.

Three measures, each beside codeact's row in the same run: a warm ``feed_run("x = 1")`` in a
checked-out session (the warm row), a host function called from inside a feed (the tool-call
row: a feed of a loop of calls, timed from the host, divided by the calls), and a pooled checkout
to its first result (the pooled-acquire row).
"""

from __future__ import annotations

import time
from typing import Any

NOTE = "no OS isolation: worker processes running a Python subset"
#: Suspensions (host calls) one checkout may make; Monty's default is 1,000.
_MAX_SUSPENSIONS = 10_000_000
_CALLS = "_t = 0\nfor _i in range({n}):\n    _t = _t + echo(_i)\n_t"


def _echo(x: int) -> int:
    return x


class MontyPeer:
    """A Monty pool with one session checked out; raises ImportError when not installed."""

    def __init__(self) -> None:
        from pydantic_monty import Monty  # peer: from the bench extra only

        self.pool: Any = Monty()
        self.pool.__enter__()
        self._checkout: Any = self.pool.checkout(limits={"max_suspensions": _MAX_SUSPENSIONS})
        self.session: Any = self._checkout.__enter__()
        if self.session.feed_run("1 + 1") != 2:
            raise RuntimeError("pydantic-monty did not answer 1 + 1")

    def warm(self) -> None:
        self.session.feed_run("x = 1")

    def calls(self, n: int) -> float:
        """Microseconds a host call, over a feed of ``n`` of them."""
        start = time.perf_counter()
        total = self.session.feed_run(_CALLS.format(n=n), external_lookup={"echo": _echo})
        took = time.perf_counter() - start
        if total != n * (n - 1) // 2:
            raise RuntimeError(f"pydantic-monty's calls summed to {total!r}")
        return took / n * 1e6

    def checkout_ms(self) -> float:
        """A pooled checkout to its first result (``1``, as codeact's row runs), in milliseconds."""
        start = time.perf_counter()
        with self.pool.checkout() as session:
            value = session.feed_run("1")
            took = time.perf_counter() - start
        if value != 1:
            raise RuntimeError(f"pydantic-monty's checkout answered {value!r}")
        return took * 1000

    def close(self) -> None:
        try:
            self._checkout.__exit__(None, None, None)
        finally:
            self.pool.__exit__(None, None, None)


def open_peer(quick: bool) -> tuple[MontyPeer | None, str]:
    """The peer, or None with the reason (skipped in ``--quick``, not installed, did not start)."""
    if quick:
        return None, "skipped in --quick"
    try:
        return MontyPeer(), ""
    except Exception as exc:
        return None, f"n/a: {type(exc).__name__}: {exc}"[:200]
