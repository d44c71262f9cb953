"""``serve-mcp``'s approver for data-flow ``ask`` decisions: an MCP elicitation of the client that
sent the run (form mode, one yes/no field), when the client declared it can answer one.

The question names the tool, what the policy found wrong and each argument's labels, never the
arguments' values: the client may be a model, and the values may be the untrusted text itself.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
from typing import Any

from pydantic import BaseModel, Field

from ..runtime.flow import FlowApprover, FlowCall

__all__ = ["approval_message", "elicitation_approver"]

_MAX_MESSAGE = 2000


class _Approval(BaseModel):
    approve: bool = Field(description="Allow this one call")


def approval_message(call: FlowCall) -> str:
    """What the client is asked: the tool, the rule it breaks, the labels of its arguments."""
    why = "; ".join(call.violations) or "the policy's check asked for approval"
    labels = ", ".join(f"{name}: [{', '.join(sorted(found)) or 'none'}]" for name, found in sorted(call.labels.items()))
    text = (f"The code wants to call {call.tool!r}, which the data-flow policy refuses without approval: {why}. "
            f"Labels of its arguments: {labels or 'none'}"
            + (f"; of the control flow at the call: [{', '.join(sorted(call.pc))}]" if call.pc else "")
            + ". Allow this one call?")
    return text if len(text) <= _MAX_MESSAGE else text[: _MAX_MESSAGE - 1] + "…"


def _can_elicit(ctx: Any) -> bool:
    try:
        capabilities = ctx.request_context.session.client_capabilities
    except (AttributeError, ValueError, LookupError):  # no request (a task's context), no session
        return False
    return capabilities is not None and capabilities.elicitation is not None


def elicitation_approver(ctx: Any, wait_s: float) -> FlowApprover | None:
    """An approver asking the client of ``ctx`` (this request's ``Context``), run from any thread
    while the request's event loop runs; None when the client cannot be asked. An answer not back
    within ``wait_s`` refuses the call."""
    if not _can_elicit(ctx):
        return None
    loop = asyncio.get_running_loop()

    def approve(call: FlowCall) -> bool | str:
        future = asyncio.run_coroutine_threadsafe(ctx.elicit(approval_message(call), _Approval), loop)
        try:
            answer = future.result(timeout=wait_s)
        except concurrent.futures.TimeoutError:
            future.cancel()
            return f"the client did not answer within {wait_s:g} s"
        if answer.action != "accept":
            return f"the client's user {'declined' if answer.action == 'decline' else 'cancelled'}"
        return True if answer.data.approve else "the client's user answered no"

    return approve
