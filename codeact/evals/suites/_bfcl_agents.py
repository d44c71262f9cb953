"""The agents of a BFCL multi-turn episode: BFCL's user turns drive one conversation.

Each user turn ends when the model answers (a text reply, or ``final_answer`` in code mode); the
next turn's message is then appended and the loop goes on, in code mode in the same sandbox session.
Functions BFCL holds out until a turn (``miss_func``) exist on the host from the start, as the
methods of BFCL's classes do in BFCL's own runs, but the model is shown them only from that turn
on: in JSON mode in the tool definitions, in code mode as stubs in that turn's message. The
episode's answer is BFCL's "model result": ``{"turns": [[call, ...] per turn], "replies": [...]}``,
each call in BFCL's ``name(arg=repr, ...)`` form, of the calls that reached the tool.
"""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from ...agent import CodeActAgent, FunctionCallingAgent
from ...agent.messages import Message
from ...agent.prompts import code_system_prompt
from ...results import ToolCallRecord
from ...runtime.session import Runtime
from ...runtime.toolhost import READ_RESULT
from ...runtime.toolset import Toolset

__all__ = ["BfclCodeAgent", "BfclJsonAgent", "TurnPlan", "call_string"]

#: The agents' episode account (``agent._loop_common.EpisodeState``, private to the agent package).
EpisodeState = Any

#: Errors raised before the tool ran: such a call changed no state, so it is not BFCL's to replay.
_BEFORE_TOOL = frozenset({"unknown_tool", "invalid_arguments"})
_ALL_STUBS = 10**7


def call_string(name: str, arguments: Any) -> str:
    """A call in the form BFCL's FC handlers decode tool calls to (``convert_to_function_call``)."""
    args = arguments if isinstance(arguments, dict) else {}
    return f"{name}({','.join(f'{k}={v!r}' for k, v in args.items())})"


def _reached(record: ToolCallRecord) -> bool:
    return record.ok or record.error is None or record.error.code not in _BEFORE_TOOL


@dataclass
class TurnPlan:
    """BFCL's turns of one task: each turn's user text and the functions first shown at it."""

    texts: list[str]
    added: dict[int, list[str]] = field(default_factory=dict)
    #: Tools hidden until their turn; the rest are shown from the start.
    hidden: frozenset[str] = frozenset()

    def visible(self, turn: int) -> set[str]:
        """The held-out functions shown by ``turn``."""
        return {n for i, names in self.added.items() if i <= turn for n in names}


class _Turns:
    """The per-episode account of the turns (shared by both agents)."""

    def __init__(self, plan: TurnPlan, toolset: Toolset) -> None:
        self.plan = plan
        self.names = [n for n in toolset.names if n not in plan.hidden]
        self.turn = 0
        self.starts: list[int] = []
        self.replies: list[Any] = []

    def shown(self) -> set[str]:
        return set(self.names) | self.plan.visible(self.turn)

    def begin(self, state: EpisodeState, turn: int, extra: str = "") -> None:
        self.turn = turn
        self.starts.append(len(state.records))
        if turn > 0:
            state.outcome, state.cuts = None, 0
            state.messages.append(Message.user(self.plan.texts[turn] + extra))
            # the viewer lists notes: each user turn shows where it began
            state.trace.emit("note", turn=state.turns, reason="user_turn",
                             text=f"user turn {turn + 1}: {self.plan.texts[turn]}")

    def end(self, state: EpisodeState) -> bool:
        """Close the turn; False when the episode ended without the turn's answer."""
        if state.outcome is None or state.outcome[0] != "answered":
            return False
        self.replies.append(state.outcome[2])
        if self.turn == len(self.plan.texts) - 1:
            ends = [*self.starts[1:], len(state.records)]
            turns = [[call_string(r.name, r.arguments) for r in state.records[a:b] if _reached(r)]
                     for a, b in zip(self.starts, ends, strict=True)]
            state.outcome = ("answered", "answer", {"turns": turns, "replies": self.replies}, None)
        return True


class BfclCodeAgent(CodeActAgent):
    """Code mode over BFCL's turns, all in one sandbox session."""

    def __init__(self, plan: TurnPlan, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.plan = plan

    def _view(self, runtime: Runtime, names: Sequence[str]) -> str:
        # every stub, as BFCL shows every function doc (not an index to search)
        return Toolset([runtime.toolset[n] for n in names]).prompt_view(budget=_ALL_STUBS)

    def _system(self, runtime: Runtime) -> str:
        shown = [n for n in runtime.toolset.names if n not in self.plan.hidden or n in self.plan.visible(0)]
        return code_system_prompt(self._view(runtime, shown), self.system_prompt)

    async def _loop(self, runtime: Runtime, state: EpisodeState) -> None:
        turns = _Turns(self.plan, runtime.toolset)
        system, tools = self._system(runtime), self._tool_defs(runtime)
        session = runtime.session()
        try:
            for i in range(len(self.plan.texts)):
                added = self.plan.added.get(i) if i > 0 else None
                extra = f"\n\nNew functions:\n```python\n{self._view(runtime, added).rstrip()}\n```" if added else ""
                turns.begin(state, i, extra)
                while state.outcome is None:
                    response = await self._ask(state, system, tools)
                    if response is None:
                        break
                    await self._step(session, state, response)
                if not turns.end(state):
                    return
        finally:
            await asyncio.to_thread(session.close)


class BfclJsonAgent(FunctionCallingAgent):
    """JSON mode over BFCL's turns; the definitions grow as BFCL adds functions."""

    def __init__(self, plan: TurnPlan, *args: Any, **kwargs: Any) -> None:
        # every definition in every request, as BFCL sends them (not search_tools first)
        super().__init__(*args, **{**kwargs, "deferred": False})
        self.plan = plan
        self._turns: _Turns | None = None

    def _tool_defs(self, runtime: Runtime, loaded: Sequence[str] | None = None,
                   wire: Any = None) -> list[dict[str, Any]]:
        defs = super()._tool_defs(runtime, loaded, wire)
        shown = self._turns.shown() if self._turns is not None else set(runtime.toolset.names) - self.plan.hidden
        return [d for d in defs if d["name"] in shown or d["name"] == READ_RESULT]

    async def _loop(self, runtime: Runtime, state: EpisodeState) -> None:
        self._turns = turns = _Turns(self.plan, runtime.toolset)
        for i in range(len(self.plan.texts)):
            turns.begin(state, i)
            await super()._loop(runtime, state)
            if not turns.end(state):
                return
