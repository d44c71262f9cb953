"""``CodeActAgent``: the model acts by writing Python that calls the tools as functions.

The loop, one persistent sandbox session per episode:

1. The system prompt shows the tools' prompt view (typed stubs) and the conventions below.
2. The model replies with code: a fenced ```python block (several blocks in one reply are
   joined and run as one action), or an ``execute_python`` tool call whose ``code`` argument is
   run and answered with a tool result (several such calls run one after the other; when a
   reply has both, the tool calls are run). A call of any other tool is answered with an
   ``unknown_tool`` error pointing at code.
3. The code runs in the session; ``render_observation`` of the ``ExecutionResult`` goes back
   (as a user message, or as the tool result, ``is_error`` when the run failed).
4. Repeat until the model finishes or a budget (turns, wall time, tokens, tool calls) runs out,
   which ends the episode as ``incomplete`` with the records obtained so far.

Final answer: ``final_answer(x)`` in the code ends the episode with ``x`` at once; a reply with
no code (and no tool call) is the answer as text. A reply cut off by the output limit or by a
broken stream is neither run nor taken as an answer: the model is told and may try again.
"""

from __future__ import annotations

import asyncio
import re
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from ..results import ExecutionResult, render_observation
from ..runtime.session import Runtime, Session
from ..runtime.toolset import Toolset
from ..sandbox import SandboxConfig
from ._loop_common import AgentBase, EpisodeState, EventHook, error_result, reply_note
from ._run_events import turn_events
from .episode import Budget
from .messages import Message, ModelResponse, ToolCall, ToolResult
from .models.base import ModelClient
from .prompts import EXECUTE_PYTHON, code_system_prompt, execute_python_tool

__all__ = ["CodeActAgent", "extract_code"]

_FENCE = re.compile(r"```[ \t]*(?:python3?|py)[ \t]*\n(.*?)(?:^[ \t]*```|\Z)", re.DOTALL | re.MULTILINE | re.IGNORECASE)
_SYNTAX_ERRORS = frozenset({"SyntaxError", "IndentationError", "TabError"})


def extract_code(text: str) -> str | None:
    """The Python of the ```python (or ```py) blocks in ``text``, joined; None when there is none.

    An unclosed block runs to the end of the text.
    """
    blocks = [block.strip("\n") for block in _FENCE.findall(text)]
    blocks = [block for block in blocks if block.strip()]
    return "\n\n".join(blocks) if blocks else None


class CodeActAgent(AgentBase):
    """Solves a task with code actions run in a sandbox session (see the module docstring).

    ``runtime=None``: a ``Runtime(tools, sandbox)`` is made for each run and closed after it;
    a given runtime is used (its tools, its sandbox settings) and left open. ``system_prompt``
    replaces the default; ``{tools}`` in it is replaced by the stubs. ``code_tool`` offers the
    ``execute_python`` tool to the model besides fenced blocks. ``on_event`` receives every
    trace event as it happens.
    """

    mode = "code"

    def __init__(self, model: ModelClient, tools: Toolset | Sequence[Any], *, sandbox: SandboxConfig | None = None,
                 runtime: Runtime | None = None, budget: Budget | None = None, system_prompt: str | None = None,
                 trace_path: str | Path | None = None, stream: bool = False, on_event: EventHook | None = None,
                 max_observation_chars: int = 8000, code_tool: bool = True, max_output_tokens: int = 4096) -> None:
        super().__init__(model, tools, runtime=runtime, sandbox=sandbox, budget=budget, system_prompt=system_prompt,
                         trace_path=trace_path, stream=stream, on_event=on_event,
                         max_observation_chars=max_observation_chars, max_output_tokens=max_output_tokens)
        self.code_tool = code_tool

    def _system(self, runtime: Runtime) -> str:
        return code_system_prompt(runtime.prompt_view, self.system_prompt)

    def _stubs(self, runtime: Runtime) -> dict[str, str]:
        return {"stubs": runtime.prompt_view}

    def _tool_defs(self, runtime: Runtime) -> list[dict[str, Any]]:
        return [execute_python_tool().to_anthropic()] if self.code_tool else []

    async def _loop(self, runtime: Runtime, state: EpisodeState) -> None:
        system, tools = self._system(runtime), self._tool_defs(runtime)
        session = runtime.session()
        try:
            while state.outcome is None:
                response = await self._ask(state, system, tools)
                if response is None:
                    return
                await self._step(session, state, response)
        finally:
            await asyncio.to_thread(session.close)

    async def _step(self, session: Session, state: EpisodeState, response: ModelResponse) -> None:
        note = state.cut(response)
        if state.outcome is not None:
            return
        if note is not None:
            reply_note(state, response, note)
        elif response.tool_calls:
            await self._tool_calls(session, state, response.tool_calls)
        else:
            code = extract_code(response.text)
            if code is None:
                self.finish_with_text(state, response)
            elif state.take_turn(tool_calls=1):
                ran = await self._execute(session, state, code, source="markdown", call_id=None)
                if ran is not None and state.outcome is None:
                    state.messages.append(Message.user(f"Observation:\n{ran[1]}"))

    async def _tool_calls(self, session: Session, state: EpisodeState, calls: Sequence[ToolCall]) -> None:
        runs_code = any(c.name == EXECUTE_PYTHON and c.executable for c in calls)
        if not state.take_turn(tool_calls=1 if runs_code else None):
            return
        results: list[ToolResult] = []
        for call in calls:
            code = (call.arguments or {}).get("code")
            if call.name != EXECUTE_PYTHON:
                state.errors["syntax"] += 1
                results.append(error_result(call.id, "unknown_tool", (
                    f"there is no tool {call.name!r} to call here: write Python that calls the tools as functions "
                    f"and run it with {EXECUTE_PYTHON} (or in a ```python block)")))
            elif not call.executable or not isinstance(code, str) or not code.strip():
                state.errors["syntax"] += 1
                why = call.parse_error or f"{EXECUTE_PYTHON} takes {{\"code\": \"<python source>\"}}"
                results.append(error_result(call.id, "invalid_arguments", f"{why}; nothing was run"))
            else:
                ran = await self._execute(session, state, code, source="tool", call_id=call.id)
                if ran is None or state.outcome is not None:
                    return
                results.append(ToolResult(call_id=call.id, content=ran[1], is_error=not ran[0].ok))
        state.messages.append(Message.tool(results))

    async def _execute(self, session: Session, state: EpisodeState, code: str, *, source: str,
                       call_id: str | None) -> tuple[ExecutionResult, str] | None:
        """Run one code action; None when the wall-time budget is gone."""
        left = state.wall_left()
        if left <= 0:
            state.stop_budget("max_wall_s", f"{state.budget.max_wall_s:g} s of wall time used")
            return None
        if not session.started:  # the cold start, timed apart from the action it precedes
            began = time.perf_counter()
            await asyncio.to_thread(session.start)
            took = time.perf_counter() - began
            state.sandbox_start_s += took
            state.trace.emit("sandbox_start", turn=state.turns, duration_ms=round(took * 1000, 2))
        state.trace.emit("code", turn=state.turns, source=source, call_id=call_id, code=code)
        result = await asyncio.to_thread(session.run, code, timeout_s=min(session.config.timeout_s, left),
                                         on_event=turn_events(state.trace, state.turns))
        state.add_records(result.calls)
        if result.termination == "rejected":  # the check found an error: nothing ran
            state.errors["check"] += 1
        elif not result.ok:
            syntax = result.error is not None and result.error.type in _SYNTAX_ERRORS
            state.errors["syntax" if syntax else "runtime"] += 1
        observation = render_observation(result, self.max_observation_chars)
        state.trace.emit("execution", turn=state.turns, call_id=call_id, result=result.model_dump(mode="json"),
                         observation=observation)
        if result.answered:
            state.end("answered", "answer", answer=result.final_answer)
        return result, observation
