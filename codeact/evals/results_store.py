"""A run directory: ``run.json`` (what was run) and ``results.jsonl`` (one line per finished episode).

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

__all__ = ["EpisodeResult", "ResultsStore", "RunMeta", "load_run"]

RESULTS = "results.jsonl"
META = "run.json"


class EpisodeResult(BaseModel):
    """One finished episode: its key, whether the answer was correct, and the Episode's fields."""

    model_config = ConfigDict(extra="allow")

    task_id: str
    mode: str
    repeat: int
    correct: bool
    suite: str = ""
    model: str = ""
    answer: Any = None
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
    records: list[dict[str, Any]] = Field(default_factory=list)
    trace_path: str | None = None
    worker: str = ""
    finished_at: str = ""

    @property
    def key(self) -> EpisodeKey:
        return EpisodeKey(self.task_id, self.mode, self.repeat)

    @classmethod
    def from_episode(cls, key: EpisodeKey, episode: Any, *, correct: bool, suite: str, expected: Any,
                     worker: str) -> EpisodeResult:
        """Build from an agent's ``Episode`` (every field of it is kept)."""
        fields = episode.model_dump(mode="json") if isinstance(episode, BaseModel) else dict(episode)
        fields.update(task_id=key.task_id, mode=key.mode, repeat=key.repeat, correct=correct, suite=suite,
                      expected=_jsonable(expected), worker=worker,
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
    """What a run directory holds results of; a resumed run must match suite and model."""

    suite: str
    suite_ref: str
    model: str
    modes: list[str]
    repeats: int
    budget: dict[str, Any] = Field(default_factory=dict)
    backend: str = ""
    engine: str = "local"
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
        """This run's meta resuming ``previous``: same suite and model, modes/repeats widened."""
        if previous is None:
            return self
        if (previous.suite, previous.model) != (self.suite, self.model):
            raise ValueError(f"the run directory holds results of suite {previous.suite!r} with model "
                             f"{previous.model!r}, not {self.suite!r} with {self.model!r}: use another --out")
        modes = previous.modes + [m for m in self.modes if m not in previous.modes]
        return self.model_copy(update={"modes": modes, "repeats": max(self.repeats, previous.repeats),
                                       "created_at": previous.created_at})


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

    def done(self) -> set[EpisodeKey]:
        with self._lock:
            return set(self._results)

    def results(self) -> list[EpisodeResult]:
        with self._lock:
            return list(self._results.values())

    def append(self, result: EpisodeResult) -> bool:
        """Write one result (flushed and fsynced); False if that episode is already stored."""
        with self._lock:
            if result.key in self._results:
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
