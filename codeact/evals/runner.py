"""Run every (task, mode, repeat) episode of a suite with one model and one budget.

Every task's instruction gets the answer-format sentence of its mode (:mod:`.answers`), and every
episode records the typed value its answer was graded as (``answer_value``). Each episode gets
fresh tools (the task's factory) and its own :class:`~codeact.Runtime`, closed after. Results go
to ``OUT/results.jsonl`` as episodes finish (see :mod:`.results_store`); a re-run of the same
directory runs only the episodes not in it. Ctrl-C stops starting new episodes, lets
the running ones finish and keeps them; a second Ctrl-C abandons those.

An exception escaping the agent is a harness failure, not a model result: it is reported, not
recorded, so a re-run tries that episode again. ``SandboxUnavailable`` stops the whole run.
"""

from __future__ import annotations

import contextlib
import fcntl
import itertools
from collections.abc import Generator, Iterable, Iterator, Sequence
from concurrent.futures import Future, ThreadPoolExecutor, as_completed
from dataclasses import dataclass, field, replace
from datetime import datetime, timezone
from pathlib import Path
from typing import Any, Literal

from ..errors import SandboxUnavailable
from ..progress import Bar, ModeRates
from ..sandbox.base import SandboxConfig
from ..tool_stubs.check import CheckMode
from ._episode import EpisodeFailure, EpisodeRunner, RunConfig
from .fingerprint import fingerprint, fingerprint_id
from .providers import ModelProvider, ModelSpec
from .results_store import RESULTS, EpisodeResult, ResultsStore, RunMeta, record_failure
from .suite import MODES, EpisodeKey, Suite, load_suite

#: The run directory's lock file (see ``_exclusive``).
_LOCK = ".lock"

__all__ = ["EpisodeFailure", "EpisodeRunner", "RunConfig", "RunSummary", "plan", "run_suite"]

Engine = Literal["local", "ray"]


@dataclass
class RunSummary:
    out_dir: Path
    planned: int = 0
    already_done: int = 0
    ran: int = 0
    failures: list[EpisodeFailure] = field(default_factory=list)
    interrupted: bool = False
    #: Stored retryable provider errors run again in this call.
    retried: int = 0
    #: Where ``force_new`` moved the previous contents of the run directory.
    set_aside: Path | None = None

    @property
    def results_path(self) -> Path:
        return self.out_dir / RESULTS


def plan(suite: Suite, modes: Sequence[str], repeats: int) -> list[EpisodeKey]:
    """Every episode, interleaving modes so both see the same conditions over time."""
    return [EpisodeKey(t.id, m, r) for r in range(repeats) for t in suite for m in modes]


def _local(runner: EpisodeRunner, keys: Sequence[EpisodeKey], concurrency: int,
           bar: Bar) -> Generator[EpisodeResult | EpisodeFailure, None, None]:
    """Episodes on a thread pool; on Ctrl-C, yields what is running as it finishes."""
    pool = ThreadPoolExecutor(max(1, concurrency), thread_name_prefix="codeact-eval")
    futures: list[Future[EpisodeResult | EpisodeFailure]] = [pool.submit(runner.run_safe, k) for k in keys]
    seen: set[int] = set()
    try:
        try:
            for fut in as_completed(futures):
                seen.add(id(fut))
                outcome = fut.result()
                yield outcome
                if isinstance(outcome, EpisodeFailure) and outcome.fatal:
                    break
        except KeyboardInterrupt:
            running = [f for f in futures if not f.cancel() and id(f) not in seen]
            bar.note(f"interrupted: finishing {len(running)} running episode(s); Ctrl-C again to abandon them")
            try:
                for fut in as_completed(running):
                    yield fut.result()
            except KeyboardInterrupt:
                pass
            raise
    finally:
        pool.shutdown(wait=False, cancel_futures=True)


def run_suite(
    suite: str | Suite,
    model: str | ModelSpec = "scripted",
    *,
    out: str | Path,
    modes: Sequence[str] = MODES,
    repeats: int = 1,
    concurrency: int = 4,
    engine: Engine = "local",
    sandbox: SandboxConfig | None = None,
    budget: dict[str, Any] | None = None,
    tasks: Iterable[str] | None = None,
    limit: int | None = None,
    progress: bool = True,
    provider: ModelProvider | None = None,
    system_prompt: str | None = None,
    stream: bool = False,
    ray_address: str | None = None,
    workers: int = 2,
    force_new: bool = False,
    retry_errors: bool = True,
    check: CheckMode = "warn",
) -> RunSummary:
    """Run (or resume) an experiment into ``out``; see the module docstring.

    ``concurrency``: episodes at once (times ``workers`` with ``engine="ray"``, whose episodes run
    their code actions on the sessions of a Ray cluster: joined at ``ray_address``, else started on
    loopback; the agent loops and model calls stay in this process).
    ``limit`` runs at most that many new episodes; ``provider`` overrides the model's provider
    (tests use it to watch the scripted server). A resume must have the run's
    fingerprint (else ``ValueError`` with the differences); ``force_new`` moves what ``out`` holds
    to ``OUT.old-<time>`` and starts afresh. ``retry_errors``: episodes stored with a retryable
    provider error are run again (the new result replaces them). ``check``: the check before each
    code action (``Runtime(check=...)``); ``block`` against ``off`` measures what it saves (a rejected
    action counts in the episode's ``check`` error layer).
    """
    spec = model if isinstance(model, ModelSpec) else ModelSpec(model)
    task_ids = tuple(tasks) if tasks is not None else None
    suite_obj = (suite.select(task_ids) if isinstance(suite, Suite) else load_suite(suite, task_ids))
    bad = [m for m in modes if m not in MODES]
    if bad or not modes:
        raise ValueError(f"modes must be among {MODES}, got {list(modes)}")
    out_dir = Path(out)
    set_aside = None
    if force_new and out_dir.exists():
        with _exclusive(out_dir):  # not from under a run writing there now
            set_aside = _set_aside(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    with _exclusive(out_dir):
        config = RunConfig(suite_ref=suite_obj.ref or suite_obj.name, model=spec, out_dir=str(out_dir.resolve()),
                           sandbox=sandbox or SandboxConfig(), tasks=task_ids, budget=dict(budget or {}),
                           system_prompt=system_prompt, stream=stream, check=check)
        config = replace(config, fingerprint=fingerprint(config, suite_obj))
        meta = RunMeta(suite=suite_obj.name, suite_ref=config.suite_ref, model=spec.name, modes=list(modes),
                       repeats=repeats, tasks=suite_obj.ids, budget=config.budget, backend=config.sandbox.backend,
                       engine=engine, fingerprint=config.fingerprint, fingerprint_id=fingerprint_id(config.fingerprint))
        meta = meta.merge(RunMeta.read(out_dir))
        meta.write(out_dir)

        summary = RunSummary(out_dir=out_dir, set_aside=set_aside)
        with ResultsStore(out_dir / RESULTS) as store:
            keys = plan(suite_obj, modes, repeats)
            done = store.done(retry_errors=retry_errors)
            pending = [k for k in keys if k not in done]
            summary.retried = len(store.done() & set(pending))
            summary.planned, summary.already_done = len(keys), len(keys) - len(pending)
            if limit is not None:
                pending = pending[: max(0, limit)]
            rates = ModeRates(modes)
            wanted = set(keys)
            for r in store.results():
                if r.key in wanted and r.key in done:
                    rates.add(r.mode, r.correct)
            label = f"{suite_obj.name} · {spec.name}"
            with Bar(len(keys), label, enabled=progress, completed=summary.already_done, status=str(rates),
                     failed_label="wrong") as bar:  # wrong answers and harness failures
                cluster = _cluster(ray_address, workers) if engine == "ray" else None
                runner = EpisodeRunner(config, suite=suite_obj, provider=provider, cluster=cluster)
                runs_at_once = concurrency * (workers if engine == "ray" else 1)
                outcomes = _local(runner, pending, runs_at_once, bar)
                try:
                    _consume(outcomes, store, rates, bar, summary, config.fingerprint)
                except KeyboardInterrupt:
                    summary.interrupted = True
                    # Ctrl-C may land here rather than while the episodes are awaited: hand it to the
                    # engine, which then finishes (and yields) what is running, as when it lands there.
                    with contextlib.suppress(KeyboardInterrupt, StopIteration):
                        first = outcomes.throw(KeyboardInterrupt())
                        _consume(itertools.chain([first], outcomes), store, rates, bar, summary, config.fingerprint)
                finally:
                    outcomes.close()  # cancels what has not started
                    runner.close()
                    if cluster is not None:
                        cluster.shutdown()  # stops Ray if this run started it
    fatal = [f for f in summary.failures if f.fatal]
    if fatal:
        raise SandboxUnavailable(fatal[0].error)
    return summary


def _cluster(address: str | None, workers: int) -> Any:
    """The Ray cluster ``engine="ray"`` runs the episodes' code actions on (``codeact.cluster``):
    joined at ``address``, else started on loopback."""
    from ..cluster import RayCluster

    return RayCluster(address, num_cpus=max(2, workers))


@contextlib.contextmanager
def _exclusive(out_dir: Path) -> Iterator[None]:
    """One run at a time in a directory: a second one would run every episode again beside it and
    store each twice. The lock is the OS's (``flock``): a killed run holds it no more."""
    handle = (out_dir / _LOCK).open("a")
    try:
        fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        handle.close()
        raise ValueError(f"another run is writing to {out_dir} now; wait for it to end, "
                         "or give another --out") from None
    try:
        yield
    finally:
        handle.close()  # releases the lock


def _set_aside(out_dir: Path) -> Path | None:
    """Move a run directory's contents to ``OUT.old-<UTC time>`` (nothing is deleted)."""
    if not out_dir.exists() or not any(p.name != _LOCK for p in out_dir.iterdir()):
        return None
    stamp = datetime.now(timezone.utc).strftime("%Y%m%dT%H%M%S")
    target = out_dir.with_name(f"{out_dir.name}.old-{stamp}")
    n = 1
    while target.exists():
        n += 1
        target = out_dir.with_name(f"{out_dir.name}.old-{stamp}-{n}")
    out_dir.rename(target)
    return target


def _consume(outcomes: Iterator[EpisodeResult | EpisodeFailure], store: ResultsStore, rates: ModeRates,
             bar: Bar, summary: RunSummary, fp: dict[str, Any]) -> None:
    for outcome in outcomes:
        if isinstance(outcome, EpisodeFailure):
            summary.failures.append(outcome)
            record_failure(summary.out_dir, outcome.key, outcome.error, fingerprint_id(fp, outcome.key.task_id))
            bar.note(f"harness failure in {outcome.key}: {outcome.error}")
            bar.advance(failed=True, status=str(rates))
            if outcome.fatal:
                return
            continue
        if store.append(outcome):
            summary.ran += 1
            rates.add(outcome.mode, outcome.correct)
            bar.advance(failed=not outcome.correct, status=str(rates))
