"""What one code action produced: ``ExecutionResult`` and its parts, and the model's view of it."""

from __future__ import annotations

import base64
import json
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

__all__ = [
    "CodeError",
    "Diagnostic",
    "EgressRecord",
    "ExecutionResult",
    "FileInfo",
    "FlowDecision",
    "Termination",
    "ToolCallError",
    "ToolCallRecord",
    "bounded_value",
    "oversized_json",
    "render_observation",
]

#: ``interrupted``: stopped on request (``Session.interrupt``, Ctrl-C in the CLI); the records so far are kept.
#: ``rejected``: not run, the check found an error (``Runtime(check="block")``); nothing happened.
Termination = Literal["completed", "error", "timeout", "memory", "output_limit", "killed", "interrupted", "rejected"]


class ToolCallError(BaseModel):
    """Why a tool call failed. ``retryable``: the same call, unchanged, may succeed later;
    ``retry_after`` and ``data``: what the tool's ``ToolError`` said besides (left out when unset)."""

    model_config = ConfigDict(frozen=True)

    code: str
    message: str
    retryable: bool = False
    retry_after: float | None = Field(None, exclude_if=lambda v: v is None)
    data: Any = Field(None, exclude_if=lambda v: v is None)


class FlowDecision(BaseModel):
    """What a data-flow policy (``runtime.flow``) decided about one call: ``allow`` (no rule
    objected), ``deny`` (refused, ``policy_denied``), ``approved``/``refused`` (a rule objected and
    the approver was asked), ``audit`` (a rule objected; allowed and recorded). ``reason``: which
    rule objected and why (names parameters and labels, never the data)."""

    model_config = ConfigDict(frozen=True)

    decision: Literal["allow", "deny", "approved", "refused", "audit"]
    reason: str | None = Field(None, exclude_if=lambda v: v is None)


def _unset(value: Any) -> bool:
    return value is None


class ToolCallRecord(BaseModel):
    """One tool call as the host saw it: recorded when it arrived and again when it ended."""

    id: str
    name: str
    arguments: Any = None
    ok: bool = False
    result: Any = None
    error: ToolCallError | None = None
    duration_ms: float = 0.0
    #: Answered from this session's ledger without running the tool again (cacheable tools).
    cached: bool = False
    #: False while the call is in flight; a record still pending when the run ended was cut short.
    finished: bool = False
    #: Under a data-flow policy (``Runtime(flow=...)``; None, left out, without one): the labels of
    #: each argument (``{name: [labels]}``, what it was computed from), of the control flow at the
    #: call (``pc_labels``), of the result the tool returned (``result_labels``), and the decision.
    labels: dict[str, list[str]] | None = Field(None, exclude_if=_unset)
    pc_labels: list[str] | None = Field(None, exclude_if=_unset)
    result_labels: list[str] | None = Field(None, exclude_if=_unset)
    flow: FlowDecision | None = Field(None, exclude_if=_unset)

    def labels_of_arguments(self) -> list[str] | None:
        """The union of the arguments' labels (None without a flow policy or when none has any)."""
        if not self.labels:
            return None
        return sorted(set().union(*self.labels.values())) or None

    def as_shown(self) -> ToolCallRecord:
        """This record as a model may see it: each labeled argument and a labeled result replaced
        by a note (what the model sees joins its context; see :func:`render_observation`)."""
        labels = self.labels or {}
        hidden_args = {name for name, found in labels.items() if found}
        if not hidden_args and not self.result_labels:
            return self
        update: dict[str, Any] = {}
        if hidden_args and isinstance(self.arguments, dict):
            update["arguments"] = {k: _hidden(labels[k]) if k in hidden_args else v for k, v in self.arguments.items()}
        elif hidden_args:
            update["arguments"] = _hidden(self.labels_of_arguments())
        if self.result_labels:
            update["result"] = _hidden(self.result_labels)
        return self.model_copy(update=update)


class CodeError(BaseModel):
    """An uncaught exception in the model's code. ``lineno`` is a line of the model's code."""

    type: str
    message: str
    lineno: int | None = None
    traceback: str = ""


class Diagnostic(BaseModel):
    """A problem the check found in a code action before it ran, at the model's own line and
    (1-based) column. ``error``: certain to fail; ``warning``: likely, or not certain."""

    model_config = ConfigDict(frozen=True)

    line: int
    column: int
    end_line: int
    end_column: int
    code: str
    message: str
    severity: Literal["error", "warning"] = "error"


class FileInfo(BaseModel):
    """A file the code wrote in the workspace (path relative to the workspace)."""

    path: str
    size: int


class EgressRecord(BaseModel):
    """One request the code sent out through the egress broker (``SandboxConfig(egress=...)``),
    allowed or refused. ``tunnel``: a CONNECT tunnel (TLS; its content is not seen, nor replayable).
    ``response``: a plain-HTTP answer as the sandbox got it (base64), kept so that a replay answers
    from the record (None: not kept, over ``Egress.max_kept_bytes``, or a tunnel); not in the
    result's JSON (traces, events): the session's cell records keep it (``runtime.snapshot``)."""

    method: str
    host: str
    port: int
    path: str = ""
    status: int | None = None
    bytes_out: int = 0
    bytes_in: int = 0
    duration_ms: float = 0.0
    allowed: bool = False
    reason: str | None = None
    tunnel: bool = False
    #: A digest of the request as sent upstream (method, target, headers, body): what replay matches.
    request_digest: str = ""
    response: str | None = Field(None, repr=False, exclude=True)

    def describe(self) -> str:
        """One line: ``GET host:port/path 200 (120 B in)``, or ``refused: why``."""
        what = f"{self.method} {self.host}:{self.port}{self.path}"
        if not self.allowed:
            return f"{what} refused: {self.reason or self.status}"
        return f"{what} {self.status} ({self.bytes_in} B in)" + (f" · {self.reason}" if self.reason else "")


class ExecutionResult(BaseModel):
    """The structured result of one code action: a public contract (``codeact exec --json`` prints it;
    its fields are listed in the README and pinned by the tests)."""

    # Alike by design (sandbox/driver.py DoneFrame): the kernel's done frame carries these fields on the
    # wire; the frame schema is the kernel's own (kernel/frames.py). EpisodeResult
    # (evals/results_store.py) is a list of fields of the same shape, of another record.
    ok: bool
    termination: Termination
    stdout: str = ""
    stderr: str = ""
    stdout_truncated: bool = False
    stderr_truncated: bool = False
    value: Any = None
    error: CodeError | None = None
    calls: list[ToolCallRecord] = Field(default_factory=list)
    files: list[FileInfo] = Field(default_factory=list)
    duration_ms: float = 0.0
    #: True when the sandbox was killed and the session's variables are gone.
    state_lost: bool = False
    #: One line on why the run ended the way it did, when it was not plain completion.
    reason: str | None = None
    #: Set by ``final_answer(x)`` in the code (``answered`` tells a None answer from none).
    final_answer: Any = None
    answered: bool = False
    #: This run started from a state rebuilt by replay (after a lost sandbox with
    #: ``SandboxConfig(recover=True)``, an idle suspension, or a lazy ``Runtime.restore``).
    restored: bool = False
    #: What the check found before the run (``Runtime(check=...)``); left out when empty.
    diagnostics: list[Diagnostic] = Field(default_factory=list, exclude_if=lambda v: not v)
    #: The requests the code sent out through the egress broker, in order; left out when empty.
    egress: list[EgressRecord] = Field(default_factory=list, exclude_if=lambda v: not v)
    #: Rich outputs, like Jupyter's ``display_data``: one ``{mime: data}`` bundle per ``display(obj)``,
    #: per rich cell value (a DataFrame, an image) and per matplotlib figure left open, in order.
    #: ``image/png``/``image/jpeg`` are base64, ``application/json`` its text; capped by
    #: ``SandboxConfig.display_cap``/``display_limit``/``display_count`` (a note says what was
    #: dropped); left out when empty.
    outputs: list[dict[str, str]] = Field(default_factory=list, exclude_if=lambda v: not v)
    #: Under a data-flow policy: the labels of each part of the observation (``stdout``, ``stderr``,
    #: ``value``, ``error``, ``outputs``), as the kernel reported them; what the model saw of this run
    #: joins the session's context (``Session.flow_context``). None (left out) without a policy.
    labels: dict[str, list[str]] | None = Field(None, exclude_if=_unset)

    def to_json(self, **kwargs: Any) -> str:
        return self.model_dump_json(**kwargs)

    def __eq__(self, other: object) -> bool:
        # The fields alone (not which were set explicitly), so a result equals its own JSON round trip.
        if not isinstance(other, ExecutionResult):
            return NotImplemented
        return self.__dict__ == other.__dict__


def oversized_json(value: Any, limit: int) -> str | None:
    """``value``'s JSON text if it is longer than ``limit`` characters, else None.

    Scalars and short strings are answered without serializing (tool results on the hot path are
    mostly those). May raise what ``json.dumps`` raises (e.g. on a circular structure).
    """
    if value is None or isinstance(value, (bool, int, float)):
        return None
    if isinstance(value, str) and len(value) <= limit // 6:  # even fully escaped it fits
        return None
    text = json.dumps(value, ensure_ascii=False, default=repr)
    return text if len(text) > limit else None


def bounded_value(value: Any, limit: int, label: str) -> Any:
    """``value`` if its JSON is at most ``limit`` characters, else a documented truncated view:
    ``{"truncated": True, "of": label, "total_chars": n, "preview": <the first limit/2 characters>}``.
    """
    text = oversized_json(value, limit)
    if text is None:
        return value
    return {"truncated": True, "of": label, "total_chars": len(text), "preview": text[: limit // 2]}


def _clip_middle(text: str, limit: int) -> str:
    if len(text) <= limit:
        return text
    keep = max(limit - 60, 0)
    head, tail = keep // 2, keep - keep // 2
    cut = len(text) - head - tail
    return f"{text[:head]}\n… [{cut} characters cut from the middle] …\n{text[len(text) - tail:]}"


def _short(value: Any, limit: int = 200) -> str:
    try:
        text = json.dumps(value, ensure_ascii=False, default=repr)
    except (TypeError, ValueError):
        text = repr(value)
    return text if len(text) <= limit else text[: limit - 1] + "…"


def _call_line(call: ToolCallRecord) -> str:
    # Under a flow policy, labeled arguments and results are not shown again: what the model sees
    # joins its context, and code that keeps data in variables keeps its literals clean.
    args = _hidden(call.labels_of_arguments()) or _short(call.arguments, 120)
    if call.flow is not None and call.flow.decision in ("deny", "refused"):
        return f"- {call.name}({args}) -> refused by the data-flow policy: {call.flow.reason or 'a rule objected'}"
    shown = _hidden(call.result_labels)
    if shown:
        return f"- {call.name}({args}) -> {'ok' if call.ok else 'failed'}: {shown}"
    if call.ok:
        tag = " (cached)" if call.cached else ""
        return f"- {call.name}({args}) -> ok{tag}: {_short(call.result)}"
    if call.error is not None:
        retry = ", retryable" if call.error.retryable else ""
        return f"- {call.name}({args}) -> {call.error.code}{retry}: {_short(call.error.message)}"
    return f"- {call.name}({args}) -> did not finish"


def _hidden(labels: list[str] | None) -> str:
    """What stands in for a labeled value in the model's view ("" when it carries no label)."""
    return f"<labeled {', '.join(labels)}: not shown; print it to see it>" if labels else ""


def _diagnostic_lines(result: ExecutionResult, max_chars: int) -> str:
    found = result.diagnostics
    errors = sum(d.severity == "error" for d in found)
    if result.termination == "rejected":
        head = f"rejected before running ({errors} error{'s' if errors != 1 else ''}; nothing ran, no tool was called):"
    else:
        head = f"check ({len(found)} finding{'s' if len(found) != 1 else ''}, the code ran anyway):"
    lines = [f"- line {d.line}, col {d.column}: {d.severity} [{d.code}] {d.message}" for d in found]
    return head + "\n" + _clip_middle("\n".join(lines), max_chars)


def _png_size(data: str) -> str:
    """``W×H`` from a base64 PNG's header, or "" when it is not one."""
    try:
        head = base64.b64decode(data[:32])
    except ValueError:
        return ""
    if len(head) < 24 or not head.startswith(b"\x89PNG"):
        return ""
    return f" {int.from_bytes(head[16:20], 'big')}×{int.from_bytes(head[20:24], 'big')}"


def _outputs_line(outputs: list[dict[str, str]], max_chars: int) -> str:
    """What the model is told of rich outputs: one line each with its kind; an image's size, never
    its data (base64 is no use as text; images are not attached, see docs); a table's text form."""
    lines = []
    for n, bundle in enumerate(outputs, 1):
        kinds = [m for m in bundle if m != "text/plain"] or ["text/plain"]
        if "image/png" in bundle or "image/jpeg" in bundle or "image/svg+xml" in bundle:
            size = _png_size(bundle["image/png"]) if "image/png" in bundle else ""
            lines.append(f"[{n}] image ({kinds[0]}{size}): shown to the user, not to you")
        else:
            text = _clip_middle(bundle.get("text/plain", ""), 1500)
            lines.append(f"[{n}] {', '.join(kinds)}:\n{text}" if text else f"[{n}] {', '.join(kinds)}")
    images = sum(line.endswith("not to you") for line in lines)
    head = f"outputs ({len(outputs)})" + (f"; {images} image{'s' if images != 1 else ''} produced" if images else "")
    return head + ":\n" + _clip_middle("\n".join(lines), max_chars)


def render_observation(result: ExecutionResult, max_chars: int = 8000) -> str:
    """The text fed back to the model: output, value, one line per call, the error with its line.

    Long parts are cut from the middle, saying how much was cut; ``result`` keeps everything.
    """
    parts: list[str] = []
    if result.diagnostics:
        parts.append(_diagnostic_lines(result, max_chars // 4))
    if result.stdout:
        note = " (truncated by the sandbox)" if result.stdout_truncated else ""
        parts.append(f"stdout{note}:\n{_clip_middle(result.stdout.removesuffix(chr(10)), max_chars // 2)}")
    if result.stderr:
        note = " (truncated by the sandbox)" if result.stderr_truncated else ""
        parts.append(f"stderr{note}:\n{_clip_middle(result.stderr.removesuffix(chr(10)), max_chars // 4)}")
    if result.value is not None:
        parts.append(f"value: {_clip_middle(_short(result.value, 10**9), max_chars // 4)}")
    if result.outputs:
        parts.append(_outputs_line(result.outputs, max_chars // 4))
    if result.calls:
        lines = [_call_line(c) for c in result.calls]
        parts.append(f"tool calls ({len(lines)}):\n" + _clip_middle("\n".join(lines), max_chars // 4))
    if result.error is not None:
        err = result.error
        where = f" at line {err.lineno}" if err.lineno is not None else ""
        tb = f"\n{_clip_middle(err.traceback, max_chars // 4)}" if err.traceback else ""
        parts.append(f"error{where}: {err.type}: {_clip_middle(err.message, 1000)}{tb}")
    if result.termination not in ("completed", "error", "rejected"):
        why = f": {result.reason}" if result.reason else ""
        parts.append(f"run ended: {result.termination}{why}")
    if result.state_lost:
        parts.append("note: the sandbox was restarted; variables from earlier runs are gone.")
    if not parts:
        parts.append("(no output)")
    return _clip_middle("\n\n".join(parts), max_chars)
