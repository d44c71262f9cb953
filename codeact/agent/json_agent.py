"""``FunctionCallingAgent``: the classic JSON tool-calling loop, on the same tools and tool host.

Each reply's tool calls go through ``runtime.host.acall`` — the same lookup, validation,
permissions, policies and records as calls from code — and the calls of one reply run
concurrently (``asyncio.gather``). Results go back matched by call id, in each vendor's shape
(the model clients render ``Message.tool``): the value as text (a string as is, anything else as
JSON), or, for a failure, ``is_error`` with the JSON of ``{code, message, retryable}``. A call whose
arguments are not a JSON object is not dispatched: it is answered with an ``invalid_arguments``
error so the model can retry. A reply without tool calls is the final answer.

``tool_choice`` (``"auto"``, ``"none"``, ``"required"``, or ``{"name": tool}``) applies to the first
model call; later calls use ``"auto"`` (``"none"`` stays), since forcing a call on every turn
would leave the model no way to answer. Tool names the vendors reject (e.g. ``math.factorial``)
are sent as their Python identifier and mapped back.
"""

from __future__ import annotations

import asyncio
import json
import re
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from ..results import ToolCallRecord
from ..runtime.ledger import CallLedger
from ..runtime.session import Runtime
from ..runtime.toolhost import READ_RESULT
from ..runtime.toolset import Toolset
from ..sandbox import SandboxConfig
from ._loop_common import AgentBase, EpisodeState, EventHook, error_result, reply_note
from ._run_events import turn_events
from .episode import Budget
from .messages import Message, ModelResponse, ToolResult
from .models.base import ModelClient, ToolChoice
from .prompts import JSON_SYSTEM_PROMPT

__all__ = ["FunctionCallingAgent", "wire_names"]

_WIRE_NAME = re.compile(r"[A-Za-z0-9_-]{1,64}")


def wire_names(toolset: Toolset) -> dict[str, str]:
    """Tool name → the name sent to the model (itself when both vendors accept it)."""
    identifiers = toolset.python_names
    return {name: name if _WIRE_NAME.fullmatch(name) else identifiers[name] for name in toolset.names}


def _clip(text: str, limit: int) -> str:
    if len(text) <= limit:
        return text
    head = max(limit - 60, 0) // 2
    return f"{text[:head]}\n… [{len(text) - 2 * head} characters cut] …\n{text[len(text) - head:]}"


class FunctionCallingAgent(AgentBase):
    """Solves a task with JSON tool calls (see the module docstring); same budgets, episodes and
    traces as :class:`~codeact.agent.CodeActAgent`. No sandbox is started in this mode."""

    mode = "json"

    def __init__(self, model: ModelClient, tools: Toolset | Sequence[Any], *, runtime: Runtime | None = None,
                 budget: Budget | None = None, system_prompt: str | None = None, tool_choice: ToolChoice = "auto",
                 trace_path: str | Path | None = None, stream: bool = False, on_event: EventHook | None = None,
                 sandbox: SandboxConfig | None = None, max_observation_chars: int = 8000,
                 max_output_tokens: int = 4096) -> None:
        super().__init__(model, tools, runtime=runtime, sandbox=sandbox, budget=budget, system_prompt=system_prompt,
                         trace_path=trace_path, stream=stream, on_event=on_event,
                         max_observation_chars=max_observation_chars, max_output_tokens=max_output_tokens)
        self.tool_choice = tool_choice

    def _system(self, runtime: Runtime) -> str:
        return JSON_SYSTEM_PROMPT if self.system_prompt is None else self.system_prompt

    def _tool_defs(self, runtime: Runtime) -> list[dict[str, Any]]:
        wire = wire_names(runtime.toolset)
        defs = [{"name": wire[s.name], "description": s.description, "input_schema": s.input_schema}
                for s in runtime.toolset.specs]
        if READ_RESULT not in runtime.toolset:  # pages through cut results, as code mode can
            spec = runtime.host.builtins[READ_RESULT].spec
            defs.append({"name": READ_RESULT, "description": spec.description, "input_schema": spec.input_schema})
        return defs

    def _config(self, runtime: Runtime) -> dict[str, Any]:
        return {**super()._config(runtime), "tool_choice": self.tool_choice}

    def _first_choice(self, wire: Mapping[str, str]) -> ToolChoice:
        choice = self.tool_choice
        if isinstance(choice, Mapping) and "name" in choice:
            return {"name": wire.get(str(choice["name"]), str(choice["name"]))}
        return choice

    async def _loop(self, runtime: Runtime, state: EpisodeState) -> None:
        wire = wire_names(runtime.toolset)
        host_name = {w: name for name, w in wire.items()}
        system, tools = self._system(runtime), self._tool_defs(runtime)
        choice = self._first_choice(wire)
        cache: dict[str, Any] = {}  # the episode's call memory (cacheable answers, ids), like a session's
        while state.outcome is None:
            response = await self._ask(state, system, tools, choice)
            if response is None:
                return
            if choice != "none":
                choice = "auto"
            note = state.cut(response)
            if state.outcome is not None:
                return
            if note is not None:
                reply_note(state, response, note)
            elif not response.tool_calls:
                self.finish_with_text(state, response)
            else:
                await self._dispatch(runtime, state, response, host_name, cache)

    async def _dispatch(self, runtime: Runtime, state: EpisodeState, response: ModelResponse,
                        host_name: Mapping[str, str], cache: dict[str, Any]) -> None:
        runnable = [c for c in response.tool_calls if c.executable]
        if not state.take_turn(tool_calls=len(runnable)):
            return
        ledger = CallLedger(cache)  # one per turn (policies count per execution); ids unique per episode
        if (events := turn_events(state.trace, state.turns)) is not None:
            ledger = events.ledger(cache)  # call_started / call_finished in the trace as they happen
        calls = [runtime.host.acall(ledger, host_name.get(c.name, c.name), self._paged(runtime, c.name, c.arguments))
                 for c in runnable]
        try:
            records: list[ToolCallRecord] = list(await asyncio.wait_for(asyncio.gather(*calls), state.wall_left()))
        except asyncio.TimeoutError:
            ledger.close_pending("timeout", "the episode's wall-time budget ran out before this call finished")
            state.add_records(ledger.records())
            state.stop_budget("max_wall_s", f"tool calls passed the {state.budget.max_wall_s:g} s wall-time budget")
            return
        state.add_records(records)
        done = iter(records)
        results: list[ToolResult] = []
        for call in response.tool_calls:
            if call.executable:
                results.append(self._result(call.id, next(done), ledger))
            else:
                state.errors["syntax"] += 1
                results.append(error_result(call.id, "invalid_arguments", (
                    f"{call.parse_error}; nothing was run. Call {call.name} again with a JSON object of arguments")))
        state.trace.emit("tool_results", turn=state.turns,
                         calls={c.id: r.id for c, r in zip(runnable, records, strict=True)},
                         records=[r.model_dump(mode="json") for r in records],
                         results=[r.model_dump(mode="json") for r in results])
        state.messages.append(Message.tool(results))

    def _paged(self, runtime: Runtime, name: str, arguments: Any) -> Any:
        """A ``read_result`` page fits one observation (the host's own page size is for code)."""
        if name != READ_RESULT or READ_RESULT in runtime.toolset or not isinstance(arguments, dict):
            return arguments
        cap = max(1, self.max_observation_chars // 3)  # room for the page's JSON escapes
        limit = arguments.get("limit")
        return {**arguments, "limit": min(limit, cap) if isinstance(limit, int) and limit > 0 else cap}

    def _result(self, call_id: str, record: ToolCallRecord, ledger: CallLedger | None = None) -> ToolResult:
        if not record.ok:
            error = record.error.model_dump() if record.error else {"code": "tool_exception",
                                                                    "message": "the call did not finish",
                                                                    "retryable": False}
            return ToolResult(call_id=call_id, content=json.dumps(error, ensure_ascii=False), is_error=True)
        value = record.result
        text = value if isinstance(value, str) else json.dumps(value, ensure_ascii=False, default=repr)
        if len(text) > self.max_observation_chars and ledger is not None and record.name != READ_RESULT:
            full = json.dumps(value, ensure_ascii=False, default=repr)
            ledger.store.keep(record.id, full)
            head = max(self.max_observation_chars // 2, 1)
            return ToolResult(call_id=call_id, content=(
                f"{full[:head]}\n… [cut: the result's JSON text has {len(full)} characters and is kept: call "
                f"{READ_RESULT}(call_id={record.id!r}, offset={head}) to read on, page by page]"))
        return ToolResult(call_id=call_id, content=_clip(text, self.max_observation_chars))
