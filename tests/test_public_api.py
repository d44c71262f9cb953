"""The public names are a contract: adding or removing one is a deliberate change made here."""

from __future__ import annotations

import importlib
import subprocess
import sys

import pytest

import codeact

PUBLIC = [
    "Budget", "CodeActAgent", "CodeError", "CodeActError", "Diagnostic", "Egress", "EgressFinished", "EgressRecord", "Episode", "ExecutionResult", "FileInfo",
    "FunctionCallingAgent", "HttpAuth", "HttpEndpoint", "HttpParam", "ModelError", "ProtocolViolation",
    "ReplayInterrupted", "RestoreDiverged", "Runtime", "RuntimeClosed", "SandboxConfig", "SandboxError", "SandboxUnavailable", "Session",
    "SessionClosed", "Snapshot", "SnapshotError", "SnapshotInvalid", "Tool",
    "ToolArgumentsError", "ToolCallError", "ToolCallRecord", "ToolDefinitionError", "ToolError", "ToolPolicy",
    "ToolSpec", "Toolset", "__version__", "execute_python_tool", "http_tool", "render_observation",
    "render_stubs", "tool",
    "CallFinished", "CallStarted", "OutputChunk", "RunDone", "RunEvent",  # live run events
    "FlowCall", "FlowDecision", "FlowPolicy", "FlowRule", "SECRET", "UNTRUSTED",  # data-flow policies
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


#: Each deprecated name: where it is looked up, the name, and where the new one lives (module, name).
DEPRECATED = [
    ("codeact", "CodeactError", "codeact", "CodeActError"),
    ("codeact.errors", "CodeactError", "codeact.errors", "CodeActError"),
    ("codeact.agent.mcp_server", "CodeactMCP", "codeact.agent.mcp_server", "CodeActMCP"),
    ("codeact.agent.models", "OpenAIChatClient", "codeact.agent.models", "OpenAIClient"),
    ("codeact.agent.models.openai", "OpenAIChatClient", "codeact.agent.models.openai", "OpenAIClient"),
    ("codeact.agent.fake_server", "FakeModelServer", "codeact.testing.fake_server", "FakeModelServer"),
    ("codeact.agent.fake_server", "RecordedRequest", "codeact.testing.fake_server", "RecordedRequest"),
    ("codeact.agent.fake_server", "main", "codeact.testing.fake_server", "main"),
]


@pytest.mark.parametrize(("home", "old", "new_home", "new"), DEPRECATED, ids=[f"{d[0]}.{d[1]}" for d in DEPRECATED])
def test_deprecated_aliases_warn_and_return_the_new_object(home: str, old: str, new_home: str, new: str) -> None:
    module = importlib.import_module(home)
    with pytest.warns(DeprecationWarning, match=rf"{home}\.{old} is deprecated; use .*\b{new}\b") as caught:
        value = getattr(module, old)
    assert value is getattr(importlib.import_module(new_home), new)
    assert caught[0].filename == __file__  # points at the line that used the old name
    assert old not in getattr(module, "__all__", ()) and old not in vars(module)  # looked up, warned each time
    with pytest.raises(AttributeError):
        getattr(module, old + "_no_such_name")


def test_from_import_of_a_deprecated_name_warns() -> None:
    with pytest.warns(DeprecationWarning, match="use codeact.CodeActError"):
        from codeact import CodeactError
    assert CodeactError is codeact.CodeActError


def test_a_closed_runtime_says_runtime() -> None:
    rt = codeact.Runtime([], codeact.SandboxConfig(backend="local"))
    rt.close()
    try:
        rt.session()
    except codeact.RuntimeClosed as exc:
        assert isinstance(exc, codeact.SessionClosed) and "runtime" in str(exc)
    else:
        raise AssertionError("a closed runtime opened a session")


def test_the_namespace_holds_only_the_public_names_and_subpackages() -> None:
    # Before, ``import codeact`` also bound TYPE_CHECKING, annotations, importlib, Any, deprecated_alias.
    import types

    code = "import codeact\nprint(' '.join(n for n in vars(codeact) if not n.startswith('_')))"
    names = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout.split()
    stray = {n for n in names if n not in codeact.__all__ and not isinstance(getattr(codeact, n), types.ModuleType)}
    assert stray == set()
    assert {n for n in dir(codeact) if not isinstance(getattr(codeact, n), types.ModuleType)} == set(codeact.__all__)
