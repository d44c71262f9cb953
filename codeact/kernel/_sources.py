"""The cells' sources for ``linecache`` (tracebacks, ``inspect``), without importing it at start.

``linecache`` pulls in ``tokenize``, which an idle kernel need not hold. Until something imports
``linecache`` (a failed cell's traceback, or the code: ``traceback``, ``inspect``, ``logging``), the
sources wait here; a finder first on ``sys.meta_path`` lets that import run as usual, then fills the
new module's cache with them and steps aside, so even a cell that imports ``traceback`` and prints
its own traceback shows its lines. Standard library only.
"""

from __future__ import annotations

import sys

TYPE_CHECKING = False
if TYPE_CHECKING:  # typing costs every idle kernel memory; annotations are never evaluated
    from typing import Any

__all__ = ["CellSources"]


class CellSources:
    """Where the cells' source lines go: ``linecache.cache`` once it exists, a dict of ours before."""

    def __init__(self) -> None:
        self.waiting: dict[str, tuple[int, None, list[str], str]] = {}
        if "linecache" not in sys.modules:
            sys.meta_path.insert(0, self)  # a finder: find_spec is all it needs

    def _cache(self) -> dict[str, Any]:
        module = sys.modules.get("linecache")
        return module.cache if module is not None else self.waiting

    def add(self, filename: str, source: str) -> None:
        self._cache()[filename] = (len(source), None, source.splitlines(True), filename)

    def discard(self, filename: str) -> None:
        self._cache().pop(filename, None)

    def find_spec(self, name: str, path: Any = None, target: Any = None) -> Any:
        """For ``linecache`` only: the spec the other finders give, its module filled once loaded."""
        if name != "linecache":
            return None
        if self in sys.meta_path:
            sys.meta_path.remove(self)
        for finder in sys.meta_path:
            find = getattr(finder, "find_spec", None)
            spec = find(name, path, target) if find is not None else None
            if spec is not None:
                break
        else:
            return None
        loader = spec.loader
        run = loader.exec_module
        waiting = self.waiting

        def exec_module(module: Any) -> None:
            run(module)
            module.cache.update(waiting)
            waiting.clear()

        loader.exec_module = exec_module  # this spec's own loader object: nothing else is touched
        return spec
