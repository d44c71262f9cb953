"""Cells: a cell's source compiled (its last expression, if any, apart: the cell's value) and
evaluated in the session's namespace, a top-level ``await`` on the kernel's one event loop.
Standard library only.
"""

from __future__ import annotations

import _ast as ast  # the parser's node types; the ast module itself costs an idle kernel memory
import collections
import re
import types

TYPE_CHECKING = False
if TYPE_CHECKING:  # typing costs every idle kernel memory; annotations are never evaluated
    from typing import Any

#: How a top-level statement that is certainly not an expression starts: a keyword of a simple or
#: compound statement, a decorator, or ``name =`` / ``a.b +=`` (not ``==``). Conservative: any
#: other start (a call, ``x[0] = …``, ``a, b = …``) takes the AST path, which decides exactly.
_NOT_EXPRESSION = re.compile(
    r"(?:(?:import|from|def|class|for|while|if|with|try|del|pass|return|raise|global|nonlocal|assert|async"
    r"|break|continue)\b|@|[A-Za-z_][\w.]*[ \t]*(?:[-+*/%&|^@]|//|\*\*|>>|<<)?=(?!=))")
_POP_TOP: int | None = None


def parse(source: str, filename: str) -> ast.Module:
    """``ast.parse(source, filename)`` without the ast module."""
    tree = compile(source, filename, "exec", flags=ast.PyCF_ONLY_AST, dont_inherit=True)
    assert isinstance(tree, ast.Module)
    return tree


def statements_only(source: str, filename: str) -> types.CodeType | None:
    """``source`` compiled as it is, when its last top-level statement is certainly not an
    expression (so the cell has no value); None when it may be one (the caller parses the tree).
    Raises SyntaxError as ``ast.parse`` would."""
    global _POP_TOP
    code = compile(source, filename, "exec", flags=ast.PyCF_ALLOW_TOP_LEVEL_AWAIT, dont_inherit=True)
    if _POP_TOP is None:
        import opcode

        _POP_TOP = opcode.opmap["POP_TOP"]
    raw = code.co_code
    if len(raw) >= 6 and raw[-6] == _POP_TOP:  # a value dropped just before the implicit return
        return None
    # The implicit ``return None`` carries the line where the last top-level statement starts.
    last = collections.deque(code.co_lines(), maxlen=1)
    line = last[0][2] if last else None
    if line is None:
        return None
    lines = source.split("\n")
    if line > len(lines) or ";" in "".join(lines[line - 1:]):
        return None
    return code if _NOT_EXPRESSION.match(lines[line - 1]) else None


def compile_plain(tree: ast.Module, filename: str) -> tuple[types.CodeType | None, types.CodeType | None]:
    """The cell's statements and, apart, its last expression (the value) when it ends with one."""
    flags = ast.PyCF_ALLOW_TOP_LEVEL_AWAIT
    body, last = tree.body, None
    if body and isinstance(body[-1], ast.Expr):
        body, last = body[:-1], body[-1]
    assert last is None or isinstance(last, ast.Expr)
    # dont_inherit: a cell must not inherit this module's ``from __future__ import annotations``
    exec_code = compile(ast.Module(body=body, type_ignores=[]), filename, "exec", flags=flags, dont_inherit=True)
    eval_code = None
    if last is not None:
        eval_code = compile(ast.Expression(body=last.value), filename, "eval", flags=flags, dont_inherit=True)
    return exec_code, eval_code


class Evaluator:
    """Evaluates compiled cells; the event loop of top-level awaits is made (and asyncio
    imported) on the first one."""

    def __init__(self) -> None:
        self._loop: Any = None

    def __call__(self, code: types.CodeType, namespace: dict[str, Any]) -> Any:
        result = eval(code, namespace)
        if code.co_flags & 0x80:  # CO_COROUTINE: the cell used top-level await
            if self._loop is None:
                import asyncio

                self._loop = asyncio.new_event_loop()
            result = self._loop.run_until_complete(result)
        return result
