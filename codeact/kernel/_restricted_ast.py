"""The restricted policy's compile step: RestrictedPython's transformer, widened to ordinary Python.

RestrictedPython rejects much everyday code (annotations, ``d[k] += 1``, ``nonlocal``, ``match``,
``async``, ``_private`` names, dunder methods) and rewrites ``print`` into its own collector. This
subclass keeps its guards (every attribute read goes through ``_getattr_``, every item read through
``_getitem_``, every store through ``_write_``, iteration through ``_getiter_``) and lets the rest
through; the runtime guards in ``_restricted`` decide what an attribute or import may reach.
Runs in the sandbox: standard library and RestrictedPython only.
"""

from __future__ import annotations

import ast
import re
from typing import Any

from RestrictedPython.transformer import (
    INSPECT_ATTRIBUTES,
    IOPERATOR_TO_STR,
    RestrictingNodeTransformer,
    copy_locations,
)

#: Names the guards live under in the namespace; the code may neither read nor rebind them.
RESERVED_NAMES = frozenset(
    "_getattr_ _getitem_ _getiter_ _write_ _inplacevar_ _apply_ _print_ _print "
    "_iter_unpack_sequence_ _unpack_sequence_ __builtins__ __metaclass__ __codeact_call__".split()
)

#: Dunder names the code may read as plain names (``if __name__ == "__main__":``).
READABLE_DUNDER_NAMES = frozenset({"__name__", "__doc__", "__annotations__"})

#: Dunder names any scope may bind (module metadata the runtime never reads).
STORABLE_DUNDER_NAMES = frozenset({"__all__", "__version__", "__author__", "__doc__"})

#: Dunder names a class body may bind besides dunder methods.
CLASS_DUNDER_NAMES = frozenset({"__slots__", "__hash__", "__doc__", "__annotations__"})

#: Dunder attributes the code may read; every other ``__x__`` attribute is refused at compile time.
READABLE_DUNDER_ATTRIBUTES = frozenset(
    "__name__ __qualname__ __doc__ __module__ __class__ __dict__ __annotations__ __len__ "
    "__iter__ __next__ __enter__ __exit__ __init__ __str__ __repr__ __eq__ __hash__ __call__ "
    "__getitem__ __setitem__ __contains__ __add__ __lt__ __wrapped__ __init_subclass__".split()
)

#: Attributes that reach frames, code objects or globals: refused wherever they appear.
DENIED_ATTRIBUTES = INSPECT_ATTRIBUTES | frozenset(
    "mro func_globals func_code f_trace cr_origin __globals__ __code__ __closure__ __builtins__ "
    "__subclasses__ __bases__ __base__ __mro__ __getattribute__ __reduce__ __reduce_ex__ "
    "__self__ __func__ __objclass__ __loader__ __spec__ __traceback__ __context__ __cause__ "
    "get_stack".split()
)


_TEMP = re.compile(r"_aug\d+_")


def is_dunder(name: str) -> bool:
    return len(name) > 4 and name.startswith("__") and name.endswith("__")


class CodeactTransformer(RestrictingNodeTransformer):
    """RestrictedPython's guards, ordinary Python's syntax (see the module docstring)."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._classes: list[str] = []  # enclosing class names (for dunder defs and name mangling)
        self._in_class_body = False
        self._tmp = 0

    # -- names ---------------------------------------------------------------------------------
    def check_name(self, node: Any, name: str | None, allow_magic_methods: bool = False) -> None:
        if name is None or name == "_" or _TEMP.fullmatch(name):
            return
        if name in RESERVED_NAMES or (name.startswith("_") and name.endswith("_") and not is_dunder(name)):
            self.error(node, f'"{name}" is a reserved name under the restricted policy.')
        elif is_dunder(name):
            store = isinstance(getattr(node, "ctx", None), (ast.Store, ast.Del))
            if allow_magic_methods or name in STORABLE_DUNDER_NAMES:
                return
            if self._in_class_body and name in CLASS_DUNDER_NAMES:
                return
            if store or name not in READABLE_DUNDER_NAMES:
                self.error(node, f'"{name}" is an invalid variable name under the restricted policy.')

    def visit_Name(self, node: ast.Name) -> ast.AST:
        # Unlike RestrictedPython, ``print`` and ``printed`` stay ordinary names (print is a builtin).
        self.check_name(node, node.id)
        return node

    def _fresh(self) -> str:
        self._tmp += 1
        return f"_aug{self._tmp}_"

    # -- attributes ----------------------------------------------------------------------------
    def _check_attribute(self, node: ast.AST, attr: str, load: bool) -> None:
        if attr in DENIED_ATTRIBUTES or attr.endswith("__roles__"):
            self.error(node, f'"{attr}" is a restricted attribute under the restricted policy.')
        elif is_dunder(attr) and not (load and attr in READABLE_DUNDER_ATTRIBUTES):
            self.error(node, f'"{attr}" is an invalid attribute name under the restricted policy.')

    def _mangle(self, attr: str) -> str:
        """CPython mangles ``self.__x`` in class ``C`` to ``_C__x``; the guards see the string."""
        if attr.startswith("__") and not attr.endswith("__") and self._classes:
            owner = self._classes[-1].lstrip("_")
            if owner:
                return f"_{owner}{attr}"
        return attr

    def visit_Attribute(self, node: ast.Attribute) -> ast.AST:
        load = isinstance(node.ctx, ast.Load)
        self._check_attribute(node, node.attr, load)
        node = self.node_contents_visit(node)
        if load:
            call = ast.Call(
                func=ast.Name("_getattr_", ast.Load()),
                args=[node.value, ast.Constant(self._mangle(node.attr))],
                keywords=[],
            )
            copy_locations(call, node)
            return call
        node.value = self._wrap_write(node.value)
        return node

    def _wrap_write(self, value: ast.expr) -> ast.expr:
        call = ast.Call(func=ast.Name("_write_", ast.Load()), args=[value], keywords=[])
        copy_locations(call, value)
        return call

    # -- statements RestrictedPython refuses ---------------------------------------------------
    def visit_AugAssign(self, node: ast.AugAssign) -> Any:
        """``t.a += v`` / ``t[k] += v`` as guarded read, in-place op, guarded write; ``t`` and ``k``
        are evaluated once, as in CPython."""
        target = node.target
        if isinstance(target, ast.Name):
            return super().visit_AugAssign(node)
        prelude: list[ast.stmt] = []

        def bind(expr: ast.expr) -> ast.expr:
            if isinstance(expr, (ast.Name, ast.Constant, ast.Slice)):
                return expr
            name = self._fresh()
            prelude.append(ast.Assign(targets=[ast.Name(name, ast.Store())], value=expr))
            return ast.Name(name, ast.Load())

        def call(func: str, *args: ast.expr) -> ast.Call:
            return ast.Call(func=ast.Name(func, ast.Load()), args=list(args), keywords=[])

        value = self.visit(node.value)
        if isinstance(target, ast.Attribute):
            self._check_attribute(target, target.attr, load=False)
            obj = bind(self.visit(target.value))
            read: ast.expr = call("_getattr_", obj, ast.Constant(self._mangle(target.attr)))
            write: ast.expr = ast.Attribute(value=call("_write_", obj), attr=target.attr, ctx=ast.Store())
        else:
            assert isinstance(target, ast.Subscript)
            obj, key = bind(self.visit(target.value)), bind(self.visit(target.slice))
            read = call("_getitem_", obj, key)
            write = ast.Subscript(value=call("_write_", obj), slice=key, ctx=ast.Store())
        op = ast.Constant(IOPERATOR_TO_STR[type(node.op)])
        statements = [*prelude, ast.Assign(targets=[write], value=call("_inplacevar_", op, read, value))]
        for statement in statements:
            ast.copy_location(statement, node)
            ast.fix_missing_locations(statement)
        return statements

    def visit_comprehension(self, node: ast.comprehension) -> Any:
        if node.is_async:  # ``async for`` iterates with __aiter__, which _getiter_ (iter) cannot
            return self.node_contents_visit(node)
        return super().visit_comprehension(node)

    def visit_AnnAssign(self, node: ast.AnnAssign) -> Any:
        return self.node_contents_visit(node)

    def visit_Nonlocal(self, node: ast.Nonlocal) -> Any:
        for name in node.names:
            self.check_name(node, name)
        return node

    def visit_Global(self, node: ast.Global) -> Any:
        for name in node.names:
            self.check_name(node, name)
        return node

    def visit_FunctionDef(self, node: Any) -> Any:
        self.check_name(node, node.name, allow_magic_methods=self._in_class_body and is_dunder(node.name))
        self.check_function_argument_names(node)
        was, self._in_class_body = self._in_class_body, False
        try:
            return self.node_contents_visit(node)
        finally:
            self._in_class_body = was

    visit_AsyncFunctionDef = visit_FunctionDef

    def visit_ClassDef(self, node: ast.ClassDef) -> Any:
        self.check_name(node, node.name)
        if any(keyword.arg == "metaclass" for keyword in node.keywords):
            self.error(node, 'The keyword argument "metaclass" is not allowed.')
        self._classes.append(node.name)
        was, self._in_class_body = self._in_class_body, True
        try:
            return self.node_contents_visit(node)
        finally:
            self._in_class_body = was
            self._classes.pop()

    def visit_Module(self, node: ast.Module) -> Any:
        return self.node_contents_visit(node)  # no print collector: print is the real builtin

    def visit_Lambda(self, node: ast.Lambda) -> Any:
        was, self._in_class_body = self._in_class_body, False
        try:
            return super().visit_Lambda(node)
        finally:
            self._in_class_body = was

    def _visit_async(self, node: ast.AST) -> Any:
        return self.node_contents_visit(node)

    visit_Await = visit_AsyncWith = visit_AsyncFor = _visit_async

    # -- match ---------------------------------------------------------------------------------
    def visit_Match(self, node: ast.Match) -> Any:
        return self.node_contents_visit(node)

    def visit_match_case(self, node: ast.match_case) -> Any:
        return self.node_contents_visit(node)

    def visit_MatchValue(self, node: ast.MatchValue) -> Any:
        # A value pattern is a dotted name or a literal; CPython looks it up natively, so the
        # attribute names are checked here instead of rewritten into ``_getattr_`` calls.
        for sub in ast.walk(node.value):
            if isinstance(sub, ast.Attribute):
                self._check_attribute(sub, sub.attr, load=True)
                if sub.attr.startswith("_"):
                    self.error(sub, f'"{sub.attr}": private names are not allowed in patterns.')
            elif isinstance(sub, ast.Name):
                self.check_name(sub, sub.id)
        return node

    def visit_MatchClass(self, node: ast.MatchClass) -> Any:
        for attr in node.kwd_attrs:
            if attr.startswith("_"):
                self.error(node, f'"{attr}": private attributes are not allowed in class patterns.')
        for sub in ast.walk(node.cls):
            if isinstance(sub, ast.Attribute) and sub.attr.startswith("_"):
                self.error(sub, f'"{sub.attr}": private names are not allowed in patterns.')
            elif isinstance(sub, ast.Name):
                self.check_name(sub, sub.id)
        for pattern in [*node.patterns, *node.kwd_patterns]:
            self.visit(pattern)
        return node

    def visit_MatchAs(self, node: ast.MatchAs) -> Any:
        self.check_name(node, node.name)
        return self.node_contents_visit(node)

    def visit_MatchStar(self, node: ast.MatchStar) -> Any:
        self.check_name(node, node.name)
        return node

    def visit_MatchMapping(self, node: ast.MatchMapping) -> Any:
        self.check_name(node, node.rest)
        for key in node.keys:
            self.visit_MatchValue(ast.MatchValue(value=key))
        for pattern in node.patterns:
            self.visit(pattern)
        return node

    def visit_MatchSequence(self, node: ast.MatchSequence) -> Any:
        return self.node_contents_visit(node)

    def visit_MatchOr(self, node: ast.MatchOr) -> Any:
        return self.node_contents_visit(node)

    def visit_MatchSingleton(self, node: ast.MatchSingleton) -> Any:
        return node


def transform(tree: ast.AST, errors: list[str], warnings: list[str]) -> ast.AST:
    """Apply the policy to ``tree`` in place; problems are appended to ``errors``."""
    transformer = CodeactTransformer(errors, warnings, {})
    result = transformer.visit(tree)
    ast.fix_missing_locations(result)
    return result  # type: ignore[no-any-return]
