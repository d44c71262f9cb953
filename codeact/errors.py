"""The one error tree of codeact.

::

    CodeActError
    ├── ToolDefinitionError (ValueError)     a tool cannot be built from what was given
    ├── ToolArgumentsError (ValueError)      arguments fail the tool's JSON Schema (lists every problem)
    ├── ToolError                            a tool call failed; carries code, message, retryable
    ├── SandboxError
    │   ├── SandboxUnavailable               no engine / no image / cannot start; one-line reason
    │   ├── ProtocolViolation                the sandbox sent a frame out of protocol
    │   └── ReplayInterrupted                a state's rebuild was interrupted or its sandbox died (kept)
    ├── CheckerUnavailable                   the type checker ``check_types`` asks for is not installed
    ├── SessionClosed                        the session was used after close()
    │   └── RuntimeClosed                    the runtime was used after close()
    ├── SnapshotError                        a snapshot cannot be taken or restored (inexact cell, too large)
    │   ├── SnapshotInvalid (ValueError)     a snapshot file is modified, foreign, corrupt or of another version
    │   └── RestoreDiverged                  replay asked for another call / ended otherwise than recorded
    ├── WorkspaceFileError                   ``Session.files`` refused or failed a read, write, listing or removal
    │   ├── WorkspaceFileNotFound (FileNotFoundError)  no such file (or directory, for a listing)
    │   ├── WorkspacePathRefused (ValueError)    absolute, escaping, or a symlink / special file on the way
    │   └── WorkspaceFileTooLarge                over the runtime's ``max_file_bytes``
    └── ModelError                           a model provider failed (HTTP status, bad response)

An exception raised by the model's code is *data* in an ``ExecutionResult``, never one of these.
"""

from __future__ import annotations

import functools
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any, Literal

from ._deprecated import deprecated_alias
from .kernel.client import ToolError as _SandboxToolError
from .kernel.frames import RETRYABLE_CODES

__all__ = [
    "RETRYABLE_CODES",
    "CheckerUnavailable",
    "CodeActError",
    "ErrorCode",
    "ModelError",
    "ProtocolViolation",
    "ReplayInterrupted",
    "RestoreDiverged",
    "RuntimeClosed",
    "SandboxError",
    "SandboxUnavailable",
    "SessionClosed",
    "SnapshotError",
    "SnapshotInvalid",
    "ToolArgumentsError",
    "ToolDefinitionError",
    "ToolError",
    "WorkspaceFileError",
    "WorkspaceFileNotFound",
    "WorkspaceFileTooLarge",
    "WorkspacePathRefused",
]

ErrorCode = Literal[
    "unknown_tool",
    "invalid_arguments",
    "permission_denied",
    "not_found",
    "not_implemented",
    "tool_exception",
    "timeout",
    "rate_limited",
    "upstream_error",
]


class CodeActError(Exception):
    """Base of every error codeact raises on the host."""


class ToolDefinitionError(CodeActError, ValueError):
    """A tool definition (function, OpenAI/Anthropic/MCP dict) cannot be turned into a tool."""


class ToolArgumentsError(CodeActError, ValueError):
    """Arguments do not satisfy the tool's input schema; ``problems`` lists every one."""

    def __init__(self, tool: str, problems: Sequence[str]) -> None:
        self.tool = tool
        self.problems = list(problems)
        listed = "; ".join(self.problems) or "invalid arguments"
        super().__init__(f"invalid arguments for tool {tool!r}: {listed}")

    def __reduce__(self) -> tuple[Any, ...]:  # pickled whole: it crosses processes (a cluster node's answer)
        return (type(self), (self.tool, self.problems))


class ToolError(CodeActError, _SandboxToolError):
    """A failed tool call. Raise it from a tool implementation to choose the code.

    ``ToolError(code, message, retryable=None, *, retry_after=None, data=None)``: ``retryable``
    defaults from the code (:data:`RETRYABLE_CODES`: timeout, rate_limited, upstream_error);
    ``retry_after`` (seconds) is a hint from the upstream, when it gave one. The constructor and
    attributes are those of the class the code catches in the sandbox (``kernel/client.py``), which
    this one extends: one implementation for both sides.
    """


class SandboxError(CodeActError):
    """The sandbox could not do what was asked."""


class SandboxUnavailable(SandboxError):
    """No sandbox can be had (no engine, no image, cannot start). The message is one line."""


class ProtocolViolation(SandboxError):
    """The sandbox sent something outside the protocol; the session is ended as ``killed``."""


class ReplayInterrupted(SandboxError):
    """The replay rebuilding a session's state stopped before it finished: it was interrupted
    (``requested``), or its sandbox died. Not a divergence: the state is kept, and rebuilt at the
    next try (a sandbox that dies at a second try in a row is taken as the cell's doing)."""

    def __init__(self, message: str, *, cell: int, requested: bool = False) -> None:
        super().__init__(message)
        self.cell = cell
        self.requested = requested

    def __reduce__(self) -> tuple[Any, ...]:
        return (functools.partial(type(self), cell=self.cell, requested=self.requested), self.args)


class CheckerUnavailable(CodeActError):
    """``Runtime(check_types=True)`` needs the ``ty`` type checker (``pip install 'codeact[check]'``)."""


class SessionClosed(CodeActError):
    """A session was used after it was closed."""


class RuntimeClosed(SessionClosed):
    """A runtime was used after it was closed (a ``SessionClosed``, so old handlers still catch it)."""


if TYPE_CHECKING:
    #: Deprecated spelling of :class:`CodeActError` (one spelling of the name: CodeAct).
    CodeactError = CodeActError
else:
    def __getattr__(name: str) -> Any:
        return deprecated_alias(__name__, name, {"CodeactError": ("codeact.CodeActError", CodeActError)})


class SnapshotError(CodeActError):
    """A session snapshot cannot be taken or restored; the message says why and what to do."""


class SnapshotInvalid(SnapshotError, ValueError):
    """A snapshot file was refused before anything of it was used (modified, foreign key, corrupt)."""


class RestoreDiverged(SnapshotError):
    """Replaying a cell did not go as recorded; ``cell`` is its 1-based position, ``call`` the
    1-based position of the first differing tool call in it (None when the outcome differed)."""

    def __init__(self, message: str, *, cell: int, call: int | None = None) -> None:
        self.cell = cell
        self.call = call
        super().__init__(message)

    def __reduce__(self) -> tuple[Any, ...]:
        return (functools.partial(type(self), cell=self.cell, call=self.call), self.args)


class WorkspaceFileError(CodeActError):
    """``Session.files`` refused or failed an operation on the session's workspace."""


class WorkspaceFileNotFound(WorkspaceFileError, FileNotFoundError):
    """No regular file (or, for a listing, no directory) at that workspace path."""


class WorkspacePathRefused(WorkspaceFileError, ValueError):
    """A workspace path that is absolute or escapes, or that meets a symlink, FIFO, device or other
    non-regular entry the code may have planted (never followed)."""


class WorkspaceFileTooLarge(WorkspaceFileError):
    """A file to read or write is over the runtime's ``max_file_bytes``."""


class ModelError(CodeActError):
    """A model provider answered with an error or an unusable response."""

    def __init__(self, message: str, *, status: int | None = None, retryable: bool = False) -> None:
        self.status = status
        self.retryable = retryable
        super().__init__(message)
