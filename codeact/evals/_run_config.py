"""``RunConfig``: what a worker needs to run an experiment's episodes, in a module of its own so
that the fingerprint (which reads it) and the episode runner (which uses the fingerprint) both
import it from below."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from ..sandbox.base import SandboxConfig
from ..tool_stubs.check import CheckMode
from .providers import ModelSpec


@dataclass(frozen=True)
class RunConfig:
    """Everything a worker needs to run episodes; picklable (a Ray actor rebuilds the rest)."""

    suite_ref: str
    model: ModelSpec
    sandbox: SandboxConfig
    out_dir: str
    tasks: tuple[str, ...] | None = None
    budget: dict[str, Any] = field(default_factory=dict)
    system_prompt: str | None = None
    stream: bool = False
    #: The check before each code action (``Runtime(check=...)``): compare ``block`` with ``off``.
    check: CheckMode = "warn"
    #: The run fingerprint (see :mod:`.fingerprint`); each episode records its id.
    fingerprint: dict[str, Any] = field(default_factory=dict)
