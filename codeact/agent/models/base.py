"""The ``ModelClient`` seam and the skeleton the HTTP clients share.

Tools are given in the neutral shape ``{"name", "description", "input_schema"}`` (an OpenAI-style
``"parameters"`` key is accepted too). ``tool_choice`` is ``"auto"``, ``"none"``, ``"required"``
(some tool must be called) or ``{"name": ...}`` (that tool must be called).
"""

from __future__ import annotations

import abc
import json
import os
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any, ClassVar, Literal, Protocol, TypeVar, runtime_checkable

from codeact._text import one_line
from codeact.agent.messages import Message, ModelResponse
from codeact.agent.models._http import Exchange, HTTPOptions, SSEEvent, Transport
from codeact.errors import ModelError
from codeact.tool_stubs.strict import OptionalForm

__all__ = ["Endpoint", "HTTPModelClient", "ModelClient", "StreamAccumulator", "StrictTools", "ToolChoice", "ToolDef",
           "require_key"]

ToolChoice = Literal["auto", "none", "required"] | Mapping[str, str]
ToolDef = Mapping[str, Any]
_C = TypeVar("_C", bound="HTTPModelClient")


@runtime_checkable
class ModelClient(Protocol):
    """Anything that answers a conversation: an HTTP vendor client or a scripted stand-in."""

    model: str

    # Alike by design (HTTPModelClient below, ScriptedModel in scripted.py): every implementation spells
    # out the protocol's signatures, so that each stays typed and documented where it is implemented.
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
        """Ask the model for its next turn."""
        ...

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
        ...


@dataclass(frozen=True)
class StrictTools:
    """How an endpoint takes strict tool definitions (``"strict": true``, constrained decoding).

    A client declares it as ``strict_tools`` (and ``supports_strict_tools = True`` when the agents
    should use it by default). ``optional``: how the schema says an argument is optional (OpenAI:
    required but nullable; Anthropic: left out of ``required``). The ``max_*`` limits apply to one
    request, summed over its strict tools (``None``: no limit); a tool past them is sent non-strict.
    """

    optional: OptionalForm = "nullable"
    max_tools: int | None = None
    max_optional: int | None = None
    max_unions: int | None = None

    def admits(self, tools: int, optional: int, unions: int) -> bool:
        """Whether a request's strict tools, with these totals, stay within the limits."""
        return all(limit is None or used <= limit for used, limit in (
            (tools, self.max_tools), (optional, self.max_optional), (unions, self.max_unions)))


class StreamAccumulator(Protocol):
    """Reassembles one streamed answer from its SSE events."""

    def feed(self, event: SSEEvent) -> None: ...

    def result(self) -> ModelResponse: ...


def tool_parts(tool: ToolDef) -> tuple[str, str, dict[str, Any]]:
    """``(name, description, input_schema)`` of a neutral tool definition."""
    if "name" not in tool:
        raise ValueError(f"a tool definition needs a 'name': {dict(tool)!r}")
    schema = tool.get("input_schema") or tool.get("parameters") or {"type": "object", "properties": {}}
    return str(tool["name"]), str(tool.get("description") or ""), dict(schema)


def choice_name(choice: ToolChoice) -> str | None:
    """The forced tool's name for ``{"name": ...}``, else ``None``; rejects unknown values."""
    if isinstance(choice, Mapping):
        if "name" not in choice:
            raise ValueError(f"tool_choice mapping needs a 'name': {dict(choice)!r}")
        return str(choice["name"])
    if choice not in ("auto", "none", "required"):
        raise ValueError(f"tool_choice must be 'auto', 'none', 'required' or {{'name': ...}}, not {choice!r}")
    return None


def decode_event(provider: str, event: SSEEvent) -> dict[str, Any]:
    """The JSON payload of a stream event."""
    try:
        data = json.loads(event.data)
    except ValueError:
        raise ModelError(f"{provider} sent a malformed stream event: {event.data[:200]!r}") from None
    if not isinstance(data, dict):
        raise ModelError(f"{provider} sent a stream event that is not a JSON object")
    return data


@contextmanager
def _shape_checked(client: HTTPModelClient) -> Iterator[None]:
    """A response (or stream event) that is JSON but not of the vendor's shape, met while reading
    it (``"choices": [null]``, ``"content": 5``): a ModelError, as unusable JSON is, not whatever
    the reading raised."""
    try:
        yield
    except ModelError:
        raise
    except (AttributeError, KeyError, TypeError, ValueError, IndexError) as exc:
        raise ModelError(f"{client.provider} sent a response of an unexpected shape "
                         f"({type(exc).__name__}: {one_line(str(exc), 200)})") from None


def require_key(key: str | None, env: str, base_url: str, default_url: str) -> None:
    """Refuse at once a client for the vendor's own API without a key: it would only be told so by
    a refused request, after retries. A server of one's own (another base URL) may need none."""
    if not key and base_url.rstrip("/") == default_url.rstrip("/"):
        raise ModelError(f"{env} is not set: export it, or pass api_key= (for another server, its base URL)")


@dataclass(frozen=True)
class Endpoint:
    """Where a vendor's API is and how a client finds its key: the default base URL, the path of
    one turn below it, and the environment variables that override the key and the URL."""

    default_url: str
    path: str
    key_env: str
    url_env: str


class HTTPModelClient(abc.ABC):
    """Shared ``complete``/``acomplete`` for vendors reached over HTTP; subclasses map the wire.

    The key is ``api_key``, else ``$<endpoint.key_env>``; the base URL ``base_url``, else
    ``$<endpoint.url_env>``, else the vendor's. ``extra_body``/``extra_headers`` go on every request."""

    provider: str = "model"
    endpoint: ClassVar[Endpoint]
    model: str

    def __init__(self, model: str, *, base_url: str | None, api_key: str | None, timeout: float, max_retries: int,
                 options: HTTPOptions | None, extra_body: dict[str, Any] | None,
                 extra_headers: dict[str, str] | None) -> None:
        where = self.endpoint
        key = api_key if api_key is not None else os.environ.get(where.key_env)
        self._base_url = (base_url or os.environ.get(where.url_env) or where.default_url).rstrip("/")
        require_key(key, where.key_env, self._base_url, where.default_url)
        self.model = model
        self._api_key = key or None
        self._transport = Transport(self.provider, options or HTTPOptions(timeout=timeout, max_retries=max_retries),
                                    secret=self._api_key)
        self.extra_body = dict(extra_body or {})
        self.extra_headers = dict(extra_headers or {})

    def __repr__(self) -> str:  # never shows the key
        return f"{type(self).__name__}(model={self.model!r}, base_url={self.base_url!r})"

    @property
    def base_url(self) -> str:
        return self._base_url

    def _endpoint(self) -> str:
        return self._base_url + self.endpoint.path

    @abc.abstractmethod
    def _headers(self, stream: bool) -> dict[str, str]: ...

    # Alike by design (AnthropicClient._body, OpenAIClient._body): the vendors implement this signature.
    @abc.abstractmethod
    def _body(
        self,
        messages: Sequence[Message],
        system: str | None,
        tools: Sequence[ToolDef],
        tool_choice: ToolChoice,
        max_tokens: int,
        stream: bool,
    ) -> dict[str, Any]: ...

    @abc.abstractmethod
    def _parse(self, data: dict[str, Any]) -> ModelResponse: ...

    @abc.abstractmethod
    def _accumulator(self) -> StreamAccumulator: ...

    def close(self) -> None:
        """Release pooled connections."""
        self._transport.close()

    def __enter__(self: _C) -> _C:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def _turn(self, body: dict[str, Any], stream: bool) -> Exchange[ModelResponse]:
        """One turn's request (``body``, from :meth:`_body`) and the parse of its answer, for
        :meth:`complete` and :meth:`acomplete`."""
        url, headers = self._endpoint(), self._headers(stream)
        if not stream:
            data = yield from self._transport.post_json(url, headers, body)
            with _shape_checked(self):
                return self._parse(data)
        acc = self._accumulator()

        def feed(event: SSEEvent) -> None:
            with _shape_checked(self):
                acc.feed(event)

        yield from self._transport.post_events(url, headers, body, feed)
        with _shape_checked(self):
            return acc.result()

    # Alike by design (acomplete below, and ModelClient's): the signatures are spelled out; both run
    # the one _turn, blocking or awaited.
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
        """Ask the model for its next turn (see :class:`ModelClient`)."""
        body = self._body(messages, system, tools, tool_choice, max_tokens, stream)
        return self._transport.run(self._turn(body, stream))

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
        body = self._body(messages, system, tools, tool_choice, max_tokens, stream)
        return await self._transport.arun(self._turn(body, stream))
