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
would leave the model no way to answer. Tool names the vendors reject (both take
``^[A-Za-z0-9_-]{1,64}$``: ``math.factorial``, GitHub's 74-character operations) are sent as their Python
identifier, shortened with a hash when still too long (:func:`wire_names`), and mapped back: the
host runs, and the records name, the real tool.

Large toolsets (deferred loading): when the runtime's tools do not fit its prompt budget (or with
``deferred=True``), the first request offers only ``search_tools``; the tools a search finds are
added to the definitions of every later request, and any tool can still be called by name. The
search is the host's built-in (recorded like any call); the model gets each hit as ``{name,
description}`` in its wire names.

Strict mode (constrained decoding): with ``strict=True`` (the default for clients that declare
``supports_strict_tools``: OpenAI's, and Anthropic's for the models that have it) each definition is
sent in the provider's strict subset (the client's ``strict_tools``:
:class:`~codeact.agent.models.base.StrictTools`) with its ``strict`` flag. A tool whose schema has no
strict form, or that would pass the provider's per-request limits (Anthropic: 20 strict tools, 24
optional and 16 union-typed parameters), is sent as it is, without the flag; the tools are taken in
the order sent (under deferred loading: ``search_tools``, then the tools in the order found). The
nulls that stand for omitted optional arguments are removed before validation (by the host's one
argument check: ``acall(omitted_nulls=True)``), so records show what the model meant.
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import re
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from .. import tracing
from ..results import ToolCallRecord
from ..runtime.cutoffs import EPISODE_INTERRUPTED, EPISODE_TIMED_OUT, UNFINISHED
from ..runtime.discovery import SEARCH_TOOLS
from ..runtime.ledger import CallLedger
from ..runtime.session import Runtime
from ..runtime.toolhost import READ_RESULT
from ..runtime.toolset import Toolset
from ..sandbox import SandboxConfig
from ..tool_stubs import ToolSpec
from ..tool_stubs.strict import strict_counts
from ._loop_common import AgentBase, EpisodeState, EventHook, error_result, reply_note
from ._run_events import turn_events
from .episode import Budget
from .messages import Message, ModelResponse, ToolResult
from .models.base import ModelClient, StrictTools, ToolChoice
from .prompts import JSON_SYSTEM_PROMPT

__all__ = ["DEFERRED_NOTE", "WIRE_NAME", "FunctionCallingAgent", "wire_names"]

DEFERRED_NOTE = """

There are {count} tools, too many to list. Only search_tools is loaded at first: call it with a few
words of what you need; the tools it finds can be called from your next reply on."""

#: What both vendors accept as a tool name (OpenAI function names; Anthropic's ``tools[].name`` and the
#: ``tool_reference`` names of its tool search).
WIRE_NAME = re.compile(r"[A-Za-z0-9_-]{1,64}")
_HASHED = 55  # characters kept before "_" and 8 hex digits of the name's SHA-1: 64 in all


def wire_names(toolset: Toolset) -> dict[str, str]:
    """Tool name → the name sent to the model: unique, and each matching :data:`WIRE_NAME`.

    A name the vendors accept is sent as it is; another goes as its Python identifier, and one still
    too long, or taken, as its first 55 characters, ``_`` and 8 hex digits of the SHA-1 of the tool's
    name (stable across runs). The built-ins the agent may add (``search_tools``, ``read_result``)
    keep their names. Map the model's calls back with the inverse of this mapping.
    """
    out: dict[str, str] = {}
    taken = {SEARCH_TOOLS, READ_RESULT}
    later = []
    for name in toolset.names:  # names both vendors accept first: they are what the model reads best
        if WIRE_NAME.fullmatch(name):
            out[name] = name
            taken.add(name)
        else:
            later.append(name)
    identifiers = toolset.python_names
    for name in later:
        wire = identifiers[name]
        salt = 0
        while not WIRE_NAME.fullmatch(wire) or wire in taken:  # a second round only on a hash collision
            digest = hashlib.sha1(f"{name}#{salt}".encode() if salt else name.encode()).hexdigest()[:8]
            wire = f"{re.sub(r'[^A-Za-z0-9_-]', '_', identifiers[name])[:_HASHED]}_{digest}"
            salt += 1
        out[name] = wire
        taken.add(wire)
    return out


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
                 max_output_tokens: int = 4096, strict: bool | None = None, deferred: bool | None = None) -> None:
        super().__init__(model, tools, runtime=runtime, sandbox=sandbox, budget=budget, system_prompt=system_prompt,
                         trace_path=trace_path, stream=stream, on_event=on_event,
                         max_observation_chars=max_observation_chars, max_output_tokens=max_output_tokens)
        self.tool_choice = tool_choice
        self.strict = bool(getattr(model, "supports_strict_tools", False)) if strict is None else strict
        rules = getattr(model, "strict_tools", None)
        self._rules = rules if isinstance(rules, StrictTools) else StrictTools()
        self.deferred = deferred

    def _is_deferred(self, runtime: Runtime) -> bool:
        searchable = SEARCH_TOOLS not in runtime.toolset  # a user tool of that name takes precedence
        return searchable and (runtime.views.large if self.deferred is None else self.deferred)

    def _system(self, runtime: Runtime) -> str:
        text = JSON_SYSTEM_PROMPT if self.system_prompt is None else self.system_prompt
        if self._is_deferred(runtime):
            text += DEFERRED_NOTE.format(count=len(runtime.toolset))
        return text

    def _tool_defs(self, runtime: Runtime, loaded: Sequence[str] | None = None,
                   wire: Mapping[str, str] | None = None) -> list[dict[str, Any]]:
        """The definitions sent: all tools, or (deferred) search_tools and the tools found so far."""
        wire = wire_names(runtime.toolset) if wire is None else wire
        if not self._is_deferred(runtime):
            tools = [(s, wire[s.name]) for s in runtime.toolset.specs]
        else:
            tools = [(runtime.host.builtins[SEARCH_TOOLS].spec, SEARCH_TOOLS),
                     *((runtime.toolset[n].spec, wire[n]) for n in loaded or ())]
        if READ_RESULT not in runtime.toolset:  # pages through cut results, as code mode can
            tools.append((runtime.host.builtins[READ_RESULT].spec, READ_RESULT))
        return self._definitions(tools)

    def _definitions(self, tools: Sequence[tuple[ToolSpec, str]]) -> list[dict[str, Any]]:
        """Neutral definitions; under strict mode, strict while the provider's limits allow."""
        rules, used = self._rules, (0, 0, 0)  # strict tools, optional and union-typed parameters so far
        defs = []
        for spec, wire_name in tools:
            out: dict[str, Any] = {"name": wire_name, "description": spec.description,
                                   "input_schema": spec.input_schema}
            if self.strict and (converted := spec.strict_input_schema(rules.optional)) is not None:
                optional, unions = strict_counts(converted)
                total = (used[0] + 1, used[1] + optional, used[2] + unions)
                if rules.admits(*total):
                    out["input_schema"], out["strict"], used = converted, True, total
            defs.append(out)
        return defs

    def _config(self, runtime: Runtime) -> dict[str, Any]:
        return {**super()._config(runtime), "tool_choice": self.tool_choice, "strict": self.strict,
                "deferred": self._is_deferred(runtime)}

    def _first_choice(self, wire: Mapping[str, str]) -> ToolChoice:
        choice = self.tool_choice
        if isinstance(choice, Mapping) and "name" in choice:
            return {"name": wire.get(str(choice["name"]), str(choice["name"]))}
        return choice

    async def _loop(self, runtime: Runtime, state: EpisodeState) -> None:
        wire = wire_names(runtime.toolset)  # once an episode: a large toolset's names are not free to map
        system = self._system(runtime)
        loaded: list[str] = []  # deferred loading: the tools searches found, in order
        choice = self._first_choice(wire)
        cache: dict[str, Any] = {}  # the episode's call memory (cacheable answers, ids), like a session's
        while state.outcome is None:
            response = await self._ask(state, system, self._tool_defs(runtime, loaded, wire), choice)
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
                await self._dispatch(runtime, state, response, wire, cache, loaded)

    async def _dispatch(self, runtime: Runtime, state: EpisodeState, response: ModelResponse,
                        wire: Mapping[str, str], cache: dict[str, Any], loaded: list[str]) -> None:
        host_name = {w: name for name, w in wire.items()}
        runnable = [c for c in response.tool_calls if c.executable]
        if not state.take_turn(tool_calls=len(runnable)):
            return
        ledger = CallLedger(cache)  # one per turn (policies count per execution); ids unique per episode
        if (events := turn_events(state.trace, state.turns)) is not None:
            ledger = events.ledger(cache)  # call_started / call_finished in the trace as they happen
        ledger.trace = tracing.run_trace(own_span=False)  # the calls' spans, under the episode's
        names = [host_name.get(c.name, c.name) for c in runnable]
        arguments = [self._paged(runtime, n, c.arguments) for n, c in zip(names, runnable, strict=True)]
        labels = _seen_labels(state.records, arguments) if runtime.flow is not None else [None] * len(arguments)
        calls = [runtime.host.acall(ledger, n, a, labels=x, omitted_nulls=self.strict)
                 for n, a, x in zip(names, arguments, labels, strict=True)]
        gathered = self._calls_task = asyncio.gather(*calls)
        try:
            records: list[ToolCallRecord] = list(await asyncio.wait_for(gathered, state.wall_left()))
        except asyncio.TimeoutError:
            ledger.close_pending(EPISODE_TIMED_OUT)
            state.add_records(ledger.records())
            state.stop_budget("max_wall_s", f"tool calls passed the {state.budget.max_wall_s:g} s wall-time budget")
            return
        except asyncio.CancelledError:
            current = asyncio.current_task()
            if (current is not None and current.cancelling()) or not self._stopped(state):
                raise  # this task itself was cancelled, not the calls by interrupt()
            ledger.close_pending(EPISODE_INTERRUPTED)
            state.add_records(ledger.records())
            return
        finally:
            self._calls_task = None
            if ledger.trace is not None:  # this turn's call spans
                ledger.trace.flush()
        state.add_records(records)
        done = iter(records)
        results: list[ToolResult] = []
        deferred = self._is_deferred(runtime)
        for call in response.tool_calls:
            if call.executable:
                record = next(done)
                if deferred and record.name == SEARCH_TOOLS and record.ok:
                    record = self._found(record, wire, loaded)
                results.append(self._result(call.id, record, ledger))
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

    @staticmethod
    def _found(record: ToolCallRecord, wire: Mapping[str, str], loaded: list[str]) -> ToolCallRecord:
        """Load the tools a search found (from the next request on); the model's view of the hits."""
        hits = [h for h in record.result or [] if isinstance(h, dict) and h.get("name") in wire]
        for hit in hits:
            if hit["name"] not in loaded:
                loaded.append(hit["name"])
        shown = [{"name": wire[h["name"]], "description": h.get("description", "")} for h in hits]
        return record.model_copy(update={"result": shown})

    def _result(self, call_id: str, record: ToolCallRecord, ledger: CallLedger | None = None) -> ToolResult:
        if not record.ok:
            error = (record.error or UNFINISHED.error()).model_dump()
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


def _seen_labels(records: Sequence[ToolCallRecord], arguments: Sequence[Any]) -> list[dict[str, Any]]:
    """Under a data-flow policy (``runtime.flow``): every argument the model writes here was written
    after it saw the whole conversation, so each carries the union of the labels of every tool
    result in it so far, and so does the decision to call at all (``pc``)."""
    seen = sorted({label for record in records for label in record.result_labels or ()})
    return [{"args": dict.fromkeys(a, seen) if isinstance(a, dict) else {}, "pc": seen} for a in arguments]
