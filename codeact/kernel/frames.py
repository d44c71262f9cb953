"""Every frame of the channel, in both directions: its type, its fields, their types and caps.
Standard library only: it ships into the sandbox flat, beside the kernel.

One declaration for both sides. The kernel and the tool client build their frames with the names
here; the host checks every frame the kernel sends with :func:`problem` (strict: an unknown key, a
missing required key, a wrong type, an oversized string or list, or a value outside its choices is
refused, and the host treats a refused frame as a protocol violation). Frames the host sends are
declared too (the kernel trusts its host, so they are not checked there).

A field's kind is one of ``str``, ``int`` (never a bool), ``bool``, ``dict`` (a JSON object),
``any`` (any JSON value), ``error`` (the ``done`` frame's nested error object, see :data:`CODE_ERROR`)
or ``chunks`` (the ``output`` frame's ``[stream, text]`` pairs).
"""

from __future__ import annotations

TYPE_CHECKING = False
if TYPE_CHECKING:  # typing costs every idle kernel memory; annotations are never evaluated
    from typing import Any

__all__ = ["CODE_ERROR", "FRAMES", "FROM_HOST", "FROM_KERNEL", "RETRYABLE_CODES", "TERMINATIONS", "Field", "problem"]


# Alike by design (any __init__ that stores its keyword arguments, e.g. ToolHost's): a plain slotted
# class, not a dataclass, because importing dataclasses (and inspect) would slow every kernel start.
class Field:
    """One key of a frame: its kind, whether it must be present, and its bounds."""

    __slots__ = ("choices", "kind", "max_len", "minimum", "name", "nullable", "required")

    def __init__(self, name: str, kind: str, *, required: bool = True, max_len: int | None = None,
                 nullable: bool = False, choices: tuple[str, ...] | None = None, minimum: int | None = None) -> None:
        self.name = name
        self.kind = kind
        self.required = required
        self.max_len = max_len
        self.nullable = nullable
        self.choices = choices
        self.minimum = minimum

    def __repr__(self) -> str:
        return f"Field({self.name!r}, {self.kind!r})"


def _frame(*fields: Field) -> dict[str, Field]:
    return {"type": Field("type", "str"), **{f.name: f for f in fields}}


TERMINATIONS = ("completed", "error", "output_limit")
#: Tool error codes for which the same call, unchanged, may succeed later: a ``ToolError`` without
#: an explicit ``retryable`` derives it from these (``codeact.errors`` re-exports them).
RETRYABLE_CODES: frozenset[str] = frozenset({"timeout", "rate_limited", "upstream_error"})
STREAMS = ("stdout", "stderr")
#: The most ``[stream, text]`` pairs one ``output`` frame carries.
MAX_CHUNKS = 10_000

#: The ``error`` object of a ``done`` frame: what the code raised.
CODE_ERROR: dict[str, Field] = {
    "type": Field("type", "str", max_len=1000),
    "message": Field("message", "str", max_len=20_000),
    "lineno": Field("lineno", "int", required=False, nullable=True),
    "traceback": Field("traceback", "str", required=False, max_len=50_000),
}

#: Kernel → host.
FROM_KERNEL: dict[str, dict[str, Field]] = {
    # The kernel is up: protocol version, its pid, its code policy.
    "hello": _frame(Field("v", "int"), Field("pid", "int"), Field("policy", "str")),
    # The tool stubs are installed, or the namespace is reset (or why not).
    "ready": _frame(Field("error", "str", required=False, nullable=True)),
    # The names of a ``bind`` are set (or why not).
    "bound": _frame(Field("error", "str", required=False, nullable=True)),
    # A tool call from the code; ``seq`` matches the host's ``result``.
    "call": _frame(Field("seq", "int", minimum=1), Field("name", "str", max_len=512),
                   Field("arguments", "any", required=False),
                   Field("labels", "dict", required=False)),
    # Output of a streaming run since the last frame, in the order written.
    "output": _frame(Field("id", "str"), Field("chunks", "chunks", max_len=MAX_CHUNKS)),
    # The run ended: how, what it printed and returned.
    "done": _frame(Field("id", "str"), Field("termination", "str", choices=TERMINATIONS),
                   Field("stdout", "str", required=False), Field("stderr", "str", required=False),
                   Field("stdout_truncated", "bool", required=False),
                   Field("stderr_truncated", "bool", required=False),
                   Field("value", "any", required=False), Field("error", "error", required=False, nullable=True),
                   Field("final", "dict", required=False, nullable=True),
                   # What replay compares (checked by the host): the lanes of the run's calls and
                   # what the cell left running (threads, processes).
                   Field("facts", "dict", required=False),
                   # The names the cell bound (None: too many to say), for the host's check.
                   Field("names", "any", required=False, nullable=True),
                   # Rich outputs (``display``, open figures): ``{mime: data}`` bundles, checked by the host.
                   Field("outputs", "any", required=False),
                   Field("labels", "dict", required=False)),
}

#: Host → kernel.
FROM_HOST: dict[str, dict[str, Field]] = {
    "setup": _frame(Field("stubs", "str"), Field("max_frame", "int", required=False),
                    Field("spin_us", "int", required=False)),
    "run": _frame(Field("id", "str"), Field("code", "str"), Field("output_cap", "int"),
                  Field("output_limit", "int"), Field("stream", "bool", required=False),
                  # The caps of the rich outputs (``SandboxConfig.display_*``); the host checks again.
                  Field("display_cap", "int", required=False), Field("display_limit", "int", required=False),
                  Field("display_count", "int", required=False),
                  Field("flow", "dict", required=False)),
    "result": _frame(Field("seq", "int"), Field("ok", "bool"), Field("value", "any", required=False),
                     Field("error", "dict", required=False),
                     Field("labels", "any", required=False)),
    # Back to the namespace as setup left it (a batch's next item); answered by ``ready``.
    "reset": _frame(),
    # Set names to JSON values (a batch's ``item``): nothing is evaluated; answered by ``bound``.
    "bind": _frame(Field("values", "dict")),
    "interrupt": _frame(),
}

#: Every frame type of either direction.
FRAMES: dict[str, dict[str, Field]] = {**FROM_KERNEL, **FROM_HOST}

_TYPES: dict[str, Any] = {"str": str, "int": int, "bool": bool, "dict": dict}


def _field_problem(field: Field, value: Any) -> str | None:
    kind = field.kind
    if kind == "any":
        return None
    if value is None:
        return None if field.nullable else f"{field.name}: must not be null"
    if kind == "error":
        return problem(value, CODE_ERROR, field.name) if type(value) is dict else \
            f"{field.name}: must be an object, not {type(value).__name__}"
    if kind == "chunks":
        return _chunks_problem(field, value)
    if type(value) is not _TYPES[kind]:  # exact: a bool is not an int, a str subclass is not sent as JSON
        return f"{field.name}: must be {kind}, not {type(value).__name__}"
    if field.max_len is not None and len(value) > field.max_len:
        return f"{field.name}: longer than {field.max_len}"
    if field.minimum is not None and value < field.minimum:
        return f"{field.name}: less than {field.minimum}"
    if field.choices is not None and value not in field.choices:
        return f"{field.name}: must be one of {', '.join(field.choices)}"
    return None


def _chunks_problem(field: Field, value: Any) -> str | None:
    if type(value) is not list:
        return f"{field.name}: must be a list, not {type(value).__name__}"
    if field.max_len is not None and len(value) > field.max_len:
        return f"{field.name}: more than {field.max_len} items"
    for i, pair in enumerate(value):
        if type(pair) is not list or len(pair) != 2 or pair[0] not in STREAMS or type(pair[1]) is not str:
            return f"{field.name}.{i}: must be a [stream, text] pair with stream stdout or stderr"
    return None


def problem(message: Any, fields: dict[str, Field] | None = None, where: str = "") -> str | None:
    """What is wrong with ``message`` as a frame (or as ``fields``), or None when it is well formed."""
    if type(message) is not dict:
        return f"{where or 'frame'}: must be an object, not {type(message).__name__}"
    prefix = f"{where}." if where else ""
    if fields is None:
        kind = message.get("type")
        fields = FRAMES.get(kind) if type(kind) is str else None
        if fields is None:
            return f"type: unknown frame type {str(kind)[:40]!r}"
    for key, value in message.items():
        field = fields.get(key)
        if field is None:
            return f"{prefix}{str(key)[:40]}: unknown field"
        issue = _field_problem(field, value)
        if issue is not None:
            return prefix + issue
    for name, field in fields.items():
        if field.required and name not in message:
            return f"{prefix}{name}: missing"
    return None
