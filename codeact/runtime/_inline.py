"""The inline lane: a plain sync tool's call run on the thread that read its frame, with every
step of the pipeline (bound → lookup → validate → admit → execute → record → reply) fused into as
few Python calls as the case allows. It takes a call only when every step passes; a call any step
would refuse goes to the full front instead, which records the refusal: the lane never decides
anything the pipeline would decide differently, it only gets there with less work.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any, Protocol

from ..results import ToolCallRecord
from ..sandbox.driver import CallDeadline
from ._calls import _Once
from ._tool import Tool
from .ledger import CallLedger
from .limits import CallLimits
from .toolset import Toolset

_Reply = Callable[[dict[str, Any]], None]


class _Host(Protocol):
    """What the lane uses of the ``ToolHost`` it is part of (``toolhost.py`` imports this module);
    a route is the host's ``_Route`` of the tool."""

    @property
    def toolset(self) -> Toolset: ...

    @property
    def limits(self) -> CallLimits: ...

    def _route(self, tool: Tool) -> Any: ...

    def _fast(self, name: str) -> bool: ...

    def _validate(self, route: Any, arguments: Any) -> dict[str, Any]: ...

    def _convert(self, route: Any, args: dict[str, Any]) -> dict[str, Any]: ...

    def _run_plain(self, ledger: CallLedger, record: ToolCallRecord, route: Any, args: dict[str, Any],
                   reply: _Reply, once: _Once, pooled: bool = True) -> None: ...

    def _expire(self, ledger: CallLedger, record: ToolCallRecord, route: Any, reply: _Reply, once: _Once,
                pooled: bool) -> None: ...


class _InlineCall(_Once):
    """One call taken by the lane: its work (``run``: the plain path on this thread, begun only
    when it runs) and its expiry (``expire``), which race to claim the session's slot back (see
    :class:`_Once`)."""

    __slots__ = ("args", "host", "ledger", "record", "reply", "route")

    def __init__(self, host: _Host, ledger: CallLedger, record: ToolCallRecord, route: Any,
                 args: dict[str, Any], reply: _Reply) -> None:
        super().__init__()
        self.host, self.ledger, self.record = host, ledger, record
        self.route, self.args, self.reply = route, args, reply

    def run(self) -> None:
        self.host._run_plain(self.ledger, self.record, self.route, self.args, self.reply, self, pooled=False)

    def expire(self) -> None:
        self.host._expire(self.ledger, self.record, self.route, self.reply, self, False)


def inline_call(host: _Host, ledger: CallLedger, name: str, arguments: Any,
                reply: _Reply, size: int) -> CallDeadline | None:
    """The call as (deadline, expire, run) for the reading thread to run, when the lane takes it;
    None, with nothing counted or recorded, when the full pipeline must (a bound, lookup,
    validation, conversion or admission that would not pass; a tool that is not plain or was slow
    lately; the session's share of the pool in use)."""
    limits = host.limits
    if type(arguments) is not dict or size > limits.max_argument_bytes:
        return None
    try:
        tool = host.toolset.get(name)
        if tool is None:
            return None
        route = host._route(tool)
        if not route.plain or not host._fast(name):
            return None
        args = host._convert(route, host._validate(route, arguments))
    except Exception:  # invalid arguments, or a fault: the full front says which, and records it
        return None
    gate = ledger.store.gate
    if gate.lent >= limits.max_lent_threads_per_session or not gate.try_enter():
        return None
    try:
        record = ledger.open_running(name, arguments, size, limits.max_calls_per_run, limits.max_run_argument_bytes,
                                     limits.max_in_flight_per_session, route.policy.max_calls)
    except BaseException:  # a fault (an observer's hook): the full front meets it too, and answers
        gate.leave()
        return None
    if record is None:
        gate.leave()
        return None
    call = _InlineCall(host, ledger, record, route, args, reply)
    ledger.holds.append((record, call, False))
    return time.monotonic() + route.timeout_s, call.expire, call.run
