"""The ``restricted`` policy: the model's code compiled with RestrictedPython.

Loaded by the kernel only when the policy is on (the local backend's default). It raises the
cost of casual escapes (dunder walks, frame walks, arbitrary imports); it is NOT a security
boundary: run untrusted code in the Docker backend.
"""

from __future__ import annotations

import ast
import builtins
import operator
import re
import types
from collections.abc import Sequence
from typing import Any

from RestrictedPython.compile import compile_restricted_eval, compile_restricted_exec
from RestrictedPython.Eval import default_guarded_getitem
from RestrictedPython.Guards import (  # type: ignore[attr-defined]
    guarded_iter_unpack_sequence,
    guarded_unpack_sequence,
    safe_builtins,
    safer_getattr,
)
from RestrictedPython.Utilities import utility_builtins

#: Modules the code may import under the restricted policy.
ALLOWED_MODULES = frozenset(
    "math cmath json re datetime time calendar collections itertools functools operator statistics "
    "random string decimal fractions typing dataclasses heapq bisect copy csv textwrap unicodedata "
    "enum uuid hashlib base64 pprint difflib zoneinfo numbers".split()
)

#: Attributes that reach frames, code objects or globals: refused even without a leading underscore.
DENIED_ATTRIBUTES = frozenset(
    "gi_frame gi_code gi_yieldfrom cr_frame cr_code cr_await ag_frame ag_code ag_await f_back "
    "f_globals f_locals f_builtins f_code tb_frame tb_next co_code func_globals func_code mro "
    "format_map".split()
)

_EXTRA_BUILTINS = (
    "sum min max any all enumerate map filter sorted reversed dict list iter next zip "
    "isinstance issubclass len abs round divmod pow hash id repr str int float bool tuple "
    "set frozenset range chr ord hex oct bin callable format slice object bytes bytearray "
    "print super staticmethod classmethod property"
).split()


class PolicyViolation(Exception):
    """The restricted policy refused an operation."""


def _guarded_import(
    name: str, globals: Any = None, locals: Any = None, fromlist: Any = (), level: int = 0
) -> types.ModuleType:
    if level != 0 or name.split(".")[0] not in ALLOWED_MODULES:
        raise PolicyViolation(f"import of {name!r} is not allowed by the restricted policy")
    return builtins.__import__(name, globals, locals, fromlist, level)


_MISSING = object()


def _guarded_getattr(obj: Any, name: str, default: Any = _MISSING) -> Any:
    if not isinstance(name, str):
        raise TypeError("attribute name must be a string")
    if name.startswith("_") or name in DENIED_ATTRIBUTES:
        raise PolicyViolation(f"access to attribute {name!r} is not allowed by the restricted policy")
    try:
        value = safer_getattr(obj, name)  # type: ignore[no-untyped-call]
    except NotImplementedError as exc:
        raise PolicyViolation(str(exc)) from None
    except AttributeError:
        if default is _MISSING:
            raise
        return default
    if isinstance(value, types.ModuleType) and value.__name__.split(".")[0] not in ALLOWED_MODULES:
        raise PolicyViolation(f"module {value.__name__!r} is not allowed by the restricted policy")
    return value


def _guarded_hasattr(obj: Any, name: str) -> bool:
    try:
        _guarded_getattr(obj, name)
    except AttributeError:
        return False
    return True


class _PrintHandler:
    """RestrictedPython rewrites ``print(...)`` into ``_print_(_getattr_)._call_print(...)``."""

    def __init__(self, _getattr: Any = None) -> None:
        pass

    def _call_print(self, *objects: Any, **kwargs: Any) -> None:
        print(*objects, **kwargs)

    def __call__(self) -> str:
        return ""


def namespace_globals() -> dict[str, Any]:
    """The names the restricted code's namespace must hold."""
    allowed = dict(safe_builtins)
    allowed.update(utility_builtins)
    for name in _EXTRA_BUILTINS:
        allowed[name] = getattr(builtins, name)
    allowed.update(
        __import__=_guarded_import,
        getattr=_guarded_getattr,
        hasattr=_guarded_hasattr,
        __build_class__=builtins.__build_class__,
    )
    return {
        "__builtins__": allowed,
        "__name__": "__main__",
        "__metaclass__": type,
        "_getattr_": _guarded_getattr,
        "_getitem_": default_guarded_getitem,
        "_getiter_": iter,
        "_iter_unpack_sequence_": guarded_iter_unpack_sequence,
        "_unpack_sequence_": guarded_unpack_sequence,
        "_write_": lambda obj: obj,
        "_inplacevar_": _inplacevar,
        "_print_": _PrintHandler,
        "_apply_": lambda f, *a, **kw: f(*a, **kw),
    }


_INPLACE = {
    "+=": operator.iadd, "-=": operator.isub, "*=": operator.imul, "/=": operator.itruediv,
    "//=": operator.ifloordiv, "%=": operator.imod, "**=": operator.ipow, "|=": operator.ior,
    "&=": operator.iand, "^=": operator.ixor, "<<=": operator.ilshift, ">>=": operator.irshift,
    "@=": operator.imatmul,
}


def _inplacevar(op: str, x: Any, y: Any) -> Any:
    return _INPLACE[op](x, y)  # type: ignore[no-untyped-call]


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
    body, last = tree.body, None
    if body and isinstance(body[-1], ast.Expr):
        body, last = body[:-1], body[-1]
    assert last is None or isinstance(last, ast.Expr)
    exec_code = None
    if body:
        result = compile_restricted_exec(ast.Module(body=body, type_ignores=[]), filename)
        if result.errors:
            _raise_policy(result.errors)
        exec_code = result.code
    eval_code = None
    if last is not None:
        result = compile_restricted_eval(ast.Expression(body=last.value), filename)
        if result.errors:
            _raise_policy(result.errors)
        eval_code = result.code
    return exec_code, eval_code
