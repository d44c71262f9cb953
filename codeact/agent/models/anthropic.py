"""Anthropic Messages client.

Wire mapping: the system prompt (and any ``system`` messages) goes in ``system``; assistant
turns are ``text`` + ``tool_use{id, name, input}`` blocks; a tool message becomes ONE user
message of ``tool_result{tool_use_id, content, is_error}`` blocks; consecutive same-role messages
are merged (tool results first, as the API requires). Streamed ``input_json_delta`` fragments are
joined per block and parsed when the block stops.
"""

from __future__ import annotations

import json
import re
from collections.abc import Sequence
from typing import Any

from codeact.agent.messages import Message, ModelResponse, StopReason, ToolCall, Usage
from codeact.agent.models._http import HTTPOptions, SSEEvent
from codeact.agent.models.base import (
    Endpoint,
    HTTPModelClient,
    StreamAccumulator,
    StrictTools,
    ToolChoice,
    ToolDef,
    choice_name,
    decode_event,
    tool_parts,
)
from codeact.errors import ModelError

__all__ = ["STRICT_TOOLS", "AnthropicClient", "parse_message", "to_anthropic_messages"]

DEFAULT_BASE_URL = "https://api.anthropic.com"
API_VERSION = "2023-06-01"
TRUNCATED = "the stream ended before message_stop; arguments are incomplete and must not be used"

#: Anthropic's strict tool use (part of structured outputs, generally available: no ``anthropic-beta``
#: header): optional arguments are left out of ``required``; one request may carry at most 20 strict
#: tools, 24 optional parameters and 16 parameters with a union type (``anyOf`` or a list of types),
#: summed over its strict tools (platform.claude.com, "Structured outputs", schema complexity limits).
STRICT_TOOLS = StrictTools(optional="omit", max_tools=20, max_optional=24, max_unions=16)
#: Model ids older than strict tool use (supported from the 4.5 models on): Claude 2 and 3, Opus and
#: Sonnet 4.0 and Opus 4.1, also as Bedrock/Vertex ids.
_BEFORE_STRICT = re.compile(
    r"(?:^|[./:])claude-(?:instant|[23](?![0-9])|(?:opus|sonnet)-4(?:-[01](?![0-9])|-20[0-9]{6}|@|$))")

_STOP: dict[str, StopReason] = {
    "end_turn": "end_turn",
    "tool_use": "tool_use",
    "max_tokens": "max_tokens",
    "stop_sequence": "stop_sequence",
    "refusal": "refusal",
    "model_context_window_exceeded": "max_tokens",
    "pause_turn": "other",
}


def _blocks(msg: Message) -> list[dict[str, Any]]:
    if msg.role == "tool":
        return [
            {"type": "tool_result", "tool_use_id": r.call_id, "content": r.content, "is_error": r.is_error}
            for r in msg.tool_results
        ]
    blocks: list[dict[str, Any]] = [{"type": "text", "text": msg.text}] if msg.text else []
    for call in msg.tool_calls if msg.role == "assistant" else []:
        # A call whose arguments never parsed is echoed with an empty input; its error result explains.
        blocks.append({"type": "tool_use", "id": call.id, "name": call.name, "input": call.arguments or {}})
    return blocks


def to_anthropic_messages(messages: Sequence[Message], system: str | None) -> tuple[str | None, list[dict[str, Any]]]:
    """Neutral messages → ``(system, messages)`` of the Messages API."""
    systems = [system] if system else []
    out: list[dict[str, Any]] = []
    for msg in messages:
        if msg.role == "system":
            systems.append(msg.text)
            continue
        role = "assistant" if msg.role == "assistant" else "user"
        blocks = _blocks(msg)
        if not blocks:
            continue  # the API rejects empty content
        if out and out[-1]["role"] == role:
            out[-1]["content"].extend(blocks)
        else:
            out.append({"role": role, "content": blocks})
    for msg_out in out:  # tool_result blocks must open a user message
        if msg_out["role"] == "user":
            msg_out["content"].sort(key=lambda b: b["type"] != "tool_result")
    return ("\n\n".join(systems) or None), out


def _tool_choice(choice: ToolChoice) -> dict[str, Any]:
    name = choice_name(choice)
    if name is not None:
        return {"type": "tool", "name": name}
    return {"type": {"auto": "auto", "none": "none", "required": "any"}[str(choice)]}


def parse_message(
    data: dict[str, Any], *, truncated: bool = False, raw_inputs: dict[int, str] | None = None
) -> ModelResponse:
    """A Messages API response body → :class:`ModelResponse`.

    ``raw_inputs`` maps a content index to the streamed JSON text of that ``tool_use`` block.
    """
    if data.get("type") == "error":
        raise ModelError(f"anthropic error: {json.dumps(data.get('error'))[:300]}")
    texts: list[str] = []
    calls: list[ToolCall] = []
    for i, block in enumerate(data.get("content") or []):
        kind = block.get("type")
        if kind == "text":
            texts.append(str(block.get("text") or ""))
        elif kind == "tool_use":
            call_id, name = str(block.get("id") or f"toolu_{i}"), str(block.get("name") or "")
            raw = (raw_inputs or {}).get(i)
            if truncated:
                calls.append(ToolCall(id=call_id, name=name, arguments_raw=raw or "", parse_error=TRUNCATED))
            elif raw is not None:
                calls.append(ToolCall.from_raw(call_id, name, raw))
            elif isinstance(block.get("input", {}), dict):
                calls.append(ToolCall.from_arguments(call_id, name, block.get("input") or {}))
            else:  # not an object: kept as text, flagged by the parse
                value = block["input"]
                text = value if isinstance(value, str) else json.dumps(value)
                calls.append(ToolCall.from_raw(call_id, name, text))
    raw_reason = str(data.get("stop_reason") or "")
    # Alike by design (the end of openai.parse_completion): each vendor fills the same neutral fields.
    return ModelResponse(
        text="".join(texts),
        tool_calls=calls,
        stop_reason="error" if truncated else _STOP.get(raw_reason, "other"),
        raw_stop_reason=raw_reason,
        usage=Usage.from_wire(data.get("usage")),
        raw=data,
        truncated=truncated,
    )


class _EventAccumulator:
    """Joins Messages stream events into one message body."""

    def __init__(self) -> None:
        self.message: dict[str, Any] = {"type": "message", "role": "assistant", "content": []}
        self.blocks: dict[int, dict[str, Any]] = {}
        self.partial: dict[int, list[str]] = {}
        self.raw_inputs: dict[int, str] = {}
        self.stopped = False

    def feed(self, event: SSEEvent) -> None:
        data = decode_event("anthropic", event)
        kind = data.get("type") or event.event
        if kind == "error":
            err = data.get("error") or {}
            retryable = err.get("type") in ("overloaded_error", "api_error")
            message = f"anthropic stream error: {err.get('type') or ''}: {err.get('message') or ''}"
            raise ModelError(
                message, status=529 if err.get("type") == "overloaded_error" else None, retryable=retryable
            )
        if kind == "message_start":
            self.message.update(data.get("message") or {})
            self.message["content"] = []
        elif kind == "content_block_start":
            index = int(data.get("index", len(self.blocks)))
            self.blocks[index] = dict(data.get("content_block") or {})
            if self.blocks[index].get("type") == "tool_use":
                self.partial[index] = []
        elif kind == "content_block_delta":
            self._delta(int(data.get("index", 0)), data.get("delta") or {})
        elif kind == "content_block_stop":
            index = int(data.get("index", 0))
            if index in self.partial:
                self.raw_inputs[index] = "".join(self.partial[index])
        elif kind == "message_delta":
            self.message.update({k: v for k, v in (data.get("delta") or {}).items() if v is not None})
            usage = dict(self.message.get("usage") or {})
            usage.update({k: v for k, v in (data.get("usage") or {}).items() if v is not None})
            self.message["usage"] = usage
        elif kind == "message_stop":
            self.stopped = True

    def _delta(self, index: int, delta: dict[str, Any]) -> None:
        block = self.blocks.setdefault(index, {"type": "text", "text": ""})
        kind = delta.get("type")
        if kind == "text_delta":
            block["text"] = str(block.get("text") or "") + str(delta.get("text") or "")
        elif kind == "input_json_delta":
            self.partial.setdefault(index, []).append(str(delta.get("partial_json") or ""))
        elif kind == "thinking_delta":
            block["thinking"] = str(block.get("thinking") or "") + str(delta.get("thinking") or "")
        elif kind == "signature_delta":
            block["signature"] = str(delta.get("signature") or "")

    def result(self) -> ModelResponse:
        content: list[dict[str, Any]] = []
        raw_inputs: dict[int, str] = {}  # by position in ``content``
        for index in sorted(self.blocks):
            block = dict(self.blocks[index])
            if block.get("type") == "tool_use":
                # Blocks cut before content_block_stop keep what arrived (the result is truncated).
                raw = self.raw_inputs.get(index, "".join(self.partial.get(index, [])))
                parsed = _loads_object(raw)
                block["input"] = parsed if parsed is not None else {}
                raw_inputs[len(content)] = raw
            content.append(block)
        body = {**self.message, "content": content}
        return parse_message(body, truncated=not self.stopped, raw_inputs=raw_inputs)


def _loads_object(raw: str) -> dict[str, Any] | None:
    try:
        value = json.loads(raw) if raw.strip() else {}
    except ValueError:
        return None
    return value if isinstance(value, dict) else None


class AnthropicClient(HTTPModelClient):
    """``POST {base_url}/v1/messages`` over httpx, sync and async, streaming or not.

    ``base_url`` defaults to ``$ANTHROPIC_BASE_URL`` then the Anthropic API; ``api_key`` to
    ``$ANTHROPIC_API_KEY`` (sent as ``x-api-key``).

    ``strict``: whether agents send strict tools (:data:`STRICT_TOOLS`) by default; ``None`` decides
    by the model (yes from the 4.5 models on). A platform where strict tools are still a beta takes
    ``extra_headers={"anthropic-beta": "structured-outputs-2025-11-13"}``.
    """

    provider = "anthropic"
    endpoint = Endpoint(DEFAULT_BASE_URL, "/v1/messages", key_env="ANTHROPIC_API_KEY", url_env="ANTHROPIC_BASE_URL")
    strict_tools = STRICT_TOOLS

    def __init__(
        self,
        model: str,
        *,
        base_url: str | None = None,
        api_key: str | None = None,
        timeout: float = 60.0,
        max_retries: int = 3,
        options: HTTPOptions | None = None,
        extra_body: dict[str, Any] | None = None,
        extra_headers: dict[str, str] | None = None,
        strict: bool | None = None,
    ) -> None:
        super().__init__(model, base_url=base_url, api_key=api_key, timeout=timeout, max_retries=max_retries,
                         options=options, extra_body=extra_body, extra_headers=extra_headers)
        self.supports_strict_tools = _BEFORE_STRICT.search(model) is None if strict is None else strict

    def _headers(self, stream: bool) -> dict[str, str]:
        headers = {
            "anthropic-version": API_VERSION,
            "accept": "text/event-stream" if stream else "application/json",
            **self.extra_headers,
        }
        if self._api_key:
            headers["x-api-key"] = self._api_key
        return headers

    def _body(
        self,
        messages: Sequence[Message],
        system: str | None,
        tools: Sequence[ToolDef],
        tool_choice: ToolChoice,
        max_tokens: int,
        stream: bool,
    ) -> dict[str, Any]:
        system_text, wire = to_anthropic_messages(messages, system)
        body: dict[str, Any] = {"model": self.model, "max_tokens": max_tokens, "messages": wire}
        if system_text:
            body["system"] = system_text
        if tools:
            body["tools"] = []
            for tool in tools:
                name, description, schema = tool_parts(tool)
                entry: dict[str, Any] = {"name": name, "input_schema": schema}
                if description:
                    entry["description"] = description
                if tool.get("strict"):  # constrained decoding: the schema is in the strict subset
                    entry["strict"] = True
                body["tools"].append(entry)
            body["tool_choice"] = _tool_choice(tool_choice)
        if stream:
            body["stream"] = True
        body.update(self.extra_body)
        return body

    def _parse(self, data: dict[str, Any]) -> ModelResponse:
        return parse_message(data)

    def _accumulator(self) -> StreamAccumulator:
        return _EventAccumulator()
