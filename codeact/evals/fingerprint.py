"""The fingerprint of a run: everything that changes how an episode runs, so that a run directory
never mixes configurations.

``run.json`` keeps the full fingerprint; every episode records its short ``id`` (a hash). A resume
must match it exactly, with two exceptions that widen a run without changing any episode: more
tasks, modes or repeats may be added (they are the *plan*, recorded beside the fingerprint), and
tasks already in the run must hash the same (instruction, expected answer, checker, budget, tags,
reference replies, the source of the tool factory and of a custom checker).
"""

from __future__ import annotations

import hashlib
import inspect
import json
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from ._episode import RunConfig
    from .suite import Suite, Task

__all__ = ["ANSWER_PROTOCOL", "diff", "fingerprint", "fingerprint_id", "task_hash"]

#: Bump when the way answers are asked for or graded changes (grades of old runs would differ).
ANSWER_PROTOCOL = "answer-line/1"


def _stable(value: Any) -> Any:
    """JSON for what json cannot encode; sets sorted, since their order changes between processes."""
    if isinstance(value, (set, frozenset)):
        return sorted(repr(v) for v in value)
    return repr(value)


def _digest(value: Any) -> str:
    try:
        text = json.dumps(value, sort_keys=True, default=_stable, ensure_ascii=False)
    except TypeError:  # keys of mixed types cannot be sorted
        text = json.dumps(value, default=_stable, ensure_ascii=False)
    return hashlib.sha256(text.encode("utf-8")).hexdigest()[:16]


def _source(obj: Any) -> str:
    """The source of a function (closures: the inner function), else its qualified name."""
    fn = getattr(obj, "fn", obj)
    try:
        return inspect.getsource(fn)
    except (OSError, TypeError):
        return f"{getattr(fn, '__module__', '')}.{getattr(fn, '__qualname__', type(fn).__name__)}"


def task_hash(task: Task) -> str:
    """A hash of what defines a task: change any of it and old episodes are no longer comparable."""
    checker = task.checker
    return _digest({
        "instruction": task.instruction, "expected": task.expected, "check": checker.name,
        "check_source": _source(checker), "budget": dict(task.budget), "tags": list(task.tags),
        "scripts": {m: list(s) for m, s in task.scripts.items()}, "tools": _source(task.tools),
    })


def _version() -> str:
    from .. import __version__

    return str(__version__)


def fingerprint(config: RunConfig, suite: Suite) -> dict[str, Any]:
    """The configuration an episode runs under (see the module docstring)."""
    model = config.model
    return {
        "suite_ref": config.suite_ref,
        "tasks": {t.id: task_hash(t) for t in suite},
        "model": model.spec, "wire": model.wire, "base_url": model.base_url,
        "budget": dict(sorted(config.budget.items())),
        "backend": config.sandbox.backend,
        "sandbox": config.sandbox.model_dump(mode="json", exclude={"backend"}),
        "stream": config.stream,
        "system_prompt": _digest(config.system_prompt) if config.system_prompt is not None else None,
        "answer_protocol": ANSWER_PROTOCOL,
        "codeact_version": _version(),
    }


def fingerprint_id(fp: Mapping[str, Any], task_id: str | None = None) -> str:
    """The short id episodes record: the run's fingerprint without the task table, plus their own task's hash."""
    shared = {k: v for k, v in fp.items() if k != "tasks"}
    return _digest([shared, fp.get("tasks", {}).get(task_id) if task_id else None])


def _flat(value: Any, prefix: str = "") -> dict[str, Any]:
    if isinstance(value, Mapping):
        out: dict[str, Any] = {}
        for k, v in value.items():
            out.update(_flat(v, f"{prefix}{k}."))
        return out
    return {prefix.rstrip("."): value}


def diff(old: Mapping[str, Any], new: Mapping[str, Any]) -> list[str]:
    """What differs, one ``key: old → new`` per field; tasks only in one of the two do not count."""
    old_tasks, new_tasks = dict(old.get("tasks") or {}), dict(new.get("tasks") or {})
    a = _flat({k: v for k, v in old.items() if k != "tasks"})
    b = _flat({k: v for k, v in new.items() if k != "tasks"})
    changes = [f"{k}: {a.get(k, '(none)')!r} → {b.get(k, '(none)')!r}" for k in sorted(a.keys() | b.keys())
               if a.get(k) != b.get(k)]
    changed_tasks = sorted(t for t in old_tasks.keys() & new_tasks.keys() if old_tasks[t] != new_tasks[t])
    if changed_tasks:
        changes.append(f"task content changed: {', '.join(changed_tasks)}")
    return changes
