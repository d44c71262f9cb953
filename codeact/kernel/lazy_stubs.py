"""Tool stubs compiled at their first use, inside the sandbox. Standard library only.

A large toolset's module of lean stubs (``render_lean_stubs`` on the host) defines thousands of
functions; compiling them all would cost every session a tenth of a second of CPU for tools it never
calls. The module lists its stubs after :data:`MARKER` (a comment: compiled whole, the module still
defines everything), one ``def`` per chunk, chunks separated by one blank line, then one footer line
that marks defaults. A typed module (``render_stubs(defer_typing=True)``) lists after
:data:`TYPED_MARKER` the stubs that need ``typing``, its import and their ``TypedDict`` classes: one
block, compiled whole at the first use of any of them, so an idle kernel never imports ``typing``.
The kernel compiles the part before the marker and keeps each stub's source:

* every such tool's name is bound at once to a :class:`Pending` stand-in, a callable that compiles
  the stub when it is called, so a tool reached by a computed name (``globals()[name]``) works;
* before a cell runs, the names its code uses (the ``co_names`` of its code objects, nested ones
  included) that still hold their stand-in get the real stub function: a tool the code names is an
  ordinary function by the time the code runs (``help``, ``inspect.signature``, ``aio``, threads).

Everything lives in the one kernel process of one session: nothing is shared between sessions.
"""

from __future__ import annotations

import threading
import types
from collections.abc import Callable, Iterable, Iterator, Mapping

TYPE_CHECKING = False
if TYPE_CHECKING:  # typing costs every idle kernel memory; annotations are never evaluated
    import ast
    from typing import Any

#: The same line as ``codeact.tool_stubs.render.LAZY_MARKER`` (the host cannot be imported here).
MARKER = "# -- codeact: the stubs below are compiled when the code first uses them --"
#: The same line as ``codeact.tool_stubs.render.TYPED_MARKER``: the typed stubs after it need ``typing``
#: (each idle kernel would pay for its import), so they are compiled together at the first use of one.
TYPED_MARKER = "# -- codeact: the stubs below use typing: compiled together when the code first uses one --"
#: How the stubs are compiled, in one piece or lazily: annotations postponed (the ``__future__``
#: import's flag), so none is evaluated when a stub is defined and ``help`` shows the same strings.
FLAGS = 0x1000000
_FOOTER = "\n\n__codeact_mark_defaults__("
_FILENAME = "<codeact-tools>"

#: How the kernel compiles a cell: (statements, trailing expression).
Compile = Callable[["ast.Module", str], "tuple[types.CodeType | None, types.CodeType | None]"]


def split(module: str) -> tuple[str, dict[str, str]]:
    """``module`` → (the source to compile now, python name → source of each stub compiled later).

    After :data:`TYPED_MARKER` every name maps to the one block they are all compiled in."""
    now, marker, later = module.partition("\n" + MARKER + "\n")
    if not marker:
        now, marker, later = module.partition("\n" + TYPED_MARKER + "\n")
        if not marker:
            return module, {}
        block = later.rpartition(_FOOTER)[0] if _FOOTER in later else later
        return now, dict.fromkeys(_defined(block), block)
    body = later.rpartition(_FOOTER)[0] if _FOOTER in later else later
    sources: dict[str, str] = {}
    for i, chunk in enumerate(body.split("\n\ndef ")):
        source = chunk if i == 0 else "def " + chunk
        if source.startswith("def ") and "(" in source:
            sources[source[4:source.index("(")]] = source
    return now, sources


def _defined(block: str) -> list[str]:
    """The functions a block of typed stubs defines (a stub's docstring lines are indented)."""
    return [line[4:line.index("(")] for line in block.split("\n") if line.startswith("def ") and "(" in line]


def code_names(*codes: types.CodeType | None) -> set[str]:
    """Every name the code objects (and the code nested in them) load, store or look up."""
    found: set[str] = set()
    todo = [c for c in codes if c is not None]
    while todo:
        code = todo.pop()
        found.update(code.co_names)
        todo.extend(c for c in code.co_consts if isinstance(c, types.CodeType))
    return found


class Pending:
    """What a tool's name holds until the code names it: calling it compiles the stub and calls that."""

    __slots__ = ("__name__", "_stubs")

    def __init__(self, stubs: LazyStubs, name: str) -> None:
        self.__name__ = name
        self._stubs = stubs

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        return self._stubs.function(self.__name__)(*args, **kwargs)

    @property
    def __wrapped__(self) -> types.FunctionType:  # inspect.signature and help() follow it
        return self._stubs.function(self.__name__)

    def __repr__(self) -> str:
        return f"<tool stub {self.__name__} (compiled at its first use)>"


class LazyStubs:
    """The stubs of one kernel that are not compiled yet, and the ones compiled so far."""

    def __init__(self, scope: dict[str, Any], sources: dict[str, str]) -> None:
        self.scope = scope  # the stubs' module globals: __codeact_call__, __codeact_args__, …
        self.sources = sources  # python name → source, while not compiled
        self.compiled: dict[str, types.FunctionType] = {}
        first = next(iter(sources.values()), "")
        #: The typed block (see :data:`TYPED_MARKER`) every name stands for, or "" for lean stubs.
        self._block = "" if first.startswith("def ") else first
        self.pending: dict[str, Pending] = {name: Pending(self, name) for name in sources}
        self._lock = threading.Lock()

    def names(self) -> list[str]:
        """Every tool this object stands for, compiled or not."""
        return [*self.compiled, *self.sources]

    def function(self, name: str) -> types.FunctionType:
        """The stub function named ``name`` (compiled now if it was not); KeyError for other names."""
        return self._compile([name])[name]

    def _compile(self, names: Iterable[str]) -> dict[str, types.FunctionType]:
        with self._lock:
            todo = [n for n in names if n not in self.compiled]
            if todo:  # one compile for all of a cell's new tools; typed ones: their block defines them all
                todo = list(self.sources) if self._block else todo
                source = self._block or "\n\n".join(self.sources[n] for n in todo)
                exec(compile(source, _FILENAME, "exec", flags=FLAGS, dont_inherit=True), self.scope)
                made = [self.scope[n] for n in todo]
                self.scope["__codeact_mark_defaults__"](made)
                for name, fn in zip(todo, made, strict=True):
                    if fn.__doc__ is None and not self._block:  # lean stubs carry no docstring: help() says
                        fn.__doc__ = f"A tool: describe_tool({name!r}) shows its parameters, types and result."
                    self.compiled[name] = fn
                    del self.sources[name]
            return {n: self.compiled[n] for n in names}

    def bind(self, namespace: dict[str, Any]) -> None:
        """Bind every pending tool's name in ``namespace`` to its stand-in."""
        namespace.update(self.pending)

    def install(self, names: Iterable[str], namespace: dict[str, Any]) -> None:
        """Put the real stub in ``namespace`` for each of ``names`` that still holds its stand-in (for
        a typed block, every name it defined)."""
        wanted = [n for n in names if n in self.pending and namespace.get(n) is self.pending[n]]
        if wanted:
            namespace.update(self._compile(wanted))
            if self._block:
                namespace.update({n: fn for n, fn in self.compiled.items() if namespace.get(n) is self.pending[n]})

    def install_named(self, codes: Iterable[types.CodeType | None], namespace: dict[str, Any]) -> None:
        """:meth:`install` the stubs the compiled ``codes`` name (nothing once all are compiled)."""
        if self.sources:
            self.install(code_names(*codes), namespace)

    def before_cells(self, compile_cell: Compile, namespace: Callable[[], dict[str, Any]]) -> Compile:
        """``compile_cell`` that also installs the stubs the compiled cell names."""

        def compile_and_install(tree: ast.Module, filename: str) -> tuple[types.CodeType | None, types.CodeType | None]:
            codes = compile_cell(tree, filename)
            self.install_named(codes, namespace())
            return codes

        return compile_and_install

    def functions(self, eager: Mapping[str, types.FunctionType]) -> Mapping[str, types.FunctionType]:
        """A mapping of every stub, ``eager`` ones and these, compiling one when it is looked up."""
        return _Functions(eager, self)


class _Functions(Mapping[str, types.FunctionType]):
    def __init__(self, eager: Mapping[str, types.FunctionType], lazy: LazyStubs) -> None:
        self._eager = eager
        self._lazy = lazy

    def __getitem__(self, name: str) -> types.FunctionType:
        if name in self._eager:
            return self._eager[name]
        if name in self._lazy.pending:
            return self._lazy.function(name)
        raise KeyError(name)

    def __iter__(self) -> Iterator[str]:
        yield from self._eager
        yield from self._lazy.pending

    def __len__(self) -> int:
        return len(self._eager) + len(self._lazy.pending)


_SEARCH = 'search_tools("what you want to do") finds tools by what they do'


def name_hint(exc: BaseException, tools: Iterable[str]) -> str:
    """For a NameError of a name like a tool's: the closest tool names and how to search for tools."""
    name = getattr(exc, "name", None)
    if not isinstance(exc, NameError) or not isinstance(name, str) or not name:
        return ""
    tools = [t for t in tools if not t.startswith("__codeact")]
    if not tools:
        return ""
    import difflib

    close = difflib.get_close_matches(name, tools, n=3, cutoff=0.75)
    if close:
        return f"; did you mean {', '.join(close)}? {_SEARCH}"
    prefix = name.split("_", 1)[0] + "_"
    if "_" in name.strip("_") and any(t.startswith(prefix) for t in tools):
        return f"; no tool has that name: {_SEARCH}"
    return ""
