"""The ``restricted`` policy: the model's code compiled with RestrictedPython, guarded at run time.

Loaded by the kernel only when the policy is on (the local backend's default). Ordinary Python
runs unchanged (print, annotations, dataclasses, ``d[k] += 1``, ``str.format``, ``match``,
top-level ``await``, ``open()`` inside the scratch directory, the harmless standard library); what
it refuses is listed in ``DENY_LIST`` with the reason. It raises the cost of escapes (dunder and
frame walks, arbitrary imports, format-string attribute walks); it is NOT a security boundary by
itself: the OS boundary is bubblewrap (local backend) or the container (Docker backend).
"""

from __future__ import annotations

import ast
import builtins
import operator
import os
import re
import string
import sys
import types
from collections.abc import Sequence
from typing import Any

from RestrictedPython.Guards import guarded_iter_unpack_sequence, guarded_unpack_sequence

try:  # flat in the sandbox; a package when imported on the host
    from . import _restricted_modules as _modules
    from ._restricted_ast import DENIED_ATTRIBUTES, RESERVED_NAMES, is_dunder, transform
except ImportError:
    import _restricted_modules as _modules  # type: ignore[no-redef]
    from _restricted_ast import (  # type: ignore[no-redef]
        DENIED_ATTRIBUTES,
        RESERVED_NAMES,
        is_dunder,
        transform,
    )

PolicyViolation = _modules.PolicyViolation
ALLOWED_MODULES = _modules.ALLOWED_MODULES

#: What ordinary Python does that the restricted policy refuses, and why.
DENY_LIST: dict[str, str] = {
    "eval / exec / compile / breakpoint": "they run code the policy has not compiled",
    "imports outside ALLOWED_MODULES (os, sys, subprocess, socket, pathlib, inspect, ...)":
        "they reach the process, the filesystem or the network",
    "dunder attributes outside the readable set (__globals__, __subclasses__, __base__, __code__ ...)":
        "they walk from any object to frames, globals and every class in the process",
    "frame and code attributes (gi_frame, f_globals, tb_frame, co_code ...)": "frame walks",
    "_private attributes of objects the code did not define": "library internals hold modules and exec",
    "str.format field walks into refused attributes ('{0.__class__}')": "the same walk as an attribute",
    "open() outside the scratch directory, of a file descriptor, or with an opener":
        "the scratch directory is the code's only file space",
    "writing attributes of modules, and _private attributes of library objects":
        "a module seen by the code is a read-only view",
    "globals() / locals() / vars()": "they return snapshots (writes do not rebind names)",
    "except* (TryStar)": "RestrictedPython: exception groups can carry unguarded frames",
    "metaclass= in class statements; object.__new__": "class machinery is the classic escape route",
    "typing.get_type_hints, string.Formatter, io.open, asyncio's loop and subprocess API":
        "dangerous re-exports of allowed modules",
    "help, copyright, credits, license": "interactive helpers (not part of the language)",
}

_ROOT = os.path.realpath(os.getcwd())
_PLAIN_CONTAINERS = (dict, list, set, bytearray)


def _user_class(cls: Any) -> bool:
    """A class the model's code defined (its module is the session's ``__main__``)."""
    return isinstance(cls, type) and vars(cls).get("__module__") == "__main__"


def _private_allowed(obj: Any, name: str) -> bool:
    """``obj._name`` is readable when the code's own class (or instance) holds it."""
    if type(obj) is super:  # super()._helper(): look where super() looks
        mro = obj.__self_class__.__mro__  # type: ignore[attr-defined]
        classes = mro[mro.index(obj.__thisclass__) + 1 :]  # type: ignore[attr-defined]
        return any(name in vars(cls) and _user_class(cls) for cls in classes)
    owner = obj if isinstance(obj, type) else type(obj)
    for cls in owner.__mro__:
        if name in vars(cls):
            return _user_class(cls)
    if not isinstance(obj, type) and _user_class(owner):
        return True  # an instance attribute, or the code's own __getattr__
    return False


def _refuse(obj: Any, name: str) -> PolicyViolation:
    return PolicyViolation(
        f"access to attribute {name!r} of {type(obj).__name__} is not allowed by the restricted policy"
    )


def _readable(obj: Any, name: str) -> bool:
    if name in DENIED_ATTRIBUTES or name == "get_loop":
        return False
    if not name.startswith("_"):
        return True
    if name == "__dict__":
        return _user_class(obj) or _user_class(type(obj))
    if is_dunder(name):
        return name in _READABLE_DUNDERS
    return _private_allowed(obj, name)


def guarded_getattr(obj: Any, name: Any, *default: Any) -> Any:
    """``obj.name`` and ``getattr()`` under the policy."""
    if type(name) is str and name[:1] != "_" and name not in _SPECIAL and type(obj) is not _ModuleView:
        value = getattr(obj, name, *default)  # the hot path: an ordinary public attribute
        if isinstance(value, types.ModuleType) and type(value) is not _ModuleView:
            return _modules.view(value)
        return value
    if type(name) is not str:
        return getattr(obj, name, *default)  # CPython's own TypeError
    if not _readable(obj, name):
        raise _refuse(obj, name)
    if name in ("format", "format_map"):
        return _str_method(getattr(obj, name, *default))
    if type(obj) is _modules.ModuleView:
        try:
            return _modules.module_attribute(obj, name)
        except AttributeError:
            if default:
                return default[0]
            raise
    value = getattr(obj, name, *default)
    if isinstance(value, types.ModuleType) and not isinstance(value, _modules.ModuleView):
        return _modules.view(value)
    if name.startswith("_") and _is_event_loop(value):  # e.g. a subclass of asyncio.Queue's _loop
        raise _refuse(obj, name)
    return value


def _is_event_loop(value: Any) -> bool:
    asyncio = sys.modules.get("asyncio")
    return asyncio is not None and isinstance(value, asyncio.AbstractEventLoop)


_ModuleView = _modules.ModuleView
_SPECIAL = DENIED_ATTRIBUTES | {"get_loop", "format", "format_map"}
_READABLE_DUNDERS = frozenset(
    "__name__ __qualname__ __doc__ __module__ __class__ __annotations__ __len__ __iter__ __next__ "
    "__enter__ __exit__ __init__ __str__ __repr__ __eq__ __hash__ __call__ __getitem__ __setitem__ "
    "__contains__ __add__ __lt__ __wrapped__ __dataclass_fields__ __match_args__ __slots__ __init_subclass__".split()
)


class _WriteProxy:
    """What ``obj.attr = v`` / ``obj[k] = v`` writes through for objects the code did not define."""

    __slots__ = ("_obj",)
    _obj: Any

    def __init__(self, obj: Any) -> None:
        object.__setattr__(self, "_obj", obj)

    def __setattr__(self, name: str, value: Any) -> None:
        if name.startswith("_"):
            raise _refuse(self._obj, name)
        setattr(self._obj, name, value)

    def __delattr__(self, name: str) -> None:
        if name.startswith("_"):
            raise _refuse(self._obj, name)
        delattr(self._obj, name)

    def __setitem__(self, key: Any, value: Any) -> None:
        self._obj[key] = value

    def __delitem__(self, key: Any) -> None:
        del self._obj[key]


def guarded_write(obj: Any) -> Any:
    """``_write_``: the code's own objects and plain containers as they are; others proxied."""
    kind = type(obj)
    if kind in _PLAIN_CONTAINERS or _user_class(kind) or _user_class(obj):
        return obj
    if isinstance(obj, types.ModuleType):
        raise PolicyViolation(f"module {obj.__name__!r} is read-only under the restricted policy")
    return _WriteProxy(obj)


def _setattr(obj: Any, name: str, value: Any) -> None:
    if type(name) is str and (is_dunder(name) or name in DENIED_ATTRIBUTES):
        raise _refuse(obj, name)
    setattr(guarded_write(obj), name, value)


def _delattr(obj: Any, name: str) -> None:
    if type(name) is str and (is_dunder(name) or name in DENIED_ATTRIBUTES):
        raise _refuse(obj, name)
    delattr(guarded_write(obj), name)


# -- str.format without attribute walks -------------------------------------------------------
class _SafeFormatter(string.Formatter):
    def get_field(self, field_name: str, args: Sequence[Any], kwargs: Any) -> Any:
        import _string

        first, rest = _string.formatter_field_name_split(field_name)
        obj = self.get_value(first, args, kwargs)
        for is_attr, key in rest:
            obj = guarded_getattr(obj, key) if is_attr else obj[key]
        return obj, first


_FORMATTER = _SafeFormatter()
_FIELD_WALK = re.compile(r"\{[^{}:!]*[.\[]")


def _safe_format(template: str, /, *args: Any, **kwargs: Any) -> str:
    if not isinstance(template, str):
        raise TypeError(f"descriptor 'format' requires a 'str' object but received a '{type(template).__name__}'")
    if not _FIELD_WALK.search(template):
        return template.format(*args, **kwargs)  # no field walks anywhere: CPython's own
    return _FORMATTER.vformat(template, args, kwargs)


def _safe_format_map(template: str, mapping: Any, /) -> str:
    if not _FIELD_WALK.search(template):
        return template.format_map(mapping)
    return _FORMATTER.vformat(template, (), mapping)


_UNSAFE_FORMAT = {str.format: _safe_format, str.format_map: _safe_format_map}


def _str_method(value: Any) -> Any:
    """``str.format``/``format_map`` however reached (an instance, ``str``, a subclass, ``super()``)
    becomes the safe version; anything else of that name is left alone."""
    if isinstance(value, types.BuiltinMethodType) and isinstance(value.__self__, str):
        safe = _UNSAFE_FORMAT.get(getattr(str, value.__name__, None))  # type: ignore[arg-type]
        return value if safe is None else types.MethodType(safe, value.__self__)
    return _UNSAFE_FORMAT.get(value, value) if type(value) is types.MethodDescriptorType else value


# -- guarded builtins -------------------------------------------------------------------------
def _open(file: Any, mode: str = "r", buffering: int = -1, encoding: str | None = None,
          errors: str | None = None, newline: str | None = None, closefd: bool = True,
          opener: Any = None) -> Any:
    """``open()`` confined to the scratch directory (the kernel's working directory)."""
    if not isinstance(file, (str, bytes, os.PathLike)) or opener is not None or not closefd:
        raise PolicyViolation("open() takes a path inside the scratch directory under the restricted policy")
    name = os.fsdecode(file)
    # Inside the scratch directory by name, and by target too unless reading: the host's links
    # there (a session's inputs/) may point outside; the code itself cannot make links.
    reading = not any(flag in mode for flag in "wax+")
    for path in (os.path.abspath(name), None if reading else os.path.realpath(name)):
        if path is not None and path != _ROOT and not path.startswith(_ROOT + os.sep):
            raise PolicyViolation(f"open({name!r}): outside the scratch directory (restricted policy)")
    return builtins.open(file, mode, buffering, encoding, errors, newline)


def _visible(name: str) -> bool:
    return name not in RESERVED_NAMES and not (name.startswith("_aug") and name.endswith("_"))


def _globals() -> dict[str, Any]:
    return {k: v for k, v in sys._getframe(1).f_globals.items() if _visible(k)}


def _locals() -> dict[str, Any]:
    return {k: v for k, v in sys._getframe(1).f_locals.items() if _visible(k)}


def _vars(*obj: Any) -> dict[str, Any]:
    if not obj:
        return {k: v for k, v in sys._getframe(1).f_locals.items() if _visible(k)}
    return guarded_getattr(obj[0], "__dict__")  # type: ignore[no-any-return]


def _dir(*obj: Any) -> list[str]:
    if not obj:
        return sorted(k for k in sys._getframe(1).f_locals if _visible(k))
    return dir(obj[0])


def _exit(code: Any = None) -> None:
    raise SystemExit(code)


_HIDDEN_BUILTINS = frozenset(
    "eval exec compile breakpoint help copyright credits license __loader__ __spec__ __package__".split()
)


def _builtins() -> dict[str, Any]:
    allowed = {k: v for k, v in vars(builtins).items() if k not in _HIDDEN_BUILTINS}
    allowed.update(
        __import__=_modules.guarded_import, getattr=guarded_getattr, setattr=_setattr, delattr=_delattr,
        open=_open, globals=_globals, locals=_locals, vars=_vars, dir=_dir, exit=_exit, quit=_exit,
        __name__="builtins",
    )
    return allowed


def _attrgetter(*names: str) -> Any:
    def walk(obj: Any, dotted: str) -> Any:
        for part in dotted.split("."):
            obj = guarded_getattr(obj, part)
        return obj

    if len(names) == 1:
        return lambda obj: walk(obj, names[0])
    return lambda obj: tuple(walk(obj, name) for name in names)


def _methodcaller(name: str, /, *args: Any, **kwargs: Any) -> Any:
    if not isinstance(name, str):
        raise TypeError("method name must be a string")
    return lambda obj: guarded_getattr(obj, name)(*args, **kwargs)


_modules.override("operator", "attrgetter", _attrgetter)
_modules.override("operator", "methodcaller", _methodcaller)


def _inplacevar(op: str, x: Any, y: Any) -> Any:
    return _INPLACE[op](x, y)  # type: ignore[no-untyped-call]


_INPLACE = {
    "+=": operator.iadd, "-=": operator.isub, "*=": operator.imul, "/=": operator.itruediv,
    "//=": operator.ifloordiv, "%=": operator.imod, "**=": operator.ipow, "|=": operator.ior,
    "&=": operator.iand, "^=": operator.ixor, "<<=": operator.ilshift, ">>=": operator.irshift,
    "@=": operator.imatmul,
}


def namespace_globals() -> dict[str, Any]:
    """The names the restricted code's namespace must hold."""
    return {
        "__builtins__": _builtins(),
        "__name__": "__main__",
        "__doc__": None,
        "_getattr_": guarded_getattr,
        "_getitem_": operator.getitem,
        "_getiter_": iter,
        "_iter_unpack_sequence_": guarded_iter_unpack_sequence,
        "_unpack_sequence_": guarded_unpack_sequence,
        "_write_": guarded_write,
        "_inplacevar_": _inplacevar,
        "_apply_": lambda f, *a, **kw: f(*a, **kw),
    }


_LINE = re.compile(r"Line (\d+)")


def _raise_policy(errors: Sequence[str]) -> None:
    match = _LINE.search(errors[0]) if errors else None
    exc = PolicyViolation("; ".join(errors))
    exc.lineno = int(match.group(1)) if match else None  # type: ignore[attr-defined]
    raise exc


def compile_cell(
    tree: ast.Module, filename: str
) -> tuple[types.CodeType | None, types.CodeType | None]:
    """Compile a parsed cell: the statements, and the trailing expression (if any) separately."""
    errors: list[str] = []
    transform(tree, errors, [])
    if errors:
        _raise_policy(errors)
    flags = ast.PyCF_ALLOW_TOP_LEVEL_AWAIT
    body, last = tree.body, None
    if body and isinstance(body[-1], ast.Expr):
        body, last = body[:-1], body[-1]
    assert last is None or isinstance(last, ast.Expr)
    exec_code = None
    if body:
        exec_code = compile(ast.Module(body=body, type_ignores=[]), filename, "exec", flags=flags, dont_inherit=True)
    eval_code = None
    if last is not None:
        eval_code = compile(ast.Expression(body=last.value), filename, "eval", flags=flags, dont_inherit=True)
    return exec_code, eval_code
