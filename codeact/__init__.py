"""codeact: run LLM-written Python that calls tools, in a sandbox, with every call recorded.

    from codeact import Runtime, SandboxConfig, tool

    @tool
    def get_weather(city: str) -> dict: ...

    with Runtime([get_weather]) as rt, rt.session() as s:
        result = s.run('get_weather("Beijing")')
"""

# Nothing but the public names is bound here (tests/test_public_api.py): no ``from __future__``
# (it binds ``annotations``), and the helpers under underscore names.
import importlib as _importlib
import types as _types
import typing as _typing

from ._deprecated import deprecated_alias as _deprecated_alias
from ._version import __version__ as __version__
from .errors import (
    CodeActError,
    ModelError,
    ProtocolViolation,
    ReplayInterrupted,
    RestoreDiverged,
    RuntimeClosed,
    SandboxError,
    SandboxUnavailable,
    SessionClosed,
    SnapshotError,
    SnapshotInvalid,
    ToolArgumentsError,
    ToolDefinitionError,
    ToolError,
)
from .results import (
    CodeError,
    Diagnostic,
    EgressRecord,
    ExecutionResult,
    FileInfo,
    FlowDecision,
    ToolCallError,
    ToolCallRecord,
    render_observation,
)
from .runtime.events import CallFinished, CallStarted, EgressFinished, OutputChunk, RunDone, RunEvent
from .runtime.flow import SECRET, UNTRUSTED, FlowCall, FlowPolicy, FlowRule
from .runtime.session import Runtime, Session
from .runtime.snapshot import Snapshot
from .runtime.sources.http import HttpAuth, HttpEndpoint, HttpParam, http_tool
from .runtime.toolset import Tool, ToolPolicy, Toolset, tool
from .sandbox import Egress
from .sandbox.base import SandboxConfig
from .tool_stubs import ToolSpec, render_stubs

if _typing.TYPE_CHECKING:
    from .agent import Budget, CodeActAgent, Episode, FunctionCallingAgent, execute_python_tool
    from .errors import CodeactError as CodeactError  # deprecated: warns at run time

#: Names loaded on first use, so that ``import codeact`` does not load the agent layer (model
#: clients, MCP) for programs that only run code.
_LAZY = dict.fromkeys(
    ("Budget", "CodeActAgent", "Episode", "FunctionCallingAgent", "execute_python_tool"), "codeact.agent")


def __getattr__(name: str) -> _typing.Any:
    module = _LAZY.get(name)
    if module is None:  # deprecated names: a DeprecationWarning naming the new one (or AttributeError)
        return _deprecated_alias(__name__, name, {"CodeactError": ("codeact.CodeActError", CodeActError)})
    value = getattr(_importlib.import_module(module), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    """The public names and the subpackages loaded so far (``codeact.runtime``, ...)."""
    return sorted({*__all__, *(n for n, v in globals().items() if isinstance(v, _types.ModuleType) and n[0] != "_")})

__all__ = [
    "SECRET",
    "UNTRUSTED",
    "Budget",
    "CallFinished",
    "CallStarted",
    "CodeActAgent",
    "CodeActError",
    "CodeError",
    "Diagnostic",
    "Egress",
    "EgressFinished",
    "EgressRecord",
    "Episode",
    "ExecutionResult",
    "FileInfo",
    "FlowCall",
    "FlowDecision",
    "FlowPolicy",
    "FlowRule",
    "FunctionCallingAgent",
    "HttpAuth",
    "HttpEndpoint",
    "HttpParam",
    "ModelError",
    "OutputChunk",
    "ProtocolViolation",
    "ReplayInterrupted",
    "RestoreDiverged",
    "RunDone",
    "RunEvent",
    "Runtime",
    "RuntimeClosed",
    "SandboxConfig",
    "SandboxError",
    "SandboxUnavailable",
    "Session",
    "SessionClosed",
    "Snapshot",
    "SnapshotError",
    "SnapshotInvalid",
    "Tool",
    "ToolArgumentsError",
    "ToolCallError",
    "ToolCallRecord",
    "ToolDefinitionError",
    "ToolError",
    "ToolPolicy",
    "ToolSpec",
    "Toolset",
    "__version__",
    "execute_python_tool",
    "http_tool",
    "render_observation",
    "render_stubs",
    "tool",
]
