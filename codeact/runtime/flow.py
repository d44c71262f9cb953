"""Data-flow policies (issue 31): labels that travel with values, checked at every tool call.

A label is a string; a set of them says where a value came from. Two kinds ship, extensible by
users (any other label string is carried and joined the same way, and a :class:`FlowPolicy`'s
``check`` may give it meaning):

- integrity: :data:`UNTRUSTED` marks low-integrity data (a web page, an email, anything a third
  party wrote); its absence means trusted.
- confidentiality: :data:`SECRET`, or ``readers:alice,bob`` (:func:`readers`); any label starting
  with ``secret`` or ``readers:`` is confidential (:func:`is_confidential`).

Labels join by union. A tool declares what its results carry and what its parameters require
(``ToolPolicy.labels``, ``trusted``, ``public_sink``; per source: ``Toolset.from_openapi(...,
labels=...)``); the kernel tracks the labels through the code and reports, for each call, the
labels of each argument and of the control flow at the call (``pc``). :func:`evaluate` is the one
place a call is judged, used by the tool host's pipeline for calls from code and from the JSON agent.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Literal, TypeAlias

from ..errors import ToolDefinitionError
from ._labelset import Labels, label_set

if TYPE_CHECKING:
    from ._tool import Tool, ToolPolicy

__all__ = ["SECRET", "UNTRUSTED", "FlowCall", "FlowPolicy", "FlowRule", "FlowVerdict", "Labels", "evaluate",
           "is_confidential", "label_set", "readers"]

#: Low integrity: written by someone other than the user (a web page, an email, a tool's output).
UNTRUSTED = "untrusted"
#: Confidential, readable by no one outside.
SECRET = "secret"
_CONFIDENTIAL_PREFIXES = ("secret", "readers:")

_NONE: Labels = frozenset()
#: What a policy does with a call: ``deny`` refuses it (``policy_denied``), ``ask`` asks the
#: approver, ``audit`` allows and records it.
OnViolation = Literal["deny", "ask", "audit"]
#: The judgement of :func:`evaluate`: (``allow``/``deny``/``ask``/``audit``, why or None).
FlowVerdict: TypeAlias = tuple[Literal["allow", "deny", "ask", "audit"], str | None]


def readers(*names: str) -> str:
    """The confidentiality label of data only ``names`` may read: ``readers:alice,bob``."""
    return "readers:" + ",".join(sorted(names))


def is_confidential(label: str) -> bool:
    """Whether ``label`` restricts who may read (``secret…``, ``readers:…``)."""
    return label.startswith(_CONFIDENTIAL_PREFIXES)


@dataclass(frozen=True)
class FlowRule:
    """What one tool's parameters require, beside what the tool declares itself: ``trusted``, the
    parameters that must not carry :data:`UNTRUSTED` (nor may the control flow at the call; True:
    all of them); ``public_sink``, no confidential label may reach the call at all."""

    trusted: tuple[str, ...] | bool = ()
    public_sink: bool = False


@dataclass(frozen=True)
class FlowCall:
    """One call as a policy sees it: the tool, its validated arguments, each argument's labels (what
    it was computed from), the labels of the control flow at the call (``pc``), and what the
    declarative rules found wrong (``violations``, empty when they allow it)."""

    tool: str
    arguments: Mapping[str, Any]
    labels: Mapping[str, Labels]
    pc: Labels = _NONE
    violations: tuple[str, ...] = ()

    def labels_of(self, parameter: str) -> Labels:
        """Everything that influenced ``parameter``: its own labels and the control flow's."""
        return self.labels.get(parameter, _NONE) | self.pc

    @property
    def all_labels(self) -> Labels:
        """Every label that reached the call."""
        return self.pc.union(*self.labels.values())


#: ``check(call)`` → ``"allow"`` / ``"deny"`` / ``"ask"`` / None (no opinion: the declarative rules
#: decide), or one of those with a reason: ``("deny", "why")``. True/False mean allow/deny.
FlowCheck: TypeAlias = Callable[[FlowCall], Any]
#: ``ask(call)`` → True to approve, False or a reason string to refuse (may be async).
FlowApprover: TypeAlias = Callable[[FlowCall], Any]


@dataclass(frozen=True)
class FlowPolicy:
    """The data-flow policy of a runtime (``Runtime(flow=FlowPolicy(...))``).

    ``rules``: per tool name, requirements beside what the tools declare (:class:`FlowRule`).
    ``check``: a callable that sees every call (:class:`FlowCall`) and may decide it (see
    :data:`FlowCheck`); its answer overrides the declarative rules, an exception denies.
    ``on_violation``: what a rule's objection (or the check's ``deny``) does: ``deny`` (the call fails
    with ``policy_denied``, not retryable), ``ask`` (``ask(call)``, else the runtime's ``ask`` hook,
    approves or refuses; no approver refuses), ``audit`` (allowed; the decision is recorded).
    ``trusted_context``: the model is trusted not to launder what it saw: the code's literals carry
    no labels whatever earlier observations showed (off by default: what the model saw counts).
    """

    rules: Mapping[str, FlowRule] = field(default_factory=dict)
    check: FlowCheck | None = None
    on_violation: OnViolation = "deny"
    ask: FlowApprover | None = None
    trusted_context: bool = False

    def __post_init__(self) -> None:
        if self.on_violation not in ("deny", "ask", "audit"):
            raise ToolDefinitionError(f"on_violation must be 'deny', 'ask' or 'audit', got {self.on_violation!r}")
        if self.check is not None and not callable(self.check):
            raise ToolDefinitionError("FlowPolicy.check must be callable or None")
        if self.ask is not None and not callable(self.ask):
            raise ToolDefinitionError("FlowPolicy.ask must be callable or None")
        for name, rule in self.rules.items():
            if not isinstance(rule, FlowRule):
                raise ToolDefinitionError(f"FlowPolicy.rules[{name!r}] must be a FlowRule, got {type(rule).__name__}")


def _violations(policy: FlowPolicy, tool: ToolPolicy, name: str, call: FlowCall) -> tuple[str, ...]:
    """What the declarative rules (the tool's own and the policy's) find wrong with ``call``."""
    rule = policy.rules.get(name)
    trusted: list[str] = []
    everything = tool.trusted is True or (rule is not None and rule.trusted is True)
    for source in (tool.trusted, rule.trusted if rule is not None else ()):
        if not isinstance(source, bool):
            trusted.extend(source)
    found: list[str] = []
    if everything or trusted:
        if UNTRUSTED in call.pc:
            found.append(f"the call is made under control flow that depends on {UNTRUSTED} data "
                         f"(a branch, loop or exception), and {name!r} needs trusted inputs")
        params = sorted(call.arguments) if everything else sorted(set(trusted))
        bad = [p for p in params if UNTRUSTED in call.labels.get(p, _NONE)]
        if bad:
            which = ", ".join(repr(p) for p in bad)
            found.append(f"argument {which} of {name!r} must be trusted but carries {UNTRUSTED} "
                         "(it came from a tool result, or the model wrote it after seeing one)")
    if tool.public_sink or (rule is not None and rule.public_sink):
        secret = sorted(label for label in call.all_labels if is_confidential(label))
        if secret:
            found.append(f"{name!r} is a public sink and the call carries confidential labels "
                         f"({', '.join(secret)})")
    return tuple(found)


def _answer(raw: Any) -> FlowVerdict | None:
    reason: str | None = None
    if isinstance(raw, tuple) and len(raw) == 2:
        raw, why = raw
        reason = str(why)[:500] if why is not None else None
    if raw is None:
        return None
    if raw is True or raw == "allow":
        return "allow", reason
    if raw is False or raw == "deny":
        return "deny", reason or "the policy's check refused the call"
    if raw == "ask":
        return "ask", reason or "the policy's check asked for approval"
    return "deny", f"the policy's check answered {str(raw)[:80]!r} (not allow, deny, ask or None)"


def evaluate(policy: FlowPolicy, tool: Tool, call: FlowCall) -> tuple[FlowVerdict, FlowCall]:
    """Judge one call: the declarative rules, then ``policy.check``; returns the verdict (``ask``
    and ``deny`` mapped through ``on_violation``) and the call with its ``violations`` filled in
    (what an approver is shown). Never raises: a check that raises denies."""
    found = _violations(policy, tool.policy, tool.name, call)
    call = FlowCall(call.tool, call.arguments, call.labels, call.pc, found)
    answered: FlowVerdict | None = None
    if policy.check is not None:
        try:
            answered = _answer(policy.check(call))
        except Exception as exc:  # a broken check refuses rather than allows
            answered = "deny", f"the policy's check failed: {type(exc).__name__}: {str(exc)[:200]}"
    verdict: FlowVerdict = answered if answered is not None else (
        ("deny", "; ".join(found)) if found else ("allow", None))
    decision, reason = verdict
    if decision == "allow":
        return verdict, call
    if policy.on_violation == "audit":
        return ("audit", reason), call
    if decision == "deny" and policy.on_violation == "ask":
        return ("ask", reason), call
    return verdict, call


def wire_call(tool: str, arguments: Mapping[str, Any], passed: Any, raw: Any, fallback: Labels) -> FlowCall:
    """The :class:`FlowCall` of a call whose labels came as ``raw`` (a call frame's checked
    ``labels``, or the JSON agent's): ``passed`` is the arguments as sent. An argument the labels do
    not name, or every argument and the control flow when there are no labels at all, gets
    ``fallback`` (everything the call could have seen): a missing label never reads as trusted."""
    sent = passed if isinstance(passed, Mapping) else {}
    if raw is None:
        return FlowCall(tool, arguments, dict.fromkeys(sent, fallback), fallback)
    given = raw.get("args") or {}
    labels = {k: frozenset(given[k]) if k in given else fallback for k in sent}
    return FlowCall(tool, arguments, labels, frozenset(raw.get("pc") or ()))
