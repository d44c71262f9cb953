"""One episode, run and graded (by :mod:`.runner`'s threads, on either engine).

Each episode gets fresh tools (the task's factory) and its own :class:`~codeact.Runtime`, closed
after; given a ``cluster`` (``--engine ray``), that runtime's sessions live on the cluster's nodes
while the agent loop and the model calls stay here. An exception escaping the agent is a harness
failure (:class:`EpisodeFailure`), not a model result; ``SandboxUnavailable`` is a fatal one.
"""

from __future__ import annotations

import os
import socket
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ..errors import SandboxUnavailable
from ..runtime.session import Runtime
from ._run_config import RunConfig
from .answers import instruction as answer_instruction
from .answers import kept_answer, to_value
from .fingerprint import fingerprint_id
from .providers import ModelProvider
from .results_store import EpisodeResult, _jsonable
from .suite import EpisodeKey, Suite, load_suite

__all__ = ["EpisodeFailure", "EpisodeRunner", "RunConfig"]


@dataclass(frozen=True)
class EpisodeFailure:
    """An episode the harness could not finish (it will be tried again on a re-run)."""

    key: EpisodeKey
    error: str
    fatal: bool = False


class EpisodeRunner:
    """Runs single episodes; one per run (shared by the engine's threads)."""

    def __init__(self, config: RunConfig, *, suite: Suite | None = None,
                 provider: ModelProvider | None = None, cluster: Any = None) -> None:
        self.config = config
        #: ``codeact.cluster.RayCluster``: every episode's code actions run on its nodes.
        self.cluster = cluster
        self.suite = suite or load_suite(config.suite_ref, config.tasks)
        self._own_provider = provider is None
        self.provider = provider or config.model.open(self.suite)
        self.traces = Path(config.out_dir) / "traces"
        self.traces.mkdir(parents=True, exist_ok=True)
        self.worker = f"{socket.gethostname()}:{os.getpid()}"

    def run(self, key: EpisodeKey) -> EpisodeResult:
        """Run one episode and grade it. Raises what the harness could not handle."""
        from ..agent import Budget, CodeActAgent, FunctionCallingAgent

        task = self.suite[key.task_id]
        budget = Budget(**{**self.config.budget, **task.budget})
        trace = self.traces / f"{key.task_id}__{key.mode}__{key.repeat}.jsonl"
        toolset = task.make_tools()
        # on a cluster each node builds the episode's tools afresh from the task's factory
        cluster = self.cluster.with_tools(task.tools) if self.cluster is not None else None
        runtime = Runtime(toolset, self.config.sandbox, check=self.config.check, cluster=cluster)
        client = self.provider.client(key)
        try:
            common: dict[str, Any] = {"runtime": runtime, "budget": budget, "system_prompt": self.config.system_prompt,
                                      "trace_path": trace, "stream": self.config.stream}
            if task.agent is not None:  # the task drives its own conversation (BFCL's turns)
                episode = task.agent(key.mode, client, toolset, **common).run(task.instruction)
            else:
                agent = (CodeActAgent(client, toolset, **common) if key.mode == "code"
                         else FunctionCallingAgent(client, toolset, **common))
                episode = agent.run(f"{task.instruction}\n\n{answer_instruction(key.mode)}")
        finally:
            runtime.close()
            close = getattr(client, "close", None)
            if callable(close):
                close()
        correct = episode.status == "answered" and task.grade(episode.answer)
        return EpisodeResult.from_episode(key, episode, correct=correct, suite=self.suite.name,
                                          expected=task.expected, worker=self.worker,
                                          fingerprint=fingerprint_id(self.config.fingerprint, key.task_id),
                                          answer=kept_answer(episode.answer),
                                          answer_value=_jsonable(to_value(episode.answer)))

    def run_safe(self, key: EpisodeKey) -> EpisodeResult | EpisodeFailure:
        try:
            return self.run(key)
        except SandboxUnavailable as exc:
            return EpisodeFailure(key, f"sandbox unavailable: {exc}", fatal=True)
        except Exception as exc:
            return EpisodeFailure(key, f"{type(exc).__name__}: {exc}")

    def close(self) -> None:
        if self._own_provider:
            self.provider.close()
