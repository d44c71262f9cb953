"""Which model an experiment talks to, always over real HTTP.

``scripted``: every task's bundled reference responses are served by one
:class:`~codeact.testing.fake_server.FakeModelServer` on 127.0.0.1, reached through the OpenAI (or,
with ``wire="anthropic"``, the Anthropic) client, exactly as a real provider would be. Requests
carry their episode in ``metadata.user_id`` (a field both APIs accept); the server answers turn
*n* of that episode's script, *n* being the number of assistant messages in the conversation, so
concurrent episodes share one server and a retried request gets the same answer.

``openai:MODEL`` / ``anthropic:MODEL``: :func:`~codeact.agent.models.make_model` with the base
URL from ``--base-url`` or the SDK environment variables.
"""

from __future__ import annotations

import threading
from collections import Counter
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Literal, Protocol

from ..agent.models import AnthropicClient, ModelClient, OpenAIChatClient, make_model
from ..testing.fake_server import FakeModelServer
from .suite import EpisodeKey, Suite

__all__ = ["ModelProvider", "ModelSpec", "RemoteProvider", "ScriptedProvider"]

Wire = Literal["openai", "anthropic"]


class ModelProvider(Protocol):
    """Makes the model client of one episode."""

    name: str

    def client(self, key: EpisodeKey) -> ModelClient: ...

    def close(self) -> None: ...


@dataclass(frozen=True)
class ModelSpec:
    """A picklable description of the model (a Ray worker builds its own provider from it)."""

    spec: str = "scripted"
    wire: Wire = "openai"
    base_url: str | None = None
    timeout: float = 120.0
    max_retries: int = 3

    def __post_init__(self) -> None:
        if self.spec != "scripted" and self.spec.partition(":")[0] not in ("openai", "anthropic"):
            raise ValueError(f"model {self.spec!r}: use 'scripted', 'openai:MODEL' or 'anthropic:MODEL'")
        if self.wire not in ("openai", "anthropic"):
            raise ValueError(f"wire {self.wire!r}: use 'openai' or 'anthropic'")

    @property
    def name(self) -> str:
        return f"scripted/{self.wire}" if self.spec == "scripted" else self.spec

    def open(self, suite: Suite) -> ModelProvider:
        if self.spec == "scripted":
            return ScriptedProvider(suite, wire=self.wire)
        return RemoteProvider(self)


class RemoteProvider:
    """A real provider (or any OpenAI/Anthropic-compatible server)."""

    def __init__(self, spec: ModelSpec) -> None:
        self.spec = spec
        self.name = spec.name

    def client(self, key: EpisodeKey) -> ModelClient:
        return make_model(self.spec.spec, base_url=self.spec.base_url, timeout=self.spec.timeout,
                          max_retries=self.spec.max_retries)

    def close(self) -> None:
        pass


class ScriptedProvider:
    """Serves each task's reference responses from one FakeModelServer on loopback."""

    def __init__(self, suite: Suite, *, wire: Wire = "openai", host: str = "127.0.0.1") -> None:
        self.suite = suite
        self.wire = wire
        self.name = f"scripted/{wire}"
        self._lock = threading.Lock()
        #: Requests per episode key, and first turns served per episode (a repeated episode shows 2).
        self.requests: Counter[str] = Counter()
        self.episodes: Counter[str] = Counter()
        self.server = FakeModelServer(self._answer, host).start()

    def _answer(self, body: dict[str, Any], vendor: str) -> Any:
        metadata = body.get("metadata")
        raw_key = metadata.get("user_id") if isinstance(metadata, Mapping) else None
        if not isinstance(raw_key, str):
            return {"http_status": 400, "message": "scripted: the request names no episode (metadata.user_id)"}
        try:
            key = EpisodeKey.parse(raw_key)
            script = list(self.suite[key.task_id].scripts.get(key.mode) or [])
        except (KeyError, ValueError):
            return {"http_status": 400, "message": f"scripted: unknown episode {raw_key!r}"}
        turn = sum(1 for m in body.get("messages") or [] if isinstance(m, Mapping) and m.get("role") == "assistant")
        with self._lock:
            self.requests[raw_key] += 1
            if turn == 0:
                self.episodes[raw_key] += 1
        if not script:
            return {"http_status": 400, "message": f"scripted: task {key.task_id!r} has no {key.mode} script"}
        if turn >= len(script):
            return {"http_status": 400,
                    "message": f"scripted: the {key.mode} script of {key.task_id!r} has {len(script)} turns; "
                    f"turn {turn + 1} was asked for"}
        return _with_ids(script[turn], turn, "call" if vendor == "openai" else "toolu")

    def client(self, key: EpisodeKey) -> ModelClient:
        extra = {"metadata": {"user_id": str(key)}}
        if self.wire == "anthropic":
            return AnthropicClient("scripted", base_url=self.server.anthropic_base_url, api_key="offline",
                                   max_retries=1, extra_body=extra)
        return OpenAIChatClient("scripted", base_url=self.server.openai_base_url, api_key="offline",
                                max_retries=1, extra_body=extra)

    def close(self) -> None:
        self.server.stop()


def _with_ids(entry: Any, turn: int, prefix: str) -> Any:
    """Deterministic tool-call ids (the server's own count depends on other episodes)."""
    if not isinstance(entry, Mapping) or not entry.get("tool_calls"):
        return entry
    tool_calls = [{"id": f"{prefix}_{turn}_{i}", **c} for i, c in enumerate(entry["tool_calls"])]
    return {**entry, "tool_calls": tool_calls}
