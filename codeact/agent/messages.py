"""A provider-neutral conversation model shared by every model client.

A conversation is a list of :class:`Message`. Assistant messages carry the :class:`ToolCall` s the
model asked for; the answers travel back as one ``role="tool"`` message carrying
:class:`ToolResult` s (each vendor client renders them in its own wire shape).
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from typing import Any, Literal, cast, get_args

from pydantic import BaseModel, ConfigDict, Field

__all__ = [
    "Message",
    "ModelResponse",
    "Role",
    "StopReason",
    "TextPart",
    "ToolCall",
    "ToolResult",
    "Usage",
    "parse_arguments",
]

Role = Literal["system", "user", "assistant", "tool"]
StopReason = Literal[
    "end_turn", "tool_use", "max_tokens", "stop_sequence", "refusal", "content_filter", "error", "other"
]


class TextPart(BaseModel):
    """A piece of text content."""

    model_config = ConfigDict(frozen=True)

    type: Literal["text"] = "text"
    text: str


class ToolCall(BaseModel):
    """One tool call requested by the model.

    ``arguments_raw`` is the JSON text exactly as the model produced it. When it does not parse
    to a JSON object (or the stream was cut), ``arguments`` is ``None`` and ``parse_error`` says
    why: such a call must not be executed; answer it with an error so the model can retry.
    """

    model_config = ConfigDict(frozen=True)

    id: str
    name: str
    arguments: dict[str, Any] | None = None
    arguments_raw: str = ""
    parse_error: str | None = None

    @property
    def executable(self) -> bool:
        """Whether the arguments were parsed and the call may be dispatched."""
        return self.arguments is not None and self.parse_error is None

    @classmethod
    def from_raw(cls, id: str, name: str, raw: str) -> ToolCall:
        """Build a call from the model's argument text, recording a parse failure if any."""
        arguments, error = parse_arguments(raw)
        return cls(id=id, name=name, arguments=arguments, arguments_raw=raw, parse_error=error)

    @classmethod
    def from_arguments(cls, id: str, name: str, arguments: Mapping[str, Any]) -> ToolCall:
        """Build a call from already-decoded arguments."""
        args = dict(arguments)
        return cls(id=id, name=name, arguments=args, arguments_raw=json.dumps(args, ensure_ascii=False))


# Alike by design (results.ToolCallError and other small frozen models): three fields of a different record.
class ToolResult(BaseModel):
    """The answer to one tool call, matched to it by ``call_id``."""

    model_config = ConfigDict(frozen=True)

    call_id: str
    content: str
    is_error: bool = False


class Message(BaseModel):
    """One turn of the conversation.

    ``tool_calls`` is used on assistant messages, ``tool_results`` on tool messages.
    """

    model_config = ConfigDict(frozen=True)

    role: Role
    content: str | list[TextPart] = ""
    tool_calls: list[ToolCall] = Field(default_factory=list)
    tool_results: list[ToolResult] = Field(default_factory=list)

    @property
    def text(self) -> str:
        """The text content, parts joined."""
        if isinstance(self.content, str):
            return self.content
        return "".join(part.text for part in self.content)

    @classmethod
    def system(cls, text: str) -> Message:
        return cls(role="system", content=text)

    @classmethod
    def user(cls, text: str) -> Message:
        return cls(role="user", content=text)

    @classmethod
    def assistant(cls, text: str = "", tool_calls: Sequence[ToolCall] = ()) -> Message:
        return cls(role="assistant", content=text, tool_calls=list(tool_calls))

    @classmethod
    def tool(cls, results: Sequence[ToolResult]) -> Message:
        return cls(role="tool", tool_results=list(results))


class Usage(BaseModel):
    """Token counts of one model call (input includes cached prompt tokens).

    ``reported`` is False when the provider sent no usage: the counts are then unknown, not 0.
    """

    model_config = ConfigDict(frozen=True)

    input_tokens: int = 0
    output_tokens: int = 0
    reported: bool = True

    def __add__(self, other: Usage) -> Usage:
        return Usage(
            input_tokens=self.input_tokens + other.input_tokens,
            output_tokens=self.output_tokens + other.output_tokens,
            reported=self.reported and other.reported,
        )

    @classmethod
    def from_wire(cls, usage: Any) -> Usage:
        """Parse any provider's usage shape: OpenAI chat (``prompt_tokens``/``completion_tokens``),
        OpenAI responses and Anthropic (``input_tokens``/``output_tokens``, plus Anthropic's cache
        fields), Gemini (``promptTokenCount``/``candidatesTokenCount``), Bedrock (``inputTokens``/
        ``outputTokens``). Missing or unreadable usage gives ``reported=False``."""
        if not isinstance(usage, Mapping):
            return cls(reported=False)

        def first(*keys: str) -> int | None:
            for key in keys:
                value = usage.get(key)
                if isinstance(value, (int, float)) and not isinstance(value, bool):
                    return int(value)
            return None

        tin = first("input_tokens", "prompt_tokens", "promptTokenCount", "inputTokens")
        tout = first("output_tokens", "completion_tokens", "candidatesTokenCount", "outputTokens")
        if tin is None and tout is None:
            return cls(reported=False)
        cached = sum(first(k) or 0 for k in ("cache_creation_input_tokens", "cache_read_input_tokens"))
        return cls(input_tokens=(tin or 0) + cached, output_tokens=tout or 0)


class ModelResponse(BaseModel):
    """What a model answered, normalized across vendors.

    ``stop_reason`` is normalized; ``raw_stop_reason`` is the vendor's own value. ``truncated``
    means a stream ended before its terminal event: its tool calls carry a ``parse_error`` and
    must not be executed. ``raw`` is the vendor's response body (reassembled when streamed).
    """

    model_config = ConfigDict(frozen=True)

    text: str = ""
    tool_calls: list[ToolCall] = Field(default_factory=list)
    stop_reason: StopReason = "end_turn"
    raw_stop_reason: str = ""
    usage: Usage = Field(default_factory=Usage)
    raw: dict[str, Any] = Field(default_factory=dict)
    truncated: bool = False

    def to_message(self) -> Message:
        """The assistant message to append to the conversation."""
        return Message.assistant(self.text, self.tool_calls)

    @classmethod
    def from_simple(cls, entry: str | Mapping[str, Any], *, index: int = 0) -> ModelResponse:
        """Build from the simple neutral form used by scripts.

        ``entry`` is a plain text answer, or ``{"text", "tool_calls": [{"name", "arguments",
        "id"?}], "stop_reason"?, "usage"?: {"input_tokens", "output_tokens"}}``; ``arguments``
        may be a dict or raw JSON text (which may be invalid, to exercise error paths).
        """
        if isinstance(entry, str):
            return cls(text=entry, raw_stop_reason="end_turn")
        calls: list[ToolCall] = []
        for i, spec in enumerate(entry.get("tool_calls") or []):
            call_id = str(spec.get("id") or f"call_{index}_{i}")
            args = spec.get("arguments", {})
            if isinstance(args, str):
                calls.append(ToolCall.from_raw(call_id, spec["name"], args))
            else:
                calls.append(ToolCall.from_arguments(call_id, spec["name"], args or {}))
        stop = str(entry.get("stop_reason") or ("tool_use" if calls else "end_turn"))
        usage = entry.get("usage") or {}
        return cls(
            text=str(entry.get("text") or ""),
            tool_calls=calls,
            stop_reason=cast(StopReason, stop) if stop in _STOP_REASONS else "other",
            raw_stop_reason=stop,
            usage=Usage(
                input_tokens=int(usage.get("input_tokens", 0)),
                output_tokens=int(usage.get("output_tokens", 0)),
            ),
            raw=dict(entry),
        )


_STOP_REASONS: frozenset[str] = frozenset(get_args(StopReason))


def parse_arguments(raw: str) -> tuple[dict[str, Any] | None, str | None]:
    """Decode tool-call argument text: ``(arguments, None)`` or ``(None, reason)``.

    Empty text means no arguments (``{}``), as some servers send for parameterless tools.
    """
    if not raw.strip():
        return {}, None
    try:
        value = json.loads(raw)
    except json.JSONDecodeError as exc:
        return None, f"arguments are not valid JSON: {exc.msg} at line {exc.lineno} column {exc.colno}"
    if not isinstance(value, dict):
        return None, f"arguments must be a JSON object, got {type(value).__name__}"
    return value, None
