"""Where every planned episode went, which episodes the rates are computed on, and where the
token numbers come from.

An episode is *finished* when it has a model outcome (answered, incomplete or error). A provider
error that may pass (``retryable``) is not an outcome: it is counted apart and re-run on resume.
A harness failure (``failures.jsonl``) leaves the episode pending. With both modes present, rates
are computed on the *paired set*: the (task, repeat) episodes finished in both modes; anything
finished outside it is reported, with a warning, and left out of the comparison.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

from .results_store import EpisodeResult, RunMeta
from .suite import EpisodeKey

__all__ = ["SCRIPTED_TOKENS", "Accounting", "account", "token_source"]

SCRIPTED_TOKENS = "estimated (characters ÷ 4, scripted)"


@dataclass
class Accounting:
    """One mode's episodes, from plan to outcome."""

    # Alike by design (the counters of agent.Episode, ModeStats, viewer's EpisodeTimeline): ModeStats
    # copies these counters flat into summary.json; the others count other things.
    mode: str
    planned: int = 0
    finished: int = 0
    in_comparison: int = 0
    harness_failures: int = 0
    provider_errors: int = 0
    incomplete: int = 0
    error_episodes: int = 0
    not_run: int = 0
    usage_unknown_calls: int = 0
    excluded: list[str] = field(default_factory=list)


def token_source(meta: RunMeta | None, results: Sequence[EpisodeResult]) -> str:
    """Where the token figures come from; said next to every token number and plot."""
    if meta is not None and meta.model.startswith("scripted"):
        return SCRIPTED_TOKENS
    unknown = sum(r.usage_unknown for r in results)
    if unknown:
        return f"provider usage ({unknown} model call(s) reported none: tokens of those episodes unknown)"
    return "provider usage"


def account(results: Sequence[EpisodeResult], meta: RunMeta | None, failures: Mapping[EpisodeKey, str],
            modes: Sequence[str]) -> tuple[dict[str, Accounting], list[EpisodeResult], list[str]]:
    """Per-mode accounting, the episodes the comparison uses, and the warnings to print."""
    finished = [r for r in results if not r.retryable]
    done = {r.key for r in finished}
    compared = list(finished)
    warnings: list[str] = []
    if {"code", "json"} <= set(modes):
        keys = {m: {(r.task_id, r.repeat) for r in finished if r.mode == m} for m in ("code", "json")}
        both = keys["code"] & keys["json"]
        compared = [r for r in finished if r.mode not in ("code", "json") or (r.task_id, r.repeat) in both]
    in_set = {r.key for r in compared}
    out: dict[str, Accounting] = {}
    for mode in modes:
        acc = Accounting(mode)
        mine = [r for r in finished if r.mode == mode]
        acc.finished = len(mine)
        acc.in_comparison = sum(1 for r in mine if r.key in in_set)
        acc.excluded = sorted(str(r.key) for r in mine if r.key not in in_set)
        retrying = {r.key for r in results if r.mode == mode and r.retryable}
        acc.provider_errors = len(retrying)
        # Each unfinished episode counts once: one whose provider error is stored and whose retry
        # then failed in the harness is not a second episode.
        acc.harness_failures = sum(1 for k in failures if k.mode == mode and k not in done and k not in retrying)
        acc.incomplete = sum(1 for r in mine if r.status == "incomplete")
        acc.error_episodes = sum(1 for r in mine if r.status == "error")
        acc.usage_unknown_calls = sum(r.usage_unknown for r in mine)
        if meta is not None and mode in meta.modes and meta.tasks:
            acc.planned = len(meta.tasks) * meta.repeats
        else:
            acc.planned = acc.finished + acc.provider_errors + acc.harness_failures
        acc.not_run = max(0, acc.planned - acc.finished - acc.provider_errors - acc.harness_failures)
        out[mode] = acc
        if acc.excluded:
            warnings.append(f"{mode}: {len(acc.excluded)} finished episode(s) have no counterpart in the other mode "
                            f"and are left out of the comparison ({', '.join(acc.excluded[:5])}"
                            f"{', …' if len(acc.excluded) > 5 else ''})")
        for count, what in ((acc.harness_failures, "harness failure(s) (see failures.jsonl; re-run to retry)"),
                            (acc.provider_errors, "retryable provider error(s) (re-run to retry)"),
                            (acc.not_run, "planned episode(s) not run yet")):
            if count:
                warnings.append(f"{mode}: {count} {what}")
    return out, compared, warnings
