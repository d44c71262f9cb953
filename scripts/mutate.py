"""Mutation testing of codeact's pure-logic modules (``make mutate``; see docs/mutation.md).

Each mutant is one small change to one function (an operator, a comparison, a constant, a boolean
connective); the module's fast tests (``scripts/mutation.toml``) run against it and either fail
(killed) or pass (survived). The tests run in a forked child of a process that imported codeact
once, and the mutant is put in place by swapping the ``__code__`` of the live function objects, so
every reference to a function (``from x import f`` included) sees the mutant and nothing is
written to the tree.

    python scripts/mutate.py [MODULE ...] [--jobs N] [--list] [--json FILE]

Exit status 0 when every module's score reaches its ``min_score``.
"""

from __future__ import annotations

import argparse
import ast
import importlib
import inspect
import io
import json
import os
import signal
import sys
import time
import types
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import tomllib

ROOT = Path(__file__).resolve().parent.parent
CONFIG = ROOT / "scripts" / "mutation.toml"
#: A child's exit status when the mutant could not be put in place (pytest's own are 0 to 5).
_NOT_PLACED = 99

_BINOPS: dict[type, list[type]] = {
    ast.Add: [ast.Sub], ast.Sub: [ast.Add], ast.Mult: [ast.Div], ast.Div: [ast.Mult],
    ast.FloorDiv: [ast.Div], ast.Mod: [ast.Mult], ast.Pow: [ast.Mult], ast.LShift: [ast.RShift],
    ast.RShift: [ast.LShift], ast.BitAnd: [ast.BitOr], ast.BitOr: [ast.BitAnd], ast.BitXor: [ast.BitAnd],
}
_CMPOPS: dict[type, list[type]] = {
    ast.Lt: [ast.LtE], ast.LtE: [ast.Lt], ast.Gt: [ast.GtE], ast.GtE: [ast.Gt], ast.Eq: [ast.NotEq],
    ast.NotEq: [ast.Eq], ast.In: [ast.NotIn], ast.NotIn: [ast.In], ast.Is: [ast.IsNot], ast.IsNot: [ast.Is],
}
_SYMBOL = {ast.Add: "+", ast.Sub: "-", ast.Mult: "*", ast.Div: "/", ast.FloorDiv: "//", ast.Mod: "%",
           ast.Pow: "**", ast.LShift: "<<", ast.RShift: ">>", ast.BitAnd: "&", ast.BitOr: "|", ast.BitXor: "^",
           ast.Lt: "<", ast.LtE: "<=", ast.Gt: ">", ast.GtE: ">=", ast.Eq: "==", ast.NotEq: "!=",
           ast.In: "in", ast.NotIn: "not in", ast.Is: "is", ast.IsNot: "is not", ast.And: "and", ast.Or: "or"}


@dataclass(frozen=True)
class Mutant:
    """One change: the ``index``-th node of the module's walk, changed the ``variant``-th way."""

    index: int
    variant: int
    line: int
    col: int
    function: str  # the qualname of the outermost function it is in (whose code is swapped)
    what: str

    @property
    def ident(self) -> str:
        return f"{self.line}:{self.col} {self.what}"


def _variants(node: ast.AST) -> list[tuple[str, Any]]:
    """Ways to mutate ``node``: (description, a function applying it to a copy of the node)."""
    out: list[tuple[str, Any]] = []
    if isinstance(node, (ast.BinOp, ast.AugAssign)):
        for new in _BINOPS.get(type(node.op), []):
            out.append((f"{_SYMBOL[type(node.op)]} -> {_SYMBOL[new]}", lambda n, new=new: setattr(n, "op", new())))
    elif isinstance(node, ast.Compare):
        for i, op in enumerate(node.ops):
            for new in _CMPOPS.get(type(op), []):
                def apply(n: ast.Compare, i: int = i, new: type = new) -> None:
                    n.ops[i] = new()
                out.append((f"{_SYMBOL[type(op)]} -> {_SYMBOL[new]}", apply))
    elif isinstance(node, ast.BoolOp):
        new = ast.Or if isinstance(node.op, ast.And) else ast.And
        out.append((f"{_SYMBOL[type(node.op)]} -> {_SYMBOL[new]}", lambda n, new=new: setattr(n, "op", new())))
    elif isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.Not):
        out.append(("not x -> x", "unwrap"))
    elif isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.USub):
        out.append(("-x -> x", "unwrap"))
    elif isinstance(node, ast.Constant) and type(node.value) is bool:
        out.append((f"{node.value} -> {not node.value}", lambda n: setattr(n, "value", not n.value)))
    elif isinstance(node, ast.Constant) and type(node.value) in (int, float):
        out.append((f"{node.value!r} -> {node.value + 1!r}", lambda n: setattr(n, "value", n.value + 1)))
    elif isinstance(node, ast.Break):
        out.append(("break -> continue", "continue"))
    elif isinstance(node, ast.Continue):
        out.append(("continue -> break", "break"))
    return out


def _functions(tree: ast.Module) -> Iterator[tuple[str, ast.AST]]:
    """(qualname, node) of every top-level function and method (classes nest)."""
    def walk(body: list[ast.stmt], prefix: str) -> Iterator[tuple[str, ast.AST]]:
        for stmt in body:
            if isinstance(stmt, (ast.FunctionDef, ast.AsyncFunctionDef)):
                yield prefix + stmt.name, stmt
            elif isinstance(stmt, ast.ClassDef):
                yield from walk(stmt.body, f"{prefix}{stmt.name}.")
    yield from walk(tree.body, "")


def _docstrings(fn: ast.AST) -> set[int]:
    """ids of docstring nodes in ``fn`` (and in what it nests): never mutated."""
    out = set()
    for node in ast.walk(fn):
        body = getattr(node, "body", None)
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)) and body:
            first = body[0]
            if isinstance(first, ast.Expr) and isinstance(first.value, ast.Constant):
                out.add(id(first.value))
    return out


def mutants(source: str) -> list[Mutant]:
    tree = ast.parse(source)
    where = {}
    for qualname, fn in _functions(tree):
        skip = _docstrings(fn)
        for node in ast.walk(fn):
            if id(node) not in skip:
                where[id(node)] = qualname
    # Annotations are not executed (``from __future__ import annotations``), and the defaults and
    # decorators of a module-level function are evaluated once, at import: a new ``__code__`` does not
    # change them, so such a mutant could not be told from a survivor.
    unplaced: list[ast.AST] = []
    for node in ast.walk(tree):
        unplaced += [getattr(node, "annotation", None), getattr(node, "returns", None)]
    for _, fn in _functions(tree):
        assert isinstance(fn, (ast.FunctionDef, ast.AsyncFunctionDef))
        unplaced += [*fn.args.defaults, *fn.args.kw_defaults, *fn.decorator_list]
    for sub in unplaced:
        if sub is not None:
            for part in ast.walk(sub):
                where.pop(id(part), None)
    out = []
    for index, node in enumerate(ast.walk(tree)):
        qualname = where.get(id(node))
        if qualname is None:
            continue
        for variant, (what, _) in enumerate(_variants(node)):
            out.append(Mutant(index, variant, node.lineno, node.col_offset, qualname, what))
    return out


class _Apply(ast.NodeTransformer):
    def __init__(self, target: ast.AST, how: Any) -> None:
        self.target, self.how = target, how

    def visit(self, node: ast.AST) -> Any:
        if node is not self.target:
            return self.generic_visit(node)
        if self.how == "unwrap":
            return node.operand  # type: ignore[attr-defined]
        if self.how in ("continue", "break"):
            return ast.copy_location(ast.Continue() if self.how == "continue" else ast.Break(), node)
        self.how(node)
        return node


def mutated_code(source: str, filename: str, mutant: Mutant) -> types.CodeType:
    tree = ast.parse(source)
    node = list(ast.walk(tree))[mutant.index]
    tree = _Apply(node, _variants(node)[mutant.variant][1]).visit(tree)
    return compile(ast.fix_missing_locations(tree), filename, "exec", dont_inherit=True)


def _code_by_qualname(code: types.CodeType) -> dict[str, types.CodeType]:
    out = {}
    for const in code.co_consts:
        if isinstance(const, types.CodeType):
            out.setdefault(const.co_qualname, const)
            for name, sub in _code_by_qualname(const).items():
                out.setdefault(name, sub)
    return out


def _live_functions(module: types.ModuleType) -> dict[str, types.FunctionType]:
    """The module's functions and methods by qualname, unwrapped (properties, classmethods, wraps)."""
    out: dict[str, types.FunctionType] = {}

    def add(value: Any) -> None:
        for inner in (getattr(value, "__func__", None), getattr(value, "fget", None), getattr(value, "fset", None),
                      getattr(value, "__wrapped__", None)):
            if inner is not None:
                add(inner)
        if inspect.isfunction(value) and value.__module__ == module.__name__:
            out.setdefault(value.__qualname__, value)

    def visit(namespace: dict[str, Any], seen: set[int]) -> None:
        for value in list(namespace.values()):
            if isinstance(value, type) and value.__module__ == module.__name__ and id(value) not in seen:
                seen.add(id(value))
                visit(dict(vars(value)), seen)
            else:
                add(value)

    visit(vars(module), set())
    return out


def _run_child(module: types.ModuleType, source: str, mutant: Mutant | None, tests: list[str]) -> int:
    import pytest

    if mutant is not None:
        codes = _code_by_qualname(mutated_code(source, module.__file__ or "", mutant))
        live = _live_functions(module)
        fn = live.get(mutant.function)
        if fn is None or mutant.function not in codes:
            return _NOT_PLACED
        fn.__code__ = codes[mutant.function]
    devnull = os.open(os.devnull, os.O_WRONLY)
    os.dup2(devnull, 1)
    os.dup2(devnull, 2)
    sys.stdout = sys.stderr = io.TextIOWrapper(os.fdopen(1, "wb"))
    args = ["-x", "-q", "-p", "no:cacheprovider", "--no-header", "--assert=plain", "-o", "addopts="]
    return int(pytest.main([*args, *tests]))


def _preimport(tests: list[str]) -> None:
    """Import the test modules (and their conftest files) once, in the parent: every child's pytest then
    finds them in ``sys.modules`` and only collects (asserts stay plain: a failing one still fails)."""
    import hypothesis  # noqa: F401  (its pytest plugin imports it late, in every child otherwise)
    for test in tests:
        parts = Path(test).with_suffix("").parts
        for i in range(1, len(parts)):
            if (ROOT / Path(*parts[:i]) / "conftest.py").exists():
                importlib.import_module(".".join([*parts[:i], "conftest"]))
        importlib.import_module(".".join(parts))


@dataclass
class _Job:
    mutant: Mutant | None
    pid: int
    started: float


def module_mutants(module_name: str, exclude: list[str]) -> list[Mutant]:
    """The mutants of a module, but for those in the functions ``exclude`` names (qualnames)."""
    module = importlib.import_module(module_name)
    found = mutants(Path(module.__file__ or "").read_text())
    unknown = set(exclude) - {m.function for m in found}
    if unknown:
        raise SystemExit(f"{module_name}: exclude names no function with mutants: {', '.join(sorted(unknown))}")
    return [m for m in found if m.function not in exclude]


def run_module(module_name: str, tests: list[str], jobs: int, timeout_factor: float,
               only: set[str] | None = None, exclude: list[str] | None = None) -> dict[str, Any]:
    module = importlib.import_module(module_name)
    source = Path(module.__file__ or "").read_text()
    todo = [m for m in module_mutants(module_name, exclude or []) if only is None or m.ident in only]
    paths = [str(ROOT / t) for t in tests]
    _preimport(tests)

    def spawn(mutant: Mutant | None) -> _Job:
        pid = os.fork()
        if pid == 0:
            code = 1
            try:
                code = _run_child(module, source, mutant, paths)
            finally:
                os._exit(code)
        return _Job(mutant, pid, time.monotonic())

    start = time.monotonic()
    baseline = spawn(None)
    _, status = os.waitpid(baseline.pid, 0)
    took = time.monotonic() - start
    if os.waitstatus_to_exitcode(status) != 0:
        raise SystemExit(f"{module_name}: its tests fail without a mutant ({' '.join(tests)})")
    limit = max(5.0, took * timeout_factor)
    result: dict[str, Any] = {"module": module_name, "tests": tests, "baseline_s": round(took, 2),
                              "killed": 0, "timeout": 0, "survived": [], "not_applicable": 0}
    running: list[_Job] = []
    queue = list(todo)
    while queue or running:
        while queue and len(running) < jobs:
            running.append(spawn(queue.pop(0)))
        time.sleep(0.02)
        for job in list(running):
            pid, status = os.waitpid(job.pid, os.WNOHANG)
            if pid == 0:
                if time.monotonic() - job.started > limit:
                    os.kill(job.pid, signal.SIGKILL)
                    os.waitpid(job.pid, 0)
                    running.remove(job)
                    result["timeout"] += 1
                continue
            running.remove(job)
            code = os.waitstatus_to_exitcode(status)
            assert job.mutant is not None
            if code == 0:
                result["survived"].append(f"{job.mutant.ident} (in {job.mutant.function})")
            elif code == _NOT_PLACED:
                result["not_applicable"] += 1
            else:
                result["killed"] += 1
    total = result["killed"] + result["timeout"] + len(result["survived"])
    result["total"] = total
    result["score"] = round(100.0 * (total - len(result["survived"])) / total, 1) if total else 100.0
    result["seconds"] = round(time.monotonic() - start, 1)
    return result


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("modules", nargs="*", help="modules of scripts/mutation.toml (default: all)")
    parser.add_argument("--jobs", type=int, default=2)
    parser.add_argument("--list", action="store_true", help="list the mutants, run nothing")
    parser.add_argument("--only", action="append", help="run only the mutant with this id (line:col what)")
    parser.add_argument("--json", help="write the results to this file")
    args = parser.parse_args()
    config = tomllib.loads(CONFIG.read_text())
    targets: dict[str, Any] = config["modules"]
    chosen = args.modules or list(targets)
    unknown = [m for m in chosen if m not in targets]
    if unknown:
        parser.error(f"not in {CONFIG.name}: {', '.join(unknown)}")
    sys.path.insert(0, str(ROOT))
    results = []
    for name in chosen:
        if args.list:
            for m in module_mutants(name, targets[name].get("exclude", [])):
                print(f"{name} {m.ident} (in {m.function})")
            continue
        res = run_module(name, targets[name]["tests"], args.jobs, config.get("timeout_factor", 4.0),
                         set(args.only) if args.only else None, targets[name].get("exclude", []))
        res["min_score"] = targets[name].get("min_score", config.get("min_score", 90.0))
        results.append(res)
        print(f"{name}: {res['score']}% killed ({res['total'] - len(res['survived'])}/{res['total']}, "
              f"{res['timeout']} by timeout) in {res['seconds']} s", flush=True)
        for ident in res["survived"]:
            print(f"  survived: {ident}", flush=True)
    if args.json:
        Path(args.json).write_text(json.dumps(results, indent=1))
    return 0 if all(r["score"] >= r["min_score"] for r in results) else 1


if __name__ == "__main__":
    sys.exit(main())
