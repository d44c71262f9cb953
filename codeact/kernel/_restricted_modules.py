"""What the restricted policy lets code import, and what an allowed module may hand out.

The code never holds a real module object: ``import json`` binds a read-only view whose attribute
reads go through the policy, so a harmless module's dangerous re-export (``typing.sys``,
``string.Formatter``, ``operator.attrgetter``) is refused just like a direct import.
Runs in the sandbox: standard library only.
"""

from __future__ import annotations

import types
from typing import Any

#: Modules (and packages with all their submodules) the code may import.
ALLOWED_MODULES = frozenset(
    "__future__ abc array asyncio base64 bisect calendar cmath collections colorsys contextlib copy csv "
    "dataclasses datetime decimal difflib enum fractions functools graphlib hashlib heapq hmac html "
    "io itertools json keyword math numbers operator pprint random re secrets stat statistics string "
    "struct textwrap time typing unicodedata uuid zoneinfo zlib urllib.parse".split()
)

#: Submodules of allowed packages that are refused anyway (they reach processes or sockets).
DENIED_SUBMODULES = frozenset({"asyncio", "json.tool"})  # asyncio: only the top-level API below

#: Per module: attributes an allowed module may not hand out, and why (the policy's deny list).
DENIED_MODULE_ATTRIBUTES: dict[str, frozenset[str]] = {
    # evaluates string annotations with the real builtins
    "typing": frozenset({"get_type_hints", "ForwardRef", "evaluate_forward_ref"}),
    # its get_field walks attributes unguarded ("{0.__class__}"); str.format is the safe route
    "string": frozenset({"Formatter"}),
    # raw file access outside open()'s confinement
    "io": frozenset({"open", "open_code", "FileIO"}),
    # reads tz files from any path
    "zoneinfo": frozenset({"reset_tzpath"}),
    # changes the process's working directory
    "contextlib": frozenset({"chdir"}),
}

#: asyncio: the part of its API that neither spawns processes nor opens sockets nor hands out
#: the event loop (whose methods do both).
ASYNCIO_API = frozenset(
    "sleep gather wait wait_for create_task TaskGroup timeout timeout_at as_completed shield "
    "Queue PriorityQueue LifoQueue QueueEmpty QueueFull Event Lock Semaphore BoundedSemaphore "
    "Condition Barrier CancelledError TimeoutError InvalidStateError IncompleteReadError "
    "iscoroutine iscoroutinefunction Future Task current_task all_tasks ensure_future".split()
)


class PolicyViolation(Exception):
    """The restricted policy refused an operation."""


#: An import the policy refuses: a PolicyViolation (same name in results) that is an ImportError
#: too, so the model's ``try: import x / except ImportError:`` fallbacks work as in CPython.
ImportViolation = type("PolicyViolation", (PolicyViolation, ImportError), {"__module__": __name__})


def module_allowed(name: str) -> bool:
    """``name`` or one of its parent packages is allowed, and it is not a denied submodule."""
    parts = name.split(".")
    if parts[0] == "asyncio" and len(parts) > 1:
        return False
    if name in DENIED_SUBMODULES and name != "asyncio":
        return False
    return any(".".join(parts[:i]) in ALLOWED_MODULES for i in range(1, len(parts) + 1))


def _parent_of_allowed(name: str) -> bool:
    prefix = name + "."
    return any(allowed.startswith(prefix) for allowed in ALLOWED_MODULES)


class ModuleView(types.ModuleType):
    """A read-only stand-in for a module: reads go through :func:`module_attribute`."""

    def __getattr__(self, name: str) -> Any:
        return module_attribute(self, name)

    def __setattr__(self, name: str, value: Any) -> None:
        raise PolicyViolation(f"module {self.__name__!r} is read-only under the restricted policy")

    __delattr__ = __setattr__  # type: ignore[assignment]

    def __repr__(self) -> str:
        return repr(_REAL[id(self)])

    def __dir__(self) -> list[str]:
        real = _REAL[id(self)]
        return [name for name in dir(real) if not name.startswith("_") and _attribute_allowed(real.__name__, name)]


_VIEWS: dict[str, ModuleView] = {}
_REAL: dict[int, types.ModuleType] = {}
_OVERRIDES: dict[tuple[str, str], Any] = {}


def override(module: str, name: str, value: Any) -> None:
    """Serve ``value`` instead of ``module.name`` (a guarded replacement)."""
    _OVERRIDES[(module, name)] = value


def view(module: types.ModuleType) -> ModuleView:
    """The (one, cached) view of an allowed module; refuses any other module."""
    name = module.__name__
    if not (module_allowed(name) or _parent_of_allowed(name)):
        raise PolicyViolation(f"module {name!r} is not allowed by the restricted policy")
    existing = _VIEWS.get(name)
    if existing is not None and _REAL[id(existing)] is module:
        return existing
    made = ModuleView(name, module.__doc__)
    if getattr(module, "__file__", None):  # for CPython's own "cannot import name ... (path)"
        types.ModuleType.__setattr__(made, "__file__", module.__file__)
    _REAL[id(made)] = module
    _VIEWS[name] = made
    return made


def _attribute_allowed(module: str, name: str) -> bool:
    if module == "asyncio":
        return name in ASYNCIO_API
    return name not in DENIED_MODULE_ATTRIBUTES.get(module, ())


def module_attribute(module_view: ModuleView, name: str) -> Any:
    """``view.name`` under the policy: no private names, no denied re-exports, modules as views."""
    real = _REAL[id(module_view)]
    module = real.__name__
    if name.startswith("_") or name == "main":  # main(): command-line entry points read argv and files
        raise PolicyViolation(f"access to {module}.{name} is not allowed by the restricted policy")
    if (module, name) in _OVERRIDES:
        return _OVERRIDES[(module, name)]
    if not _attribute_allowed(module, name) or not (module_allowed(module) or _parent_of_allowed(module)):
        raise PolicyViolation(f"access to {module}.{name} is not allowed by the restricted policy")
    value = getattr(real, name)
    if isinstance(value, types.ModuleType):
        return view(value)
    if not module_allowed(module):  # a parent package of an allowed submodule: only that submodule
        raise PolicyViolation(f"access to {module}.{name} is not allowed by the restricted policy")
    return value


def _exists(name: str) -> bool:
    import importlib.util

    try:
        return importlib.util.find_spec(name.split(".")[0]) is not None
    except (ImportError, ValueError):
        return False


def guarded_import(
    name: str, globals: Any = None, locals: Any = None, fromlist: Any = (), level: int = 0
) -> ModuleView:
    """``__import__`` for the code: allowed modules only, handed out as views."""
    if type(fromlist) is list:
        # PyImport_Import: a C function the code called (datetime.strptime -> _strptime) imports
        # lazily through the frame's builtins; the code itself cannot pass a list here (an
        # import statement passes None or a tuple, and __import__ is a name it cannot reach).
        return __import__(name, globals, locals, fromlist, 0)  # type: ignore[return-value]
    if level != 0 or not isinstance(name, str) or not module_allowed(name):
        if isinstance(name, str) and level == 0 and not _exists(name):
            raise ModuleNotFoundError(f"No module named {name!r}", name=name)
        raise ImportViolation(f"import of {name!r} is not allowed by the restricted policy")
    for item in fromlist or ():
        if not isinstance(item, str) or item.startswith("_") or item == "*":
            raise PolicyViolation(f"from {name} import {item!r} is not allowed by the restricted policy")
    module = __import__(name, None, None, fromlist, 0)
    return view(module)
