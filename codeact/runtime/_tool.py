"""The tool model: a spec with its implementation and policy (``Tool``, ``ToolPolicy``) and ``@tool``.

Its own module, below ``toolset.py`` and ``sources/``: the tool sources (``runtime/sources/``) build
``Tool``s from this module, and ``Toolset`` (``toolset.py``) collects them and calls into the sources
from its ``from_*`` constructors. Were the model in ``toolset.py``, sources and toolset would import
each other. Import these names from ``codeact.runtime`` (or ``codeact.runtime.toolset``).
"""

from __future__ import annotations

import enum
import inspect
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field, replace
from typing import Any, Literal, TypeAlias, overload

from codeact.errors import ToolDefinitionError, ToolError
from codeact.tool_stubs import ToolSpec

from ._labelset import label_set

__all__ = ["PermissionRule", "Tool", "ToolPolicy", "labeled", "tool"]

#: ``"allow"``, ``"deny"``, ``"ask"`` (the host's approver decides), or ``fn(name, arguments)``
#: returning True to allow, False or a reason string to deny (it may be async).
PermissionRule: TypeAlias = Literal["allow", "deny", "ask"] | Callable[[str, dict[str, Any]], Any]


@dataclass
class ToolPolicy:
    """How the host runs one tool. Checked at construction; a bad value raises ToolDefinitionError."""

    timeout_s: float | None = 30.0  # per call, on the host
    permission: PermissionRule = "allow"
    deny_reason: str | None = None
    max_calls: int | None = None  # per execution (run)
    rate_limit_per_s: float | None = None
    idempotent: bool = False  # only then are failures retried automatically
    max_retries: int = 2
    cacheable: bool = False  # read-only: a repeated call with equal arguments may be answered from the ledger
    #: On a cluster (``codeact.cluster``): ``"node"`` runs the tool on the node that runs the code,
    #: ``"caller"`` forwards its calls to the process that made the Runtime (same outside a cluster).
    where: Literal["node", "caller"] = "node"
    #: Data-flow declarations (``runtime.flow``; they take effect under ``Runtime(flow=...)``): the
    #: labels every result of the tool carries (e.g. ``{"untrusted"}``); the parameters that must
    #: not carry ``untrusted`` (True: all), the control flow at the call included; and whether no
    #: confidential label may reach the tool (it publishes what it gets).
    labels: frozenset[str] | Iterable[str] | None = None
    trusted: tuple[str, ...] | bool = ()
    public_sink: bool = False

    def __post_init__(self) -> None:
        if self.timeout_s is not None and not self.timeout_s > 0:
            raise ToolDefinitionError(f"timeout_s must be positive or None, got {self.timeout_s!r}")
        if not callable(self.permission) and self.permission not in ("allow", "deny", "ask"):
            raise ToolDefinitionError(
                f"permission must be 'allow', 'deny', 'ask' or a callable, got {self.permission!r}"
            )
        if self.max_calls is not None and self.max_calls < 0:
            raise ToolDefinitionError(f"max_calls must be >= 0 or None, got {self.max_calls!r}")
        if self.rate_limit_per_s is not None and not self.rate_limit_per_s > 0:
            raise ToolDefinitionError(f"rate_limit_per_s must be positive or None, got {self.rate_limit_per_s!r}")
        if self.max_retries < 0:
            raise ToolDefinitionError(f"max_retries must be >= 0, got {self.max_retries!r}")
        if self.where not in ("node", "caller"):
            raise ToolDefinitionError(f"where must be 'node' or 'caller', got {self.where!r}")
        self.labels = label_set(self.labels, "labels") or None
        if isinstance(self.trusted, str):  # trusted="to": one parameter, not its letters
            self.trusted = (self.trusted,)
        elif not isinstance(self.trusted, bool):
            self.trusted = tuple(self.trusted)
            if not all(isinstance(p, str) for p in self.trusted):
                raise ToolDefinitionError(f"trusted must name parameters (strings) or be a bool, got {self.trusted!r}")


@dataclass(eq=False)
class Tool:
    """A tool spec with its implementation (``fn(**arguments)``, sync or async) and its policy.

    A tool without ``fn`` answers ``not_implemented`` on the host. Calling a Tool calls ``fn``
    directly, so a decorated function stays usable as a function.
    """

    spec: ToolSpec
    fn: Callable[..., Any] | None = None
    policy: ToolPolicy = field(default_factory=ToolPolicy)
    group: str | None = None  # where the tool is listed when a toolset is too large to show whole
    _async: bool = field(default=False, init=False, repr=False, compare=False)
    _async_of: Any = field(default=None, init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        if not isinstance(self.spec, ToolSpec):
            raise ToolDefinitionError(f"Tool.spec must be a ToolSpec, got {type(self.spec).__name__}")
        if self.fn is not None and not callable(self.fn):
            raise ToolDefinitionError(f"Tool.fn must be callable, got {type(self.fn).__name__}")
        if not isinstance(self.policy, ToolPolicy):
            raise ToolDefinitionError(f"Tool.policy must be a ToolPolicy, got {type(self.policy).__name__}")
        if self.group is not None and (not isinstance(self.group, str) or not self.group.strip()):
            raise ToolDefinitionError(f"Tool.group must be a non-empty string or None, got {self.group!r}")

    @property
    def name(self) -> str:
        return self.spec.name

    @property
    def python_name(self) -> str:
        return self.spec.python_name

    @property
    def is_async(self) -> bool:
        """Whether calling ``fn`` returns an awaitable (async def, or an object with an async __call__)."""
        fn = self.fn
        if fn is None:
            return False
        if self._async_of is not fn:  # inspect is slow for a per-call check: remember per fn
            self._async, self._async_of = (
                inspect.iscoroutinefunction(fn) or inspect.iscoroutinefunction(type(fn).__call__), fn)
        return self._async

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        if self.fn is None:
            raise ToolError("not_implemented", f"tool {self.name!r} has no implementation")
        return self.fn(*args, **kwargs)

    def __get__(self, instance: Any, owner: type | None = None) -> Tool:
        """``@tool`` on a method in a class body: ``obj.method`` is a Tool bound to ``obj``."""
        if instance is None or not _takes_self(self.fn):
            return self
        return replace(self, fn=self.fn.__get__(instance, owner))  # type: ignore[union-attr]

    def __repr__(self) -> str:
        kind = "no implementation" if self.fn is None else getattr(self.fn, "__qualname__", repr(self.fn))
        return f"Tool({self.name!r}, {kind})"


def _takes_self(fn: Any) -> bool:
    if not inspect.isfunction(fn):
        return False
    params = list(inspect.signature(fn).parameters)
    return bool(params) and params[0] == "self"


class _Unset(enum.Enum):
    UNSET = enum.auto()


_UNSET = _Unset.UNSET


@overload
def tool(fn: Callable[..., Any], /, **options: Any) -> Tool: ...
@overload
def tool(
    fn: None = None,
    /,
    *,
    name: str | None = None,
    description: str | None = None,
    policy: ToolPolicy | None = None,
    group: str | None = None,
    timeout_s: float | _Unset | None = _UNSET,
    permission: PermissionRule | _Unset = _UNSET,
    deny_reason: str | _Unset | None = _UNSET,
    max_calls: int | _Unset | None = _UNSET,
    rate_limit_per_s: float | _Unset | None = _UNSET,
    idempotent: bool | _Unset = _UNSET,
    max_retries: int | _Unset = _UNSET,
    cacheable: bool | _Unset = _UNSET,
    where: Literal["node", "caller"] | _Unset = _UNSET,
    labels: Iterable[str] | _Unset | None = _UNSET,
    trusted: tuple[str, ...] | bool | _Unset = _UNSET,
    public_sink: bool | _Unset = _UNSET,
) -> Callable[[Callable[..., Any]], Tool]: ...


def tool(
    fn: Callable[..., Any] | None = None,
    /,
    *,
    name: str | None = None,
    description: str | None = None,
    policy: ToolPolicy | None = None,
    group: str | None = None,
    **overrides: Any,
) -> Tool | Callable[[Callable[..., Any]], Tool]:
    """Make a :class:`Tool` from a function, async function or bound method.

    Use as ``@tool``, ``@tool(name=..., timeout_s=..., cacheable=True, ...)`` or ``tool(obj.method)``.
    Policy keywords (those of :class:`ToolPolicy`) override ``policy``; ``group`` lists the tool
    under that name in the index a large toolset's prompt shows.
    """
    unknown = set(overrides) - set(ToolPolicy.__dataclass_fields__)
    if unknown:
        raise TypeError(f"tool() got unexpected keyword arguments: {', '.join(sorted(unknown))}")
    chosen = {k: v for k, v in overrides.items() if v is not _UNSET}
    final_policy = replace(policy or ToolPolicy(), **chosen)

    def build(target: Callable[..., Any]) -> Tool:
        if isinstance(target, Tool):
            spec = target.spec
            if name is not None or description is not None:
                spec = ToolSpec(
                    name=spec.name if name is None else name,
                    description=spec.description if description is None else description,
                    input_schema=spec.input_schema,
                    output_schema=spec.output_schema,
                )
            return Tool(spec=spec, fn=target.fn, policy=final_policy if policy or chosen else target.policy,
                        group=group or target.group)
        return Tool(spec=ToolSpec.from_function(target, name=name, description=description), fn=target,
                    policy=final_policy, group=group)

    return build if fn is None else build(fn)


def labeled(tools: Iterable[Tool], labels: Iterable[str] | str | None) -> list[Tool]:
    """``tools`` with ``labels`` as their results' labels, where their policy declares none: a
    source's default (``Toolset.from_openapi(..., labels={"untrusted"})``)."""
    chosen = label_set(labels, "labels") or None
    made = list(tools)
    if chosen is None:
        return made
    return [t if t.policy.labels else replace(t, policy=replace(t.policy, labels=chosen)) for t in made]
