"""The import contract, read from the source (AST), so that the layers stay real.

Floors, lowest first: ``kernel``/``errors``/``results`` → ``tool_stubs`` → ``sandbox``/``image`` → ``runtime`` →
``agent`` → ``evals`` → ``viewer`` → ``cli``; ``codeact/__init__`` sits on top (:data:`ROOT_FLOOR`)
and only re-exports, so no module below it imports a name from it. A module may import its own
floor and the floors below it, never one above. Function-level imports count: hiding an import
inside a function does not change the dependency; so do imports made only for type checkers
(``if TYPE_CHECKING:``), for floors and for cycles alike.

Known debts are listed in ``KNOWN_*`` below, each with the issue that removes it. The lists can only
shrink: a debt that is gone fails the test until its entry is deleted, and a new violation fails it
at once.
"""

from __future__ import annotations

import ast
import sys
from collections import defaultdict
from pathlib import Path

import pytest

PACKAGE = Path(__file__).resolve().parents[1] / "codeact"

FLOORS: dict[str, int] = {
    "kernel": 0, "errors": 0, "results": 0, "_version": 0, "_text": 0, "_paths": 0, "_deprecated": 0, "progress": 0, "tracing": 0,
    "tool_stubs": 1,
    "sandbox": 2, "image": 2,
    "runtime": 3,
    "agent": 4, "testing": 4, "cluster": 4,
    "evals": 5,
    "viewer": 6,
    "cli": 7,
}
#: The root package, ``codeact/__init__``: above every floor.
ROOT_FLOOR = max(FLOORS.values()) + 1

#: Upward imports still to remove (issue 17).
KNOWN_UPWARD: set[tuple[str, str]] = set()

#: Import cycles between modules still to break (issue 17), each as its sorted member list.
KNOWN_CYCLES: set[tuple[str, ...]] = set()

#: Cross-package imports of private modules still to remove (issue 17).
KNOWN_PRIVATE: set[tuple[str, str]] = set()

#: The files that run inside the sandbox, on its own Python: standard library and each other only.
IN_SANDBOX = tuple(sorted(f"kernel/{p.name}" for p in (PACKAGE / "kernel").glob("*.py")
                          if p.name not in ("__init__.py", "files.py")))
#: What the in-sandbox files may import besides the standard library (RestrictedPython is the
#: local backend's policy; the kernel imports it only there, and never in the Docker image).
IN_SANDBOX_EXTRA = {"RestrictedPython", "protocol", "frames", "client", "kernel", "_restricted", "_restricted_ast",
                    "_restricted_modules", "lazy_stubs", "egress_forwarder", "running", "rich_output",
                    "flow", "_flow_rewrite", "_capture", "_cells", "_describe", "_live", "_reading", "_sources"}


def _modules() -> dict[str, Path]:
    found: dict[str, Path] = {}
    for path in PACKAGE.rglob("*.py"):
        parts = ("codeact", *path.relative_to(PACKAGE).with_suffix("").parts)
        name = ".".join(parts[:-1] if parts[-1] == "__init__" else parts)
        found[name] = path
    return found


def _type_only_nodes(tree: ast.AST) -> set[int]:
    """ids of the import nodes under ``if TYPE_CHECKING:`` (annotations only, never run)."""
    found: set[int] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.If) and "TYPE_CHECKING" in ast.unparse(node.test):
            found.update(id(inner) for stmt in node.body for inner in ast.walk(stmt))
    return found


def _imported_names(module: str, path: Path, *, type_only: bool = True) -> set[str]:
    """Every dotted name the module imports (module and ``from x import y`` as ``x.y``);
    ``type_only=False`` leaves out the imports made only for type checkers."""
    package = module if path.name == "__init__.py" else module.rpartition(".")[0]
    names: set[str] = set()
    tree = ast.parse(path.read_text(), str(path))
    skip = set() if type_only else _type_only_nodes(tree)
    for node in ast.walk(tree):
        if id(node) in skip:
            continue
        if isinstance(node, ast.Import):
            names.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.split(".")[: len(package.split(".")) - node.level + 1]
                target = ".".join(base + ([node.module] if node.module else []))
            else:
                target = node.module or ""
            # each imported name, resolved below to the module that holds it (the package itself
            # only for a name its ``__init__`` defines)
            names.update(f"{target}.{alias.name}" for alias in node.names)
    return names


def _edges(*, type_only: bool = True) -> dict[str, set[str]]:
    modules = _modules()
    edges: dict[str, set[str]] = defaultdict(set)
    for module, path in modules.items():
        for name in _imported_names(module, path, type_only=type_only):
            while name not in modules and "." in name:
                name = name.rpartition(".")[0]
            # a package importing its own submodules is structure, not a dependency; nor is a
            # module naming its own package, except the root, whose names are the whole public API
            if name in modules and name != module and not name.startswith(module + "."):
                if not module.startswith(name + ".") or name == "codeact":
                    edges[module].add(name)
    return edges


def _floor(module: str) -> int:
    parts = module.split(".")
    if len(parts) == 1:
        return ROOT_FLOOR  # codeact/__init__: the top, re-exports only
    top = parts[1]
    if top == "__main__":
        return FLOORS["cli"]
    if top not in FLOORS:
        pytest.fail(f"{module}: declare the floor of package 'codeact.{top}' in FLOORS")
    return FLOORS[top]


def test_no_module_imports_a_higher_floor() -> None:
    upward = set()
    for module, targets in _edges().items():
        own = _floor(module)
        for target in targets:
            theirs = _floor(target)
            if theirs > own:
                upward.add((module, target))
    assert upward - KNOWN_UPWARD == set(), "imports pointing up a floor"
    assert KNOWN_UPWARD - upward == set(), "fixed: delete these from KNOWN_UPWARD"


def _cycles(edges: dict[str, set[str]]) -> set[tuple[str, ...]]:
    """Strongly connected components with more than one module (Tarjan, iterative)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: set[tuple[str, ...]] = set()
    counter = 0
    nodes = set(edges) | {t for ts in edges.values() for t in ts}
    for root in sorted(nodes):
        if root in index:
            continue
        work = [(root, iter(sorted(edges.get(root, ()))))]
        index[root] = low[root] = counter
        counter += 1
        stack.append(root)
        on_stack.add(root)
        while work:
            node, children = work[-1]
            child = next(children, None)
            if child is not None:
                if child not in index:
                    index[child] = low[child] = counter
                    counter += 1
                    stack.append(child)
                    on_stack.add(child)
                    work.append((child, iter(sorted(edges.get(child, ())))))
                elif child in on_stack:
                    low[node] = min(low[node], index[child])
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[node])
            if low[node] == index[node]:
                component = []
                while True:
                    member = stack.pop()
                    on_stack.discard(member)
                    component.append(member)
                    if member == node:
                        break
                if len(component) > 1:
                    found.add(tuple(sorted(component)))
    return found


def test_no_import_cycles() -> None:
    # imports made only for type checkers count: a cycle closed under ``TYPE_CHECKING`` is still two
    # modules that cannot be read (or changed) one without the other
    cycles = _cycles(_edges())
    assert cycles - KNOWN_CYCLES == set(), "new import cycles"
    assert KNOWN_CYCLES - cycles == set(), "broken: delete these from KNOWN_CYCLES"


def test_cycle_finder_finds_a_cycle() -> None:
    assert _cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == {("a", "b", "c")}
    assert _cycles({"a": {"b"}, "b": set()}) == set()


def test_no_cross_package_import_of_private_modules() -> None:
    crossing = set()
    for module, targets in _edges().items():
        for target in targets:
            parent, _, leaf = target.rpartition(".")
            private = leaf.startswith("_") and not leaf.startswith("__")
            if private and not (module == parent or module.startswith(parent + ".")):
                crossing.add((module, target))
    assert crossing - KNOWN_PRIVATE == set(), "private modules imported from another package"
    assert KNOWN_PRIVATE - crossing == set(), "fixed: delete these from KNOWN_PRIVATE"


@pytest.mark.parametrize("rel", IN_SANDBOX)
def test_in_sandbox_files_import_only_the_standard_library(rel: str) -> None:
    path = PACKAGE / rel
    module = "codeact." + rel[:-3].replace("/", ".")
    siblings = {"codeact." + r[:-3].replace("/", ".") for r in IN_SANDBOX}
    # the host imports these files as a package (relative imports of each other); the image flat
    parents = {s.rpartition(".")[0] for s in siblings}
    names = {n for n in _imported_names(module, path)
             if n not in parents and not any(n == s or n.startswith(s + ".") for s in siblings)}
    tops = {name.split(".")[0] for name in names}
    foreign = tops - set(sys.stdlib_module_names) - IN_SANDBOX_EXTRA
    assert foreign == set(), f"{rel} imports {sorted(foreign)}: the sandbox has only the standard library"


def test_in_sandbox_list_matches_what_the_image_ships() -> None:
    from codeact.kernel.files import KERNEL_FILES

    assert set(IN_SANDBOX) == set(KERNEL_FILES)


def test_every_package_states_its_floor() -> None:
    for init in sorted(PACKAGE.glob("*/__init__.py")):
        doc = ast.get_docstring(ast.parse(init.read_text())) or ""
        name = init.parent.name
        if name in FLOORS and not name.startswith("_"):
            assert f"Floor {FLOORS[name]}" in doc, f"codeact/{name}/__init__.py: say 'Floor {FLOORS[name]}'"
