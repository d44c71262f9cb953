"""Tools on the host: a spec with its implementation and policy; the ``@tool`` decorator; ``Toolset``."""

from __future__ import annotations

import enum
import importlib
import importlib.util
import inspect
import os
import sys
from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import dataclass, field, replace
from pathlib import Path
from types import ModuleType
from typing import Any, Literal, TypeAlias, overload

from codeact.errors import ToolDefinitionError, ToolError
from codeact.tool_stubs import ToolSpec, python_names, render_stubs
from codeact.tool_stubs.catalog import DEFAULT_PROMPT_BUDGET, ToolCatalog

__all__ = ["PermissionRule", "Tool", "ToolPolicy", "Toolset", "tool"]

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


ToolLike: TypeAlias = "Tool | ToolSpec | Callable[..., Any] | Mapping[str, Any] | Toolset"


class Toolset:
    """An ordered collection of tools with unique names.

    Accepts :class:`Tool` objects, plain callables (wrapped with :func:`tool`), :class:`ToolSpec`
    objects and OpenAI/Anthropic/MCP dicts (no implementation), and other toolsets.
    """

    def __init__(self, tools: Iterable[ToolLike] = ()) -> None:
        self._tools: dict[str, Tool] = {}
        self._closers: list[Callable[[], None]] = []
        for item in tools:
            if isinstance(item, Toolset):
                for t in item:
                    self.add(t)
                self._closers.extend(item._closers)
            else:
                self.add(item)

    def on_close(self, closer: Callable[[], None]) -> None:
        """Register a cleanup (e.g. an MCP connection) run by :meth:`close`."""
        self._closers.append(closer)

    def close(self) -> None:
        """Release what the tools hold (connections); the runtime calls this when it closes."""
        closers, self._closers = self._closers, []
        for closer in reversed(closers):
            closer()

    def add(self, item: Tool | ToolSpec | Callable[..., Any] | Mapping[str, Any]) -> Tool:
        """Add one tool (usable as a decorator); returns the Tool. A duplicate name raises."""
        new = _as_tool(item)
        if new.name in self._tools:
            raise ToolDefinitionError(f"duplicate tool name {new.name!r}: tool names in a toolset must be unique")
        self._tools[new.name] = new
        return new

    def get(self, name: str) -> Tool | None:
        return self._tools.get(name)

    def __getitem__(self, name: str) -> Tool:
        return self._tools[name]

    def __iter__(self) -> Iterator[Tool]:
        return iter(list(self._tools.values()))

    def __len__(self) -> int:
        return len(self._tools)

    def __contains__(self, item: object) -> bool:
        if isinstance(item, Tool):
            return self._tools.get(item.name) is item
        return item in self._tools

    def __repr__(self) -> str:
        return f"Toolset({self.names!r})"

    @property
    def names(self) -> list[str]:
        return list(self._tools)

    @property
    def specs(self) -> list[ToolSpec]:
        return [t.spec for t in self._tools.values()]

    @property
    def groups(self) -> dict[str, str | None]:
        """Tool name → its group (None: ungrouped)."""
        return {name: t.group for name, t in self._tools.items()}

    @property
    def python_names(self) -> dict[str, str]:
        """Tool name → the identifier its stub has (collisions resolved as in the stubs)."""
        return python_names(self.specs)

    def merge(self, other: Toolset | Iterable[ToolLike]) -> Toolset:
        """A new toolset with this one's tools, then ``other``'s; a shared name raises."""
        return Toolset([self, other if isinstance(other, Toolset) else Toolset(other)])

    def stubs(self) -> str:
        """The typed stub module for these tools (what a sandbox executes)."""
        return render_stubs(self.specs)

    def prompt_view(self, budget: int = DEFAULT_PROMPT_BUDGET) -> str:
        """What a model is shown of these tools: every stub within ``budget`` characters, else an
        index of groups and how to search (``Runtime.prompt_view`` adds the runtime's built-ins)."""
        return ToolCatalog(self.specs, self.groups).prompt_view(self.specs, budget)

    def to_openai(self) -> list[dict[str, Any]]:
        return [s.to_openai() for s in self.specs]

    def to_anthropic(self) -> list[dict[str, Any]]:
        return [s.to_anthropic() for s in self.specs]

    def to_mcp(self) -> list[dict[str, Any]]:
        return [s.to_mcp() for s in self.specs]

    @classmethod
    def from_openai(cls, definitions: Iterable[Mapping[str, Any]]) -> Toolset:
        return cls(ToolSpec.from_openai(d) for d in definitions)

    @classmethod
    def from_anthropic(cls, definitions: Iterable[Mapping[str, Any]]) -> Toolset:
        return cls(ToolSpec.from_anthropic(d) for d in definitions)

    @classmethod
    def from_mcp(cls, source: Any, **options: Any) -> Toolset:
        """An MCP server's tools, connected now: ``source`` is a stdio command (a list of strings or
        ``mcp.StdioServerParameters``) or a streamable-HTTP URL (``options``: see
        :func:`~codeact.runtime.mcp_tools.mcp_toolset`; :meth:`close` ends the connection); or
        ``{group name: server}`` for several servers at once, each a group (see ``mcp_toolsets``).
        Or tools without implementation from MCP tool dicts / ``mcp.types.Tool`` objects."""
        from .mcp_tools import is_mcp_server, mcp_toolset, mcp_toolsets

        if is_mcp_server(source):
            return mcp_toolset(source, **options)
        if isinstance(source, Mapping):  # {group name: server}: several servers, each a group
            return mcp_toolsets(source, **options)
        if options:
            raise TypeError(f"options {sorted(options)} apply to an MCP server, not to tool definitions")
        return cls(ToolSpec.from_mcp(d) for d in source)

    @classmethod
    async def afrom_mcp(cls, source: Any, **options: Any) -> Toolset:
        """:meth:`from_mcp` for a server, without blocking the caller's event loop."""
        from .mcp_tools import amcp_toolset

        return await amcp_toolset(source, **options)

    @classmethod
    def from_openapi(cls, spec: Mapping[str, Any] | str | os.PathLike[str], operations: Iterable[str] | None = None,
                     base_url: str | None = None, auth: Any = None, **options: Any) -> Toolset:
        """HTTP tools for an OpenAPI 3 document's operations (a dict, a file or a URL); ``operations``
        picks some (operationIds or ``"GET /path"``); ``auth``: an ``HttpAuth``. See ``runtime.openapi``."""
        from .openapi import openapi_tools

        return cls(openapi_tools(spec, operations, base_url, auth, **options))

    @classmethod
    def from_http(cls, endpoints: Iterable[Any], *, base_url: str | None = None, auth: Any = None,
                  client: Any = None) -> Toolset:
        """HTTP tools from ``HttpEndpoint`` definitions sharing a base URL, a default ``HttpAuth`` and a
        client. See ``runtime.http_tools``."""
        from .http_tools import http_tools

        return cls(http_tools(endpoints, base_url=base_url, auth=auth, client=client))

    @classmethod
    def from_module(cls, module: ModuleType | str | os.PathLike[str]) -> Toolset:
        """Every :class:`Tool` bound at the top level of a module (an object, a dotted name, or a
        ``.py`` path loaded with importlib), in definition order; one Tool bound twice counts once."""
        if not isinstance(module, ModuleType):
            module = _load_module(module)
        found: dict[int, Tool] = {}
        for value in vars(module).values():
            if isinstance(value, Tool):
                found.setdefault(id(value), value)
        return cls(found.values())


def _as_tool(item: Any) -> Tool:
    if isinstance(item, Tool):
        return item
    if isinstance(item, ToolSpec):
        return Tool(spec=item)
    if isinstance(item, Mapping) or (hasattr(item, "name") and hasattr(item, "inputSchema")):
        return Tool(spec=ToolSpec.from_dict(item))
    if callable(item):
        made: Tool = tool(item)
        return made
    raise ToolDefinitionError(
        f"cannot make a tool from {type(item).__name__}: pass a Tool, a function, a ToolSpec or a tool dict"
    )


def _load_module(source: str | os.PathLike[str]) -> ModuleType:
    path = Path(source)
    if path.suffix != ".py" and not path.exists() and isinstance(source, str):
        try:
            return importlib.import_module(source)
        except ImportError as exc:
            raise ToolDefinitionError(f"cannot import tools module {source!r}: {exc}") from exc
    if not path.is_file():
        raise ToolDefinitionError(f"no such tools file: {path}")
    resolved = path.resolve()
    module_name = f"_codeact_tools_{resolved.stem}_{abs(hash(str(resolved))):x}"
    spec = importlib.util.spec_from_file_location(module_name, resolved)
    if spec is None or spec.loader is None:
        raise ToolDefinitionError(f"cannot load tools file {path}: not a Python module")
    module = importlib.util.module_from_spec(spec)
    sys.modules[module_name] = module
    sys.path.insert(0, str(resolved.parent))  # let the file import its neighbours, as `python file.py` would
    try:
        spec.loader.exec_module(module)
    except Exception as exc:
        sys.modules.pop(module_name, None)
        raise ToolDefinitionError(f"cannot load tools file {path}: {type(exc).__name__}: {exc}") from exc
    finally:
        sys.path.remove(str(resolved.parent))
    return module
