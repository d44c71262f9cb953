"""OpenAI Chat Completions client (works with any OpenAI-compatible server: vLLM, Ollama, …).

Wire mapping: the system prompt is the first ``system`` message; assistant tool calls go out as
``tool_calls`` with JSON-text ``arguments``; each tool result is its own ``role: "tool"`` message
with ``tool_call_id``. Streamed tool-call fragments are joined by ``index`` and parsed only once
the stream completes.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any
from urllib.parse import urlsplit

from codeact._deprecated import deprecated_alias
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

__all__ = ["OpenAIClient", "parse_completion", "to_openai_messages"]

DEFAULT_BASE_URL = "https://api.openai.com/v1"
TRUNCATED = "the stream ended before the model finished; arguments are incomplete and must not be used"

_FINISH: dict[str, StopReason] = {
    "stop": "end_turn",
    "tool_calls": "tool_use",
    "function_call": "tool_use",
    "length": "max_tokens",
    "content_filter": "content_filter",
}


def _call_arguments(call: ToolCall) -> str:
    if call.arguments is None:
        return call.arguments_raw
    return call.arguments_raw or json.dumps(call.arguments, ensure_ascii=False)


def to_openai_messages(messages: Sequence[Message], system: str | None) -> list[dict[str, Any]]:
    """Neutral messages → Chat Completions ``messages``."""
    out: list[dict[str, Any]] = [{"role": "system", "content": system}] if system else []
    for msg in messages:
        if msg.role == "tool":
            out.extend({"role": "tool", "tool_call_id": r.call_id, "content": r.content} for r in msg.tool_results)
        elif msg.role == "assistant" and msg.tool_calls:
            calls = [
                {
                    "id": c.id,
                    "type": "function",
                    "function": {"name": c.name, "arguments": _call_arguments(c)},
                }
                for c in msg.tool_calls
            ]
            out.append({"role": "assistant", "content": msg.text or None, "tool_calls": calls})
        else:
            out.append({"role": msg.role, "content": msg.text})
    return out


def _tool_choice(choice: ToolChoice) -> str | dict[str, Any]:
    name = choice_name(choice)
    if name is not None:
        return {"type": "function", "function": {"name": name}}
    return str(choice)


def parse_completion(data: dict[str, Any], *, truncated: bool = False) -> ModelResponse:
    """A Chat Completions response body → :class:`ModelResponse`."""
    choices = data.get("choices") or []
    if not choices:
        raise ModelError(f"openai response has no choices: {json.dumps(data)[:200]}")
    choice = choices[0]
    message = choice.get("message") or {}
    calls: list[ToolCall] = []
    for i, tc in enumerate(message.get("tool_calls") or []):
        fn = tc.get("function") or {}
        call_id, name, raw = str(tc.get("id") or f"call_{i}"), str(fn.get("name") or ""), fn.get("arguments")
        if truncated:
            calls.append(ToolCall(id=call_id, name=name, arguments_raw=str(raw or ""), parse_error=TRUNCATED))
        elif isinstance(raw, dict):  # some compatible servers send an object
            calls.append(ToolCall.from_arguments(call_id, name, raw))
        else:
            calls.append(ToolCall.from_raw(call_id, name, str(raw or "")))
    raw_reason = str(choice.get("finish_reason") or "")
    stop: StopReason = _FINISH.get(raw_reason, "other")
    if truncated:
        stop = "error"
    elif message.get("refusal") and not calls:
        stop = "refusal"
    elif calls and stop == "end_turn":  # e.g. Ollama answers "stop" alongside tool calls
        stop = "tool_use"
    return ModelResponse(
        text=str(message.get("content") or message.get("refusal") or ""),
        tool_calls=calls,
        stop_reason=stop,
        raw_stop_reason=raw_reason,
        usage=Usage.from_wire(data.get("usage")),
        raw=data,
        truncated=truncated,
    )


class _ChunkAccumulator:
    """Joins ``chat.completion.chunk`` events into one completion body."""

    def __init__(self) -> None:
        self.meta: dict[str, Any] = {}
        self.text: list[str] = []
        self.refusal: list[str] = []
        self.calls: list[dict[str, Any]] = []  # slot -> {"id", "name", "args": [..]}
        self.slot_of: dict[int, int] = {}
        self.finish: str | None = None
        self.usage: dict[str, Any] | None = None
        self.done = False

    def _slot(self, index: int, call_id: str) -> dict[str, Any]:
        slot = self.slot_of.get(index)
        # A new id at a seen index opens a new call (Ollama reuses index 0 in a parallel batch).
        if slot is None or (call_id and self.calls[slot]["id"] and self.calls[slot]["id"] != call_id):
            self.calls.append({"id": "", "name": "", "args": []})
            slot = self.slot_of[index] = len(self.calls) - 1
        return self.calls[slot]

    def feed(self, event: SSEEvent) -> None:
        if event.data.strip() == "[DONE]":
            self.done = True
            return
        chunk = decode_event("openai", event)
        if "error" in chunk:
            err = chunk["error"] if isinstance(chunk["error"], dict) else {"message": chunk["error"]}
            raise ModelError(f"openai stream error: {err.get('type') or ''} {err.get('message') or ''}".strip())
        for key in ("id", "model", "created", "system_fingerprint"):
            if key in chunk:
                self.meta[key] = chunk[key]
        if chunk.get("usage"):
            self.usage = chunk["usage"]
        for choice in chunk.get("choices") or []:
            if choice.get("index", 0) != 0:
                continue
            delta = choice.get("delta") or {}
            if delta.get("content"):
                self.text.append(delta["content"])
            if delta.get("refusal"):
                self.refusal.append(delta["refusal"])
            for pos, tc in enumerate(delta.get("tool_calls") or []):
                index = tc.get("index", pos)
                slot = self._slot(index, str(tc.get("id") or ""))
                fn = tc.get("function") or {}
                slot["id"] = slot["id"] or str(tc.get("id") or "")
                slot["name"] += str(fn.get("name") or "")
                slot["args"].append(str(fn.get("arguments") or ""))
            if choice.get("finish_reason"):
                self.finish = choice["finish_reason"]

    def body(self) -> dict[str, Any]:
        """The equivalent non-streamed response body."""
        message: dict[str, Any] = {"role": "assistant", "content": "".join(self.text) or None}
        if self.refusal:
            message["refusal"] = "".join(self.refusal)
        if self.calls:
            message["tool_calls"] = [
                {
                    "id": c["id"],
                    "type": "function",
                    "function": {"name": c["name"], "arguments": "".join(c["args"])},
                }
                for c in self.calls
            ]
        return {
            **self.meta,
            "object": "chat.completion",
            "choices": [{"index": 0, "message": message, "finish_reason": self.finish}],
            "usage": self.usage,
        }

    def result(self) -> ModelResponse:
        # Complete once a finish_reason arrived; [DONE] alone only ends the optional usage chunk.
        return parse_completion(self.body(), truncated=self.finish is None)


class OpenAIClient(HTTPModelClient):
    """``POST {base_url}/chat/completions`` over httpx, sync and async, streaming or not.

    ``base_url`` defaults to ``$OPENAI_BASE_URL`` then the OpenAI API; ``api_key`` to
    ``$OPENAI_API_KEY`` (sent as a Bearer token; omitted when empty, for local servers).
    ``max_tokens_param`` names the length limit on the wire: ``"max_completion_tokens"`` for
    api.openai.com (newer models reject ``max_tokens``), ``"max_tokens"`` for other servers.
    """

    #: The endpoint decodes ``strict`` function definitions under their schema (constrained decoding):
    #: every property required, an optional one nullable.
    supports_strict_tools = True
    strict_tools = StrictTools(optional="nullable")

    provider = "openai"
    endpoint = Endpoint(DEFAULT_BASE_URL, "/chat/completions", key_env="OPENAI_API_KEY", url_env="OPENAI_BASE_URL")

    # Alike by design (AnthropicClient.__init__): each vendor's constructor spells out its own keywords,
    # environment variables and defaults; the shared part is HTTPModelClient.__init__.
    def __init__(
        self,
        model: str,
        *,
        base_url: str | None = None,
        api_key: str | None = None,
        timeout: float = 60.0,
        max_retries: int = 3,
        options: HTTPOptions | None = None,
        max_tokens_param: str | None = None,
        extra_body: dict[str, Any] | None = None,
        extra_headers: dict[str, str] | None = None,
    ) -> None:
        super().__init__(model, base_url=base_url, api_key=api_key, timeout=timeout, max_retries=max_retries,
                         options=options, extra_body=extra_body, extra_headers=extra_headers)
        if max_tokens_param is None:
            host = urlsplit(self._base_url).hostname or ""
            max_tokens_param = "max_completion_tokens" if host == "api.openai.com" else "max_tokens"
        self.max_tokens_param = max_tokens_param

    def _headers(self, stream: bool) -> dict[str, str]:
        headers = {"accept": "text/event-stream" if stream else "application/json", **self.extra_headers}
        if self._api_key:
            headers["authorization"] = f"Bearer {self._api_key}"
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
        body: dict[str, Any] = {
            "model": self.model,
            "messages": to_openai_messages(messages, system),
            self.max_tokens_param: max_tokens,
        }
        if tools:
            body["tools"] = []
            for tool in tools:
                name, description, schema = tool_parts(tool)
                fn: dict[str, Any] = {"name": name, "description": description, "parameters": schema}
                if tool.get("strict"):  # constrained decoding: the schema is in the strict subset
                    fn["strict"] = True
                body["tools"].append({"type": "function", "function": fn})
            body["tool_choice"] = _tool_choice(tool_choice)
        if stream:
            body["stream"] = True
            body["stream_options"] = {"include_usage": True}
        body.update(self.extra_body)
        return body

    def _parse(self, data: dict[str, Any]) -> ModelResponse:
        return parse_completion(data)

    def _accumulator(self) -> StreamAccumulator:
        return _ChunkAccumulator()


if TYPE_CHECKING:
    #: Deprecated name of :class:`OpenAIClient` (named like ``AnthropicClient``).
    OpenAIChatClient = OpenAIClient
else:
    def __getattr__(name: str) -> Any:
        return deprecated_alias(__name__, name,
                                {"OpenAIChatClient": ("codeact.agent.models.OpenAIClient", OpenAIClient)})
