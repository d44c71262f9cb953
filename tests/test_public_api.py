"""The public names are a contract: adding or removing one is a deliberate change made here."""

from __future__ import annotations

import subprocess
import sys

import codeact

PUBLIC = [
    "Budget", "CodeActAgent", "CodeError", "CodeActError", "CodeactError", "Episode", "ExecutionResult", "FileInfo",
    "FunctionCallingAgent", "HttpAuth", "HttpEndpoint", "HttpParam", "ModelError", "ProtocolViolation",
    "RestoreDiverged", "Runtime", "RuntimeClosed", "SandboxConfig", "SandboxError", "SandboxUnavailable", "Session",
    "SessionClosed", "Snapshot", "SnapshotError", "SnapshotInvalid", "Tool",
    "ToolArgumentsError", "ToolCallError", "ToolCallRecord", "ToolDefinitionError", "ToolError", "ToolPolicy",
    "ToolSpec", "Toolset", "__version__", "execute_python_tool", "http_tool", "render_observation",
    "render_stubs", "tool",
    "CallFinished", "CallStarted", "OutputChunk", "RunDone", "RunEvent",  # live run events
]


def test_public_names_are_pinned() -> None:
    assert sorted(codeact.__all__) == sorted(PUBLIC)
    for name in PUBLIC:
        assert getattr(codeact, name) is not None


def test_errors_subclass_the_nearest_builtin() -> None:
    assert issubclass(codeact.ToolArgumentsError, ValueError)
    assert issubclass(codeact.ToolDefinitionError, ValueError)
    assert issubclass(codeact.SandboxUnavailable, codeact.CodeActError)


def test_optional_extras_are_not_imported() -> None:
    # rich draws progress bars only (``Bar`` loads it); httpx runs HTTP tools only (the first
    # ``HttpClient`` loads it), and its CLI pulls in rich, click and pygments when installed.
    code = ("import sys, codeact\n"
            "bad = [m for m in ('ray', 'matplotlib', 'smolagents', 'ipykernel', 'rich', 'httpx') if m in sys.modules]\n"
            "print(','.join(bad))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == ""


def test_import_codeact_does_not_load_the_agent_layer() -> None:
    code = ("import sys, codeact\n"
            "print(sorted(m for m in sys.modules if m.startswith(('codeact.agent', 'codeact.evals', "
            "'codeact.cli', 'mcp'))))\n"
            "codeact.CodeActAgent\n"
            "print('codeact.agent' in sys.modules)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.split("\n")[:2] == ["[]", "True"]


def test_one_spelling_with_deprecated_aliases() -> None:
    from codeact.agent.mcp_server import CodeActMCP, CodeactMCP
    from codeact.agent.models import OpenAIChatClient, OpenAIClient

    assert codeact.CodeactError is codeact.CodeActError
    assert CodeactMCP is CodeActMCP and OpenAIChatClient is OpenAIClient


def test_a_closed_runtime_says_runtime() -> None:
    rt = codeact.Runtime([], codeact.SandboxConfig(backend="local"))
    rt.close()
    try:
        rt.session()
    except codeact.RuntimeClosed as exc:
        assert isinstance(exc, codeact.SessionClosed) and "runtime" in str(exc)
    else:
        raise AssertionError("a closed runtime opened a session")
