"""What a call cut short records, decided in one place: its error's code, message and whether a
retry may help, for a call past its timeout, a call whose run or episode ended first (timed out,
interrupted, killed, closed), a call cancelled, and a call the closing runtime never ran.

The tool host raises or records these (``toolhost.py``), the ledger ends the calls still open at
a run's or an episode's end with them (``CallLedger.close_pending``), and the session picks the
one for the run's termination (``run_ended``, from the driver's outcome).
"""

from __future__ import annotations

import functools
from typing import NamedTuple

from ..errors import ToolError
from ..results import ToolCallError

__all__ = ["CANCELLED", "EPISODE_INTERRUPTED", "EPISODE_TIMED_OUT", "NOT_STARTED", "RUNTIME_CLOSED", "UNFINISHED",
           "Cutoff", "Ending", "run_ended", "tool_timeout"]


class Cutoff(NamedTuple):
    """One kind of cut-off as a call's error."""

    code: str
    message: str
    retryable: bool = False

    def error(self) -> ToolCallError:
        """As a record's error."""
        return ToolCallError(code=self.code, message=self.message, retryable=self.retryable)

    def exception(self) -> ToolError:
        """As the ToolError the execute step raises (an idempotent tool's retry may meet it)."""
        return ToolError(self.code, self.message, self.retryable)


class Ending(NamedTuple):
    """What the calls still open when a run or an episode ends record: ``running`` for a call
    that had begun, ``queued`` for one that had not (it never will)."""

    running: Cutoff
    queued: Cutoff


def tool_timeout(name: str, seconds: float) -> Cutoff:
    """A call past its time limit (on any lane): worth retrying."""
    return Cutoff("timeout", f"{name!r} did not answer within {seconds} s", True)


#: A call that reached its execute step after its run had ended: it never runs.
NOT_STARTED = Cutoff("timeout", "the run ended before this call started")
#: A call through the loop whose caller gave it up, or whose runtime closed, while it ran.
CANCELLED = Cutoff("tool_exception", "the call was cancelled before it finished "
                                     "(its caller was interrupted, or the runtime closed)")
#: A call the runtime, closing, would no longer run.
RUNTIME_CLOSED = Cutoff("tool_exception", "the runtime closed before this call finished")
#: What a reply says of a record that ended without an error of its own, or never ended.
UNFINISHED = Cutoff("tool_exception", "the call did not finish")


def _ending(code: str, why: str) -> Ending:
    retryable = code == "timeout"
    return Ending(Cutoff(code, f"{why} before this call finished", retryable),
                  Cutoff(code, f"{why} before this call started (it was not run)", retryable))


@functools.lru_cache(maxsize=32)  # a handful of terminations; every run's end asks
def run_ended(termination: str) -> Ending:
    """The calls still open when a run ended as ``termination`` (``timeout``, ``killed``,
    ``interrupted``, ``memory``, ``completed``, …): a timeout's are timeouts, any other
    termination's ``tool_exception``s."""
    return _ending("timeout" if termination == "timeout" else "tool_exception", f"the run ended ({termination})")


#: The calls still open when a JSON agent's episode ran out of wall time.
EPISODE_TIMED_OUT = _ending("timeout", "the episode's wall-time budget ran out")
#: The calls still open when a JSON agent's episode was interrupted.
EPISODE_INTERRUPTED = _ending("tool_exception", "the episode was interrupted")
