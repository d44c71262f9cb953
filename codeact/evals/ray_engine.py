"""Deprecated: ``--engine ray`` runs on :mod:`codeact.cluster` (the one Ray path).

A batch on Ray is ``Runtime(tools, sandbox, cluster=RayCluster(address)).map(...)``; an eval on Ray
is ``run_suite(..., engine="ray")``, whose episodes build their runtimes with ``cluster=`` (the
agent loop stays in the caller, the code actions run on the cluster's sessions). The two functions
below still work, say so (``DeprecationWarning``) and run that way.
"""

from __future__ import annotations

import warnings
from collections.abc import Callable, Generator, Sequence
from typing import Any

from ..cluster import RayCluster, init_ray
from ..progress import Bar
from ..results import ExecutionResult
from ..runtime.session import Runtime
from ..runtime.toolset import Toolset
from ..sandbox.base import SandboxConfig
from ._episode import EpisodeFailure, EpisodeRunner, RunConfig
from .results_store import EpisodeResult
from .runner import _local
from .suite import EpisodeKey

__all__ = ["init_ray", "map_code_ray", "run_episodes"]


def _warn(old: str, new: str) -> None:
    warnings.warn(f"codeact.evals.ray_engine.{old} is deprecated; use {new}", DeprecationWarning, stacklevel=3)


def run_episodes(config: RunConfig, keys: Sequence[EpisodeKey], *, workers: int = 2, threads: int = 1,
                 address: str | None = None) -> Generator[EpisodeResult | EpisodeFailure, None, None]:
    """Deprecated: ``run_suite(..., engine="ray")``. The episodes, ``workers × threads`` at once."""
    _warn("run_episodes", 'codeact.evals.run_suite(..., engine="ray")')
    cluster = RayCluster(address, num_cpus=max(2, workers))
    runner = EpisodeRunner(config, cluster=cluster)
    try:
        with Bar(len(keys), "eval", enabled=False) as bar:
            yield from _local(runner, keys, max(1, workers) * max(1, threads), bar)
    finally:
        runner.close()
        cluster.shutdown()


def map_code_ray(tools: Callable[[], Toolset], sandbox: SandboxConfig, code: str, inputs: Sequence[Any], *,
                 workers: int = 2, threads: int = 2, address: str | None = None,
                 on_done: Callable[[list[ExecutionResult]], None] | None = None) -> list[ExecutionResult]:
    """Deprecated: ``Runtime(tools, sandbox, cluster=RayCluster(address)).map(code, inputs)``."""
    _warn("map_code_ray", "Runtime(tools, sandbox, cluster=codeact.cluster.RayCluster(address)).map(...)")
    from ..runtime.batch import map_code

    cluster = RayCluster(address, tools=tools, num_cpus=max(2, workers))
    try:
        with Runtime(tools(), sandbox, cluster=cluster) as runtime:
            return map_code(runtime, code, inputs, concurrency=max(1, workers) * max(1, threads),
                            on_result=None if on_done is None else lambda _, r: on_done([r]))
    finally:
        cluster.shutdown()
