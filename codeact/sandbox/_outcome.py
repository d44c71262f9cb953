"""What a run ends with, and the kernel's frames it is made from, checked: ``DoneFrame`` (a
``done`` frame typed), ``RunOutcome`` (the done frame, or how the run ended without one), and the
checks of ``done`` and ``call`` frames (``frames.FROM_KERNEL``) that the driver and the leaders
reading a run's frames (``_leader.py``) both apply."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from .._text import one_line
from ..kernel.frames import FROM_KERNEL, TERMINATIONS, problem
from .labels import call_labels_problem, done_labels_problem

__all__ = ["CodeErrorFrame", "DoneFrame", "RunOutcome", "call_problem", "done_problem"]


@dataclass(slots=True)
class CodeErrorFrame:
    """The ``error`` object of a ``done`` frame (checked against ``frames.CODE_ERROR``)."""

    type: str
    message: str
    lineno: int | None = None
    traceback: str = ""

    def as_dict(self) -> dict[str, Any]:
        return {"type": self.type, "message": self.message, "lineno": self.lineno, "traceback": self.traceback}


# Alike by design (results.ExecutionResult): the wire's ``done`` fields, checked and typed, from
# which the session assembles the public result; the two change for different reasons.
@dataclass(slots=True)
class DoneFrame:
    """A checked ``done`` frame (``frames.FROM_KERNEL["done"]``), with its defaults filled in."""

    type: str
    id: str
    termination: str
    stdout: str = ""
    stderr: str = ""
    stdout_truncated: bool = False
    stderr_truncated: bool = False
    value: Any = None
    error: CodeErrorFrame | None = None
    final: dict[str, Any] | None = None
    facts: dict[str, Any] | None = None  # for replay; checked by the runtime
    names: Any = None  # the names the cell bound, for the check; checked by the runtime
    outputs: Any = None  # rich outputs ({mime: data} bundles); checked by the runtime
    labels: dict[str, list[str]] | None = None  # data-flow labels of each part (checked: sandbox.labels)

    @classmethod
    def of(cls, message: dict[str, Any]) -> DoneFrame:
        """From a frame that passed ``frames.problem``."""
        error = message.get("error")
        if error is not None:
            message = {**message, "error": CodeErrorFrame(**error)}
        return cls(**message)


@dataclass
class RunOutcome:
    """What the kernel reported for one run, or how the run ended without a report."""

    termination: str
    done: DoneFrame | None = None
    interrupted: bool = False
    state_lost: bool = False
    reason: str | None = None
    wall_ms: float = 0.0
    extra: dict[str, Any] = field(default_factory=dict)
    #: What was raised into the caller's thread mid-run (Ctrl-C's KeyboardInterrupt, say): the run
    #: was interrupted and waited for; the caller records it, then raises this.
    raised: BaseException | None = None


_CALL, _DONE = FROM_KERNEL["call"], FROM_KERNEL["done"]
# The fast paths' keys leave ``labels`` out: labels always get the full check (``sandbox.labels``).
_CALL_KEYS = frozenset(_CALL) - {"labels"}
_DONE_KEYS = frozenset(_DONE) - {"labels"}
_MAX_NAME = _CALL["name"].max_len or 0


def done_problem(message: dict[str, Any]) -> str | None:
    """What is wrong with a done frame, if anything (``frames.FROM_KERNEL["done"]``), with the
    common case (no error, no final answer) checked inline."""
    termination = message.get("termination")
    if (type(message.get("id")) is str and type(termination) is str and termination in TERMINATIONS
            and message.keys() <= _DONE_KEYS and message.get("error") is None and message.get("final") is None
            and type(message.get("stdout", "")) is str and type(message.get("stderr", "")) is str
            and type(message.get("stdout_truncated", False)) is bool
            and type(message.get("stderr_truncated", False)) is bool):
        return None
    issue = problem(message, _DONE)
    if issue is None and "labels" in message:
        issue = done_labels_problem(message["labels"])
    return issue


def call_problem(message: dict[str, Any]) -> str | None:
    """What is wrong with a call frame, if anything (``frames.FROM_KERNEL["call"]``), with the
    common valid case checked inline."""
    seq, name = message.get("seq"), message.get("name")
    if type(seq) is int and seq >= 1 and type(name) is str and len(name) <= _MAX_NAME and message.keys() <= _CALL_KEYS:
        return None
    issue = problem(message, _CALL)
    if issue is None and "labels" in message:
        issue = call_labels_problem(message["labels"])
    return None if issue is None else one_line(issue, 300)
