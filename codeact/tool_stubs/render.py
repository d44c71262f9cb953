"""render_stubs: tool specs → one module of typed Python stubs; the same text is the model's prompt view.

Each stub is an ordinary ``def`` whose body only builds a dict of arguments and returns
``__codeact_call__(<tool name>, <arguments>)``. The kernel injects ``__codeact_call__``; stubs use no
other global name besides ``typing`` names and the module's own ``__codeact_args__``, and no builtins,
since a tool may be called ``max`` or ``dict``. The module a sandbox runs (``defer_typing=True``) has
the stubs that need ``typing`` last, so that an idle kernel need not import it.

Faithful arguments: a signature shows the schema's documented default (``per_page: int = 30``), but
a short footer wraps every default in a ``__codeact_default__`` marker (its repr is the value's, so
``help()`` reads the same) and ``__codeact_args__`` leaves marked values out: an argument the code did
not pass is not sent, and the tool's (or server's) own default applies. An explicit ``None`` for an
optional parameter whose schema takes no null is left out too. The prompt view (``prompt=True``) is
the module without that machinery.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from codeact.tool_stubs._schema_to_py import (
    TypeRenderer,
    allows_null,
    camel,
    constraints,
    py_literal,
    py_str,
    required_keys,
)
from codeact.tool_stubs.spec import RESERVED_NAMES, ToolSpec, python_names

__all__ = ["HEADER", "LAZY_MARKER", "TYPED_MARKER", "StubParameter", "render_lean_stubs", "render_module",
           "render_stubs", "stub_signature"]

HEADER = """\
# Tools. Each function below runs a tool on the host, outside this sandbox, and returns its result.
# Call them like ordinary Python functions. A failed call raises ToolError, which has .code,
# .message and .retryable (True when the same call may succeed later); you can catch it.
# Concurrency: parallel(fn, items) runs calls at once (results in order, a failure's exception in
# its place), and every tool has an async twin, aio.<name>(...), for `await asyncio.gather(...)`.
# A result too large to send arrives as {"truncated": True, "call_id": ..., "preview": ...};
# read_result(call_id, offset, limit) pages through the rest."""

#: In a lean module, the stubs after this line are compiled in the sandbox when the code first uses
#: them (``codeact/kernel/lazy_stubs.py`` reads the same constant; the text is a plain comment,
#: so the module stays complete: compiled whole, it defines everything).
LAZY_MARKER = "# -- codeact: the stubs below are compiled when the code first uses them --"
#: In a typed module rendered with ``defer_typing``, the stubs after this line need ``typing`` and are
#: compiled together, the import included, when the code first uses one (``lazy_stubs`` reads it too).
TYPED_MARKER = "# -- codeact: the stubs below use typing: compiled together when the code first uses one --"
_CALL = "__codeact_call__"
_ARGS = "__codeact_args__"
_PREAMBLE = '''\
class __codeact_default__:
    """A default the code did not override: not sent, so the tool's own default applies."""

    __slots__ = ("value",)

    def __init__(self, value):
        self.value = value

    def __repr__(self):
        return self.value.__repr__()


def __codeact_args__(arguments, *drop_if_none):
    """The arguments the code passed (defaults left out; None too where the tool takes no null)."""
    return {
        key: value for key, value in arguments.items()
        if value.__class__ is not __codeact_default__ and not (value is None and key in drop_if_none)
    }


__codeact_locals__ = locals  # bound before any tool can shadow the builtin (lean stubs use it)


def __codeact_mark_defaults__(functions):
    for function in functions:
        if function.__defaults__:
            function.__defaults__ = (*(__codeact_default__(v) for v in function.__defaults__),)'''

#: Builtins that annotations use: a stub with one of these names goes last, with quoted annotations,
#: so that it cannot break the annotations of the stubs and classes defined before it.
_ANNOTATION_BUILTINS = frozenset({"str", "int", "float", "bool", "list", "dict"})
_MAX_LINE = 100


@dataclass
class _Param:
    key: str  # the JSON property name, sent to the host
    name: str  # the Python parameter name
    annotation: str
    default: str | None  # Python source of the default; None when required
    omit_if_none: bool
    doc: str


@dataclass(frozen=True)
class StubParameter:
    """One parameter of a stub as the check sees it: its Python name, the key it is sent as, and
    whether a ``None`` for it is left out rather than sent (an optional parameter without null)."""

    name: str
    key: str
    required: bool
    omit_if_none: bool


def stub_signature(spec: ToolSpec, stub: str) -> tuple[list[StubParameter], bool]:
    """The parameters of ``spec``'s stub in positional order, and whether it takes ``**kwargs``
    (the same signature :func:`render_stubs` and :func:`render_lean_stubs` write)."""
    params = [StubParameter(p.name, p.key, p.default is None, p.omit_if_none) for p in _params(spec, stub, None)]
    extra = spec.input_schema.get("additionalProperties")
    return params, extra is True or (isinstance(extra, dict) and bool(extra))


def render_stubs(specs: Sequence[ToolSpec], *, prompt: bool = False, defer_typing: bool = False) -> str:
    """Python source (3.10+) defining one typed stub function per spec, named by its python name.

    ``prompt=True``: the text the model is shown: the same signatures and docstrings, bodies ``...``,
    without the module's default-marking machinery. ``defer_typing=True`` (what a sandbox runs): the
    stubs that need ``typing`` (its names or a ``TypedDict``) come last, after :data:`TYPED_MARKER`,
    with the import, so that a kernel compiles them only when the code first uses one of them.
    """
    specs = list(specs)
    return render_module(specs, python_names(specs), prompt=prompt, defer_typing=defer_typing)


def render_module(specs: Sequence[ToolSpec], names: Mapping[str, str], *, prompt: bool = False,
                  header: str = HEADER, defer_typing: bool = False) -> str:
    """:func:`render_stubs` with the python names given (a subset of a larger set keeps its names)."""
    types = TypeRenderer(set(names.values()) | RESERVED_NAMES | _ANNOTATION_BUILTINS)
    head: list[tuple[str, str, bool]] = []  # (python name or "" for a class, source, needs typing)
    tail: list[tuple[str, str, bool]] = []  # stubs named like a builtin that annotations use, their classes
    for spec in specs:
        name = names[spec.name]
        shadows = name in _ANNOTATION_BUILTINS
        types.typed = False
        source = _function(spec, name, types, quoted=shadows, prompt=prompt)
        (tail if shadows else head).extend([*(("", c, True) for c in types.drain()), (name, source, types.typed)])
    deferred = defer_typing and not prompt and bool(types.imports)
    imports = "from typing import " + ", ".join(sorted(types.imports)) if types.imports else ""
    top = [header] if header else []
    if imports and not deferred:
        top.append(imports)
    if not specs:
        top.append("# (no tools are available)")
    parts = ["\n\n".join(top)] if top else []
    if not prompt and specs:
        parts.append(_PREAMBLE)
    if not deferred:
        parts += [source for _, source, _ in [*head, *tail]]
        if not prompt and specs:
            parts.append(_footer(names[s.name] for s in specs))
        return "\n\n\n".join(parts) + "\n"
    plain = [name for name, _, typed in head if not typed]
    parts += [source for _, source, typed in head if not typed]
    if plain:
        parts.append(_footer(plain))
    # builtin-named stubs stay last, so that every annotation before them reads the builtin
    later = [(name, source) for name, source, typed in head if typed] + [(name, source) for name, source, _ in tail]
    parts += [f"{TYPED_MARKER}\n{imports}", *(source for _, source in later)]
    parts.append(_footer(name for name, _ in later if name))
    return "\n\n\n".join(parts) + "\n"


def _footer(stubs: Iterable[str]) -> str:
    return f"__codeact_mark_defaults__(({''.join(f'{n}, ' for n in stubs)}))"


def _unique(base: str, taken: set[str]) -> str:
    name = base
    while name in taken:
        name += "_"
    return name


def _params(spec: ToolSpec, stub: str, types: TypeRenderer | None) -> list[_Param]:
    """The stub's parameters, required ones first; ``types=None``: without annotations (lean stubs)."""
    schema = spec.input_schema
    props = schema.get("properties")
    props = props if isinstance(props, dict) else {}
    required = required_keys(schema, props)
    pynames = python_names(list(props), reserved={_CALL})
    params = []
    for key, sub in props.items():
        annotation = types.annotation(sub, schema, camel(stub) + camel(key)) if types else ""
        doc = _param_doc(sub) if types else ""
        if key in required:
            params.append(_Param(key, pynames[key], annotation, None, False, doc))
            continue
        default = py_literal(sub["default"]) if isinstance(sub, dict) and "default" in sub else None
        omit = not allows_null(sub, schema)
        if default in (None, "None", '"None"'):  # BFCL-style docs write a missing default as "None"
            params.append(_Param(key, pynames[key], types.optional(annotation) if types else "", "None", omit, doc))
        else:
            params.append(_Param(key, pynames[key], annotation, default, omit, doc))
        if key != pynames[key]:
            params[-1].doc = f"{params[-1].doc} (sent to the tool as {py_str(key)})".lstrip()
    return sorted(params, key=lambda p: p.default is not None)  # stable: required ones first


def _param_doc(schema: Any) -> str:
    if not isinstance(schema, dict):
        return ""
    text = schema.get("description") or schema.get("title") or ""
    text = text.strip() if isinstance(text, str) else ""
    enum = schema.get("enum")
    if isinstance(enum, list) and enum:
        values = ", ".join(py_literal(v) or repr(v) for v in enum)
        text = f"{text} One of: {values}.".strip()
    limits = constraints(schema)
    return f"{text} ({limits})" if text and limits else text or limits


def _function(spec: ToolSpec, stub: str, types: TypeRenderer, quoted: bool, prompt: bool = False) -> str:
    def q(annotation: str) -> str:
        return py_str(annotation) if quoted and not annotation.startswith(("'", '"')) else annotation

    params = _params(spec, stub, types)
    taken = {p.name for p in params}
    extra = spec.input_schema.get("additionalProperties")
    kwargs = _unique("kwargs", taken) if extra is True or (isinstance(extra, dict) and extra) else None
    if spec.output_schema is not None:
        title = spec.output_schema.get("title")  # a pydantic model's class name: the stub's class has it too
        hint = camel(title) if isinstance(title, str) and camel(title).isidentifier() else camel(stub) + "Result"
        returns = types.annotation(spec.output_schema, spec.output_schema, hint)
    else:
        returns = types.any()
    parts = [f"{p.name}: {q(p.annotation)}" + (f" = {p.default}" if p.default is not None else "") for p in params]
    if kwargs:
        parts.append(f"**{kwargs}: {q(types.any())}")
    signature = f"def {stub}({', '.join(parts)}) -> {q(returns)}:"
    if len(signature) > _MAX_LINE:
        signature = f"def {stub}(\n" + "".join(f"    {p},\n" for p in parts) + f") -> {q(returns)}:"
    lines = [signature]
    doc = _docstring(spec, params, kwargs, returns)
    if doc:
        lines.append(doc)
    lines += ["    ..."] if prompt else _body(spec.name, params, kwargs, taken)  # the model needs no plumbing
    return "\n".join(lines)


def _docstring(spec: ToolSpec, params: list[_Param], kwargs: str | None, returns: str) -> str:
    lines = _text_lines(spec.description)
    if not lines and (params or kwargs or spec.output_schema is not None):
        lines = [f"Call the tool {py_str(spec.name)}."]
    described = [p for p in params if p.doc]  # one with no words has its whole story in the signature
    if described or kwargs:
        lines += ["", "Args:"] if lines else ["Args:"]
        for p in described:
            first, *rest = _text_lines(p.doc)
            lines.append(f"    {p.name}: {first}".rstrip())
            lines += [f"        {line}".rstrip() for line in rest]
        if kwargs:
            lines.append(f"    **{kwargs}: further arguments, passed to the tool unchanged.")
    if spec.output_schema is not None:
        out = spec.output_schema
        text = out.get("description") or out.get("title") or returns
        lines += ["", "Returns:", *(f"    {line}" for line in _text_lines(str(text)))]
    if not lines:
        return ""
    content = _escape_doc("\n".join(lines))
    if "\n" not in content:
        return f'    """{content}"""'
    first, *rest = content.split("\n")
    return "\n".join([f'    """{first}', *(f"    {line}" if line else "" for line in rest), '    """'])


def _text_lines(text: str) -> list[str]:
    text = text.replace("\r\n", "\n").replace("\r", "\n").strip()
    return [line.rstrip() for line in text.split("\n")] if text else []


def _escape_doc(text: str) -> str:
    """Make ``text`` safe inside a triple-quoted string: backslashes, quote runs, unprintables."""
    out: list[str] = []
    run = 0
    for i, ch in enumerate(text):
        if ch == '"' and (run == 2 or i == len(text) - 1):
            out.append('\\"')
            run = 0
        elif ch == '"':
            out.append(ch)
            run += 1
        else:
            run = 0
            if ch == "\\":
                out.append("\\\\")
            elif ch in "\n\t" or ch.isprintable():
                out.append(ch)
            else:
                out.append(ch.encode("unicode_escape").decode("ascii"))
    return "".join(out)


def _dict_source(params: list[_Param], indent: str, prefix: str, suffix: str) -> list[str]:
    items = [f"{py_str(p.key)}: {p.name}" for p in params]
    flat = f"{indent}{prefix}{{{', '.join(items)}}}{suffix}"
    if len(flat) <= _MAX_LINE or not items:
        return [flat]
    return [f"{indent}{prefix}{{", *(f"{indent}    {item}," for item in items), f"{indent}}}{suffix}"]


def _body(tool: str, params: list[_Param], kwargs: str | None, taken: set[str]) -> list[str]:
    call = f"return {_CALL}({py_str(tool)}, "
    if all(p.default is None for p in params) and not kwargs:
        return _dict_source(params, "    ", call, ")")
    drops = "".join(f", {py_str(p.key)}" for p in params if p.omit_if_none)
    if not kwargs:
        return _dict_source(params, "    ", f"{call}{_ARGS}(", f"{drops}))")
    var = _unique("arguments", taken | {kwargs})
    lines = _dict_source(params, "    ", f"{var} = {_ARGS}(", f"{drops})")
    lines += [f"    {var}.update({kwargs})", f"    {call}{var})"]
    return lines


def render_lean_stubs(specs: Sequence[ToolSpec]) -> str:
    """The executable module for a large toolset: every tool's stub with its real parameters and
    defaults but no annotations, docstrings or classes (``describe_tool`` shows those). Calls send
    exactly what :func:`render_stubs`' would.

    Layout (the sandbox's kernel relies on it): the header and the preamble, :data:`LAZY_MARKER`,
    then one ``def`` per tool, separated by one blank line and holding none, then the footer that
    marks defaults. A kernel compiles the part before the marker and each stub at its first use."""
    specs = list(specs)
    names = python_names(specs)
    defs = []
    for spec in specs:
        stub = names[spec.name]
        params = _params(spec, stub, None)
        taken = {p.name for p in params}
        extra = spec.input_schema.get("additionalProperties")
        kwargs = _unique("kwargs", taken) if extra is True or (isinstance(extra, dict) and extra) else None
        parts = [p.name + (f"={p.default}" if p.default is not None else "") for p in params]
        if kwargs:
            parts.append(f"**{kwargs}")
        if kwargs or any(p.key != p.name for p in params):
            body = _body(spec.name, params, kwargs, taken)
        else:  # the parameters are the keys: send the frame's locals (a third of the source to compile)
            drops = "".join(f", {py_str(p.key)}" for p in params if p.omit_if_none)
            body = [f"    return {_CALL}({py_str(spec.name)}, {_ARGS}(__codeact_locals__(){drops}))"]
        defs.append("\n".join([f"def {stub}({', '.join(parts)}):", *body]))
    if not specs:
        return HEADER + "\n"
    return "\n\n".join([HEADER, _PREAMBLE, LAZY_MARKER + "\n" + defs[0], *defs[1:], _footer(names.values())]) + "\n"
