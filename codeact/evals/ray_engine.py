"""Scale-out on Ray (optional extra ``ray``; imported only when ``--engine ray`` is asked for).

Episodes and batch items are spread over Ray actors by :class:`ray.util.ActorPool`; each actor
builds its own model provider and its own runtimes, so its sandboxes run on its node's Docker
engine. Results stream back to the driver, which writes them to the same resumable file as the
local engine. ``address`` joins an existing cluster (``ray.init(address=...)``); without it a
local cluster is started on 127.0.0.1 only: no dashboard, no usage stats, every listener on
loopback (``codeact.cluster._ray``, the one place codeact calls ``ray.init``).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Generator, Sequence
from typing import Any

from ..cluster import init_ray, ray_module
from ..results import ExecutionResult
from ..runtime.toolset import Toolset
from ..sandbox.base import SandboxConfig
from ._episode import EpisodeFailure, EpisodeRunner, RunConfig
from .results_store import EpisodeResult
from .suite import EpisodeKey

__all__ = ["init_ray", "map_code_ray", "run_episodes"]


def _ray() -> Any:
    return ray_module()


class _EpisodeWorker:
    """A Ray actor: one EpisodeRunner (its own provider, its own runtimes)."""

    def __init__(self, config: RunConfig) -> None:
        self.runner = EpisodeRunner(config)

    def run(self, key: tuple[str, str, int]) -> EpisodeResult | EpisodeFailure:
        return self.runner.run_safe(EpisodeKey(*key))

    def close(self) -> None:
        self.runner.close()


class _BatchWorker:
    """A Ray actor: one Runtime (its own sandboxes) running chunks of batch items."""

    def __init__(self, tools: Callable[[], Toolset], sandbox: SandboxConfig, threads: int) -> None:
        from ..runtime.session import Runtime

        self.runtime = Runtime(tools(), sandbox)
        self.threads = threads

    def map(self, code: str, start: int, items: list[Any]) -> tuple[int, list[ExecutionResult]]:
        from ..runtime.batch import map_code

        return start, map_code(self.runtime, code, items, concurrency=self.threads, progress=False)

    def close(self) -> None:
        self.runtime.close()


def _pool(ray: Any, cls: type, args: tuple[Any, ...], workers: int, threads: int) -> tuple[Any, list[Any]]:
    from ray.util import ActorPool

    remote = ray.remote(num_cpus=0.5, max_concurrency=max(1, threads))(cls)
    actors = [remote.remote(*args) for _ in range(max(1, workers))]
    return ActorPool(actors * max(1, threads)), actors  # an actor listed k times takes k calls at once


def _shutdown(ray: Any, actors: list[Any], started: bool) -> None:
    try:
        ray.get([a.close.remote() for a in actors], timeout=30)
    except Exception:
        pass
    for actor in actors:
        ray.kill(actor)
    if started:
        ray.shutdown()


def run_episodes(config: RunConfig, keys: Sequence[EpisodeKey], *, workers: int = 2, threads: int = 1,
                 address: str | None = None) -> Generator[EpisodeResult | EpisodeFailure, None, None]:
    """Run episodes on ``workers`` Ray actors (``threads`` at once each), yielding as they finish."""
    if not keys:
        return
    ray = _ray()
    started = init_ray(address, num_cpus=max(2, workers))
    pool, actors = _pool(ray, _EpisodeWorker, (config,), workers, threads)
    try:
        yield from pool.map_unordered(lambda actor, key: actor.run.remote(tuple(key)), list(keys))
    finally:
        _shutdown(ray, actors, started)


def map_code_ray(tools: Callable[[], Toolset], sandbox: SandboxConfig, code: str, inputs: Sequence[Any], *,
                 workers: int = 2, threads: int = 2, address: str | None = None,
                 on_done: Callable[[list[ExecutionResult]], None] | None = None) -> list[ExecutionResult]:
    """:func:`~codeact.runtime.batch.map_code` over Ray actors; results in input order."""
    items = list(inputs)
    if not items:
        return []
    ray = _ray()
    started = init_ray(address, num_cpus=max(2, workers))
    size = max(1, math.ceil(len(items) / (max(1, workers) * 8)))
    chunks = [(i, items[i:i + size]) for i in range(0, len(items), size)]
    pool, actors = _pool(ray, _BatchWorker, (tools, sandbox, threads), workers, 1)
    out: list[ExecutionResult | None] = [None] * len(items)
    try:
        for start, results in pool.map_unordered(lambda actor, chunk: actor.map.remote(code, *chunk), chunks):
            out[start:start + len(results)] = results
            if on_done is not None:
                on_done(results)
    finally:
        _shutdown(ray, actors, started)
    return [r for r in out if r is not None]

