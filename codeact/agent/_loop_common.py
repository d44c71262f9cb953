"""What both agent loops share: runtime ownership, budgets, model calls, counting, traces."""

from __future__ import annotations

import abc
import asyncio
import concurrent.futures
import json
import time
from collections.abc import Callable, Iterable, Sequence
from pathlib import Path
from typing import Any, ClassVar, Literal

from .. import tracing
from ..errors import ModelError
from ..results import ToolCallRecord
from ..runtime.session import Runtime
from ..runtime.toolset import Toolset
from ..sandbox import SandboxConfig
from .episode import ERROR_LAYERS, Budget, Episode, EpisodeStatus
from .messages import Message, ModelResponse, ToolResult
from .models.base import ModelClient, ToolChoice, ToolDef
from .trace import TraceWriter

EventHook = Callable[[dict[str, Any]], None]

#: Consecutive replies cut off (output limit, broken stream) before the episode gives up.
MAX_CONSECUTIVE_CUTS = 2

_CUT_NOTES = {
    "max_tokens_stop": "Your reply hit the output limit (max_tokens) and was cut off. Nothing in it was run and "
    "it is not taken as an answer. Reply again, more briefly.",
    "truncated": "Your reply was cut off: the stream ended before you finished. Nothing in it was run. "
    "Send it again.",
}


def error_result(call_id: str, code: str, message: str, retryable: bool = False) -> ToolResult:
    """A failed tool result: content is the JSON of ``{code, message, retryable}``."""
    content = json.dumps({"code": code, "message": message, "retryable": retryable}, ensure_ascii=False)
    return ToolResult(call_id=call_id, content=content, is_error=True)


def reply_note(state: EpisodeState, response: ModelResponse, note: str) -> None:
    """Tell the model its cut reply was not used: an error result per call, else a user message."""
    if response.tool_calls:
        state.messages.append(Message.tool([error_result(c.id, "invalid_arguments", note)
                                            for c in response.tool_calls]))
    else:
        state.messages.append(Message.user(note))


class EpisodeState:
    """The mutable account of one episode: conversation, counters, records, outcome."""

    def __init__(self, task: str, budget: Budget, trace: TraceWriter) -> None:
        self.task = task
        self.budget = budget
        self.trace = trace
        self.messages: list[Message] = [Message.user(task)]
        self.turns = self.model_calls = self.tokens_in = self.tokens_out = 0
        self.records: list[ToolCallRecord] = []
        self.errors: dict[str, int] = dict.fromkeys(ERROR_LAYERS, 0)
        self.cuts = 0
        self.retryable = False
        self.usage_unknown = 0
        self.sandbox_start_s = 0.0  # starting the sandbox, inside the wall time (code mode)
        self.outcome: tuple[EpisodeStatus, str, Any, str | None] | None = None

    # -- accounting ------------------------------------------------------------------------------
    def wall_left(self) -> float:
        return self.budget.max_wall_s - self.trace.elapsed()

    def add_records(self, records: Iterable[ToolCallRecord]) -> None:
        for record in records:
            self.records.append(record)
            if not record.ok:
                self.errors["tool"] += 1

    def end(self, status: EpisodeStatus, stop_reason: str, answer: Any = None, detail: str | None = None) -> None:
        if self.outcome is None:
            self.outcome = (status, stop_reason, answer, detail)

    def stop_budget(self, limit: str, detail: str) -> None:
        self.errors["budget"] += 1
        self.trace.emit("budget", turn=self.turns, limit=limit, detail=detail)
        self.end("incomplete", limit, detail=detail)

    def take_turn(self, tool_calls: int | None = None) -> bool:
        """Account one more turn; False (and the episode stops) when a budget forbids it.

        ``tool_calls``: the calls the action will make at least (None: no tool budget check).
        """
        b = self.budget
        if self.turns >= b.max_turns:
            self.stop_budget("max_turns", "the model asked for another action after "
                                           f"{b.max_turns} turn{'' if b.max_turns == 1 else 's'}")
        elif tool_calls is not None and len(self.records) + tool_calls > b.max_tool_calls:
            self.stop_budget("max_tool_calls", f"{len(self.records)} of {b.max_tool_calls} tool calls used, "
                                               f"{tool_calls} more asked for")
        elif self.wall_left() <= 0:
            self.stop_budget("max_wall_s", f"{b.max_wall_s:g} s of wall time used")
        else:
            self.turns += 1
            return True
        return False

    def cut(self, response: ModelResponse) -> str | None:
        """The note for a reply cut off (not executed, not an answer), or None. Ends the episode
        when replies keep being cut."""
        if response.truncated or response.stop_reason == "error":
            kind = "truncated"
        elif response.stop_reason == "max_tokens":
            kind = "max_tokens_stop"
        else:
            self.cuts = 0
            return None
        self.cuts += 1
        self.errors["model"] += 1
        if self.cuts >= MAX_CONSECUTIVE_CUTS:
            self.end("incomplete", kind, detail=f"{self.cuts} replies in a row were cut off ({kind})")
            return None
        if not self.take_turn():
            return None
        self.trace.emit("note", turn=self.turns, reason=kind, text=_CUT_NOTES[kind])
        return _CUT_NOTES[kind]

    def episode(self, mode: Literal["code", "json"], model: str, trace_path: str | None) -> Episode:
        status, stop_reason, answer, detail = self.outcome or ("error", "internal", None, "the loop ended early")
        return Episode(task=self.task, mode=mode, model=model, answer=answer, status=status,
                       stop_reason=stop_reason, turns=self.turns, model_calls=self.model_calls,
                       tokens_in=self.tokens_in, tokens_out=self.tokens_out, tool_calls=len(self.records),
                       tool_errors=sum(not r.ok for r in self.records), errors=dict(self.errors),
                       wall_s=round(self.trace.elapsed(), 4), records=self.records, trace_path=trace_path,
                       detail=detail, retryable=self.retryable and status == "error",
                       usage_unknown=self.usage_unknown, sandbox_start_s=round(self.sandbox_start_s, 4))


class AgentBase(abc.ABC):
    """Runtime ownership, ``run``/``arun``, budgets and traced model calls for both loops."""

    mode: ClassVar[Literal["code", "json"]]

    def __init__(self, model: ModelClient, tools: Toolset | Sequence[Any], *, runtime: Runtime | None,
                 sandbox: SandboxConfig | None, budget: Budget | None, system_prompt: str | None,
                 trace_path: str | Path | None, stream: bool, on_event: EventHook | None,
                 max_observation_chars: int, max_output_tokens: int) -> None:
        self.model = model
        self.tools = tools
        self.runtime = runtime
        self.sandbox = sandbox
        self.budget = budget or Budget()
        self.system_prompt = system_prompt
        self.trace_path = Path(trace_path) if trace_path is not None else None
        self.stream = stream
        self.on_event = on_event
        self.max_observation_chars = max_observation_chars
        self.max_output_tokens = max_output_tokens
        self._stop = False
        self._active: tuple[asyncio.AbstractEventLoop, Runtime] | None = None
        self._model_task: asyncio.Task[ModelResponse] | None = None
        #: The JSON agent's tool calls of the turn, while they run (``interrupt`` cancels them).
        self._calls_task: asyncio.Future[Any] | None = None

    def interrupt(self) -> None:
        """Stop the running episode (from any thread): the running code is interrupted, a model
        call in flight is cancelled, no new step starts; the episode ends ``incomplete`` with
        ``stop_reason="interrupted"``, its records and trace kept."""
        self._stop = True
        active = self._active
        if active is None:
            return
        loop, runtime = active
        runtime.interrupt()
        for task in (self._model_task, self._calls_task):
            if task is not None:
                loop.call_soon_threadsafe(task.cancel)

    def _stopped(self, state: EpisodeState) -> bool:
        if self._stop:
            state.end("incomplete", "interrupted", detail="interrupted on request (Ctrl-C)")
        return self._stop

    def run(self, task: str) -> Episode:
        """Run one episode to its end (from a thread without a running event loop, or any thread)."""
        try:
            asyncio.get_running_loop()
        except RuntimeError:
            return asyncio.run(self.arun(task))
        with concurrent.futures.ThreadPoolExecutor(1) as pool:  # called from async code: own loop, own thread
            return pool.submit(asyncio.run, self.arun(task)).result()

    async def arun(self, task: str) -> Episode:
        """Run one episode; an own runtime (``runtime=None``) is made for it and closed after."""
        owned = self.runtime is None
        runtime = self.runtime or Runtime(self.tools, self.sandbox)
        trace = TraceWriter(self.trace_path, self.on_event)
        state = EpisodeState(task, self.budget, trace)
        self._stop, self._active = False, (asyncio.get_running_loop(), runtime)
        try:
            trace.emit("episode_start", task=task, mode=self.mode, model=self.model.model,
                       config=self._config(runtime), system=self._system(runtime), tools=self._tool_defs(runtime),
                       **self._stubs(runtime))
            try:
                with tracing.span(f"invoke_agent {type(self).__name__}", {
                        "gen_ai.operation.name": "invoke_agent", "gen_ai.agent.name": type(self).__name__,
                        "gen_ai.request.model": self.model.model}) as current:
                    await self._loop(runtime, state)
                    if current is not None:
                        status, stop_reason = state.outcome[:2] if state.outcome else ("incomplete", "")
                        current.set_attributes({
                            "gen_ai.usage.input_tokens": state.tokens_in,
                            "gen_ai.usage.output_tokens": state.tokens_out,
                            "codeact.episode.status": status, "codeact.episode.stop_reason": stop_reason,
                            "codeact.episode.turns": state.turns})
            except BaseException as exc:
                state.end("error", "exception", detail=f"{type(exc).__name__}: {exc}")
                trace.emit("episode_end", episode=self._episode(state).model_dump(mode="json"))
                raise
            episode = self._episode(state)
            trace.emit("episode_end", episode=episode.model_dump(mode="json"))
            return episode
        finally:
            self._active = None
            trace.close()
            if owned:
                await asyncio.to_thread(runtime.close)

    def _episode(self, state: EpisodeState) -> Episode:
        return state.episode(self.mode, self.model.model, str(self.trace_path) if self.trace_path else None)

    def _config(self, runtime: Runtime) -> dict[str, Any]:
        return {"budget": self.budget.model_dump(), "sandbox": runtime.config.model_dump(mode="json"),
                "stream": self.stream, "max_output_tokens": self.max_output_tokens,
                "max_observation_chars": self.max_observation_chars, "tools": runtime.toolset.names}

    @abc.abstractmethod
    def _system(self, runtime: Runtime) -> str: ...

    def _stubs(self, runtime: Runtime) -> dict[str, str]:
        """The tool stubs the model is shown, for the trace (``{"stubs": ...}``; none by default)."""
        return {}

    @abc.abstractmethod
    def _tool_defs(self, runtime: Runtime) -> list[dict[str, Any]]: ...

    @abc.abstractmethod
    async def _loop(self, runtime: Runtime, state: EpisodeState) -> None:
        """Converse until ``state.end`` was called."""

    async def _ask(self, state: EpisodeState, system: str, tools: Sequence[ToolDef],
                   tool_choice: ToolChoice = "auto") -> ModelResponse | None:
        """One model call within the budgets; None when the episode ended instead."""
        b = state.budget
        if self._stopped(state):
            return None
        if state.tokens_in + state.tokens_out >= b.max_tokens:
            state.stop_budget("max_tokens", f"{state.tokens_in + state.tokens_out} of {b.max_tokens} tokens used")
            return None
        if state.wall_left() <= 0:
            state.stop_budget("max_wall_s", f"{b.max_wall_s:g} s of wall time used")
            return None
        turn, call = state.turns + 1, state.model_calls + 1
        state.trace.emit("model_request", turn=turn, call=call, messages=len(state.messages),
                         tools=[str(t.get("name")) for t in tools], tool_choice=tool_choice, stream=self.stream)
        state.model_calls = call
        started = time.perf_counter()
        with tracing.model_call(self.model.model, getattr(self.model, "provider", None)) as answered:
            response = await self._await_model(state, system, tools, tool_choice, turn, call)
            if answered is not None and response is not None:
                answered(response)
        if response is None:
            return None
        state.tokens_in += response.usage.input_tokens
        state.tokens_out += response.usage.output_tokens
        state.usage_unknown += not response.usage.reported
        duration_ms = round((time.perf_counter() - started) * 1000, 2)
        state.trace.emit("model_response", turn=turn, call=call, duration_ms=duration_ms,
                         response=response.model_dump(mode="json", exclude={"raw"}))
        state.messages.append(response.to_message())
        return response

    async def _await_model(self, state: EpisodeState, system: str, tools: Sequence[ToolDef],
                           tool_choice: ToolChoice, turn: int, call: int) -> ModelResponse | None:
        """The model's reply (the task started here, under the caller's ``chat`` span); None when
        the episode ended instead."""
        b = state.budget
        task = self._model_task = asyncio.ensure_future(
            self.model.acomplete(state.messages, system=system, tools=tools, tool_choice=tool_choice,
                                 max_tokens=self.max_output_tokens, stream=self.stream))
        try:
            response = await asyncio.wait_for(task, timeout=state.wall_left())
        except asyncio.CancelledError:
            if not task.cancelled() or not self._stopped(state):
                raise  # this task itself was cancelled, not the model call by interrupt()
            return None
        except asyncio.TimeoutError:
            state.stop_budget("max_wall_s", f"the model call passed the {b.max_wall_s:g} s wall-time budget")
            return None
        except ModelError as exc:
            tracing.failed(type(exc).__name__, str(exc))  # on the ``chat`` span
            state.errors["model"] += 1
            state.trace.emit("model_error", turn=turn, call=call, message=str(exc), retryable=exc.retryable)
            state.retryable = exc.retryable
            state.end("error", "model_error", detail=str(exc))
            return None
        finally:
            self._model_task = None
        return response

    @staticmethod
    def finish_with_text(state: EpisodeState, response: ModelResponse) -> None:
        """A reply without an action: the final answer, unless it is a refusal or empty."""
        if response.stop_reason in ("refusal", "content_filter"):
            state.end("incomplete", response.stop_reason, answer=response.text or None,
                      detail=f"the model stopped with {response.raw_stop_reason or response.stop_reason}")
        elif not response.text.strip():
            state.end("incomplete", "empty_reply", detail="the model replied with neither an action nor text")
        else:
            state.end("answered", "answer", answer=response.text)
