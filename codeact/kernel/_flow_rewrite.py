"""The AST rewrite of a cell under data-flow tracking (see ``flow``). Standard library only.

Every expression that makes a value goes through a helper of ``__flow__``: literals (``lit``),
operators (``bin``, ``un``, ``cmp``), ``x[k]`` (``item``), ``x.a`` (``attr``), calls (``call``),
displays (``fresh``), and/or, if-else, f-strings and comprehensions (``mark``/``note``/``unmark``).
Statements: assignments carry the pc (``pcv``, ``unpack``, ``setitem``), returns and yields go
through ``ret``, ``if`` runs its branches inside ``with __flow__.cond(test) as __flowc__``, ``for``
iterates ``loop(...)``, ``while`` tests through ``wtest``, handlers run under ``caught()``, and a
function body keeps the depth of the pc stack at its start (``__flowf__``) and goes back to it at
its end. Docstrings, annotations, ``super()`` and ``match`` patterns are left as they are.
"""

from __future__ import annotations

import ast
from typing import Any

__all__ = ["HIDDEN", "instrument"]

F = "__flow__"
#: Names the rewrite binds in the code's scopes (never reported as the cell's names).
HIDDEN = frozenset({"__flow__", "__flowf__", "__flowc__"})
_BIN = {ast.Add: "add", ast.Sub: "sub", ast.Mult: "mul", ast.Div: "truediv", ast.FloorDiv: "floordiv",
        ast.Mod: "mod", ast.Pow: "pow", ast.LShift: "lshift", ast.RShift: "rshift", ast.BitOr: "or_",
        ast.BitXor: "xor", ast.BitAnd: "and_", ast.MatMult: "matmul"}
_IBIN = {k: "i" + v.rstrip("_") if v.endswith("_") else "i" + v for k, v in _BIN.items()}
_UN = {ast.UAdd: "pos", ast.USub: "neg", ast.Not: "not_", ast.Invert: "invert"}
_CMP = {ast.Eq: "eq", ast.NotEq: "ne", ast.Lt: "lt", ast.LtE: "le", ast.Gt: "gt", ast.GtE: "ge",
        ast.Is: "is_", ast.IsNot: "is_not", ast.In: "contains", ast.NotIn: "not_in"}
_FRAME_NAMES = frozenset({"super"})


def _h(name: str, *args: ast.expr) -> ast.Call:
    return ast.Call(ast.Attribute(ast.Name(F, ast.Load()), name, ast.Load()), list(args), [])


def _op(name: str) -> ast.expr:
    """``__flow__.ops.<name>``: an ``operator`` function (``in``/``not in`` as ``in_``/``not_in``)."""
    ops = ast.Attribute(ast.Name(F, ast.Load()), "ops", ast.Load())
    return ast.Attribute(ops, {"contains": "in_"}.get(name, name), ast.Load())


def _shape(target: ast.expr) -> Any:
    if isinstance(target, (ast.Tuple, ast.List)):
        return tuple("*" if isinstance(e, ast.Starred) else _shape(e) for e in target.elts)
    return None


def _abrupt(body: list[ast.stmt], loop: bool) -> bool:
    """Whether the statements leave their block early (return, raise; break/continue of this loop
    or, outside a loop, of an enclosing one), not counting nested functions and classes."""
    for node in body:
        for sub in _walk_local(node, loop):
            if isinstance(sub, (ast.Return, ast.Raise)) or (isinstance(sub, (ast.Break, ast.Continue)) and not loop):
                return True
            if isinstance(sub, (ast.Break, ast.Continue)) and loop:
                return True
    return False


def _walk_local(node: ast.AST, loop: bool) -> list[ast.AST]:
    found: list[ast.AST] = []
    todo = [node]
    while todo:
        item = todo.pop()
        found.append(item)
        for child in ast.iter_child_nodes(item):
            if isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef, ast.Lambda)):
                continue
            if isinstance(child, (ast.For, ast.AsyncFor, ast.While)):  # their break/continue are their own
                found.extend(n for n in ast.walk(child) if isinstance(n, (ast.Return, ast.Raise)))
                continue
            todo.append(child)
    return found


def _assigned(body: list[ast.stmt], target: ast.expr | None) -> list[str]:
    """The plain names the statements (and a loop's target) may bind, nested scopes left out."""
    found: set[str] = set()
    todo: list[ast.AST] = [*body] + ([target] if target is not None else [])
    while todo:
        item = todo.pop()
        if isinstance(item, ast.Name) and isinstance(item.ctx, ast.Store):
            found.add(item.id)
        for child in ast.iter_child_nodes(item):
            if not isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef, ast.Lambda,
                                      ast.ListComp, ast.SetComp, ast.DictComp, ast.GeneratorExp)):
                todo.append(child)
    return sorted(found - {"__flowc__", "__flowf__"})


def _relabel(names: list[str]) -> list[ast.stmt]:
    """After a branch or loop, still under its pc: every name it may have bound carries the pc,
    whether or not that path ran (``x = 0; if secret: x = 1`` labels ``x`` either way)."""
    out: list[ast.stmt] = []
    for name in names:
        again = ast.Assign([ast.Name(name, ast.Store())], _h("pcv", ast.Name(name, ast.Load())))
        out.append(ast.Try([again], [ast.ExceptHandler(ast.Name("NameError", ast.Load()), None, [ast.Pass()])], [], []))
    return out


class _Rewrite(ast.NodeTransformer):
    def __init__(self, key: int) -> None:
        self.key = key
        self.in_class = False  # directly in a class body: a name read there may be a global's

    def _relabel(self, names: list[str]) -> list[ast.stmt]:
        return [] if self.in_class else _relabel(names)

    # -- expressions -------------------------------------------------------------------------------
    def visit_Constant(self, node: ast.Constant) -> ast.expr:
        return _h("lit", node, ast.Constant(self.key))

    def visit_JoinedStr(self, node: ast.JoinedStr) -> ast.expr:
        for value in node.values:
            if isinstance(value, ast.FormattedValue):
                value.value = _h("note", self.visit(value.value))
                if value.format_spec is not None:
                    for part in value.format_spec.values:  # type: ignore[attr-defined]
                        if isinstance(part, ast.FormattedValue):
                            part.value = _h("note", self.visit(part.value))
        return self._marked(node)

    def _marked(self, expr: ast.expr) -> ast.expr:
        return _h("unmark", ast.BoolOp(ast.Or(), [_h("mark"), expr]), ast.Constant(self.key))

    def visit_BinOp(self, node: ast.BinOp) -> ast.expr:
        return _h("bin", _op(_BIN[type(node.op)]), self.visit(node.left), self.visit(node.right))

    def visit_UnaryOp(self, node: ast.UnaryOp) -> ast.expr:
        return _h("un", _op(_UN[type(node.op)]), self.visit(node.operand))

    def visit_Compare(self, node: ast.Compare) -> ast.expr:
        ops = ast.Tuple([_op(_CMP[type(o)]) for o in node.ops], ast.Load())
        return _h("cmp", ops, self.visit(node.left), *[self.visit(c) for c in node.comparators])

    def visit_BoolOp(self, node: ast.BoolOp) -> ast.expr:
        values = [self.visit(v) for v in node.values]
        values = [_h("note", v) for v in values[:-1]] + values[-1:]
        return self._marked(ast.BoolOp(node.op, values))

    def visit_IfExp(self, node: ast.IfExp) -> ast.expr:
        test = _h("note", self.visit(node.test))
        return self._marked(ast.IfExp(test, self.visit(node.body), self.visit(node.orelse)))

    def visit_Subscript(self, node: ast.Subscript) -> ast.expr:
        if not isinstance(node.ctx, ast.Load):
            node.value = self.visit(node.value)
            node.slice = self.visit(node.slice)
            return node
        return _h("item", self.visit(node.value), self.visit(node.slice))

    def visit_Slice(self, node: ast.Slice) -> ast.expr:
        parts = [self.visit(p) if p is not None else ast.Constant(None) for p in (node.lower, node.upper, node.step)]
        return ast.Call(ast.Name("slice", ast.Load()), parts, [])

    def visit_Attribute(self, node: ast.Attribute) -> ast.expr:
        if not isinstance(node.ctx, ast.Load):
            node.value = self.visit(node.value)
            return node
        return _h("attr", self.visit(node.value), ast.Constant(node.attr))

    def visit_Call(self, node: ast.Call) -> ast.expr:
        if isinstance(node.func, ast.Name) and node.func.id in _FRAME_NAMES:
            node.args = [self.visit(a) for a in node.args]
            return node
        args = [ast.Starred(_h("spread", self.visit(a.value)), ast.Load()) if isinstance(a, ast.Starred)
                else self.visit(a) for a in node.args]
        keywords = [ast.keyword(k.arg, self.visit(k.value) if k.arg is not None else _h("dspread", self.visit(k.value)))
                    for k in node.keywords]
        call = ast.Attribute(ast.Name(F, ast.Load()), "call", ast.Load())
        return ast.Call(call, [self.visit(node.func), *args], keywords)

    def _display(self, node: ast.expr) -> ast.expr:
        self.generic_visit(node)
        if isinstance(node, (ast.List, ast.Tuple, ast.Set)):
            node.elts = [ast.Starred(_h("spread", e.value), ast.Load()) if isinstance(e, ast.Starred) else e
                         for e in node.elts]
        if isinstance(node, ast.Dict):
            node.values = [_h("dspread", v) if k is None else v for k, v in zip(node.keys, node.values, strict=True)]
        return _h("fresh", node, ast.Constant(self.key))

    def visit_List(self, node: ast.List) -> ast.expr:
        return self._display(node) if isinstance(node.ctx, ast.Load) else self.generic_visit(node)  # type: ignore[return-value]

    def visit_Tuple(self, node: ast.Tuple) -> ast.expr:
        return self._display(node) if isinstance(node.ctx, ast.Load) else self.generic_visit(node)  # type: ignore[return-value]

    def visit_Set(self, node: ast.Set) -> ast.expr:
        return self._display(node)

    def visit_Dict(self, node: ast.Dict) -> ast.expr:
        return self._display(node)

    def _comp(self, node: Any, elts: tuple[str, ...]) -> ast.expr:
        for gen in node.generators:
            gen.iter = _h("loop", self.visit(gen.iter), ast.Constant(_shape(gen.target)), ast.Constant(False))
            gen.ifs = [_h("note", self.visit(c)) for c in gen.ifs]
        wrap = "ret" if isinstance(node, ast.GeneratorExp) else "pcv"
        for name in elts:
            setattr(node, name, _h(wrap, self.visit(getattr(node, name))))
        return self._marked(node)

    def visit_ListComp(self, node: ast.ListComp) -> ast.expr:
        return self._comp(node, ("elt",))

    def visit_SetComp(self, node: ast.SetComp) -> ast.expr:
        return self._comp(node, ("elt",))

    def visit_GeneratorExp(self, node: ast.GeneratorExp) -> ast.expr:
        return _h("gen", self._comp(node, ("elt",)))

    def visit_DictComp(self, node: ast.DictComp) -> ast.expr:
        return self._comp(node, ("key", "value"))

    def visit_Lambda(self, node: ast.Lambda) -> ast.expr:
        node.args = self._args(node.args)
        node.body = _h("ret", self.visit(node.body))
        return node

    def visit_NamedExpr(self, node: ast.NamedExpr) -> ast.expr:
        node.value = _h("pcv", self.visit(node.value))
        return node

    def visit_Yield(self, node: ast.Yield) -> ast.expr:
        node.value = _h("ret", self.visit(node.value) if node.value is not None else ast.Constant(None))
        return node

    def _args(self, args: ast.arguments) -> ast.arguments:
        args.defaults = [self.visit(d) for d in args.defaults]
        args.kw_defaults = [self.visit(d) if d is not None else None for d in args.kw_defaults]
        return args

    # -- statements --------------------------------------------------------------------------------
    def _body(self, body: list[ast.stmt]) -> list[ast.stmt]:
        out: list[ast.stmt] = []
        for stmt in body:
            new = self.visit(stmt)
            out.extend(new if isinstance(new, list) else [new])
        return out

    def _docstring(self, body: list[ast.stmt]) -> tuple[list[ast.stmt], list[ast.stmt]]:
        if body and isinstance(body[0], ast.Expr) and isinstance(body[0].value, ast.Constant) \
                and isinstance(body[0].value.value, str):
            return body[:1], body[1:]
        return [], body

    def visit_FunctionDef(self, node: Any) -> ast.stmt:
        node.args = self._args(node.args)
        node.decorator_list = [self.visit(d) for d in node.decorator_list]
        doc, body = self._docstring(node.body)
        outer, self.in_class = self.in_class, False
        enter = ast.Assign([ast.Name("__flowf__", ast.Store())], _h("enter"))
        leave = ast.Expr(_h("leave", ast.Name("__flowf__", ast.Load())))
        node.body = [*doc, enter, ast.Try(self._body(body) or [ast.Pass()], [], [], [leave])]
        self.in_class = outer
        return node  # type: ignore[no-any-return]

    visit_AsyncFunctionDef = visit_FunctionDef

    def visit_ClassDef(self, node: ast.ClassDef) -> ast.stmt:
        node.bases = [self.visit(b) for b in node.bases]
        node.keywords = [ast.keyword(k.arg, self.visit(k.value)) for k in node.keywords]
        node.decorator_list = [ast.Attribute(ast.Name(F, ast.Load()), "klass", ast.Load()),
                               *[self.visit(d) for d in node.decorator_list]]
        doc, body = self._docstring(node.body)
        outer, self.in_class = self.in_class, True
        try:
            node.body = [*doc, *self._body(body)] or [ast.Pass()]
        finally:
            self.in_class = outer
        return node

    def visit_Return(self, node: ast.Return) -> ast.stmt:
        node.value = _h("ret", self.visit(node.value) if node.value is not None else ast.Constant(None))
        return node

    def visit_Assign(self, node: ast.Assign) -> ast.stmt:
        value = self.visit(node.value)
        if len(node.targets) == 1 and isinstance(node.targets[0], ast.Subscript):
            target = node.targets[0]
            return ast.Expr(_h("setitem", self.visit(target.value), self.visit(target.slice), value))
        if len(node.targets) == 1 and isinstance(node.targets[0], (ast.Tuple, ast.List)):
            value = _h("unpack", value, ast.Constant(_shape(node.targets[0])))
        else:
            value = _h("pcv", value)
        node.targets = [self.visit(t) for t in node.targets]
        node.value = value
        return node

    def visit_AnnAssign(self, node: ast.AnnAssign) -> ast.stmt:
        if node.value is not None:
            node.value = _h("pcv", self.visit(node.value))
        if not isinstance(node.target, ast.Name):
            node.target = self.visit(node.target)
        return node

    def visit_AugAssign(self, node: ast.AugAssign) -> ast.stmt:
        op = _op(_IBIN[type(node.op)])
        value = self.visit(node.value)
        target = node.target
        if isinstance(target, ast.Attribute):
            return ast.Expr(_h("aug_attr", self.visit(target.value), ast.Constant(target.attr), op, value))
        if isinstance(target, ast.Subscript):
            return ast.Expr(_h("aug_item", self.visit(target.value), self.visit(target.slice), op, value))
        assert isinstance(target, ast.Name)
        load = ast.Name(target.id, ast.Load())
        return ast.Assign([ast.Name(target.id, ast.Store())], _h("pcv", _h("bin", op, load, value)))

    def visit_For(self, node: Any) -> ast.stmt:
        sticky = _abrupt(node.body, loop=True)
        names = _assigned([*node.body, *node.orelse], node.target)
        head = _h("cond", self.visit(node.iter), ast.Constant(sticky), ast.Constant(True))
        node.iter = _h("loop", ast.Name("__flowc__", ast.Load()), ast.Constant(_shape(node.target)),
                       ast.Constant(False))
        node.target = self.visit(node.target)
        node.body = self._body(node.body)
        node.orelse = self._body(node.orelse)
        return ast.With([ast.withitem(head, ast.Name("__flowc__", ast.Store()))], [node, *self._relabel(names)])

    visit_AsyncFor = visit_For

    def visit_While(self, node: ast.While) -> Any:
        names = _assigned([*node.body, *node.orelse], None)
        node.test = _h("wtest", self.visit(node.test))
        node.body = self._body(node.body)
        node.orelse = self._body(node.orelse)
        return [node, *self._relabel(names)]  # the test's labels stay in the pc: the names carry them

    def visit_If(self, node: ast.If) -> ast.stmt:
        sticky = _abrupt(node.body, loop=False) or _abrupt(node.orelse, loop=False)
        names = _assigned([*node.body, *node.orelse], None)
        test = _h("cond", self.visit(node.test), ast.Constant(sticky))
        inner = ast.If(ast.Name("__flowc__", ast.Load()), self._body(node.body), self._body(node.orelse))
        return ast.With([ast.withitem(test, ast.Name("__flowc__", ast.Store()))], [inner, *self._relabel(names)])

    def visit_Assert(self, node: ast.Assert) -> Any:
        raise_ = ast.Raise(ast.Call(ast.Name("AssertionError", ast.Load()), [node.msg] if node.msg else [], []), None)
        return self.visit(ast.If(ast.UnaryOp(ast.Not(), node.test), [raise_], []))

    def visit_Raise(self, node: ast.Raise) -> ast.stmt:
        if node.exc is not None:
            node.exc = _h("exc", self.visit(node.exc))
        if node.cause is not None:
            node.cause = self.visit(node.cause)
        return node

    def visit_ExceptHandler(self, node: ast.ExceptHandler) -> ast.ExceptHandler:
        if node.type is not None:
            node.type = self.visit(node.type)
        node.body = [ast.With([ast.withitem(_h("caught"), None)], self._body(node.body))]
        return node

    def visit_With(self, node: Any) -> ast.stmt:
        for item in node.items:
            item.context_expr = self.visit(item.context_expr)
        names = [i.optional_vars.id for i in node.items if isinstance(i.optional_vars, ast.Name)]
        again = [ast.Assign([ast.Name(n, ast.Store())], _h("pcv", ast.Name(n, ast.Load()))) for n in names]
        node.body = [*again, *self._body(node.body)]
        return node  # type: ignore[no-any-return]

    visit_AsyncWith = visit_With

    def visit_Match(self, node: ast.Match) -> ast.stmt:
        subject = _h("cond", self.visit(node.subject), ast.Constant(False))
        node.subject = ast.Name("__flowc__", ast.Load())
        for case in node.cases:
            if case.guard is not None:
                case.guard = self.visit(case.guard)
            captured = sorted({n.name for n in ast.walk(case.pattern) if isinstance(n, (ast.MatchAs, ast.MatchStar))
                               and n.name} | {n.rest for n in ast.walk(case.pattern)
                                              if isinstance(n, ast.MatchMapping) and n.rest})
            again = [ast.Assign([ast.Name(n, ast.Store())], _h("pcv", ast.Name(n, ast.Load()))) for n in captured]
            case.body = [*again, *self._body(case.body)]
        return ast.With([ast.withitem(subject, ast.Name("__flowc__", ast.Store()))], [node])


def instrument(tree: Any, key: int) -> Any:
    """``tree`` (a Module, Expression or Interactive) rewritten; ``key``: its literals' context labels."""
    rewrite = _Rewrite(key)
    if isinstance(tree, ast.Expression):
        tree.body = rewrite.visit(tree.body)
    else:
        doc, body = rewrite._docstring(tree.body) if isinstance(tree, ast.Module) else ([], tree.body)
        tree.body = [*doc, *rewrite._body(body)]
    return ast.fix_missing_locations(tree)
