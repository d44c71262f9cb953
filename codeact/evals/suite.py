"""Tasks and suites: what an experiment runs, and how to load a suite by name, module or path.

A :class:`Task` carries an instruction, a *factory* for its tools (each episode gets fresh tool
state), a checker, optional budget overrides, and optional reference model responses per mode
(``scripts``: what a competent model would answer; served by the fake model server offline).

A suite is a Python module (or package, or directory) exposing ``SUITE`` (a :class:`Suite`),
``suite()`` returning one, or ``TASKS`` (a list of tasks). A directory without ``suite.py`` /
``__init__.py`` gathers ``TASKS`` (or ``TASK``) from each of its ``*.py`` files, in name order.
"""

from __future__ import annotations

import importlib
import importlib.util
import re
import sys
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from types import ModuleType
from typing import Any, Literal, NamedTuple

from pydantic import ValidationError

from ..runtime.toolset import Toolset
from .checks import Check, custom, exact

__all__ = ["MODES", "EpisodeKey", "Mode", "Suite", "Task", "load_suite"]

Mode = Literal["code", "json"]
MODES: tuple[Mode, ...] = ("code", "json")
_ID = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]*$")


class EpisodeKey(NamedTuple):
    """One episode of an experiment: a task, a mode, a repeat number (0-based)."""

    task_id: str
    mode: str
    repeat: int

    def __str__(self) -> str:
        return f"{self.task_id}|{self.mode}|{self.repeat}"

    @classmethod
    def parse(cls, text: str) -> EpisodeKey:
        task_id, mode, repeat = text.rsplit("|", 2)
        return cls(task_id, mode, int(repeat))


@dataclass(frozen=True)
class Task:
    """One task. ``tools`` is called once per episode and returns that episode's tools."""

    id: str
    instruction: str
    tools: Callable[[], Toolset | Iterable[Any]]
    expected: Any = None
    #: A :class:`Check`, or a predicate given the typed answer (:func:`.checks.decode`).
    check: Check | Callable[[Any], bool] | None = None
    #: Overrides of the run's Budget fields for this task (e.g. ``{"max_turns": 4}``).
    budget: Mapping[str, Any] = field(default_factory=dict)
    #: Reference model responses per mode, in the FakeModelServer's neutral entry form.
    scripts: Mapping[str, Sequence[Any]] = field(default_factory=dict)
    tags: tuple[str, ...] = ()
    #: Makes the episode's agent, ``agent(mode, model, tools, **options)`` (a multi-turn driver);
    #: the instruction then goes to it as it is, without the answer-format sentence.
    agent: Callable[..., Any] | None = None

    def __post_init__(self) -> None:
        if not isinstance(self.id, str) or not _ID.match(self.id):
            raise ValueError(f"task id {self.id!r}: use letters, digits, '_', '.' and '-' only")
        if not isinstance(self.instruction, str) or not self.instruction.strip():
            raise TypeError(f"task {self.id!r}: instruction must be a non-empty string")
        if isinstance(self.tags, str) or not all(isinstance(t, str) for t in self.tags):
            raise TypeError(f"task {self.id!r}: tags must be a tuple of strings, not {self.tags!r}")
        if any(isinstance(replies, str) for replies in self.scripts.values()):
            raise TypeError(f"task {self.id!r}: scripts map each mode to a list of replies, not to one string")
        if not callable(self.tools):
            raise TypeError(f"task {self.id!r}: tools must be a factory (a callable returning the tools)")
        if self.check is None and self.expected is None:
            raise ValueError(f"task {self.id!r}: give an expected answer or a check")
        if self.check is not None and not callable(self.check):  # else every answer is graded wrong, silently
            raise TypeError(f"task {self.id!r}: check must be a Check or a predicate, not {type(self.check).__name__}")
        if self.budget:  # a misspelt field would otherwise fail every episode of the task, at run time
            from ..agent.episode import Budget

            try:
                Budget(**self.budget)
            except ValidationError as exc:
                first = exc.errors()[0]
                where = ".".join(map(str, first["loc"]))
                raise ValueError(f"task {self.id!r}: budget field {where!r}: {first['msg']}") from None
            except TypeError as exc:  # keys that are not names
                raise ValueError(f"task {self.id!r}: budget: {exc}") from None
        unknown = set(self.scripts) - set(MODES)
        if unknown:
            raise ValueError(f"task {self.id!r}: scripts for unknown modes {sorted(unknown)}; modes are {MODES}")

    @property
    def checker(self) -> Check:
        if isinstance(self.check, Check):
            return self.check
        if self.check is not None:  # a plain predicate gets the typed answer too
            return custom(self.check, getattr(self.check, "__name__", "custom"))
        return exact(self.expected)

    def make_tools(self) -> Toolset:
        """Fresh tools for one episode."""
        made = self.tools()
        return made if isinstance(made, Toolset) else Toolset(list(made))

    def grade(self, answer: Any) -> bool:
        return self.checker(answer)


@dataclass
class Suite:
    """An ordered set of tasks with unique ids. ``ref`` reloads it elsewhere (a Ray worker)."""

    name: str
    tasks: list[Task]
    description: str = ""
    ref: str = ""

    def __post_init__(self) -> None:
        seen: set[str] = set()
        for i, task in enumerate(self.tasks):
            if not isinstance(task, Task):
                raise ValueError(f"suite {self.name!r}: item {i} of its tasks is a {type(task).__name__}, not a Task")
            if task.id in seen:
                raise ValueError(f"suite {self.name!r}: duplicate task id {task.id!r}")
            seen.add(task.id)
        self._by_id = {t.id: t for t in self.tasks}

    def __getitem__(self, task_id: str) -> Task:
        try:
            return self._by_id[task_id]
        except KeyError:
            raise KeyError(f"suite {self.name!r} has no task {task_id!r}") from None

    def __iter__(self) -> Iterator[Task]:
        return iter(self.tasks)

    def __len__(self) -> int:
        return len(self.tasks)

    @property
    def ids(self) -> list[str]:
        return [t.id for t in self.tasks]

    def select(self, ids: Iterable[str] | None = None) -> Suite:
        """The tasks whose id or tag is in ``ids`` (all when None), in suite order."""
        if ids is None:
            return self
        wanted = set(ids)
        unknown = wanted - set(self.ids) - {tag for t in self.tasks for tag in t.tags}
        if unknown:
            raise KeyError(f"suite {self.name!r} has no task or tag {sorted(unknown)}")
        tasks = [t for t in self.tasks if t.id in wanted or wanted & set(t.tags)]
        return Suite(self.name, tasks, self.description, self.ref)


def _import_path(path: Path) -> ModuleType:
    resolved = path.resolve()
    target = resolved / "__init__.py" if resolved.is_dir() else resolved
    try:
        stat = target.stat()
        version = f"{stat.st_mtime_ns:x}_{stat.st_size:x}"  # an edited file is imported again
    except OSError:
        version = "0"
    name = f"_codeact_suite_{re.sub(r'[^A-Za-z0-9_]', '_', resolved.stem)}_{abs(hash(str(resolved))):x}_{version}"
    if name in sys.modules:
        return sys.modules[name]
    spec = importlib.util.spec_from_file_location(
        name, target, submodule_search_locations=[str(resolved)] if resolved.is_dir() else None
    )
    if spec is None or spec.loader is None:
        raise ValueError(f"cannot load suite file {path}")
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    try:
        spec.loader.exec_module(module)
    except Exception as exc:  # the suite's own error, in one line (the chain keeps its traceback)
        sys.modules.pop(name, None)
        where = f", line {exc.lineno}" if isinstance(exc, SyntaxError) and exc.lineno else ""
        raise ValueError(f"suite file {path}{where}: {type(exc).__name__}: {exc}") from exc
    except BaseException:
        sys.modules.pop(name, None)
        raise
    return module


def _from_module(module: ModuleType, name: str, ref: str) -> Suite:
    found: Any = getattr(module, "SUITE", None)
    if found is None and callable(getattr(module, "suite", None)):
        found = module.suite()
    if found is None and hasattr(module, "TASKS"):
        if not isinstance(module.TASKS, (list, tuple)):
            raise ValueError(f"{ref}: TASKS must be a list of Task, not a {type(module.TASKS).__name__}")
        found = Suite(name, list(module.TASKS), (module.__doc__ or "").strip().split("\n")[0])
    if not isinstance(found, Suite):
        raise ValueError(f"{ref}: a suite module defines SUITE, suite() or TASKS")
    if not found.tasks:
        raise ValueError(f"{ref}: the suite has no tasks")
    found.ref = ref
    return found


def _from_directory(path: Path, ref: str) -> Suite:
    for entry in ("suite.py", "__init__.py"):
        if (path / entry).is_file():
            module = _import_path(path / entry if entry == "suite.py" else path)
            return _from_module(module, path.name, ref)
    tasks: list[Task] = []
    for file in sorted(path.glob("*.py")):
        if file.name.startswith("_"):
            continue
        module = _import_path(file)
        tasks.extend(getattr(module, "TASKS", None) or ([module.TASK] if hasattr(module, "TASK") else []))
    if not tasks:
        raise ValueError(f"{path}: no tasks found (define TASKS in its .py files, or a suite.py)")
    return Suite(path.name, tasks, ref=ref)


def load_suite(ref: str, tasks: Sequence[str] | None = None) -> Suite:
    """A suite by built-in name (``weather``, ``data``, ``multitool``, ``bfcl-multi-turn[:CATEGORY]``),
    ``.py`` path, directory or dotted module; ``tasks`` keeps those task ids or tags only."""
    from .suites import BUILTIN

    path = Path(ref)
    builtin, _, variant = ref.partition(":")
    if ref in BUILTIN:
        suite = _from_module(importlib.import_module(BUILTIN[ref]), ref, ref)
    elif variant and builtin in BUILTIN and not path.exists():  # ``bfcl-multi-turn:base``: suite(variant)
        module = importlib.import_module(BUILTIN[builtin])
        if not callable(getattr(module, "suite", None)):
            raise ValueError(f"suite {builtin!r} has no variants ({ref!r})")
        suite = module.suite(variant)
        suite.ref = ref
    elif path.is_dir():
        suite = _from_directory(path, str(path.resolve()))
    elif path.suffix == ".py" and path.is_file():
        suite = _from_module(_import_path(path), path.stem, str(path.resolve()))
    else:
        try:
            module = importlib.import_module(ref)
        except ImportError as exc:
            known = ", ".join(sorted(BUILTIN))
            raise ValueError(f"no suite {ref!r}: not a built-in ({known}), a path, or a module ({exc})") from None
        suite = _from_module(module, ref.rsplit(".", 1)[-1], ref)
    return suite.select(tasks)
