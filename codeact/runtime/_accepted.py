"""What the tool host's front gives for one arriving call: an :class:`Accepted` call (its record,
its tool's route, the arguments the tool gets, and the lane that runs it), or a :class:`Refusal`
(its reply, and its record when it was recorded). Every lane executes an Accepted; none decides
anything about the call again."""

from __future__ import annotations

import enum
from typing import Any, final

from ..results import ToolCallError, ToolCallRecord

__all__ = ["Accepted", "Lane", "Refusal"]


class Lane(enum.Enum):
    """Where an accepted call runs."""

    #: The host's own tools (``read_result``, discovery), answered on the caller's thread.
    BUILTIN = "builtin"
    #: A plain sync tool on the thread that read its frame: no hand-off at all.
    INLINE = "inline"
    #: A plain sync tool on a pool thread (one hand-off).
    POOL = "pool"
    #: Through the host's event loop: permission hooks, rate limits, the cache, retries, async tools.
    LOOP = "loop"


@final
class Accepted:
    """One call past the front: recorded, its arguments checked and converted, its lane chosen
    (for :attr:`Lane.INLINE`, with the session's slot already taken). ``route`` is the host's
    ``_Route`` of the tool."""

    __slots__ = ("args", "lane", "record", "route")

    def __init__(self, record: ToolCallRecord, route: Any, args: dict[str, Any], lane: Lane) -> None:
        self.record, self.route, self.args, self.lane = record, route, args, lane


@final
class Refusal:
    """A call refused at the front: its record (None when not even recorded) and its reply."""

    __slots__ = ("payload", "record")

    def __init__(self, record: ToolCallRecord | None, payload: dict[str, Any]) -> None:
        self.record = record
        self.payload = payload

    @classmethod
    def of(cls, record: ToolCallRecord | None, error: ToolCallError) -> Refusal:
        return cls(record, {"ok": False, "error": error.model_dump()})
