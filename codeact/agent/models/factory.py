"""``make_model``: a model client from a ``provider:model`` string."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from codeact.agent.models.anthropic import AnthropicClient
from codeact.agent.models.base import ModelClient
from codeact.agent.models.openai import OpenAIClient
from codeact.agent.models.scripted import ScriptedModel

__all__ = ["load_script", "make_model"]

PROVIDERS = ("openai", "anthropic", "scripted", "replay")


def load_script(path: str | Path) -> list[Any]:
    """Read a script file: a JSON list of entries, or ``{"responses": [...]}``."""
    data = json.loads(Path(path).read_text(encoding="utf-8"))
    if isinstance(data, dict) and isinstance(data.get("responses"), list):
        data = data["responses"]
    if not isinstance(data, list):
        raise ValueError(f"{path}: a script is a JSON list of responses (or {{'responses': [...]}})")
    return data


def make_model(spec: str, *, base_url: str | None = None, api_key: str | None = None, **options: Any) -> ModelClient:
    """Build a client from ``"openai:MODEL"``, ``"anthropic:MODEL"`` or ``"scripted:PATH"``.

    ``base_url``/``api_key`` override the provider's environment variables; ``options`` go to
    the client (``timeout``, ``max_retries``, ``extra_body``…).
    """
    provider, sep, name = spec.partition(":")
    if not sep or not name or provider not in PROVIDERS:
        raise ValueError(
            f"model spec {spec!r} must look like 'openai:gpt-4o-mini', 'anthropic:claude-sonnet-4-5' "
            f"or 'scripted:PATH' or 'replay:TRACE' (providers: {', '.join(PROVIDERS)})"
        )
    if provider == "openai":
        return OpenAIClient(name, base_url=base_url, api_key=api_key, **options)
    if provider == "anthropic":
        return AnthropicClient(name, base_url=base_url, api_key=api_key, **options)
    if provider == "replay":
        from ..trace import ReplayModel  # a trace of an earlier run, replayed offline

        return ReplayModel(name)
    return ScriptedModel(load_script(name), model=f"scripted:{Path(name).name}")
