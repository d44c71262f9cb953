"""Python tools from a module: every :class:`Tool` bound at its top level (``Toolset.from_module``).

A function becomes a Tool with ``@tool`` (``runtime/_tool.py``); this source finds the Tools a
module (an object, a dotted name, or a ``.py`` file) defines.
"""

from __future__ import annotations

import importlib
import importlib.util
import os
import sys
from pathlib import Path
from types import ModuleType

from ...errors import ToolDefinitionError
from .._tool import Tool

__all__ = ["load_module", "module_tools"]


def module_tools(module: ModuleType | str | os.PathLike[str]) -> list[Tool]:
    """Every :class:`Tool` bound at the top level of a module (an object, a dotted name, or a
    ``.py`` path loaded with importlib), in definition order; one Tool bound twice counts once."""
    if not isinstance(module, ModuleType):
        module = load_module(module)
    found: dict[int, Tool] = {}
    for value in vars(module).values():
        if isinstance(value, Tool):
            found.setdefault(id(value), value)
    return list(found.values())


def load_module(source: str | os.PathLike[str]) -> ModuleType:
    """A module by dotted name, or a ``.py`` file loaded with importlib (its folder importable while it runs)."""
    path = Path(source)
    if path.suffix != ".py" and not path.exists() and isinstance(source, str):
        try:
            return importlib.import_module(source)
        except ImportError as exc:
            raise ToolDefinitionError(f"cannot import tools module {source!r}: {exc}") from exc
    if not path.is_file():
        raise ToolDefinitionError(f"no such tools file: {path}")
    resolved = path.resolve()
    module_name = f"_codeact_tools_{resolved.stem}_{abs(hash(str(resolved))):x}"
    spec = importlib.util.spec_from_file_location(module_name, resolved)
    if spec is None or spec.loader is None:
        raise ToolDefinitionError(f"cannot load tools file {path}: not a Python module")
    module = importlib.util.module_from_spec(spec)
    sys.modules[module_name] = module
    sys.path.insert(0, str(resolved.parent))  # let the file import its neighbours, as `python file.py` would
    try:
        spec.loader.exec_module(module)
    except Exception as exc:
        sys.modules.pop(module_name, None)
        raise ToolDefinitionError(f"cannot load tools file {path}: {type(exc).__name__}: {exc}") from exc
    finally:
        sys.path.remove(str(resolved.parent))
    return module
