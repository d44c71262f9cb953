"""``CallLimits``: the bounds every tool call of a runtime goes through, one frozen object that the
``Runtime`` makes from its arguments and hands down (to its ``ToolHost``, and from it to the
host a replay answers with), never copied field by field."""

from __future__ import annotations

from dataclasses import dataclass

__all__ = ["CallLimits"]


@dataclass(frozen=True, slots=True)
class CallLimits:
    """The bounds of tool calls (the ``Runtime`` arguments of the same names)."""

    #: A result longer than this (as JSON text) reaches the code as a truncated view (``read_result``).
    max_result_chars: int = 1_000_000
    #: Tool executions in flight at once, across every session of the runtime.
    max_concurrency: int = 32
    #: The timeout of a tool whose policy sets none (every call has one).
    tool_timeout_s: float = 30.0
    #: Calls one run may make.
    max_calls_per_run: int = 10_000
    #: The JSON bytes of one call's arguments, at most.
    max_argument_bytes: int = 256 * 1024
    #: The JSON bytes of all the arguments of one run's calls, at most.
    max_run_argument_bytes: int = 64 * 1024 * 1024
    #: Calls of one session recorded and not yet ended, at most (more are refused, retryable).
    max_in_flight_per_session: int = 256
    #: Host threads one session's calls may hold past their timeout (each lent to the pool so that
    #: others keep its capacity), at most; while that many are held, its calls are refused.
    max_lent_threads_per_session: int = 16
