"""Data-flow labels inside the kernel (issue 31). Standard library only: it runs in the sandbox.

A ``run`` frame with ``flow`` has its cell rewritten by ``_flow_rewrite`` so that every operation
goes through a helper of :class:`Flow` (``__flow__`` in the namespace). Labels are frozensets of
strings; the kernel only joins them (union); their meaning is the host's.

Representation
--------------
* Labeled immutable values are instances of label-carrying subclasses (``LStr``, ``LBytes``,
  ``LInt``, ``LFloat``, ``LComplex``, ``LTuple``, ``LFrozenset``), their labels in ``_fl``. A new
  box is made whenever labels are added, so a label never lands on a shared object (small ints,
  ``''``, interned strings and code constants stay plain and unlabeled).
* ``None``, ``True``, ``False`` and ``...`` cannot be subclassed: a labeled one is an ``LBox``
  (a small proxy: truth, equality, hash, repr, str, int, comparisons delegate). The rewritten
  ``is``/``is not`` unwrap it, and opaque calls receive the plain value.
* Labeled mutable containers made by the kernel (tool results, displays, comprehensions) are
  ``LList``/``LDict``/``LSet`` whose ``_fl`` (the container's *own* labels: its length, which keys)
  grows in place. Any other object (a plain list the code aliased, an exception, a class
  instance, an iterator) gets its own labels in ``_side``: id -> (object, labels), holding a
  strong reference so that an id is never reused while labeled. :func:`prune`, at the start of
  each run, drops the entries of objects nothing else refers to (they can reach no sink); past
  :data:`_SIDE_CAP` entries (cyclic garbage the count cannot see), the oldest are folded into
  ``_overflow``, which every object not boxed then carries (sound: a value never loses a label).
* An element keeps its own labels; reading it through a labeled container (subscript, iteration,
  unpacking, ``*``/``**``) adds the container's own labels. ``deep(v)`` is the union over a value
  and everything it holds (bounded: past :data:`_DEEP_CAP` nodes it is every label seen).
* Control flow: each thread has a stack of pc entries (``_Thread.stack``); the pc is their union.
  Assignments, returns, yields and tool calls under it carry it. Threads other than the kernel's
  main thread start with the escape set as their pc.
* Opaque calls (C functions, uninstrumented Python): the result carries every label of the
  callee, its ``__self__`` and the arguments (deep), and of whatever instrumented code returned to
  it meanwhile (callbacks, generators: ``ret``'s accumulator); tool calls made inside carry those
  labels as pc. A call not on the pure list also adds its inputs and the pc to the session's
  escape set, which labels every later non-pure opaque result and untracked output.
"""

from __future__ import annotations

import ast
import base64
import binascii
import builtins
import hashlib
import json
import math
import operator
import re
import sys
import threading
import types
from collections.abc import Callable, Iterable, Iterator
from typing import Any

EMPTY: frozenset[str] = frozenset()
_DEEP_CAP = 20_000


# -- boxes ------------------------------------------------------------------------------------
class LStr(str):
    __slots__ = ("_fl",)
    _fl: frozenset[str]

    def __str__(self) -> str:
        return self  # str() of a labeled str keeps the box (print/format see the same text)


class LBytes(bytes):
    _fl: frozenset[str]


class LInt(int):
    _fl: frozenset[str]


class LFloat(float):
    _fl: frozenset[str]


class LComplex(complex):
    _fl: frozenset[str]


class LTuple(tuple):  # type: ignore[type-arg]
    _fl: frozenset[str]


class LFrozenset(frozenset):  # type: ignore[type-arg]
    _fl: frozenset[str]


class LList(list):  # type: ignore[type-arg]
    _fl: frozenset[str]


class LDict(dict):  # type: ignore[type-arg]
    _fl: frozenset[str]


class LSet(set):  # type: ignore[type-arg]
    _fl: frozenset[str]


class LBox:
    """A labeled ``None``/``True``/``False``/``...`` (those are singletons: never labeled themselves)."""

    __slots__ = ("_fl", "v")

    def __init__(self, v: Any, labels: frozenset[str]) -> None:
        self.v, self._fl = v, labels

    def __bool__(self) -> bool:
        return bool(self.v)

    def __eq__(self, other: object) -> bool:
        return bool(self.v == (other.v if type(other) is LBox else other))

    def __ne__(self, other: object) -> bool:
        return not self.__eq__(other)

    def __lt__(self, other: Any) -> Any:
        return self.v < (other.v if type(other) is LBox else other)

    def __gt__(self, other: Any) -> Any:
        return self.v > (other.v if type(other) is LBox else other)

    def __hash__(self) -> int:
        return hash(self.v)

    def __repr__(self) -> str:
        return repr(self.v)

    def __str__(self) -> str:
        return str(self.v)

    def __format__(self, spec: str) -> str:
        return format(self.v, spec)

    def __int__(self) -> int:
        return int(self.v)

    def __index__(self) -> int:
        return operator.index(self.v)


_IMMUTABLE: dict[type, type] = {str: LStr, bytes: LBytes, int: LInt, float: LFloat, complex: LComplex,
                                tuple: LTuple, frozenset: LFrozenset}
_MUTABLE: dict[type, type] = {list: LList, dict: LDict, set: LSet}
_IMM_BOXES = frozenset(_IMMUTABLE.values())
_MUT_BOXES = frozenset(_MUTABLE.values())
_BOXES = _IMM_BOXES | _MUT_BOXES | {LBox}
_SINGLETONS = (type(None), bool, type(...))
_PLAIN_SCALARS = frozenset({str, bytes, int, float, complex, bool, type(None)})
_side: dict[int, tuple[Any, frozenset[str]]] = {}
#: The labels of entries evicted from a full ``_side``: carried by every object that is not boxed.
_overflow: frozenset[str] = EMPTY
_SIDE_CAP = 50_000


def own(v: Any) -> frozenset[str]:
    """The labels ``v`` itself carries (not those of what it holds)."""
    if type(v) in _BOXES:
        return v._fl  # type: ignore[no-any-return]
    found = EMPTY
    if _side:
        entry = _side.get(id(v))
        if entry is not None and entry[0] is v:
            found = entry[1]
    if _overflow and type(v) not in _PLAIN_SCALARS:
        return found | _overflow
    return found


def _counts(table: dict[int, tuple[Any, frozenset[str]]]) -> list[tuple[int, int]]:
    """Each entry's key and its object's reference count, as seen from here."""
    return [(k, sys.getrefcount(e[0])) for k, e in list(table.items())]


#: What :func:`_counts` reads for an object only its entry refers to (measured, not assumed: the
#: interpreter's own temporaries differ between versions).
_ONLY_OURS = _counts({0: (object(), EMPTY)})[0][1]


def prune() -> None:
    """Drop the side entries of objects only the table still refers to, until none is left (a
    dropped object frees what it alone held); then fold the oldest past the cap into ``_overflow``.
    Dropping is safe: with no other reference no code can reach the object again. Objects in
    reference cycles keep a count above that, so they stay (kept is always sound)."""
    global _overflow
    while _side:
        try:
            dead = [k for k, n in _counts(_side) if n <= _ONLY_OURS]
        except RuntimeError:  # another thread labeled something meanwhile: keep all, next run prunes
            return
        if not dead:
            break
        for k in dead:
            _side.pop(k, None)
    if len(_side) > _SIDE_CAP:
        folded = set(_overflow)
        for k in list(_side)[:len(_side) - _SIDE_CAP // 2]:
            entry = _side.pop(k, None)
            if entry is not None:
                folded.update(entry[1])
        _overflow = frozenset(folded)


def add(v: Any, labels: frozenset[str]) -> Any:
    """``v`` carrying ``labels`` too: a new box for an immutable, in place for anything else."""
    if not labels:
        return v
    t = type(v)
    box = _IMMUTABLE.get(t)
    if box is not None:
        made = box(v)
        made._fl = labels
        return made
    if t in _IMM_BOXES:
        if labels <= v._fl:
            return v
        made = t(v)
        made._fl = v._fl | labels
        return made
    if t in _MUT_BOXES:
        v._fl = v._fl | labels
        return v
    if t is LBox:
        return v if labels <= v._fl else LBox(v.v, v._fl | labels)
    if t in _SINGLETONS:
        return LBox(v, labels)
    entry = _side.get(id(v))
    old = entry[1] if entry is not None and entry[0] is v else EMPTY
    if not labels <= old:
        _side[id(v)] = (v, old | labels)
    return v


def plain(v: Any) -> Any:
    """``v`` with every box replaced by its plain value (for JSON on the wire and ``json.dumps``)."""
    t = type(v)
    if t in _PLAIN_SCALARS:
        return v
    if t is LBox:
        return v.v
    if t is LStr:
        return str.__str__(v)
    if t in _IMM_BOXES and t not in (LTuple, LFrozenset):
        return t.__mro__[1](v)
    if isinstance(v, dict):
        return {plain(k): plain(x) for k, x in v.items()}
    if isinstance(v, list):
        return [plain(x) for x in v]
    if isinstance(v, tuple):
        return tuple(plain(x) for x in v) if t in (tuple, LTuple) else v  # a named tuple stays as it is
    if isinstance(v, (set, frozenset)):
        return {plain(x) for x in v}
    return v


def deep(v: Any, all_labels: frozenset[str] = EMPTY) -> frozenset[str]:
    """The union of the labels of ``v`` and of everything it holds (containers, instance dicts)."""
    t = type(v)
    if t in _PLAIN_SCALARS:
        return EMPTY
    if t in _IMM_BOXES and t is not LTuple and t is not LFrozenset:
        return v._fl  # type: ignore[no-any-return]
    found: set[str] = set()
    seen: set[int] = set()
    todo = [v]
    while todo:
        item = todo.pop()
        if id(item) in seen:
            continue
        seen.add(id(item))
        if len(seen) > _DEEP_CAP:
            return all_labels | frozenset(found)
        found.update(own(item))
        if isinstance(item, dict):
            todo.extend(item.keys())
            todo.extend(item.values())
        elif isinstance(item, (list, tuple, set, frozenset)):
            todo.extend(item)
        elif type(item) not in _PLAIN_SCALARS and not isinstance(item, (type, types.ModuleType, types.FunctionType)):
            attrs = getattr(item, "__dict__", None)
            if type(attrs) is dict:
                todo.extend(attrs.values())
            if isinstance(item, BaseException):
                todo.extend(item.args)
    return frozenset(found)


def box_json(v: Any, labels: frozenset[str]) -> Any:
    """A fresh JSON value with every part labeled (a tool's result, ``json.loads``)."""
    if not labels:
        return v
    t = type(v)
    if t is dict:
        made: Any = LDict((box_json(k, labels), box_json(x, labels)) for k, x in v.items())
    elif t is list:
        made = LList(box_json(x, labels) for x in v)
    else:
        return add(v, labels)
    made._fl = labels
    return made


# -- what is pure -------------------------------------------------------------------------------
_BUILTIN_TYPES = (types.BuiltinFunctionType, types.BuiltinMethodType, types.MethodWrapperType,
                  types.WrapperDescriptorType, types.MethodDescriptorType, types.ClassMethodDescriptorType)
_PURE_SELF = (str, bytes, int, float, complex, tuple, frozenset, bool, type(None), range, slice,
              re.Pattern, re.Match, type(json.JSONEncoder()), type(json.JSONDecoder()))
#: Methods of containers: their arguments are stored in the container (its own labels grow).
_CONTAINER_SELF = (list, dict, set, bytearray, type(hashlib.sha256()))
_READERS = frozenset({"get", "keys", "values", "items", "copy", "__getitem__", "pop", "popitem", "__iter__",
                      "__len__", "__contains__"})
#: Builtins (and classes) whose result depends only on the values passed (no hidden state written).
_PURE_FUNCS: set[Any] = {
    len, sorted, min, max, sum, abs, round, repr, ascii, format, ord, chr, hex, bin, oct, hash, divmod,
    pow, any, all, isinstance, issubclass, callable, id, type, str, bytes, int, float, complex, bool,
    tuple, frozenset, set, list, dict, range, slice, enumerate, zip, map, filter, reversed, iter, next,
    getattr, hasattr, bytearray, memoryview, object, json.dumps, json.loads,
}
_PURE_MODULES = (base64, binascii, hashlib, math, re, json, operator)
for _module in _PURE_MODULES:
    for _name in dir(_module):
        _obj = getattr(_module, _name)
        if callable(_obj) and not _name.startswith("_"):
            try:
                _PURE_FUNCS.add(_obj)
            except TypeError:
                pass
_PURE_FUNCS.update(x for x in vars(builtins).values() if isinstance(x, type) and issubclass(x, BaseException))
_PURE_FUNCS -= {json.dump, json.load, operator.setitem, operator.delitem, operator.iadd}
#: Results that only rearrange what was passed: labeled with the arguments' own labels, not deep.
_STRUCTURAL: frozenset[Any] = frozenset({list, tuple, dict, iter, enumerate, zip, reversed, next})
_FRESH_JSON = frozenset({json.loads})
_FRAME_FUNCS = frozenset({locals, globals, vars, dir})


def _in(a: Any, b: Any) -> bool:
    return a in b


def _not_in(a: Any, b: Any) -> bool:
    return a not in b


#: What the rewritten operators call: ``operator``'s functions, ``in``/``not in`` operand-first.
OPS = types.SimpleNamespace(**{n: getattr(operator, n) for n in dir(operator) if not n.startswith("_")},
                            in_=_in, not_in=_not_in)


class _Thread(threading.local):
    def __init__(self) -> None:
        #: pc entries: [labels, accumulator or None]; an accumulator gathers what instrumented code
        #: returned while an opaque call (or a marked expression) was running.
        self.stack: list[list[Any]] = []
        self.pc: frozenset[str] = EMPTY


class Flow:
    """One session's label state; its methods are what the rewritten code calls."""

    def __init__(self, main_ident: int) -> None:
        self.main = main_ident
        self.t = _Thread()
        self.escape: frozenset[str] = EMPTY
        self.all: frozenset[str] = EMPTY  # every label ever seen: the bound of a cut-short walk
        self.ctxs: list[frozenset[str]] = []
        self._ctx_keys: dict[frozenset[str], int] = {}
        self.codes: set[int] = set()  # ids of instrumented code objects (kept alive in _keep)
        self._keep: list[Any] = []
        self.classes: set[int] = set()
        self.stub_scope: dict[str, Any] | None = None
        self.transparent: set[Any] = set()
        self.out: dict[str, frozenset[str]] = {}
        self.printing = 0
        self.untracked: set[str] = set()
        self.context: frozenset[str] = EMPTY
        self.ops = OPS
        #: Kernel helpers handled like ``print`` (``display``, ``final_answer``): callable -> part.
        self.sinks: dict[Any, str] = {}

    # -- per run --------------------------------------------------------------------------------
    def begin(self, context: Iterable[str]) -> int:
        """A run starts: its context labels; returns their key for the rewriter."""
        self.context = frozenset(str(x) for x in context)
        self.all |= self.context
        prune()
        self.t.stack, self.t.pc = [], EMPTY
        self.out = {}
        self.untracked = set()
        return self.ctx_key(self.context)

    def ctx_key(self, labels: frozenset[str]) -> int:
        key = self._ctx_keys.get(labels)
        if key is None:
            key = self._ctx_keys[labels] = len(self.ctxs)
            self.ctxs.append(labels)
        return key

    def register(self, code: types.CodeType) -> None:
        todo = [code]
        while todo:
            c = todo.pop()
            self.codes.add(id(c))
            self._keep.append(c)
            todo.extend(x for x in c.co_consts if isinstance(x, types.CodeType))

    def note_out(self, part: str, labels: frozenset[str]) -> None:
        if labels:
            self.out[part] = self.out.get(part, EMPTY) | labels

    def done_labels(self, has_output: dict[str, bool], value: Any, exc: BaseException | None,
                    final: list[Any]) -> dict[str, list[str]]:
        """The ``labels`` of the ``done`` frame."""
        out = dict(self.out)
        for name in ("stdout", "stderr"):
            if has_output.get(name) and name in self.untracked:
                out[name] = out.get(name, EMPTY) | self.escape
        if has_output.get("outputs"):
            out["outputs"] = out.get("outputs", EMPTY) | self.escape
        if value is not None:
            out["value"] = out.get("value", EMPTY) | deep(value, self.all)
        for item in final:
            out["value"] = out.get("value", EMPTY) | deep(item, self.all)
        if exc is not None:
            out["error"] = out.get("error", EMPTY) | deep(exc, self.all) | self.context | self.t.pc
        return {k: sorted(v) for k, v in out.items() if v}

    # -- the tool client's side -------------------------------------------------------------------
    def call_labels(self, arguments: Any) -> tuple[Any, dict[str, Any]]:
        return _call_labels(self, arguments)

    def result_labels(self, value: Any, labels: Any, arguments: Any) -> tuple[Any, frozenset[str]]:
        return _result_labels(self, value, labels, arguments)

    def label_error(self, exc: BaseException, labels: frozenset[str]) -> None:
        add(exc, labels)

    # -- pc --------------------------------------------------------------------------------------
    def pc(self) -> frozenset[str]:
        t = self.t
        if threading.get_ident() != self.main:
            return t.pc | self.escape
        return t.pc

    def _push(self, labels: frozenset[str], acc: set[str] | None = None) -> list[Any]:
        t = self.t
        entry = [labels, acc]
        t.stack.append(entry)
        t.pc = t.pc | labels
        return entry

    def _pop(self, entry: list[Any]) -> None:
        t = self.t
        stack = t.stack
        for i in range(len(stack) - 1, -1, -1):
            if stack[i] is entry:
                del stack[i]
                break
        t.pc = frozenset().union(*(e[0] for e in stack)) if stack else EMPTY

    def enter(self) -> int:
        """A function starts: the depth to go back to when it ends (sticky entries end there)."""
        return len(self.t.stack)

    def leave(self, depth: int) -> None:
        t = self.t
        if len(t.stack) > depth:
            del t.stack[depth:]
            t.pc = frozenset().union(*(e[0] for e in t.stack)) if t.stack else EMPTY

    def pcv(self, v: Any) -> Any:
        """A value assigned under the pc carries it."""
        t = self.t
        if not t.pc and not (self.escape and threading.get_ident() != self.main):
            return v
        return add(v, self.pc())

    def ret(self, v: Any) -> Any:
        """A value returned or yielded: carries the pc; counted by the opaque caller, if any."""
        t = self.t
        if not t.stack:
            return self.pcv(v)
        v = add(v, self.pc())
        for entry in reversed(t.stack):
            if entry[1] is not None:
                entry[1].update(deep(v, self.all))
                break
        return v

    def gen(self, inner: Any) -> _Gen:
        """A generator expression: it runs under a pc of its own (see :class:`_Gen`)."""
        made = _Gen(self, inner)
        return add(made, own(inner))  # type: ignore[no-any-return]

    def _gather(self, labels: frozenset[str]) -> None:
        """What decided a generator's step reaches the nearest accumulator (the consumer's)."""
        for entry in reversed(self.t.stack):
            if entry[1] is not None:
                entry[1].update(labels)
                break

    # -- literals and expressions ------------------------------------------------------------------
    def lit(self, v: Any, key: int) -> Any:
        return add(v, self.ctxs[key])

    def fresh(self, v: Any, key: int) -> Any:
        """A display (``[...]``, ``{...}``): boxed with the context and the pc."""
        labels = self.ctxs[key] | self.pc()
        if not labels:
            return v
        box = _MUTABLE.get(type(v))
        if box is not None:
            made = box(v)
            made._fl = labels
            return made
        return add(v, labels)

    def mark(self) -> None:
        """Start of a marked expression (and/or, if-else, f-string, comprehension)."""
        self._push(EMPTY, set())

    def note(self, v: Any) -> Any:
        """A decision inside a marked expression: its labels join the pc until the mark ends."""
        labels = deep(v, self.all) if type(v) not in _PLAIN_SCALARS else EMPTY
        if labels:
            self._push(labels)
        return v.v if type(v) is LBox else v

    def unmark(self, v: Any, key: int) -> Any:
        t = self.t
        stack = t.stack
        gathered: set[str] = set(self.ctxs[key])
        while stack:
            entry = stack.pop()
            gathered.update(entry[0])
            if entry[1] is not None:
                gathered.update(entry[1])
                break
        t.pc = frozenset().union(*(e[0] for e in stack)) if stack else EMPTY
        return add(v, frozenset(gathered) | self.pc())

    def bin(self, op: Callable[[Any, Any], Any], a: Any, b: Any) -> Any:
        la = own(a) if type(a) in _BOXES else (deep(a, self.all) if type(a) not in _PLAIN_SCALARS else EMPTY)
        lb = own(b) if type(b) in _BOXES and type(b) not in (LTuple, LList, LDict) else \
            (deep(b, self.all) if type(b) not in _PLAIN_SCALARS else EMPTY)
        if type(a) is LBox:
            a = a.v
        if type(b) is LBox:
            b = b.v
        try:
            result = op(a, b)
        except BaseException as exc:
            add(exc, la | lb | self.pc())
            raise
        return add(result, la | lb) if (la or lb) else result

    def un(self, op: Callable[[Any], Any], a: Any) -> Any:
        labels = own(a)
        result = op(a.v if type(a) is LBox else a)
        return add(result, labels) if labels else result

    def cmp(self, ops: tuple[Callable[[Any, Any], Any], ...], *operands: Any) -> Any:
        labels: frozenset[str] = EMPTY
        for x in operands:
            if type(x) not in _PLAIN_SCALARS:
                labels = labels | deep(x, self.all)
        values = [x.v if type(x) is LBox else x for x in operands]
        result: Any = True
        try:
            for i, op in enumerate(ops):
                result = op(values[i], values[i + 1])
                if not result:
                    break
        except BaseException as exc:
            add(exc, labels | self.pc())
            raise
        return add(result, labels) if labels else result

    def item(self, o: Any, k: Any) -> Any:
        labels = own(o)
        if type(k) is slice:
            labels = labels | own(k.start) | own(k.stop) | own(k.step)
        elif type(k) not in _PLAIN_SCALARS:
            labels = labels | own(k)
            if type(k) is LBox:
                k = k.v
        try:
            v = (o.v if type(o) is LBox else o)[k]
        except BaseException as exc:
            add(exc, labels | deep(k, self.all) | self.pc())
            raise
        return add(v, labels) if labels else v

    def setitem(self, o: Any, k: Any, v: Any) -> None:
        labels = own(k) | self.pc()
        o[k.v if type(k) is LBox else k] = add(v, labels)
        if labels:
            add(o, labels)

    def attr(self, o: Any, name: str) -> Any:
        labels = own(o)
        try:
            v = getattr(o.v if type(o) is LBox else o, name)
        except BaseException as exc:
            add(exc, labels | self.pc())
            raise
        if labels and getattr(v, "__self__", None) is not o:
            return add(v, labels)
        return v

    def aug_attr(self, o: Any, name: str, op: Callable[[Any, Any], Any], v: Any) -> None:
        setattr(o, name, self.pcv(self.bin(op, self.attr(o, name), v)))

    def aug_item(self, o: Any, k: Any, op: Callable[[Any, Any], Any], v: Any) -> None:
        self.setitem(o, k, self.bin(op, self.item(o, k), v))

    def unpack(self, v: Any, shape: Any) -> Any:
        """An assignment's or a loop's target pattern, each part carrying the container's labels and the pc."""
        labels = own(v) | self.pc()
        if shape is None:
            return add(v, self.pc())
        items = list(v.v if type(v) is LBox else v)
        if len(shape) != len(items) or any(s == "*" for s in shape):
            return [add(x, labels) for x in items] if labels else items
        return [self.unpack(add(x, labels), s) if s is not None else add(x, labels)
                for x, s in zip(items, shape, strict=True)]

    def spread(self, v: Any) -> Any:
        labels = own(v)
        return [add(x, labels) for x in v] if labels else v

    def dspread(self, v: Any) -> Any:
        labels = own(v)
        return {k: add(x, labels) for k, x in v.items()} if labels else v

    # -- control flow -----------------------------------------------------------------------------
    def loop(self, iterable: Any, shape: Any, sticky: bool) -> Iterator[Any]:
        """A ``for`` loop's iterable: the loop runs (and its targets are set) under its labels."""
        labels = own(iterable)
        if type(iterable) is LBox:
            iterable = iterable.v
        if type(iterable) is _Gen:  # how often the body runs depends on what decided each step
            yield from self._loop_gen(iterable, shape, labels, sticky)
            return
        if not labels:
            if shape is None and not self.t.pc:
                yield from iterable
                return
            for item in iterable:
                yield self.unpack(item, shape)
            return
        for entry in reversed(self.t.stack):  # a comprehension's mark: its result's length depends on this
            if entry[1] is not None:
                entry[1].update(labels)
                break
        entry = self._push(labels)
        try:
            for item in iterable:
                yield self.unpack(item, shape)
        finally:
            if not sticky:
                self._pop(entry)

    def _loop_gen(self, gen: _Gen, shape: Any, labels: frozenset[str], sticky: bool) -> Iterator[Any]:
        # a ``for`` statement's entry (its cond's) stays after the loop, while the names the loop
        # may have bound are relabelled: a loop that ran no time labels them too
        mine = gen.sink is None
        entry: list[Any] = self._push(labels) if gen.sink is None else gen.sink
        try:
            while True:
                try:
                    item = next(gen)
                finally:
                    if not gen.last <= entry[0]:
                        entry[0] = entry[0] | gen.last
                        self.t.pc = self.t.pc | gen.last
                yield self.unpack(item, shape)
        except StopIteration:
            return
        finally:
            if mine and not sticky:
                self._pop(entry)

    def cond(self, test: Any, sticky: bool, shallow: bool = False) -> _Cond:
        """A branch's test (``shallow``: a loop's iterable, whose own labels count)."""
        return _Cond(self, test, sticky, own(test) if shallow else None)

    def wtest(self, test: Any) -> bool:
        """A ``while`` test: its labels stay in the pc until the function (or cell) ends."""
        labels = deep(test, self.all) if type(test) not in _PLAIN_SCALARS else EMPTY
        if labels and not labels <= self.t.pc:
            self._push(labels)
        return bool(test)

    def caught(self) -> _Cond:
        exc = sys.exc_info()[1]
        return _Cond(self, exc, False, deep(exc, self.all) if exc is not None else EMPTY)

    def exc(self, e: Any) -> Any:
        if isinstance(e, type) and issubclass(e, BaseException):
            e = e()
        labels = self.pc()
        if labels and isinstance(e, BaseException):
            add(e, labels)
        return e

    def klass(self, cls: Any) -> Any:
        self.classes.add(id(cls))
        self._keep.append(cls)
        return cls

    # -- calls ------------------------------------------------------------------------------------
    def _instrumented(self, f: Any) -> bool:
        t = type(f)
        if t is types.MethodType:
            f, t = f.__func__, type(f.__func__)
        if t is types.FunctionType:
            return id(f.__code__) in self.codes or f.__globals__ is self.stub_scope
        return id(f) in self.classes or f in self.transparent

    def call(self, f: Any, *args: Any, **kwargs: Any) -> Any:
        try:
            if self._instrumented(f):
                return f(*args, **kwargs)
        except TypeError:  # an unhashable callable
            pass
        special = _SPECIAL.get(f) if _hashable(f) else None
        if special is not None:
            return special(self, sys._getframe(1), f, args, kwargs)
        part = self.sinks.get(f) if self.sinks and _hashable(f) else None
        if part is not None:
            labels = self.pc()
            for x in (*args, *kwargs.values()):
                labels = labels | deep(x, self.all)
            self.note_out(part, labels)
            return f(*args, **kwargs)
        return self._opaque(f, args, kwargs)

    def _opaque(self, f: Any, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
        self_obj = getattr(f, "__self__", None) if isinstance(f, _BUILTIN_TYPES) else None
        pure = _hashable(f) and f in _PURE_FUNCS
        container = False
        if not pure and isinstance(f, _BUILTIN_TYPES) and self_obj is not None:
            pure = isinstance(self_obj, _PURE_SELF)
            container = not pure and isinstance(self_obj, _CONTAINER_SELF)
        structural = (container and getattr(f, "__name__", "") in _READERS) or (_hashable(f) and f in _STRUCTURAL)
        if structural:
            labels = own(f) | own(self_obj)
            for x in (*args, *kwargs.values()):
                labels = labels | own(x)
        else:
            labels = own(f) | (deep(self_obj, self.all) if self_obj is not None else EMPTY)
            for x in (*args, *kwargs.values()):
                if type(x) not in _PLAIN_SCALARS:
                    labels = labels | deep(x, self.all)
        if not pure and not container:
            self.escape = self.escape | labels | self.pc()
            labels = labels | self.escape
        args = tuple(x.v if type(x) is LBox else x for x in args)
        kwargs = {k: (x.v if type(x) is LBox else x) for k, x in kwargs.items()}
        if f is json.dumps and args:
            args = (plain(args[0]), *args[1:])
        if not labels and not _may_call_back(args, kwargs):
            if container and self.t.pc and not structural:
                add(self_obj, self.pc())
            return f(*args, **kwargs)
        acc: set[str] = set()
        entry = self._push(labels, acc)
        try:
            result = f(*args, **kwargs)
        except BaseException as exc:
            add(exc, labels | frozenset(acc) | self.pc())
            raise
        finally:
            self._pop(entry)
        labels = labels | frozenset(acc)
        if container and not structural:
            add(self_obj, labels | self.pc())
        if f in _FRESH_JSON:
            return box_json(result, labels)
        return add(result, labels)


def _may_call_back(args: tuple[Any, ...], kwargs: dict[str, Any]) -> bool:
    """Whether an opaque call may run instrumented code whose results it uses (a generator, a
    callback, an object with methods): then what that code returns is gathered into the result."""
    for x in (*args, *kwargs.values()):
        if type(x) not in _PLAIN_SCALARS and type(x) not in _BOXES:
            return True
    return False


def _hashable(f: Any) -> bool:
    try:
        hash(f)
    except TypeError:
        return False
    return True


class _Gen:
    """A generator expression's generator. Its frame pushes pc entries (its loops, its ``if``
    tests) that belong to it, not to whoever consumes it: they are put back on the thread's stack
    when it resumes and taken off when it yields or ends, so they do not leak into the consumer's
    pc. What they held at a step (``last``) decided whether an item came and which: it goes to the
    consumer's accumulator (an opaque call, a comprehension) and into the pc of a ``for`` over it."""

    __slots__ = ("flow", "inner", "last", "saved", "sink")

    def __init__(self, flow: Flow, inner: Any) -> None:
        self.flow, self.inner = flow, inner
        self.saved: list[list[Any]] = []
        self.last: frozenset[str] = EMPTY
        #: The pc entry of the ``for`` statement over it, which its steps' labels join.
        self.sink: list[Any] | None = None

    def __iter__(self) -> _Gen:
        return self

    def __next__(self) -> Any:
        return self._step(self.inner.__next__)

    def send(self, value: Any) -> Any:
        return self._step(self.inner.send, value)

    def throw(self, *exc: Any) -> Any:
        return self._step(self.inner.throw, *exc)

    def close(self) -> None:
        self._step(self.inner.close)

    def __getattr__(self, name: str) -> Any:  # gi_frame, gi_running, …: the generator's
        return getattr(self.inner, name)

    def _step(self, op: Callable[..., Any], *args: Any) -> Any:
        t = self.flow.t
        stack = t.stack
        depth = len(stack)
        if self.saved:
            stack.extend(self.saved)
            t.pc = t.pc.union(*(e[0] for e in self.saved))
        try:
            return op(*args)
        finally:
            self.saved = stack[depth:]
            del stack[depth:]
            t.pc = frozenset().union(*(e[0] for e in stack)) if stack else EMPTY
            self.last = frozenset().union(*(e[0] for e in self.saved)) if self.saved else EMPTY
            if self.last:
                self.flow._gather(self.last)


class _Cond:
    """``with __flow__.cond(test) as c: if c: ...``: the branch runs under the test's labels."""

    __slots__ = ("entry", "flow", "labels", "sticky", "value")

    def __init__(self, flow: Flow, test: Any, sticky: bool, labels: frozenset[str] | None = None) -> None:
        self.flow, self.sticky = flow, sticky
        if labels is None:
            labels = deep(test, flow.all) if type(test) not in _PLAIN_SCALARS else EMPTY
        self.labels = labels
        self.value = test.v if type(test) is LBox else test
        self.entry: list[Any] | None = None

    def __enter__(self) -> Any:
        if self.labels or type(self.value) is _Gen:
            self.entry = self.flow._push(self.labels)
            if type(self.value) is _Gen:
                self.value.sink = self.entry
        return self.value

    def __exit__(self, *exc: Any) -> None:
        if self.entry is not None and not self.sticky:
            self.flow._pop(self.entry)


# -- calls the kernel treats specially -------------------------------------------------------------
def _print(flow: Flow, frame: Any, f: Any, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
    target = kwargs.get("file")
    stream = "stdout" if target is None or target is sys.stdout else "stderr" if target is sys.stderr else None
    if stream is None:
        return flow._opaque(f, args, kwargs)
    labels = flow.pc()
    for x in (*args, *kwargs.values()):
        labels = labels | deep(x, flow.all)
    flow.note_out(stream, labels)
    flow.printing += 1
    try:
        return f(*args, **kwargs)
    finally:
        flow.printing -= 1


def _frame_func(flow: Flow, frame: Any, f: Any, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
    if args or kwargs:
        return flow._opaque(f, args, kwargs)
    if f is globals:
        return frame.f_globals
    names = frame.f_locals
    return sorted(names) if f is dir else names


def _run_text(flow: Flow, frame: Any, f: Any, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
    """``exec``/``eval``/``compile`` of text: the text is instrumented too, its literals carrying
    the text's labels (and the cell's context), run under its labels."""
    try:
        from ._flow_rewrite import instrument
    except ImportError:
        from _flow_rewrite import instrument  # type: ignore[no-redef]
    if not args:
        return f(*args, **kwargs)
    source, rest = args[0], list(args[1:])
    labels = deep(source, flow.all)
    for x in (*rest, *kwargs.values()):
        labels = labels | own(x)
    key = flow.ctx_key(labels | flow.context)
    if f is compile:
        filename = rest[0] if rest else kwargs.get("filename", "<string>")
        mode = rest[1] if len(rest) > 1 else kwargs.get("mode", "exec")
        if isinstance(source, (str, bytes, ast.AST)):
            tree = source if isinstance(source, ast.AST) else ast.parse(plain(source), str(filename), mode)
            if isinstance(tree, (ast.Module, ast.Expression, ast.Interactive)):
                code = compile(instrument(tree, key), str(filename), mode, dont_inherit=True)
                flow.register(code)
                return add(code, labels)
        return flow._opaque(f, args, kwargs)
    if isinstance(source, (str, bytes)):
        mode = "eval" if f is eval else "exec"
        code = compile(instrument(ast.parse(plain(source), "<string>", mode), key), "<string>", mode, dont_inherit=True)
        flow.register(code)
        source = code
    elif not isinstance(source, types.CodeType):
        return flow._opaque(f, args, kwargs)
    scope_g = rest[0] if rest else kwargs.get("globals")
    scope_l = rest[1] if len(rest) > 1 else kwargs.get("locals")
    if scope_g is None:
        scope_g, scope_l = frame.f_globals, frame.f_locals if scope_l is None else scope_l
    scope_g.setdefault("__flow__", flow)
    entry = flow._push(labels | own(source)) if labels | own(source) else None
    try:
        result = f(source, scope_g, scope_l)
    finally:
        if entry is not None:
            flow._pop(entry)
    return flow.ret(result) if f is eval else result


_SPECIAL: dict[Any, Callable[[Flow, Any, Any, tuple[Any, ...], dict[str, Any]], Any]] = {
    builtins.print: _print, builtins.exec: _run_text, builtins.eval: _run_text, builtins.compile: _run_text,
    **dict.fromkeys(_FRAME_FUNCS, _frame_func),
}


def _call_labels(flow: Flow, arguments: Any) -> tuple[Any, dict[str, Any]]:
    """A call frame's plain arguments and its ``labels``: each argument's deep labels, and the pc."""
    per: dict[str, list[str]] = {}
    if isinstance(arguments, dict):
        for key, value in arguments.items():
            per[str(key)] = sorted(deep(value, flow.all) | own(key))
    return plain(arguments), {"args": per, "pc": sorted(flow.pc())}


def _result_labels(flow: Flow, value: Any, labels: Any, arguments: Any) -> tuple[Any, frozenset[str]]:
    """A tool's result labeled with what the host said and with what its arguments carried."""
    given = frozenset(str(x) for x in labels) if isinstance(labels, list) else EMPTY
    flow.all |= given
    carried = given | (deep(arguments, flow.all) if arguments is not None else EMPTY)
    return box_json(value, carried), carried
