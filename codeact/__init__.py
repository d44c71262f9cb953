"""codeact: run LLM-written Python that calls tools, in a sandbox, with every call recorded.

    from codeact import Runtime, SandboxConfig, tool

    @tool
    def get_weather(city: str) -> dict: ...

    with Runtime([get_weather]) as rt, rt.session() as s:
        result = s.run('get_weather("Beijing")')
"""

from __future__ import annotations

from .agent import Budget, CodeActAgent, Episode, FunctionCallingAgent, execute_python_tool
from .errors import (
    CodeactError,
    ModelError,
    ProtocolViolation,
    RestoreDiverged,
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
    ExecutionResult,
    FileInfo,
    ToolCallError,
    ToolCallRecord,
    render_observation,
)
from .runtime.http_tools import HttpAuth, HttpEndpoint, HttpParam, http_tool
from .runtime.session import Runtime, Session
from .runtime.snapshot import Snapshot
from .runtime.toolset import Tool, ToolPolicy, Toolset, tool
from .sandbox.base import SandboxConfig
from .tool_stubs import ToolSpec, render_stubs

__version__ = "0.1.0"

__all__ = [
    "Budget",
    "CodeActAgent",
    "CodeError",
    "CodeactError",
    "Episode",
    "ExecutionResult",
    "FileInfo",
    "FunctionCallingAgent",
    "HttpAuth",
    "HttpEndpoint",
    "HttpParam",
    "ModelError",
    "ProtocolViolation",
    "RestoreDiverged",
    "Runtime",
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
