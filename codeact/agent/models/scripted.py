"""``ScriptedModel``: a ``ModelClient`` that answers from a script, for tests and offline runs."""

from __future__ import annotations

import threading
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from codeact.agent.messages import Message, ModelResponse
from codeact.agent.models.base import ToolChoice, ToolDef
from codeact.errors import ModelError

__all__ = ["ScriptEntry", "ScriptedModel", "ScriptedRequest"]

ScriptEntry = ModelResponse | str | Mapping[str, Any]


@dataclass(frozen=True)
class ScriptedRequest:
    """One request a :class:`ScriptedModel` received."""

    messages: list[Message]
    system: str | None
    tools: list[dict[str, Any]]
    tool_choice: ToolChoice
    max_tokens: int
    stream: bool = False
    extra: dict[str, Any] = field(default_factory=dict)


class ScriptedModel:
    """Returns the scripted responses in order and records every request in ``.requests``.

    An entry is a :class:`ModelResponse`, a plain text answer, or the simple dict form
    ``{"text", "tool_calls": [{"name", "arguments"}], "stop_reason"?, "usage"?}`` (see
    :meth:`ModelResponse.from_simple`). ``responses`` may instead be a callable taking the
    :class:`ScriptedRequest` and returning an entry. Raises :class:`ModelError` when exhausted.
    """

    def __init__(
        self,
        responses: Sequence[ScriptEntry] | Callable[[ScriptedRequest], ScriptEntry],
        *,
        model: str = "scripted",
    ) -> None:
        self.model = model
        self._responses = responses if callable(responses) else list(responses)
        self.requests: list[ScriptedRequest] = []
        self._lock = threading.Lock()

    @property
    def remaining(self) -> int | None:
        """Responses not yet served (``None`` for a callable script)."""
        if callable(self._responses):
            return None
        return max(0, len(self._responses) - len(self.requests))

    # Alike by design (ModelClient in base.py; acomplete below): the protocol's signature, spelled out;
    # acomplete only delegates to complete.
    def complete(
        self,
        messages: Sequence[Message],
        *,
        system: str | None = None,
        tools: Sequence[ToolDef] = (),
        tool_choice: ToolChoice = "auto",
        max_tokens: int = 4096,
        stream: bool = False,
    ) -> ModelResponse:
        """Record the request and return the next scripted response."""
        request = ScriptedRequest(
            messages=list(messages),
            system=system,
            tools=[dict(t) for t in tools],
            tool_choice=tool_choice,
            max_tokens=max_tokens,
            stream=stream,
        )
        with self._lock:
            index = len(self.requests)
            self.requests.append(request)
            if callable(self._responses):
                entry = self._responses(request)
            elif index < len(self._responses):
                entry = self._responses[index]
            else:
                raise ModelError(
                    f"ScriptedModel: script exhausted after {len(self._responses)} responses "
                    f"(request {index + 1} has no answer); add entries to the script"
                )
        if isinstance(entry, ModelResponse):
            return entry
        return ModelResponse.from_simple(entry, index=index)

    async def acomplete(
        self,
        messages: Sequence[Message],
        *,
        system: str | None = None,
        tools: Sequence[ToolDef] = (),
        tool_choice: ToolChoice = "auto",
        max_tokens: int = 4096,
        stream: bool = False,
    ) -> ModelResponse:
        """Async :meth:`complete`."""
        return self.complete(
            messages,
            system=system,
            tools=tools,
            tool_choice=tool_choice,
            max_tokens=max_tokens,
            stream=stream,
        )
