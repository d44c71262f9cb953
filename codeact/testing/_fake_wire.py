"""Wire rendering and request checks for :mod:`codeact.testing.fake_server` (private).

A script entry in the neutral simple form is rendered as an OpenAI Chat Completions or Anthropic
Messages answer, plain JSON or SSE events whose text and tool-call arguments are cut into many
small pieces. Requests are checked for the mistakes the real APIs answer with a 400.
"""

from __future__ import annotations

import json
import random
import re
from collections.abc import Iterator, Mapping
from typing import Any, Literal

from codeact.tool_stubs.strict import strict_counts

__all__ = ["Vendor", "error_body", "render_events", "render_json", "usage_of", "validate"]

Vendor = Literal["openai", "anthropic"]
CREATED = 1_700_000_000

_OPENAI_FINISH = {
    "end_turn": "stop",
    "tool_use": "tool_calls",
    "max_tokens": "length",
    "stop_sequence": "stop",
}
_ANTHROPIC_STOP = {"content_filter": "refusal", "length": "max_tokens", "stop": "end_turn"}
_ERROR_TYPES = {
    400: "invalid_request_error",
    401: "authentication_error",
    403: "permission_error",
    404: "not_found_error",
    413: "request_too_large",
    429: "rate_limit_error",
    529: "overloaded_error",
}


def error_body(vendor: Vendor, status: int, message: str) -> dict[str, Any]:
    """An error body in the vendor's shape."""
    kind = _ERROR_TYPES.get(status, "api_error" if status >= 500 else "invalid_request_error")
    if vendor == "anthropic":
        return {"type": "error", "error": {"type": kind, "message": message}}
    return {"error": {"message": message, "type": kind, "param": None, "code": None}}


def _tokens(text: str) -> int:
    return max(1, (len(text) + 3) // 4)


def _arguments_text(args: Any) -> str:
    return args if isinstance(args, str) else json.dumps(args if args is not None else {}, ensure_ascii=False)


def _calls(entry: Mapping[str, Any], vendor: Vendor, n: int) -> list[tuple[str, str, str]]:
    """``(id, name, arguments_text)`` per scripted tool call."""
    prefix = "call" if vendor == "openai" else "toolu"
    return [
        (str(c.get("id") or f"{prefix}_{n}_{i}"), str(c["name"]), _arguments_text(c.get("arguments")))
        for i, c in enumerate(entry.get("tool_calls") or [])
    ]


def usage_of(entry: Mapping[str, Any], body: Mapping[str, Any]) -> tuple[int, int]:
    """``(input, output)`` tokens: the entry's own, else a deterministic characters/4 count."""
    given = entry.get("usage") or {}
    prompt = json.dumps([body.get("system"), body.get("messages"), body.get("tools")], ensure_ascii=False)
    output = str(entry.get("text") or "") + "".join(
        _arguments_text(c.get("arguments")) for c in entry.get("tool_calls") or []
    )
    return int(given.get("input_tokens", _tokens(prompt))), int(given.get("output_tokens", _tokens(output)))


def _stop(entry: Mapping[str, Any], vendor: Vendor) -> str:
    stop = str(entry.get("stop_reason") or ("tool_use" if entry.get("tool_calls") else "end_turn"))
    table = _OPENAI_FINISH if vendor == "openai" else _ANTHROPIC_STOP
    return table.get(stop, stop)


def render_json(entry: Mapping[str, Any], vendor: Vendor, body: Mapping[str, Any], n: int) -> dict[str, Any]:
    """The non-streamed answer body."""
    text, calls, (tin, tout) = str(entry.get("text") or ""), _calls(entry, vendor, n), usage_of(entry, body)
    if vendor == "openai":
        message: dict[str, Any] = {"role": "assistant", "content": text or None, "refusal": None}
        if calls:
            message["tool_calls"] = [
                {"id": cid, "type": "function", "function": {"name": name, "arguments": args}}
                for cid, name, args in calls
            ]
        return {
            "id": f"chatcmpl-fake-{n}",
            "object": "chat.completion",
            "created": CREATED,
            "model": body.get("model"),
            "choices": [{"index": 0, "message": message, "logprobs": None, "finish_reason": _stop(entry, vendor)}],
            "usage": {"prompt_tokens": tin, "completion_tokens": tout, "total_tokens": tin + tout},
        }
    content: list[dict[str, Any]] = [{"type": "text", "text": text}] if text else []
    for cid, name, args in calls:
        try:
            value: Any = json.loads(args)
        except ValueError:
            value = args  # not representable on this wire; sent as is to exercise the client
        content.append({"type": "tool_use", "id": cid, "name": name, "input": value})
    return {
        "id": f"msg_fake_{n}",
        "type": "message",
        "role": "assistant",
        "model": body.get("model"),
        "content": content,
        "stop_reason": _stop(entry, vendor),
        "stop_sequence": None,
        "usage": {"input_tokens": tin, "output_tokens": tout},
    }


def _pieces(text: str, rng: random.Random, sizes: tuple[int, int]) -> Iterator[str]:
    pos = 0
    while pos < len(text):
        step = rng.randint(*sizes)
        yield text[pos : pos + step]
        pos += step


def _openai_events(
    entry: Mapping[str, Any], body: Mapping[str, Any], n: int, rng: random.Random, sizes: tuple[int, int]
) -> Iterator[str]:
    usage = bool((body.get("stream_options") or {}).get("include_usage"))
    head = {"id": f"chatcmpl-fake-{n}", "object": "chat.completion.chunk", "created": CREATED}
    head["model"] = body.get("model")

    def chunk(delta: dict[str, Any], finish: str | None = None) -> str:
        data = {**head, "choices": [{"index": 0, "delta": delta, "logprobs": None, "finish_reason": finish}]}
        return json.dumps({**data, "usage": None} if usage else data)

    yield chunk({"role": "assistant", "content": ""})
    for piece in _pieces(str(entry.get("text") or ""), rng, sizes):
        yield chunk({"content": piece})
    for i, (cid, name, args) in enumerate(_calls(entry, "openai", n)):
        fn = {"name": name, "arguments": ""}
        yield chunk({"tool_calls": [{"index": i, "id": cid, "type": "function", "function": fn}]})
        for piece in _pieces(args, rng, sizes):
            yield chunk({"tool_calls": [{"index": i, "function": {"arguments": piece}}]})
    yield chunk({}, _stop(entry, "openai"))
    if usage:
        tin, tout = usage_of(entry, body)
        counts = {"prompt_tokens": tin, "completion_tokens": tout, "total_tokens": tin + tout}
        yield json.dumps({**head, "choices": [], "usage": counts})
    yield "[DONE]"


def _anthropic_events(
    entry: Mapping[str, Any], body: Mapping[str, Any], n: int, rng: random.Random, sizes: tuple[int, int]
) -> Iterator[tuple[str, dict[str, Any]]]:
    tin, tout = usage_of(entry, body)
    message = render_json({**entry, "text": "", "tool_calls": []}, "anthropic", body, n)
    message.update(stop_reason=None, usage={"input_tokens": tin, "output_tokens": 1})
    yield "message_start", {"type": "message_start", "message": message}
    yield "ping", {"type": "ping"}
    index = 0
    text = str(entry.get("text") or "")
    if text:
        block: dict[str, Any] = {"type": "text", "text": ""}
        yield "content_block_start", {"type": "content_block_start", "index": index, "content_block": block}
        for piece in _pieces(text, rng, sizes):
            delta: dict[str, Any] = {"type": "text_delta", "text": piece}
            yield "content_block_delta", {"type": "content_block_delta", "index": index, "delta": delta}
        yield "content_block_stop", {"type": "content_block_stop", "index": index}
        index += 1
    for cid, name, args in _calls(entry, "anthropic", n):
        block = {"type": "tool_use", "id": cid, "name": name, "input": {}}
        yield "content_block_start", {"type": "content_block_start", "index": index, "content_block": block}
        for piece in _pieces(args, rng, sizes):
            delta = {"type": "input_json_delta", "partial_json": piece}
            yield "content_block_delta", {"type": "content_block_delta", "index": index, "delta": delta}
        yield "content_block_stop", {"type": "content_block_stop", "index": index}
        index += 1
    stop = {"stop_reason": _stop(entry, "anthropic"), "stop_sequence": None}
    yield "message_delta", {"type": "message_delta", "delta": stop, "usage": {"output_tokens": tout}}
    yield "message_stop", {"type": "message_stop"}


def render_events(
    entry: Mapping[str, Any], vendor: Vendor, body: Mapping[str, Any], n: int, sizes: tuple[int, int] = (3, 7)
) -> list[bytes]:
    """The streamed answer as encoded SSE events (cut short or with an error when scripted)."""
    rng = random.Random(n)
    if vendor == "openai":
        events = [f"data: {data}\n\n".encode() for data in _openai_events(entry, body, n, rng, sizes)]
    else:
        events = [
            f"event: {name}\ndata: {json.dumps(data)}\n\n".encode()
            for name, data in _anthropic_events(entry, body, n, rng, sizes)
        ]
    error = entry.get("stream_error")
    if error:
        kind = error if isinstance(error, str) else "overloaded_error"
        payload = json.dumps(error_body(vendor, 529 if kind == "overloaded_error" else 500, kind))
        line = f"event: error\ndata: {payload}\n\n" if vendor == "anthropic" else f"data: {payload}\n\n"
        events = [*events[: len(events) // 2], line.encode()]
    elif entry.get("truncate_stream"):
        events = events[: _cut_point(events, vendor, entry.get("truncate_after"))]
    return events


def _cut_point(events: list[bytes], vendor: Vendor, after: Any) -> int:
    """Events kept by a truncated stream: ``after``, else up to (not including) the last
    argument fragment, so every call has started and the last is incomplete; else half."""
    if after is not None:
        return int(after)
    marker = b"input_json_delta" if vendor == "anthropic" else b'"arguments": "'
    fragments = [i for i, event in enumerate(events) if marker in event]
    return fragments[-1] if fragments else len(events) // 2


_TOOL_NAME = re.compile(r"[a-zA-Z0-9_-]{1,64}")
#: Anthropic's per-request limits on strict tools: tools, optional parameters, union-typed parameters.
_ANTHROPIC_STRICT = {"strict tools": 20, "optional parameters": 24, "parameters with union types": 16}


def _tool_problems(vendor: Vendor, tools: Any) -> Iterator[str]:
    """Tool names outside both vendors' pattern; Anthropic's strict-tool limits."""
    totals = dict.fromkeys(_ANTHROPIC_STRICT, 0)
    for i, tool in enumerate(tools if isinstance(tools, list) else []):
        entry = (tool.get("function") or {}) if vendor == "openai" else tool
        name = entry.get("name")
        if not isinstance(name, str) or not _TOOL_NAME.fullmatch(name):
            where = f"Invalid 'tools[{i}].function.name'" if vendor == "openai" else f"tools.{i}.custom.name"
            yield f"{where}: string should match pattern '^[a-zA-Z0-9_-]{{1,64}}$' (got {name!r})"
        if vendor == "anthropic" and entry.get("strict"):
            optional, unions = strict_counts(entry.get("input_schema") or {})
            for key, n in zip(totals, (1, optional, unions), strict=True):
                totals[key] += n
    for key, limit in _ANTHROPIC_STRICT.items():
        if totals[key] > limit:
            yield f"strict tools: too many {key} ({totals[key]}; at most {limit}): the schemas are too complex"


def _openai_problems(body: Mapping[str, Any]) -> Iterator[str]:
    if not isinstance(body.get("model"), str):
        yield "you must provide a model parameter"
    messages = body.get("messages")
    if not isinstance(messages, list) or not messages:
        yield "'messages' must be a non-empty array"
        return
    if body.get("tool_choice") is not None and not body.get("tools"):
        yield "Invalid value for 'tool_choice': 'tool_choice' is only allowed when 'tools' are specified."
    if body.get("stream_options") is not None and not body.get("stream"):
        yield "The 'stream_options' parameter is only allowed when 'stream' is enabled."
    pending: list[str] = []
    for i, msg in enumerate(messages):
        role = msg.get("role")
        if role not in ("system", "developer", "user", "assistant", "tool"):
            yield f"messages[{i}].role: invalid value {role!r}"
        if role == "tool":
            if msg.get("tool_call_id") not in pending:
                yield (
                    f"messages[{i}]: messages with role 'tool' must be a response "
                    "to a preceding message with 'tool_calls'"
                )
            else:
                pending.remove(msg["tool_call_id"])
            continue
        if pending:
            yield (
                "An assistant message with 'tool_calls' must be followed by tool messages "
                f"responding to each 'tool_call_id'. Missing: {pending}"
            )
        pending = []
        for call in msg.get("tool_calls") or []:
            if not isinstance((call.get("function") or {}).get("arguments"), str):
                yield f"messages[{i}].tool_calls: function.arguments must be a string"
            pending.append(call.get("id"))


def _anthropic_problems(body: Mapping[str, Any]) -> Iterator[str]:
    for key, kind in (("model", str), ("max_tokens", int), ("messages", list)):
        if not isinstance(body.get(key), kind):
            yield f"{key}: Field required"
    messages: list[Any] = body["messages"] if isinstance(body.get("messages"), list) else []
    expected: set[str] = set()
    uses_tools = False
    for i, msg in enumerate(messages):
        role, content = msg.get("role"), msg.get("content")
        if role not in ("user", "assistant"):
            yield f"messages.{i}.role: Input should be 'user' or 'assistant'"
        blocks = [{"type": "text", "text": content}] if isinstance(content, str) else content or []
        if not blocks:
            yield f"messages.{i}: all messages must have non-empty content"
        results = [str(b.get("tool_use_id")) for b in blocks if b.get("type") == "tool_result"]
        kinds = [b.get("type") for b in blocks]
        if results and kinds[: len(results)] != ["tool_result"] * len(results):
            yield f"messages.{i}: tool_result blocks must come first in the user message"
        if expected and set(results) != expected:
            missing = sorted(expected - set(results))
            yield f"messages.{i}: tool_use ids without tool_result blocks immediately after: {missing}"
        if set(results) - expected:
            unexpected = sorted(set(results) - expected)
            yield f"messages.{i}: unexpected tool_use_id found in tool_result blocks: {unexpected}"
        expected = {str(b.get("id")) for b in blocks if b.get("type") == "tool_use"}
        uses_tools = uses_tools or bool(results) or bool(expected)
        for b in blocks:
            if b.get("type") == "text" and not b.get("text"):
                yield f"messages.{i}: text content blocks must be non-empty"
            if b.get("type") == "tool_use" and not isinstance(b.get("input"), dict):
                yield f"messages.{i}: tool_use.input must be an object"
    if uses_tools and not body.get("tools"):
        yield "Requests which include `tool_use` or `tool_result` blocks must define tools."
    choice = body.get("tool_choice") or {}
    names = {t.get("name") for t in body.get("tools") or []}
    if choice.get("type") == "tool" and choice.get("name") not in names:
        yield f"tool_choice: tool {choice.get('name')!r} not found in tools"


def validate(vendor: Vendor, body: Mapping[str, Any], headers: Mapping[str, str]) -> list[str]:
    """What the real API would reject in this request (empty when acceptable)."""
    if vendor == "anthropic":
        missing = [] if headers.get("anthropic-version") else ["anthropic-version: header is required"]
        return missing + list(_anthropic_problems(body)) + list(_tool_problems(vendor, body.get("tools")))
    return list(_openai_problems(body)) + list(_tool_problems(vendor, body.get("tools")))
