"""A run directory: ``run.json`` (what was run), ``results.jsonl`` (one line per finished episode)
and ``failures.jsonl`` (harness failures: episodes the harness could not finish, still pending).

The results file is append-only and flushed (and fsynced) per line, so a run killed at any point
keeps every episode that finished; a torn last line (killed mid-write) is cut off on open. A
re-run reads the file and skips the episodes it holds: no episode is run twice.
"""

from __future__ import annotations

import json
import os
import threading
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict, Field

from .suite import EpisodeKey

__all__ = ["EpisodeResult", "ResultsStore", "RunMeta", "load_failures", "load_run", "record_failure"]

RESULTS = "results.jsonl"
META = "run.json"
FAILURES = "failures.jsonl"


class EpisodeResult(BaseModel):
    """One finished episode: its key, whether the answer was correct, and the Episode's fields."""

    model_config = ConfigDict(extra="allow")

    # Alike by design (agent.Episode, whose fields it stores): the stored form keeps plain types and extra
    # fields, so results.jsonl files keep loading as Episode changes.
    task_id: str
    mode: str
    repeat: int
    correct: bool
    suite: str = ""
    model: str = ""
    answer: Any = None
    #: The typed value the answer was graded as (see :mod:`.answers`).
    answer_value: Any = None
    expected: Any = None
    status: str = "error"
    stop_reason: str = ""
    turns: int = 0
    model_calls: int = 0
    tokens_in: int = 0
    tokens_out: int = 0
    tool_calls: int = 0
    tool_errors: int = 0
    errors: dict[str, int] = Field(default_factory=dict)
    wall_s: float = 0.0
    #: Of ``wall_s``, the time spent starting the sandbox.
    sandbox_start_s: float = 0.0
    records: list[dict[str, Any]] = Field(default_factory=list)
    trace_path: str | None = None
    worker: str = ""
    finished_at: str = ""
    #: The provider failed in a way that may pass (connection, 5xx, 429 after the client's retries):
    #: not a model outcome; a resume runs the episode again (unless ``retry_errors=False``).
    retryable: bool = False
    #: Model calls whose reply carried no token usage (their tokens are unknown, not 0).
    usage_unknown: int = 0
    #: The id of the run fingerprint this episode ran under (see :mod:`.fingerprint`).
    fingerprint: str = ""

    @property
    def key(self) -> EpisodeKey:
        return EpisodeKey(self.task_id, self.mode, self.repeat)

    @classmethod
    def from_episode(cls, key: EpisodeKey, episode: Any, *, correct: bool, suite: str, expected: Any,
                     worker: str, fingerprint: str = "", **extra: Any) -> EpisodeResult:
        """Build from an agent's ``Episode`` (every field of it is kept)."""
        fields = episode.model_dump(mode="json") if isinstance(episode, BaseModel) else dict(episode)
        fields.update(extra)
        fields.update(task_id=key.task_id, mode=key.mode, repeat=key.repeat, correct=correct, suite=suite,
                      expected=_jsonable(expected), worker=worker, fingerprint=fingerprint,
                      finished_at=datetime.now(timezone.utc).isoformat(timespec="seconds"))
        fields["answer"] = _jsonable(fields.get("answer"))
        return cls.model_validate(fields)


def _jsonable(value: Any) -> Any:
    try:
        json.dumps(value)
        return value
    except (TypeError, ValueError):
        return repr(value)


class RunMeta(BaseModel):
    """What a run directory holds results of: the fingerprint every episode ran under, and the plan.

    A resume must have the same fingerprint (:func:`merge`); the plan (tasks, modes, repeats) may
    only grow.
    """

    suite: str
    suite_ref: str
    model: str
    modes: list[str]
    repeats: int
    #: The planned task ids (in suite order); with ``modes`` and ``repeats``, the planned episodes.
    tasks: list[str] = Field(default_factory=list)
    budget: dict[str, Any] = Field(default_factory=dict)
    backend: str = ""
    engine: str = "local"
    fingerprint: dict[str, Any] = Field(default_factory=dict)
    fingerprint_id: str = ""
    created_at: str = Field(default_factory=lambda: datetime.now(timezone.utc).isoformat(timespec="seconds"))

    def write(self, out_dir: Path) -> None:
        tmp = out_dir / (META + ".tmp")
        tmp.write_text(self.model_dump_json(indent=2) + "\n", encoding="utf-8")
        tmp.replace(out_dir / META)

    @classmethod
    def read(cls, out_dir: Path) -> RunMeta | None:
        path = out_dir / META
        return cls.model_validate_json(path.read_text(encoding="utf-8")) if path.is_file() else None

    def merge(self, previous: RunMeta | None) -> RunMeta:
        """This run's meta resuming ``previous``: the same fingerprint; tasks/modes/repeats widened.

        Raises ``ValueError`` with a one-line diff when the configurations differ.
        """
        from .fingerprint import diff

        if previous is None:
            return self
        if not previous.fingerprint:
            raise ValueError("the run directory was written without a run fingerprint (an older codeact): "
                             "use --force-new or another --out")
        changes = diff(previous.fingerprint, self.fingerprint)
        if changes:
            raise ValueError("the run directory holds results of another configuration (" + "; ".join(changes)
                             + "): use --force-new for a fresh directory, or another --out")
        modes = previous.modes + [m for m in self.modes if m not in previous.modes]
        tasks = previous.tasks + [t for t in self.tasks if t not in previous.tasks]
        fingerprint = {**self.fingerprint, "tasks": {**previous.fingerprint.get("tasks", {}),
                                                     **self.fingerprint.get("tasks", {})}}
        return self.model_copy(update={"modes": modes, "tasks": tasks, "repeats": max(self.repeats, previous.repeats),
                                       "fingerprint": fingerprint, "created_at": previous.created_at})


class ResultsStore:
    """``results.jsonl``: append one line per finished episode; thread-safe; skips duplicates."""

    def __init__(self, path: str | Path) -> None:
        self.path = Path(path)
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self._lock = threading.Lock()
        self.skipped_lines = 0
        self._results: dict[EpisodeKey, EpisodeResult] = {}
        self._repair_and_load()
        self._fh = self.path.open("a", encoding="utf-8")

    def _repair_and_load(self) -> None:
        if not self.path.exists():
            return
        data = self.path.read_bytes()
        if data and not data.endswith(b"\n"):  # killed mid-write: drop the torn line
            cut = data.rfind(b"\n") + 1
            with self.path.open("r+b") as fh:
                fh.truncate(cut)
            data = data[:cut]
        for line in data.decode("utf-8", errors="replace").splitlines():
            if not line.strip():
                continue
            try:
                result = EpisodeResult.model_validate_json(line)
            except ValueError:
                self.skipped_lines += 1
                continue
            self._results[result.key] = result

    def __contains__(self, key: object) -> bool:
        return key in self._results

    def __len__(self) -> int:
        return len(self._results)

    def done(self, *, retry_errors: bool = False) -> set[EpisodeKey]:
        """The stored episodes; with ``retry_errors``, without those that ended on a retryable provider error."""
        with self._lock:
            return {k for k, r in self._results.items() if not (retry_errors and r.retryable)}

    def results(self) -> list[EpisodeResult]:
        with self._lock:
            return list(self._results.values())

    def append(self, result: EpisodeResult) -> bool:
        """Write one result (flushed and fsynced); False if that episode is already stored.

        A stored retryable error is replaced (the later line wins when the file is read).
        """
        with self._lock:
            stored = self._results.get(result.key)
            if stored is not None and not stored.retryable:
                return False
            self._fh.write(result.model_dump_json() + "\n")
            self._fh.flush()
            os.fsync(self._fh.fileno())
            self._results[result.key] = result
            return True

    def close(self) -> None:
        with self._lock:
            if not self._fh.closed:
                self._fh.close()

    def __enter__(self) -> ResultsStore:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def record_failure(out_dir: str | Path, key: EpisodeKey, error: str, fingerprint: str = "") -> None:
    """Append a harness failure to ``failures.jsonl`` (the episode stays pending; the report shows it)."""
    line = json.dumps({"task_id": key.task_id, "mode": key.mode, "repeat": key.repeat, "error": error[:2000],
                       "fingerprint": fingerprint,
                       "at": datetime.now(timezone.utc).isoformat(timespec="seconds")}, ensure_ascii=False)
    with (Path(out_dir) / FAILURES).open("a", encoding="utf-8") as fh:
        fh.write(line + "\n")


def load_failures(out_dir: str | Path) -> dict[EpisodeKey, str]:
    """The last harness failure of each episode that has one (finished or not)."""
    path = Path(out_dir) / FAILURES
    out: dict[EpisodeKey, str] = {}
    if path.is_file():
        for line in path.read_text(encoding="utf-8", errors="replace").splitlines():
            try:
                row = json.loads(line)
                out[EpisodeKey(str(row["task_id"]), str(row["mode"]), int(row["repeat"]))] = str(row.get("error", ""))
            except (ValueError, KeyError, TypeError):
                continue
    return out


def load_run(out_dir: str | Path) -> tuple[RunMeta | None, list[EpisodeResult]]:
    """The meta and results of a run directory (read-only)."""
    out = Path(out_dir)
    results: dict[EpisodeKey, EpisodeResult] = {}
    path = out / RESULTS
    if path.is_file():
        for line in path.read_text(encoding="utf-8", errors="replace").splitlines():
            try:
                result = EpisodeResult.model_validate_json(line)
            except ValueError:
                continue
            results[result.key] = result
    return RunMeta.read(out), list(results.values())
