"""The fingerprint of a run: everything that changes how an episode runs, so that a run directory
never mixes configurations.

``run.json`` keeps the full fingerprint; every episode records its short ``id`` (a hash). A resume
must match it exactly, with two exceptions that widen a run without changing any episode: more
tasks, modes or repeats may be added (they are the *plan*, recorded beside the fingerprint), and
tasks already in the run must hash the same (instruction, expected answer, checker, budget, tags,
reference replies, and the code of the checker and of the tool factory: their source, and what they
reach through closures, defaults and module globals, plain data included).
"""

from __future__ import annotations

import datetime
import decimal
import enum
import fractions
import functools
import hashlib
import inspect
import json
import re
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from ._run_config import RunConfig
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


_PLAIN = (type(None), bool, int, float, complex, str, bytes)
#: How the modules of suite files loaded by path are named (``suite._import_path``): per process.
_SUITE_MODULE = "_codeact_suite_"
_MAX_DATA = 100_000  # elements of a data value looked at (a huge table is hashed by its first ones)


def _data(value: Any, budget: list[int]) -> Any:
    """A plain data value as JSON-able data that is the same in every process; None when the value
    is not plain data (an object's repr may hold its address: never part of a fingerprint)."""
    budget[0] -= 1
    if budget[0] < 0:
        return "…"
    if isinstance(value, _PLAIN):
        return [type(value).__name__, repr(value)] if isinstance(value, (float, complex, bytes)) else value
    if isinstance(value, (list, tuple)):
        return [type(value).__name__, [_data(v, budget) for v in value]]
    if isinstance(value, (set, frozenset)):  # in an order of their own first: the budget then cuts alike
        return ["set", [_data(v, budget) for v in sorted(value, key=_order)]]
    if isinstance(value, Mapping):
        return ["map", [[_data(k, budget), _data(v, budget)] for k, v in sorted(value.items(), key=_order_item)]]
    if isinstance(value, re.Pattern):
        return ["pattern", value.pattern if isinstance(value.pattern, str) else repr(value.pattern), value.flags]
    if isinstance(value, (enum.Enum, decimal.Decimal, fractions.Fraction, datetime.date, datetime.time,
                          datetime.timedelta)):
        return repr(value)  # no address in these reprs
    return None


def _order(value: Any) -> str:
    """A sort key the same in every process (a set's iteration order is not)."""
    return json.dumps(_data(value, [_MAX_DATA]), default=str, sort_keys=True)


def _order_item(item: tuple[Any, Any]) -> str:
    return _order(item[0])


def _name(obj: Any) -> str:
    """``module.qualname``; a suite file's module, whose name is made per process, as ``suite``."""
    module = str(getattr(obj, "__module__", None) or type(obj).__module__)
    qualname = str(getattr(obj, "__qualname__", None) or type(obj).__qualname__)
    return f"{'suite' if module.startswith(_SUITE_MODULE) else module}.{qualname}"


def _identity(obj: Any, depth: int = 0, seen: set[int] | None = None) -> Any:
    """What a function (a checker, a tool factory) computes with: its source, and, followed a few
    levels, the functions and plain data it reaches through its closure, its default arguments
    and the module globals it names. A checker made by ``custom(fn)`` is ``fn``'s; a module-level
    table a tool reads, or a tolerance a closure captured, is part of it."""
    seen = set() if seen is None else seen
    if id(obj) in seen or depth > 4:
        return None
    seen.add(id(obj))
    if isinstance(obj, functools.partial):
        return ["partial", _identity(obj.func, depth + 1, seen), _data(obj.args, [_MAX_DATA]),
                _data(obj.keywords, [_MAX_DATA])]
    fn = getattr(obj, "__func__", obj)  # a bound method: its function
    if not inspect.isfunction(fn):
        inner = getattr(obj, "fn", None)  # a Check, a Tool: the function it calls
        if inner is not None and inner is not obj:
            return ["wraps", getattr(obj, "name", None), _identity(inner, depth + 1, seen)]
        data = _data(obj, [_MAX_DATA])
        if data is not None:
            return data
        return _name(obj)
    try:
        source: str = inspect.getsource(fn)
    except (OSError, TypeError):
        source = _name(fn)
    reached: dict[str, Any] = {}
    cells = zip(fn.__code__.co_freevars, fn.__closure__ or (), strict=False)
    values = [(f"closure:{name}", cell.cell_contents) for name, cell in cells if _filled(cell)]
    values += [(f"default:{i}", v) for i, v in enumerate(fn.__defaults__ or ())]
    values += [(f"kwdefault:{k}", v) for k, v in (fn.__kwdefaults__ or {}).items()]
    names = set(fn.__code__.co_names)
    for const in fn.__code__.co_consts:  # names used by nested functions and comprehensions
        if inspect.iscode(const):
            names.update(const.co_names)
    values += [(f"global:{n}", fn.__globals__[n]) for n in sorted(names) if n in fn.__globals__]
    for key, value in values:
        if inspect.ismodule(value) or isinstance(value, type):
            continue  # an imported module or class: its name is in the source already
        reached[key] = _identity(value, depth + 1, seen)
    return [source, reached]


def _filled(cell: Any) -> bool:
    try:
        _ = cell.cell_contents
    except ValueError:  # a cell not assigned yet
        return False
    return True


def task_hash(task: Task) -> str:
    """A hash of what defines a task: change any of it and old episodes are no longer comparable."""
    checker = task.checker
    return _digest({
        "instruction": task.instruction, "expected": task.expected, "check": checker.name,
        "check_code": _identity(checker), "budget": dict(task.budget), "tags": list(task.tags),
        "scripts": {m: list(s) for m, s in task.scripts.items()}, "tools": _identity(task.tools),
    })


def _version() -> str:
    from .._version import __version__

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
        **({"check": config.check} if config.check != "warn" else {}),  # the default keeps older runs' ids
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
